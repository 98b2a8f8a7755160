//go:build linux

// Package simnet is the data plane of a simulated Proxmox cluster (pkg/pvesim): it
// builds, with network namespaces, what the cluster's configuration means on the wire,
// so that a simulated guest has real packets to send. It needs root.
//
// Every namespace is named Prefix-...:
//
//	Prefix-inet     the "internet": bridge "fabric" joining every node's eno1, holding
//	                the nodes' default gateway (vmbr0's gateway) and Config.Upstream
//	Prefix-<node>   a node: eno1 in vmbr0 with the node's address (the VXLAN
//	                underlay), and per applied VNet of its zone a bridge of the VNet's
//	                id; in a vxlan or evpn zone with the device vxlan_<vnet> (the
//	                VNet's VNI, the zone's peers by head-end replication), as
//	                Proxmox's ifupdown2 configuration makes them
//	Prefix-vm<vmid> a running guest: per NIC netN a veth tap<vmid>i<N> on the node's
//	                bridge, named ethN inside, with netN's MAC and cloud-init
//	                ipconfigN's address and gateway
//
// A node's namespace also holds its guests' firewall (firewall.go): nftables tables that
// filter each NIC with firewall=1 on its tap as Proxmox's firewall does, when the guest's
// and the cluster's firewall are enabled.
//
// A Plane is a pvesim.DataPlane: the cluster hands it its topology after every change.
// Stopping, deleting or migrating a guest removes (or moves) its namespace; a node that
// goes offline loses its namespace, and with it every veth into it. StartInGuest runs a
// process inside a guest's namespace (the simulator's cloud-init); its process group is
// killed when the namespace goes.
package simnet

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/support/nsnet"
)

// Config configures a Plane.
type Config struct {
	// Prefix starts the name of every namespace of the plane; it must be unique on the
	// host (a test's random suffix) and at most 40 characters. Required.
	Prefix string
	// Upstream are further addresses (with their prefix) of the internet namespace on
	// the fabric, for example the gateway of an external network whose addresses the
	// edge gateways hold.
	Upstream []netip.Prefix
	// Logger receives what the plane changes; nil discards it.
	Logger *slog.Logger
}

// Plane is the data plane of one simulated cluster.
type Plane struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	guests map[int]string     // applied guests: VMID -> signature; protected by mu
	procs  map[int][]int      // process groups started in guests (StartInGuest): VMID -> ids; protected by mu
	fw     map[string]fwState // applied firewalls by node; protected by mu
	closed bool               // protected by mu
}

// vnetAlias marks the bridges and VXLAN devices the plane made for VNets.
const vnetAlias = "pvesim:vnet"

// New creates the plane's internet namespace, removing what a plane of the same
// prefix left behind.
func New(cfg Config) (*Plane, error) {
	if cfg.Prefix == "" || len(cfg.Prefix) > 40 || strings.ContainsAny(cfg.Prefix, "/ ") {
		return nil, fmt.Errorf("simnet: new: prefix %q must be 1 to 40 characters without '/' or spaces", cfg.Prefix)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Plane{cfg: cfg, log: log, guests: map[int]string{}, procs: map[int][]int{}, fw: map[string]fwState{}}
	if err := p.removeAll(); err != nil {
		return nil, err
	}
	if err := nsnet.Ensure(p.InternetNS()); err != nil {
		return nil, fmt.Errorf("simnet: new: %w", err)
	}
	h, err := nsnet.Handle(p.InternetNS())
	if err != nil {
		return nil, err
	}
	defer h.Close()
	if _, err := ensureBridge(h, "fabric", 1500, ""); err != nil {
		return nil, fmt.Errorf("simnet: new: %w", err)
	}
	if err := addAddrs(h, "fabric", cfg.Upstream...); err != nil {
		return nil, fmt.Errorf("simnet: new: %w", err)
	}
	// The internet forwards between its addresses' networks, as a router would.
	if err := nsnet.Sysctl(p.InternetNS(), "net/ipv4/ip_forward", "1"); err != nil {
		return nil, fmt.Errorf("simnet: new: %w", err)
	}
	return p, nil
}

// InternetNS is the name of the internet namespace.
func (p *Plane) InternetNS() string { return p.cfg.Prefix + "-inet" }

// NodeNS is the name of node's namespace (where its bridges live).
func (p *Plane) NodeNS(node string) string { return p.cfg.Prefix + "-" + node }

// GuestNS is the name of the namespace of the running guest vmid.
func (p *Plane) GuestNS(vmid int) string { return p.cfg.Prefix + "-vm" + strconv.Itoa(vmid) }

// Close removes every namespace of the plane.
func (p *Plane) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for vmid := range p.procs {
		p.endProcs(vmid)
	}
	return p.removeAll()
}

