package pvesim

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// hAgentInterfaces answers the guest agent's network-get-interfaces: loopback plus one
// interface per netN with the addresses its ipconfigN (or its IPAM mapping) gives it.
func hAgentInterfaces(cl *call, g *guest) (any, error) {
	c := cl.c
	agent, _ := g.conf["agent"].(string)
	if pr := parseProperty(agent); pr.first != "1" && pr.get("enabled") != "1" {
		return nil, errorf(http.StatusInternalServerError, "No QEMU guest agent configured")
	}
	if !g.running {
		return nil, errorf(http.StatusInternalServerError, "VM %d is not running", g.vmid)
	}
	if time.Since(g.startedAt) < c.cfg.Timing.Start {
		return nil, errorf(http.StatusInternalServerError, "QEMU guest agent is not running")
	}
	m := g.metrics(time.Now())
	ifaces := []map[string]any{{
		"name":             "lo",
		"hardware-address": "00:00:00:00:00:00",
		"ip-addresses": []map[string]any{
			{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8},
			{"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128},
		},
		"statistics": ifaceStats(0, 0),
	}}
	for i := 0; i < 32; i++ {
		s, ok := g.conf["net"+strconv.Itoa(i)].(string)
		if !ok {
			continue
		}
		mac := ""
		for _, k := range parseProperty(s).keys {
			if netModels[k] {
				mac = parseProperty(s).get(k)
			}
		}
		var addrs []map[string]any
		if ipc, ok := g.conf["ipconfig"+strconv.Itoa(i)].(string); ok {
			pr := parseProperty(ipc)
			if pfx, err := netip.ParsePrefix(pr.get("ip")); err == nil {
				addrs = append(addrs, map[string]any{"ip-address-type": "ipv4", "ip-address": pfx.Addr().String(), "prefix": pfx.Bits()})
			} else if pr.get("ip") == "dhcp" {
				addrs = append(addrs, c.st.sdn.leaseFor(mac)...)
			}
			if pfx, err := netip.ParsePrefix(pr.get("ip6")); err == nil {
				addrs = append(addrs, map[string]any{"ip-address-type": "ipv6", "ip-address": pfx.Addr().String(), "prefix": pfx.Bits()})
			}
		}
		if ll := linkLocal(mac); ll != "" {
			addrs = append(addrs, map[string]any{"ip-address-type": "ipv6", "ip-address": ll, "prefix": 64})
		}
		stats := ifaceStats(0, 0)
		if i == 0 {
			stats = ifaceStats(m.netin, m.netout)
		}
		ifaces = append(ifaces, map[string]any{
			"name":             "ens" + strconv.Itoa(18+i),
			"hardware-address": strings.ToLower(mac),
			"ip-addresses":     addrs,
			"statistics":       stats,
		})
	}
	return map[string]any{"result": ifaces}, nil
}

func ifaceStats(rx, tx int64) map[string]any {
	return map[string]any{
		"rx-bytes": rx, "rx-packets": rx / 1200, "rx-errs": 0, "rx-dropped": 0,
		"tx-bytes": tx, "tx-packets": tx / 1200, "tx-errs": 0, "tx-dropped": 0,
	}
}

// linkLocal is the EUI-64 IPv6 link-local address of a MAC address.
func linkLocal(mac string) string {
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return ""
	}
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	a[8], a[9], a[10] = hw[0]^0x02, hw[1], hw[2]
	a[11], a[12] = 0xff, 0xfe
	a[13], a[14], a[15] = hw[3], hw[4], hw[5]
	return netip.AddrFrom16(a).String()
}

// leaseFor is what a DHCP client with mac got: the IPAM mapping of that MAC, if any.
func (sd *sdnState) leaseFor(mac string) []map[string]any {
	for _, m := range sd.ips {
		if m.mac != "" && strings.EqualFold(m.mac, mac) {
			bits := 24
			if s := sd.current.subnets[m.subnet]; s != nil {
				if pfx, err := netip.ParsePrefix(fmt.Sprint(s["cidr"])); err == nil {
					bits = pfx.Bits()
				}
			}
			return []map[string]any{{"ip-address-type": "ipv4", "ip-address": m.ip, "prefix": bits}}
		}
	}
	return nil
}

