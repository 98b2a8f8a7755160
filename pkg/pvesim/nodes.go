package pvesim

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// defaultIfaces are a fresh node's interfaces: one NIC, the bridge vmbr0 carrying the
// node's address and the VLAN-aware bridge vmbr1.
func defaultIfaces(ip string) map[string]map[string]any {
	gw := ip[:strings.LastIndex(ip, ".")] + ".254"
	return map[string]map[string]any{
		"eno1": {"iface": "eno1", "type": "eth", "active": 1, "autostart": 1, "exists": 1, "method": "manual", "method6": "manual", "families": []string{"inet"}, "priority": 3},
		"vmbr0": {"iface": "vmbr0", "type": "bridge", "active": 1, "autostart": 1, "method": "static", "method6": "manual", "families": []string{"inet"},
			"bridge_ports": "eno1", "bridge_stp": "off", "bridge_fd": "0", "address": ip, "netmask": "24", "cidr": ip + "/24", "gateway": gw, "priority": 4},
		"vmbr1": {"iface": "vmbr1", "type": "bridge", "active": 1, "autostart": 1, "method": "manual", "method6": "manual", "families": []string{"inet"},
			"bridge_ports": "none", "bridge_stp": "off", "bridge_fd": "0", "bridge_vlan_aware": 1, "bridge_vids": "2-4094", "priority": 5},
	}
}

// hNodeNetwork lists a node's interfaces (with pending changes, as Proxmox reads
// interfaces.new first) and, where the type filter asks, the applied SDN vnets.
func hNodeNetwork(cl *call) (any, error) {
	c := cl.c
	n := c.st.nodes[cl.vars["node"]]
	typ, _ := cl.p.str("type")
	ifaces := n.ifaces
	if n.pendIfaces != nil {
		ifaces = n.pendIfaces
	}
	var all []map[string]any
	for _, id := range sortedKeys(ifaces) {
		all = append(all, ifaces[id])
	}
	for _, id := range sortedKeys(c.st.sdn.running.vnets) {
		all = append(all, map[string]any{"iface": id, "type": "vnet", "active": 1, "method": "manual", "families": []string{"inet"}})
	}
	out := []map[string]any{}
	for _, e := range all {
		t := e["type"].(string)
		keep := false
		switch typ {
		case "":
			keep = t != "vnet"
		case "any_bridge", "any_local_bridge":
			keep = t == "bridge" || t == "OVSBridge" || (typ == "any_bridge" && t == "vnet")
		case "include_sdn":
			keep = true
		default:
			keep = t == typ
		}
		if keep {
			out = append(out, sdnEntry(e))
		}
	}
	return out, nil
}

var ifaceKeys = []string{"address", "address6", "autostart", "bond-primary", "bond_mode", "bond_xmit_hash_policy", "bridge_ports", "bridge_vids", "bridge_vlan_aware", "cidr", "cidr6", "comments", "comments6", "gateway", "gateway6", "mtu", "netmask", "netmask6", "slaves", "vlan-id", "vlan-raw-device"}

// hNodeNetworkCreate adds an interface to the node's pending network configuration;
// PUT applies it.
func hNodeNetworkCreate(cl *call) (any, error) {
	n := cl.c.st.nodes[cl.vars["node"]]
	id, _ := cl.p.str("iface")
	typ, _ := cl.p.str("type")
	pending := n.pendIfaces
	if pending == nil {
		pending = copyObjects(n.ifaces)
	}
	if pending[id] != nil {
		return nil, paramError("iface", "interface already exists")
	}
	switch typ {
	case "bridge", "bond", "vlan":
	default:
		return nil, paramError("type", fmt.Sprintf("creating an interface of type '%s' is not simulated", typ))
	}
	obj := map[string]any{"iface": id, "type": typ, "active": 0, "method": "manual", "method6": "manual", "families": []string{"inet"}}
	setKeys(obj, cl.p, ifaceKeys)
	if ports, ok := obj["bridge_ports"].(string); ok {
		for _, p := range splitList(ports) {
			if p != "none" && pending[p] == nil {
				return nil, paramError("bridge_ports", fmt.Sprintf("unable to find bridge port '%s'", p))
			}
		}
	}
	if _, ok := obj["cidr"]; ok {
		obj["method"] = "static"
	}
	pending[id] = obj
	n.pendIfaces = pending
	return nil, nil
}