// StartInGuest starts cmd inside the namespace of the running guest vmid, in
// a process group of its own, which the plane kills (SIGKILL to the group) when
// the guest's namespace goes: the guest stops, is deleted or moves to another
// node, or the plane closes. The caller waits for cmd. It implements
// pvesim.GuestExec: the simulator runs a guest's cloud-init with it.
func (p *Plane) StartInGuest(vmid int, cmd *exec.Cmd) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ns := p.GuestNS(vmid)
	if p.closed || !nsnet.Exists(ns) {
		return fmt.Errorf("simnet: start in guest %d: it is not running", vmid)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &unix.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	// A child forked from a thread in the namespace starts in it.
	if err := nsnet.Do(ns, cmd.Start); err != nil {
		return fmt.Errorf("simnet: start in guest %d: %w", vmid, err)
	}
	p.procs[vmid] = append(p.procs[vmid], cmd.Process.Pid)
	return nil
}

// endProcs kills the process groups started in guest vmid. The caller holds mu.
func (p *Plane) endProcs(vmid int) {
	for _, pgid := range p.procs[vmid] {
		if err := unix.Kill(-pgid, unix.SIGKILL); err == nil {
			p.log.Info("simnet: guest gone: killed its processes", "vmid", vmid, "pgid", pgid)
		}
	}
	delete(p.procs, vmid)
}

func (p *Plane) removeAll() error {
	names, err := nsnet.List(p.cfg.Prefix + "-")
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		errs = append(errs, nsnet.Delete(n))
	}
	return errors.Join(errs...)
}