// hMigratePreconditions answers GET migrate: where the VM may go and which local disks
// would have to move.
func hMigratePreconditions(cl *call, g *guest) (any, error) {
	c := cl.c
	target, _ := cl.p.str("target")
	allowed := []string{}
	for _, n := range c.nodes {
		if n != g.node && c.st.nodes[n].online && (target == "" || n == target) {
			allowed = append(allowed, n)
		}
	}
	local := []map[string]any{}
	for _, volid := range g.volumes() {
		sid, _, _ := strings.Cut(volid, ":")
		if sd := c.st.storage(sid); sd == nil || sd.shared {
			continue
		}
		e := map[string]any{"volid": volid, "cdrom": false, "is_unused": false}
		if v := c.st.findVolume(g.node, volid); v != nil {
			e["size"] = v.size
		}
		for k, cv := range g.conf {
			if s, ok := cv.(string); ok && parseProperty(s).first == volid {
				e["drivename"] = k
				e["is_unused"] = strings.HasPrefix(k, "unused")
				e["cdrom"] = isCDROM(s) && !strings.Contains(volid, "cloudinit")
			}
		}
		local = append(local, e)
	}
	return map[string]any{
		"running":                g.running,
		"has-dbus-vmstate":       true,
		"allowed_nodes":          allowed,
		"not_allowed_nodes":      map[string]any{},
		"local_disks":            local,
		"local_resources":        []string{},
		"mapped-resources":       []string{},
		"mapped-resource-info":   map[string]any{},
		"dependent-ha-resources": []string{},
	}, nil
}

var rrdSteps = map[string]time.Duration{
	"hour": time.Minute, "day": 30 * time.Minute, "week": 3 * time.Hour,
	"month": 12 * time.Hour, "year": 7 * 24 * time.Hour, "decade": 70 * 24 * time.Hour,
}

// rrdPoints is the number of points an rrddata answer has, as Proxmox's
// RRD archives give about 70 per timeframe.
const rrdPoints = 70

// rrdTimes are the times of an rrddata answer's points, oldest first.
func rrdTimes(timeframe string, now time.Time) (times []time.Time, step time.Duration) {
	step = rrdSteps[timeframe]
	last := now.Truncate(step)
	for i := rrdPoints - 1; i >= 0; i-- {
		times = append(times, last.Add(-time.Duration(i)*step))
	}
	return times, step
}

// ranDuring tells whether the guest has been running since before the end
// of the RRD slot [t, t+step) (the slot a point of time t averages), and
// its uptime at the slot's start (0 when it started within the slot). The
// simulator keeps no history: a stopped guest has no data, a running one
// data since it last started.
func (g *guest) ranDuring(t time.Time, step time.Duration) (time.Duration, bool) {
	if !g.running || !g.startedAt.Before(t.Add(step)) {
		return 0, false
	}
	return max(t.Sub(g.startedAt), 0), true
}

// hGuestRRDData answers rrddata from the same time-derived model as the live metrics:
// 70 points of the timeframe, with data where the guest was running.
func hGuestRRDData(cl *call, g *guest) (any, error) {
	tf, _ := cl.p.str("timeframe")
	times, step := rrdTimes(tf, time.Now())
	out := make([]map[string]any, 0, len(times))
	for _, t := range times {
		e := map[string]any{"time": t.Unix(), "maxcpu": g.cpus(), "maxmem": g.maxmem(), "maxdisk": g.maxdisk(), "disk": 0}
		if up, ok := g.ranDuring(t, step); ok {
			m, next := g.metricsAt(up), g.metricsAt(up+step)
			secs := step.Seconds()
			e["cpu"] = m.cpu
			e["mem"] = m.mem
			e["netin"] = float64(next.netin-m.netin) / secs
			e["netout"] = float64(next.netout-m.netout) / secs
			e["diskread"] = float64(next.diskread-m.diskread) / secs
			e["diskwrite"] = float64(next.diskwrite-m.diskwrite) / secs
		}
		out = append(out, e)
	}
	return out, nil
}

func hQemuSuspend(cl *call, g *guest) (any, error) {
	c := cl.c
	if cl.p.bool("todisk") {
		return nil, errorf(http.StatusNotImplemented, "suspend to disk is not simulated")
	}
	t := c.st.runChecked(g.node, "qmsuspend", strconv.Itoa(g.vmid), cl.user, c.taskDuration(0, 0), g.checkRunning, func(*task) error {
		g.paused = true
		return nil
	})
	return t.upid, nil
}

func hQemuResume(cl *call, g *guest) (any, error) {
	c := cl.c
	check := func() error {
		if err := g.checkRunning(); err != nil {
			return err
		}
		if !g.paused {
			return fmt.Errorf("VM %d is not paused", g.vmid)
		}
		return nil
	}
	t := c.st.runChecked(g.node, "qmresume", strconv.Itoa(g.vmid), cl.user, c.taskDuration(0, 0), check, func(*task) error {
		g.paused = false
		return nil
	})
	return t.upid, nil
}

func hQemuReset(cl *call, g *guest) (any, error) {
	c := cl.c
	t := c.st.runChecked(g.node, "qmreset", strconv.Itoa(g.vmid), cl.user, c.taskDuration(0, 0), g.checkRunning, func(*task) error {
		g.stop()
		c.st.boot(g)
		return nil
	})
	return t.upid, nil
}
