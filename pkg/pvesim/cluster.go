package pvesim

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	pveRelease = "9.1"
	pveVersion = "9.1.1"
	pveRepoID  = "42db4a6cf33dac83"
	kernel     = "6.17.2-1-pve"
)

func hVersion(cl *call) (any, error) {
	return map[string]any{"release": pveRelease, "version": pveVersion, "repoid": pveRepoID}, nil
}

func hClusterStatus(cl *call) (any, error) {
	c := cl.c
	var out []map[string]any
	online := 0
	for _, name := range c.nodes {
		if c.st.nodes[name].online {
			online++
		}
	}
	if c.name != "" {
		quorate := 0
		if online*2 > len(c.nodes) {
			quorate = 1
		}
		out = append(out, map[string]any{
			"type": "cluster", "id": "cluster", "name": c.name,
			"nodes": len(c.nodes), "quorate": quorate, "version": len(c.nodes) + 1,
		})
	}
	for i, name := range c.nodes {
		n := c.st.nodes[name]
		local := 0
		if i == 0 {
			local = 1
		}
		out = append(out, map[string]any{
			"type": "node", "id": "node/" + name, "name": name, "nodeid": n.id,
			"ip": n.ip, "online": boolInt(n.online), "local": local, "level": "",
		})
	}
	return out, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// hNextID answers the lowest free VMID, or checks a given one like Proxmox.
func hNextID(cl *call) (any, error) {
	c := cl.c
	if vmid, ok := cl.p.int("vmid"); ok {
		if c.st.guests[int(vmid)] != nil {
			return nil, paramError("vmid", fmt.Sprintf("VM %d already exists", vmid))
		}
		return strconv.FormatInt(vmid, 10), nil
	}
	for id := 100; id < 1_000_000; id++ {
		if c.st.guests[id] == nil {
			return strconv.Itoa(id), nil
		}
	}
	return nil, errorf(http.StatusInternalServerError, "unable to get any free VMID in range [100, 999999]")
}

func (c *Cluster) nodeEntry(n *node, now time.Time) map[string]any {
	e := map[string]any{
		"id": "node/" + n.name, "node": n.name, "type": "node", "level": "",
		"status": "offline",
	}
	if n.online {
		m := c.st.nodeMetrics(n, now)
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
	var out []map[string]any
	for _, name := range c.nodes {
		n := c.st.nodes[name]
		e := c.nodeEntry(n, now)
		e["ssl_fingerprint"] = c.certs.nodes[name].fingerprint
		out = append(out, e)
	}
	return out, nil
}

func hNodeStatus(cl *call) (any, error) {
	c := cl.c
	n := c.st.nodes[cl.vars["node"]]
	m := c.st.nodeMetrics(n, time.Now())
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

func hNodeVersion(cl *call) (any, error) {
	return map[string]any{"release": pveRelease, "version": pveVersion, "repoid": pveRepoID}, nil
}

func hCertificatesInfo(cl *call) (any, error) {
	c := cl.c
	node := cl.vars["node"]
	nc := c.certs.nodes[node]
	ca := map[string]any{
		"filename": "pve-root-ca.pem",
		"pem":      string(c.certs.caPEM),
		"subject":  nc.issuer,
		"issuer":   nc.issuer,
	}
	return []map[string]any{
		ca,
		{
			"filename":        "pve-ssl.pem",
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

// hClusterResources lists guests, nodes, storage and SDN zones, filtered by type.
func hClusterResources(cl *call) (any, error) {
	c := cl.c
	typ, _ := cl.p.str("type")
	now := time.Now()
	out := make([]map[string]any, 0, len(c.st.guests)+len(c.nodes)*4)
	if typ == "" || typ == "vm" {
		ids := make([]int, 0, len(c.st.guests))
		for id := range c.st.guests {
			ids = append(ids, id)
		}
		sort.Ints(ids)
		for _, id := range ids {
			e := c.st.guestResource(c.st.guests[id], now)
			out = append(out, e)
		}
	}
	if typ == "" || typ == "node" {
		for _, name := range c.nodes {
			e := c.nodeEntry(c.st.nodes[name], now)
			e["cgroup-mode"] = 2
			if !c.st.nodes[name].online {
				e["status"] = "offline"
			}
			out = append(out, e)
		}
	}
	if typ == "" || typ == "storage" {
		for _, name := range c.nodes {
			n := c.st.nodes[name]
			for _, s := range c.st.storages {
				e := c.st.storageStatus(n, s)
				e["id"] = "storage/" + name + "/" + s.id
				e["type"] = "storage"
				e["node"] = name
				e["storage"] = s.id
				e["plugintype"] = s.typ
				e["disk"] = e["used"]
				e["maxdisk"] = e["total"]
				for _, k := range []string{"used", "total", "avail", "active", "enabled", "used_fraction"} {
					delete(e, k)
				}
				if !n.online {
					e["status"] = "unknown"
					delete(e, "disk")
					delete(e, "maxdisk")
				}
				out = append(out, e)
			}
		}
	}
	if typ == "" {
		for _, p := range sortedKeys(c.st.pools) {
			out = append(out, map[string]any{"id": "/pool/" + p, "type": "pool", "pool": p})
		}
	}
	if typ == "" || typ == "sdn" {
		for _, name := range c.nodes {
			n := c.st.nodes[name]
			for _, z := range sortedKeys(c.st.sdn.running.zones) {
				status := "ok"
				if !n.online {
					status = "unknown"
				}
				zt, _ := c.st.sdn.running.zones[z]["type"].(string)
				out = append(out, map[string]any{
					"id": "sdn/" + name + "/" + z, "type": "sdn", "sdn": z, "node": name, "status": status,
				})
				out = append(out, map[string]any{
					"id": "network/" + name + "/zone/" + z, "type": "network", "network-type": "zone",
					"network": z, "zone-type": zt, "node": name, "status": status,
				})
			}
		}
	}
	return out, nil
}

// guestResource is a guest as /cluster/resources and pool members list it.
func (st *state) guestResource(g *guest, now time.Time) map[string]any {
	e := st.guestStatus(g, now)
	e["id"] = fmt.Sprintf("qemu/%d", g.vmid)
	e["type"] = "qemu"
	e["node"] = g.node
	e["maxcpu"] = e["cpus"]
	for _, k := range []string{"cpus", "qmpstatus", "pid", "ha", "running-machine", "running-qemu", "agent"} {
		delete(e, k)
	}
	if g.pool != "" {
		e["pool"] = g.pool
	}
	if _, ok := e["template"]; !ok {
		e["template"] = 0
	}
	return e
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func joinContent(cs []string) string { return strings.Join(cs, ",") }
