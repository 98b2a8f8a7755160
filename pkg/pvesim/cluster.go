package pvesim

import (
	"cmp"
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
	for _, name := range c.nodes {
		n := c.st.nodes[name]
		local := 0
		if name == cl.local {
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

// hClusterResources lists guests, nodes, storage and SDN zones, filtered by type.
func hClusterResources(cl *call) (any, error) {
	c := cl.c
	typ, _ := cl.p.str("type")
	now := time.Now()
	out := make([]any, 0, len(c.st.guests)+len(c.nodes)*8)
	if typ == "" || typ == "vm" {
		ids := make([]int, 0, len(c.st.guests))
		for id := range c.st.guests {
			ids = append(ids, id)
		}
		sort.Ints(ids)
		for _, id := range ids {
			out = append(out, c.st.guestResource(c.st.guests[id], now))
		}
	}
	if typ == "" || typ == "node" {
		loads := c.st.loads(now)
		for _, name := range c.nodes {
			e := c.nodeEntry(c.st.nodes[name], now, loads)
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

// vmResource is a guest as /cluster/resources and pool member lists show it (a struct:
// this list is the hot path of every dashboard).
type vmResource struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	VMID     int    `json:"vmid"`
	Name     string `json:"name"`
	Node     string `json:"node"`
	Status   string `json:"status"`
	MaxCPU   int64  `json:"maxcpu"`
	MaxMem   int64  `json:"maxmem"`
	MaxDisk  int64  `json:"maxdisk"`
	Template int    `json:"template"`
	Tags     string `json:"tags,omitempty"`
	Lock     string `json:"lock,omitempty"`
	Pool     string `json:"pool,omitempty"`
	HAState  string `json:"hastate,omitempty"`
	*vmMetrics
}

// vmMetrics are the runtime fields, absent while the guest's node is offline.
type vmMetrics struct {
	CPU       float64 `json:"cpu"`
	Mem       int64   `json:"mem"`
	Disk      int64   `json:"disk"`
	NetIn     int64   `json:"netin"`
	NetOut    int64   `json:"netout"`
	DiskRead  int64   `json:"diskread"`
	DiskWrite int64   `json:"diskwrite"`
	Uptime    int64   `json:"uptime"`
}

// guestResource is a guest as /cluster/resources and pool members list it.
func (st *state) guestResource(g *guest, now time.Time) *vmResource {
	e := &vmResource{
		ID:      "qemu/" + strconv.Itoa(g.vmid),
		Type:    "qemu",
		VMID:    g.vmid,
		Name:    g.name(),
		Node:    g.node,
		Status:  "stopped",
		MaxCPU:  g.cpus(),
		MaxMem:  g.maxmem(),
		MaxDisk: g.maxdisk(),
		Lock:    g.lock(),
		Pool:    g.pool,
	}
	if r := st.ha.res["vm:"+strconv.Itoa(g.vmid)]; r != nil {
		e.HAState = cmp.Or(r.crm, r.state)
	}
	if g.running {
		e.Status = "running"
	}
	if g.isTemplate() {
		e.Template = 1
	}
	if t, ok := g.conf["tags"].(string); ok {
		e.Tags = t
	}
	if n := st.nodes[g.node]; n != nil && !n.online {
		e.Status = "unknown"
		return e
	}
	m := g.metrics(now)
	e.vmMetrics = &vmMetrics{CPU: m.cpu, Mem: m.mem, NetIn: m.netin, NetOut: m.netout, DiskRead: m.diskread, DiskWrite: m.diskwrite, Uptime: m.uptime}
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