// hNodeNetworkApply applies the pending network configuration (a srvreload task).
func hNodeNetworkApply(cl *call) (any, error) {
	c := cl.c
	n := c.st.nodes[cl.vars["node"]]
	if n.pendIfaces == nil {
		return nil, errorf(http.StatusInternalServerError, "no changes to apply")
	}
	applied := n.pendIfaces
	n.pendIfaces = nil
	t := c.st.runTask(n.name, "srvreload", "networking", cl.user, c.taskDuration(0, 0), func(*task) error {
		for _, e := range applied {
			e["active"] = 1
		}
		n.ifaces = applied
		return nil
	})
	return t.upid, nil
}

// hNodeNetworkRevert drops the pending network configuration.
func hNodeNetworkRevert(cl *call) (any, error) {
	cl.c.st.nodes[cl.vars["node"]].pendIfaces = nil
	return nil, nil
}

// hNodePower shuts a node down (it goes offline) or reboots it (offline, then back
// after the start time of the timing model).
func hNodePower(cl *call) (any, error) {
	c := cl.c
	node := cl.vars["node"]
	cmd, _ := cl.p.str("command")
	c.st.setNodeOnline(node, false)
	if cmd == "reboot" {
		c.st.after(c.taskDuration(c.cfg.Timing.Start, 0)+10*time.Millisecond, func() {
			c.st.setNodeOnline(node, true)
		})
	}
	return nil, nil
}

// hClusterJoinInfo answers the join information of the cluster: every node with its
// address and certificate fingerprint.
func hClusterJoinInfo(cl *call) (any, error) {
	c := cl.c
	if c.name == "" {
		return nil, errorf(http.StatusInternalServerError, "node is not in a cluster, no join info available!")
	}
	preferred := cl.p.strOr("node", c.nodes[0])
	var nodes []map[string]any
	var conf strings.Builder
	for _, name := range c.nodes {
		n := c.st.nodes[name]
		nodes = append(nodes, map[string]any{
			"name": name, "nodeid": n.id, "pve_addr": n.ip, "pve_fp": c.certs.nodes[name].fingerprint,
			"quorum_votes": 1, "ring0_addr": n.ip,
		})
		fmt.Fprintf(&conf, "node %s %d %s\n", name, n.id, n.ip)
	}
	sum := sha1.Sum([]byte(c.name + "\n" + conf.String()))
	return map[string]any{
		"nodelist":       nodes,
		"preferred_node": preferred,
		"config_digest":  hex.EncodeToString(sum[:]),
		"totem": map[string]any{
			"cluster_name": c.name, "config_version": strconv.Itoa(len(c.nodes) + 1), "ip_version": "ipv4-6",
			"link_mode": "passive", "secauth": "on", "version": "2", "transport": "knet",
			"interface": map[string]any{"0": map[string]any{"linknumber": "0"}},
		},
	}, nil
}

func (c *Cluster) nodeEntry(n *node, now time.Time, loads map[string]nodeLoad) map[string]any {
	e := map[string]any{
		"id": "node/" + n.name, "node": n.name, "type": "node", "level": "",
		"status": "offline",
	}
	if n.online {
		m := c.st.nodeMetrics(n, now, loads[n.name])
		e["status"] = "online"
		e["cpu"] = m.cpu
		e["maxcpu"] = c.cfg.NodeCPUs
		e["mem"] = m.mem
		e["maxmem"] = c.cfg.NodeMemory
		e["disk"] = m.rootUse
		e["maxdisk"] = int64(100 << 30)
		e["uptime"] = m.uptime
	}
	return e
}

func hNodes(cl *call) (any, error) {
	c := cl.c
	now := time.Now()
	loads := c.st.loads(now)
	var out []map[string]any
	for _, name := range c.nodes {
		n := c.st.nodes[name]
		e := c.nodeEntry(n, now, loads)
		e["ssl_fingerprint"] = c.certs.nodes[name].fingerprint
		out = append(out, e)
	}
	return out, nil
}

