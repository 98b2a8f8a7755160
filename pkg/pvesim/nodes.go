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

// hNodeNetwork lists a node's interfaces: one NIC, the bridges vmbr0 (with the node's
// address) and vmbr1, and the applied SDN vnets where the type filter asks for them.
func hNodeNetwork(cl *call) (any, error) {
	c := cl.c
	n := c.st.nodes[cl.vars["node"]]
	typ, _ := cl.p.str("type")
	all := []map[string]any{
		{"iface": "eno1", "type": "eth", "active": 1, "autostart": 1, "exists": 1, "method": "manual", "method6": "manual", "families": []string{"inet"}, "priority": 3},
		{"iface": "vmbr0", "type": "bridge", "active": 1, "autostart": 1, "method": "static", "method6": "manual", "families": []string{"inet"},
			"bridge_ports": "eno1", "bridge_stp": "off", "bridge_fd": "0", "address": n.ip, "netmask": "24", "cidr": n.ip + "/24",
			"gateway": strings.TrimSuffix(n.ip, "."+strings.Split(n.ip, ".")[3]) + ".254", "priority": 4},
		{"iface": "vmbr1", "type": "bridge", "active": 1, "autostart": 1, "method": "manual", "method6": "manual", "families": []string{"inet"},
			"bridge_ports": "none", "bridge_stp": "off", "bridge_fd": "0", "bridge_vlan_aware": 1, "bridge_vids": "2-4094", "priority": 5},
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
			keep = t == "bridge" || (typ == "any_bridge" && t == "vnet")
		case "include_sdn":
			keep = true
		default:
			keep = t == typ
		}
		if keep {
			out = append(out, e)
		}
	}
	return out, nil
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