// Apply makes the host match t.
func (p *Plane) Apply(t pvesim.Topology) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("simnet: apply: closed")
	}
	var errs []error
	for _, n := range t.Nodes {
		if !n.Online {
			if nsnet.Exists(p.NodeNS(n.Name)) {
				p.log.Info("simnet: node offline: removing its namespace", "node", n.Name)
			}
			errs = append(errs, nsnet.Delete(p.NodeNS(n.Name)))
			delete(p.fw, n.Name)
			continue
		}
		if err := p.applyNode(n, t.VNets); err != nil {
			errs = append(errs, fmt.Errorf("simnet: node %s: %w", n.Name, err))
		}
	}
	want := map[int]bool{}
	for _, g := range t.Guests {
		want[g.VMID] = true
		if err := p.applyGuest(g, t.VNets); err != nil {
			errs = append(errs, fmt.Errorf("simnet: guest %d: %w", g.VMID, err))
		}
	}
	names, err := nsnet.List(p.cfg.Prefix + "-vm")
	errs = append(errs, err)
	for _, name := range names {
		vmid, err := strconv.Atoi(strings.TrimPrefix(name, p.cfg.Prefix+"-vm"))
		if err != nil || want[vmid] {
			continue
		}
		p.log.Info("simnet: guest stopped: removing its namespace", "vmid", vmid)
		p.endProcs(vmid)
		errs = append(errs, nsnet.Delete(name))
		delete(p.guests, vmid)
	}
	for _, n := range t.Nodes {
		if !n.Online {
			continue
		}
		if err := p.applyFirewall(t, n.Name); err != nil {
			errs = append(errs, fmt.Errorf("simnet: node %s: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}

// applyNode makes the node's namespace, its underlay and its VNets' bridges.
func (p *Plane) applyNode(n pvesim.TopologyNode, vnets []pvesim.TopologyVNet) error {
	ns := p.NodeNS(n.Name)
	if err := nsnet.Ensure(ns); err != nil {
		return err
	}
	h, err := nsnet.Handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	if _, err := h.LinkByName("eno1"); err != nil {
		if err := p.underlay(n.Name); err != nil {
			return err
		}
	}
	br, err := ensureBridge(h, "vmbr0", 1500, "")
	if err != nil {
		return err
	}
	eno1, err := h.LinkByName("eno1")
	if err != nil {
		return err
	}
	if eno1.Attrs().MasterIndex != br.Attrs().Index {
		if err := h.LinkSetMaster(eno1, br); err != nil {
			return fmt.Errorf("eno1 into vmbr0: %w", err)
		}
	}
	if err := h.LinkSetUp(eno1); err != nil {
		return err
	}
	if n.Address.IsValid() {
		if err := addAddrs(h, "vmbr0", n.Address); err != nil {
			return err
		}
		if n.Gateway.IsValid() {
			if err := p.upstreamGateway(n.Address, n.Gateway); err != nil {
				return err
			}
			if err := h.RouteReplace(&netlink.Route{LinkIndex: br.Attrs().Index, Gw: n.Gateway.AsSlice()}); err != nil {
				return fmt.Errorf("default route: %w", err)
			}
		}
	}
	return p.applyVNets(h, n, vnets)
}

// underlay links node's eno1 to the fabric of the internet namespace.
func (p *Plane) underlay(node string) error {
	ih, err := nsnet.Handle(p.InternetNS())
	if err != nil {
		return err
	}
	defer ih.Close()
	ns, err := nsnet.Open(p.NodeNS(node))
	if err != nil {
		return err
	}
	defer ns.Close()
	port := ifname("n-" + node)
	if old, err := ih.LinkByName(port); err == nil {
		_ = ih.LinkDel(old)
	}
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: port, MTU: 1500}, PeerName: "eno1", PeerNamespace: netlink.NsFd(int(ns))}
	if err := ih.LinkAdd(v); err != nil {
		return fmt.Errorf("underlay veth: %w", err)
	}
	fabric, err := ih.LinkByName("fabric")
	if err != nil {
		return err
	}
	l, err := ih.LinkByName(port)
	if err != nil {
		return err
	}
	if err := ih.LinkSetMaster(l, fabric); err != nil {
		return err
	}
	return ih.LinkSetUp(l)
}

// upstreamGateway gives the internet namespace the nodes' gateway address.
func (p *Plane) upstreamGateway(nodeAddr netip.Prefix, gw netip.Addr) error {
	ih, err := nsnet.Handle(p.InternetNS())
	if err != nil {
		return err
	}
	defer ih.Close()
	return addAddrs(ih, "fabric", netip.PrefixFrom(gw, nodeAddr.Bits()))
}

// vnetMTU is the MTU of a VNet's bridge: the zone's, or Proxmox's default.
func vnetMTU(v pvesim.TopologyVNet) int {
	switch {
	case v.MTU > 0:
		return v.MTU
	case v.ZoneType == "vxlan" || v.ZoneType == "evpn":
		return 1450
	}
	return 1500
}

func onNode(v pvesim.TopologyVNet, node string) bool {
	return len(v.Nodes) == 0 || slices.Contains(v.Nodes, node)
}

// applyVNets makes the node's VNet bridges (and VXLAN devices) and removes those of
// VNets no longer applied.
func (p *Plane) applyVNets(h *netlink.Handle, n pvesim.TopologyNode, vnets []pvesim.TopologyVNet) error {
	want := map[string]bool{}
	for _, v := range vnets {
		if !onNode(v, n.Name) {
			continue
		}
		want[v.ID] = true
		br, err := ensureBridge(h, v.ID, vnetMTU(v), vnetAlias)
		if err != nil {
			return err
		}
		if (v.ZoneType != "vxlan" && v.ZoneType != "evpn") || v.Tag == 0 {
			continue
		}
		want["vxlan_"+v.ID] = true
		if err := p.ensureVXLAN(h, br, v, n.Address.Addr()); err != nil {
			return fmt.Errorf("vnet %s: %w", v.ID, err)
		}
	}
	links, err := h.LinkList()
	if err != nil {
		return err
	}
	for _, l := range links {
		if l.Attrs().Alias == vnetAlias && !want[l.Attrs().Name] {
			p.log.Info("simnet: removing a VNet's device", "node", n.Name, "link", l.Attrs().Name)
			if err := h.LinkDel(l); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *Plane) ensureVXLAN(h *netlink.Handle, br netlink.Link, v pvesim.TopologyVNet, local netip.Addr) error {
	name := "vxlan_" + v.ID
	port := v.Port
	if port == 0 {
		port = 4789
	}
	if l, err := h.LinkByName(name); err == nil {
		if vx, ok := l.(*netlink.Vxlan); !ok || vx.VxlanId != v.Tag || vx.Port != port || !vx.SrcAddr.Equal(local.AsSlice()) {
			if err := h.LinkDel(l); err != nil {
				return err
			}
		}
	}
	l, err := h.LinkByName(name)
	if err != nil {
		vx := &netlink.Vxlan{
			LinkAttrs: netlink.LinkAttrs{Name: name, MTU: vnetMTU(v), MasterIndex: br.Attrs().Index},
			VxlanId:   v.Tag, SrcAddr: local.AsSlice(), Port: port, Learning: true,
		}
		if err := h.LinkAdd(vx); err != nil {
			return fmt.Errorf("add %s: %w", name, err)
		}
		if l, err = h.LinkByName(name); err != nil {
			return err
		}
		if err := h.LinkSetAlias(l, vnetAlias); err != nil {
			return err
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return err
	}
	// Head-end replication: unknown and broadcast frames go to every peer.
	for _, peer := range v.Peers {
		if peer == local {
			continue
		}
		err := h.NeighAppend(&netlink.Neigh{
			LinkIndex: l.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
			State: netlink.NUD_PERMANENT | netlink.NUD_NOARP, HardwareAddr: make(net.HardwareAddr, 6), IP: peer.AsSlice(),
		})
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s: peer %s: %w", name, peer, err)
		}
	}
	return nil
}

// guestSignature is what a guest's namespace is built from: a change rebuilds it.
func guestSignature(g pvesim.TopologyGuest, vnets []pvesim.TopologyVNet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", g.Node)
	for _, n := range g.NICs {
		fmt.Fprintf(&b, "|%d,%s,%s,%s,%s", n.Index, n.Bridge, n.MAC, n.Address, n.Gateway)
		for _, v := range vnets {
			if v.ID == n.Bridge {
				fmt.Fprintf(&b, ",%d", vnetMTU(v))
			}
		}
	}
	return b.String()
}

// applyGuest makes the guest's namespace unless it is up to date.
func (p *Plane) applyGuest(g pvesim.TopologyGuest, vnets []pvesim.TopologyVNet) error {
	sig := guestSignature(g, vnets)
	ns := p.GuestNS(g.VMID)
	if p.guests[g.VMID] == sig && nsnet.Exists(ns) && p.tapsPresent(g) {
		return nil
	}
	p.endProcs(g.VMID)
	if err := nsnet.Delete(ns); err != nil {
		return err
	}
	delete(p.guests, g.VMID)
	if err := nsnet.Ensure(ns); err != nil {
		return err
	}
	pair, err := nsnet.OpenPair(p.NodeNS(g.Node), ns)
	if err != nil {
		return err
	}
	defer pair.Close()
	nh, gh, gfd := pair.Outer, pair.Inner, pair.InnerNS
	routed := false
	for _, nic := range g.NICs {
		br, err := nh.LinkByName(nic.Bridge)
		if err != nil {
			return fmt.Errorf("net%d: bridge %s: %w", nic.Index, nic.Bridge, err)
		}
		tap := fmt.Sprintf("tap%di%d", g.VMID, nic.Index)
		if old, err := nh.LinkByName(tap); err == nil {
			_ = nh.LinkDel(old)
		}
		mtu := br.Attrs().MTU
		v := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: tap, MTU: mtu, MasterIndex: br.Attrs().Index},
			PeerName:  "eth" + strconv.Itoa(nic.Index), PeerMTU: uint32(mtu), PeerNamespace: netlink.NsFd(int(gfd)),
		}
		if mac, err := net.ParseMAC(nic.MAC); err == nil {
			v.PeerHardwareAddr = mac
		}
		if err := nh.LinkAdd(v); err != nil {
			return fmt.Errorf("net%d: veth: %w", nic.Index, err)
		}
		if l, err := nh.LinkByName(tap); err != nil {
			return err
		} else if err := nh.LinkSetUp(l); err != nil {
			return err
		}
		eth, err := gh.LinkByName("eth" + strconv.Itoa(nic.Index))
		if err != nil {
			return err
		}
		if err := gh.LinkSetUp(eth); err != nil {
			return err
		}
		if !nic.Address.IsValid() {
			continue
		}
		if err := gh.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(nic.Address)}); err != nil {
			return fmt.Errorf("net%d: address: %w", nic.Index, err)
		}
		if nic.Gateway.IsValid() && !routed {
			if err := gh.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: nic.Gateway.AsSlice()}); err != nil {
				return fmt.Errorf("net%d: default route: %w", nic.Index, err)
			}
			routed = true
		}
	}
	p.guests[g.VMID] = sig
	p.log.Info("simnet: guest namespace ready", "vmid", g.VMID, "node", g.Node, "ns", ns)
	return nil
}