func hNodeStatus(cl *call) (any, error) {
	c := cl.c
	n := c.st.nodes[cl.vars["node"]]
	now := time.Now()
	m := c.st.nodeMetrics(n, now, c.st.loads(now)[n.name])
	total := c.cfg.NodeMemory
	rootTotal := int64(100 << 30)
	swapTotal := int64(8 << 30)
	cpus := c.cfg.NodeCPUs
	return map[string]any{
		"cpu":    m.cpu,
		"wait":   0.0004,
		"idle":   0,
		"uptime": m.uptime,
		"loadavg": []string{
			strconv.FormatFloat(m.load[0], 'f', 2, 64),
			strconv.FormatFloat(m.load[1], 'f', 2, 64),
			strconv.FormatFloat(m.load[2], 'f', 2, 64),
		},
		"kversion":   "Linux " + kernel + " #1 SMP PREEMPT_DYNAMIC PMX " + kernel + " (2025-11-04T12:00Z) x86_64",
		"pveversion": "pve-manager/" + pveVersion + "/" + pveRepoID,
		"cpuinfo": map[string]any{
			"model": "AMD EPYC 7402P 24-Core Processor", "cores": cpus / 2, "cpus": cpus, "sockets": 1,
			"mhz": "2800.000", "hvm": "1", "user_hz": 100, "flags": "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr svm",
		},
		"memory": map[string]any{"total": total, "used": m.mem, "free": total - m.mem, "available": total - m.mem},
		"swap":   map[string]any{"total": swapTotal, "used": 0, "free": swapTotal},
		"rootfs": map[string]any{"total": rootTotal, "used": m.rootUse, "free": rootTotal - m.rootUse, "avail": rootTotal - m.rootUse},
		"ksm":    map[string]any{"shared": 0},
		"boot-info": map[string]any{
			"mode": "efi", "secureboot": 0,
		},
		"current-kernel": map[string]any{
			"sysname": "Linux", "release": kernel, "machine": "x86_64",
			"version": "#1 SMP PREEMPT_DYNAMIC PMX " + kernel + " (2025-11-04T12:00Z)",
		},
	}, nil
}

// hNodeRRDData answers a node's rrddata from its guests: at each point the
// load of the guests that ran then (their CPU, memory and traffic, as their
// own rrddata reports them), over the node's idle base, as hNodeStatus
// derives the node's current metrics. Before the node booted a point has
// its time only, as Proxmox's RRD has no data for it.
func hNodeRRDData(cl *call) (any, error) {
	c := cl.c
	n := c.st.nodes[cl.vars["node"]]
	tf, _ := cl.p.str("timeframe")
	times, step := rrdTimes(tf, time.Now())
	var guests []*guest
	for _, g := range c.st.guests {
		if g.node == n.name {
			guests = append(guests, g)
		}
	}
	secs := step.Seconds()
	out := make([]map[string]any, 0, len(times))
	for _, t := range times {
		e := map[string]any{"time": t.Unix()}
		if !n.booted.Before(t.Add(step)) {
			out = append(out, e)
			continue
		}
		var load nodeLoad
		var netin, netout float64
		for _, g := range guests {
			up, ok := g.ranDuring(t, step)
			if !ok {
				continue
			}
			m, next := g.metricsAt(up), g.metricsAt(up+step)
			load.mem += m.mem + 64<<20
			load.busy += m.cpu * float64(g.cpus())
			netin += float64(next.netin-m.netin) / secs
			netout += float64(next.netout-m.netout) / secs
		}
		m := c.st.nodeMetrics(n, t, load)
		e["cpu"] = m.cpu
		e["maxcpu"] = c.cfg.NodeCPUs
		e["iowait"] = 0.0004
		e["loadavg"] = m.load[0]
		e["memtotal"] = c.cfg.NodeMemory
		e["memused"] = m.mem
		e["swaptotal"] = int64(8 << 30)
		e["swapused"] = 0
		e["roottotal"] = int64(100 << 30)
		e["rootused"] = m.rootUse
		e["netin"] = netin
		e["netout"] = netout
		out = append(out, e)
	}
	return out, nil
}

func hNodeVersion(cl *call) (any, error) {
	return map[string]any{"release": pveRelease, "version": pveVersion, "repoid": pveRepoID}, nil
}

func hCertificatesInfo(cl *call) (any, error) {
	c := cl.c
	node := cl.vars["node"]
	nc := c.certs.nodes[node]
	ca := map[string]any{
		"filename": "/etc/pve/pve-root-ca.pem",
		"pem":      string(c.certs.caPEM),
		"subject":  nc.issuer,
		"issuer":   nc.issuer,
	}
	return []map[string]any{
		ca,
		{
			"filename":        "/etc/pve/nodes/" + node + "/pve-ssl.pem",
			"fingerprint":     nc.fingerprint,
			"subject":         nc.subject,
			"issuer":          nc.issuer,
			"notbefore":       nc.notBefore.Unix(),
			"notafter":        nc.notAfter.Unix(),
			"san":             nc.san,
			"pem":             nc.pem,
			"public-key-type": "id-ecPublicKey",
			"public-key-bits": nc.bits,
		},
	}, nil
}

// hLxcList lists a node's containers: the simulator runs none (creating one answers 501).
func hLxcList(*call) (any, error) { return []map[string]any{}, nil }
