package pvesim

import (
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DataPlane builds on the host what a cluster's network configuration means on the
// wire (package simnet does it with network namespaces, bridges, VXLAN devices and
// veths). The cluster calls Apply from one goroutine of its own, never under its lock,
// with the whole topology after every change that alters it; Apply makes the host
// match it, idempotently. An error is logged and Apply runs again a second later.
type DataPlane interface {
	Apply(Topology) error
}

// Topology is what the cluster's applied SDN configuration and its running guests
// mean on the wire.
type Topology struct {
	// Cluster is the cluster's name.
	Cluster string
	// Nodes are every node, online or not, in node order.
	Nodes []TopologyNode
	// VNets are the VNets of the running (applied) SDN configuration, sorted by id.
	VNets []TopologyVNet
	// Guests are the running guests of online nodes, sorted by VMID.
	Guests []TopologyGuest
	// FirewallSets are the address sets the NICs' firewalls name: "dc/NAME" for the
	// cluster's ipset NAME, "guest/VMID/NAME" for a guest's.
	FirewallSets map[string]FirewallSet
}

// TopologyNode is a node and its management address (vmbr0), which VXLAN zones use
// as the tunnel endpoint.
type TopologyNode struct {
	Name    string
	Online  bool
	Address netip.Prefix
	Gateway netip.Addr
}

// TopologyVNet is an applied VNet: the bridge of its id on every node of its zone.
type TopologyVNet struct {
	ID   string
	Zone string
	// ZoneType is the zone's type: "simple", "vxlan", "evpn", "vlan", "qinq".
	ZoneType string
	// Tag is the VXLAN VNI (vxlan, evpn) or VLAN tag; 0 without.
	Tag int
	// MTU is the zone's MTU; 0 leaves the default (1450 for VXLAN zones, as Proxmox).
	MTU int
	// Peers are a VXLAN zone's peer addresses.
	Peers []netip.Addr
	// Nodes restricts the zone to these nodes; empty is every node.
	Nodes []string
	// Port is a VXLAN zone's UDP port (default 4789).
	Port int
}

// TopologyGuest is a running guest and its NICs.
type TopologyGuest struct {
	VMID int
	Node string
	Name string
	NICs []TopologyNIC
}

// TopologyNIC is a guest's NIC netN: the bridge it is plugged into, its MAC and, from
// the cloud-init ipconfigN, its static address and gateway (zero without).
type TopologyNIC struct {
	Index   int
	Bridge  string
	MAC     string
	Address netip.Prefix
	Gateway netip.Addr
	// Firewall is what the firewall enforces on the NIC; nil when it is off.
	Firewall *NICFirewall
}

// topology builds the Topology of the model; the caller holds mu.
func (st *state) topology() Topology {
	c := st.c
	t := Topology{Cluster: c.name}
	for _, name := range c.nodes {
		n := st.nodes[name]
		tn := TopologyNode{Name: name, Online: n.online}
		if br := n.ifaces["vmbr0"]; br != nil {
			tn.Address, _ = netip.ParsePrefix(fmt.Sprint(br["cidr"]))
			tn.Gateway, _ = netip.ParseAddr(fmt.Sprint(br["gateway"]))
		}
		t.Nodes = append(t.Nodes, tn)
	}
	run := st.sdn.running
	for _, id := range sortedKeys(run.vnets) {
		v := run.vnets[id]
		z := run.zones[fmt.Sprint(v["zone"])]
		if z == nil {
			continue
		}
		tv := TopologyVNet{ID: id, Zone: fmt.Sprint(v["zone"]), ZoneType: fmt.Sprint(z["type"])}
		tv.Tag, _ = strconv.Atoi(formatValue(v["tag"]))
		tv.MTU, _ = strconv.Atoi(formatValue(z["mtu"]))
		tv.Port, _ = strconv.Atoi(formatValue(z["vxlan-port"]))
		if p, ok := z["peers"]; ok {
			for _, s := range splitList(formatValue(p)) {
				if a, err := netip.ParseAddr(s); err == nil {
					tv.Peers = append(tv.Peers, a)
				}
			}
		}
		if ns, ok := z["nodes"]; ok {
			tv.Nodes = splitList(formatValue(ns))
		}
		t.VNets = append(t.VNets, tv)
	}
	for _, vmid := range slices.Sorted(maps.Keys(st.guests)) {
		g := st.guests[vmid]
		if !g.running || !st.nodes[g.node].online {
			continue
		}
		tg := TopologyGuest{VMID: vmid, Node: g.node, Name: g.name()}
		for _, k := range sortedKeys(g.conf) {
			s, ok := g.conf[k].(string)
			if !ok || !netKeyR.MatchString(k) {
				continue
			}
			idx, _ := strconv.Atoi(strings.TrimPrefix(k, "net"))
			pr := parseProperty(s)
			nic := TopologyNIC{Index: idx, Bridge: pr.get("bridge")}
			for _, key := range pr.keys {
				if netModels[key] {
					nic.MAC = strings.ToLower(pr.get(key))
				}
			}
			if ic, ok := g.conf["ipconfig"+strconv.Itoa(idx)].(string); ok {
				ip := parseProperty(ic)
				nic.Address, _ = netip.ParsePrefix(ip.get("ip"))
				nic.Gateway, _ = netip.ParseAddr(ip.get("gw"))
			}
			tg.NICs = append(tg.NICs, nic)
		}
		t.Guests = append(t.Guests, tg)
	}
	st.firewallTopology(&t)
	return t
}

// dataPlaneLoop applies the topology whenever kickNet signals a change, until the
// cluster closes. It runs alone, so the data plane sees one Apply at a time.
func (c *Cluster) dataPlaneLoop() {
	defer c.work.Done()
	var last *Topology
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.netKick:
		}
		c.mu.Lock()
		t := c.st.topology()
		// The guests started in t whose cloud-init is to run.
		fbs := c.st.firstBoots
		c.st.firstBoots = nil
		c.mu.Unlock()
		if last == nil || !reflect.DeepEqual(*last, t) {
			if err := c.cfg.DataPlane.Apply(t); err != nil {
				c.mu.Lock()
				c.st.firstBoots = append(fbs, c.st.firstBoots...)
				c.mu.Unlock()
				c.log.Error("data plane: apply; again in 1s", "err", err)
				c.work.Add(1)
				time.AfterFunc(time.Second, func() { defer c.work.Done(); c.kickNet() })
				continue
			}
			last = &t
		}
		c.runFirstBoots(fbs)
	}
}

// kickNet asks the data plane loop to apply the topology again; it never blocks.
func (c *Cluster) kickNet() {
	if c.netKick == nil {
		return
	}
	select {
	case c.netKick <- struct{}{}:
	default:
	}
}