// tapsPresent reports whether every tap of g is still on its node (a node that went
// offline and came back lost them).
func (p *Plane) tapsPresent(g pvesim.TopologyGuest) bool {
	nh, err := nsnet.Handle(p.NodeNS(g.Node))
	if err != nil {
		return false
	}
	defer nh.Close()
	for _, nic := range g.NICs {
		if _, err := nh.LinkByName(fmt.Sprintf("tap%di%d", g.VMID, nic.Index)); err != nil {
			return false
		}
	}
	return true
}

// ifname shortens a name to the kernel's 15 characters.
func ifname(s string) string {
	if len(s) > 15 {
		return s[:15]
	}
	return s
}

// ensureBridge returns the bridge name, made (up, with mtu and alias) if missing.
func ensureBridge(h *netlink.Handle, name string, mtu int, alias string) (netlink.Link, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}}); err != nil {
			return nil, fmt.Errorf("add bridge %s: %w", name, err)
		}
		if l, err = h.LinkByName(name); err != nil {
			return nil, err
		}
		if alias != "" {
			if err := h.LinkSetAlias(l, alias); err != nil {
				return nil, err
			}
		}
	}
	if l.Attrs().MTU != mtu {
		if err := h.LinkSetMTU(l, mtu); err != nil {
			return nil, err
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return nil, err
	}
	return l, nil
}

// addAddrs adds the addresses to the link name unless it has them.
func addAddrs(h *netlink.Handle, name string, addrs ...netip.Prefix) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		err := h.AddrAdd(l, &netlink.Addr{IPNet: ipNet(a)})
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s: address %s: %w", name, a, err)
		}
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
