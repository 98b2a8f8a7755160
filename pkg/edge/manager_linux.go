//go:build linux

package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/flexplane/flexplane/pkg/support/nsnet"
)

// Config configures a Manager.
type Config struct {
	// BridgeNamespace is the named network namespace holding the node's bridges (the
	// VNets and the external network's): "" is the agent's own namespace, as on a
	// real Proxmox node; in the simulator's data plane it is the node's namespace
	// (simnet's Prefix-<node>).
	BridgeNamespace string
	// NamespacePrefix starts the names of the gateways' namespaces (default "fp").
	NamespacePrefix string
	// Logger receives what the manager changes; nil discards it.
	Logger *slog.Logger
}

// Manager runs the edge gateways of one node.
type Manager struct {
	cfg Config
	log *slog.Logger
	mu  sync.Mutex // serialises Apply and Remove
}

// NewManager returns a manager; it changes nothing until Apply.
func NewManager(cfg Config) *Manager {
	if cfg.NamespacePrefix == "" {
		cfg.NamespacePrefix = "fp"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, log: log}
}

// Namespace is the namespace of vdc's gateway.
func (m *Manager) Namespace(vdc string) string { return Namespace(m.cfg.NamespacePrefix, vdc) }

// Status is what a gateway reports.
type Status struct {
	// Namespace is the gateway's network namespace.
	Namespace string
	// Counters are the packets and bytes each rule matched, by rule id; the default
	// inbound deny is DefaultDenyID.
	Counters map[string]Counter
	// RulesetApply is how long the last nftables transaction took.
	RulesetApply time.Duration
}

// Counter is what one rule matched.
type Counter struct{ Packets, Bytes uint64 }

// DefaultDenyID is the counter of inbound traffic no rule allowed.
const DefaultDenyID = "default-deny-inbound"

// Apply makes vdc's gateway match g: the namespace, its legs and uplink, the ruleset
// in one transaction, the bandwidth limits. Applying the same state again changes
// nothing that carries traffic.
func (m *Manager) Apply(ctx context.Context, g Gateway) (Status, error) {
	if err := g.Validate(); err != nil {
		return Status{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ns := m.Namespace(g.VDC)
	if err := nsnet.Ensure(ns); err != nil {
		return Status{}, fmt.Errorf("edge: apply %s: %w", g.VDC, err)
	}
	if err := nsnet.Sysctl(ns, "net/ipv4/ip_forward", "1"); err != nil {
		return Status{}, fmt.Errorf("edge: apply %s: %w", g.VDC, err)
	}
	if err := m.links(g, ns); err != nil {
		return Status{}, fmt.Errorf("edge: apply %s: %w", g.VDC, err)
	}
	took, err := ApplyRuleset(ns, g)
	if err != nil {
		return Status{}, fmt.Errorf("edge: apply %s: %w", g.VDC, err)
	}
	if err := shape(ns, g); err != nil {
		return Status{}, fmt.Errorf("edge: apply %s: bandwidth: %w", g.VDC, err)
	}
	st, err := m.status(ns)
	st.RulesetApply = took
	return st, err
}

// Status reports vdc's gateway; ErrNotRunning without one.
func (m *Manager) Status(ctx context.Context, vdc string) (Status, error) {
	ns := m.Namespace(vdc)
	if !nsnet.Exists(ns) {
		return Status{}, ErrNotRunning
	}
	return m.status(ns)
}

// ErrNotRunning is a gateway that does not run on this node.
var ErrNotRunning = errors.New("edge: the gateway does not run here")

func (m *Manager) status(ns string) (Status, error) {
	cs, err := ReadCounters(ns)
	return Status{Namespace: ns, Counters: cs}, err
}

// Remove removes vdc's gateway (its namespace, and with it its NICs); one that does
// not run is no error.
func (m *Manager) Remove(ctx context.Context, vdc string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return nsnet.Delete(m.Namespace(vdc))
}

// links makes the gateway's NICs: per leg a veth from the VNet's bridge, the uplink
// from the external bridge, with stable MACs and the addresses of g; NICs of legs no
// longer wanted go.
func (m *Manager) links(g Gateway, ns string) error {
	pair, err := nsnet.OpenPair(m.cfg.BridgeNamespace, ns)
	if err != nil {
		return err
	}
	defer pair.Close()
	bh, gh, gfd := pair.Outer, pair.Inner, pair.InnerNS
	want := map[string]bool{}
	nic := func(bridge, inside, short string, addrs []netip.Prefix) error {
		want[inside] = true
		host := hostIf(g.VDC, short)
		br, err := bh.LinkByName(bridge)
		if err != nil {
			return fmt.Errorf("bridge %s: %w", bridge, err)
		}
		l, err := gh.LinkByName(inside)
		if err == nil {
			if _, herr := bh.LinkByName(host); herr != nil {
				// The bridge side went (a node restart): make the pair again.
				_ = gh.LinkDel(l)
				err = herr
			}
		}
		if err != nil {
			if old, err := bh.LinkByName(host); err == nil {
				_ = bh.LinkDel(old)
			}
			v := &netlink.Veth{
				LinkAttrs: netlink.LinkAttrs{Name: host, MTU: br.Attrs().MTU, MasterIndex: br.Attrs().Index},
				PeerName:  inside, PeerMTU: uint32(br.Attrs().MTU), PeerHardwareAddr: mac(g.VDC, inside), PeerNamespace: netlink.NsFd(int(gfd)),
			}
			if err := bh.LinkAdd(v); err != nil {
				return fmt.Errorf("veth %s: %w", host, err)
			}
			if l, err = gh.LinkByName(inside); err != nil {
				return err
			}
		}
		hl, err := bh.LinkByName(host)
		if err != nil {
			return err
		}
		if hl.Attrs().MasterIndex != br.Attrs().Index {
			if err := bh.LinkSetMaster(hl, br); err != nil {
				return err
			}
		}
		if err := bh.LinkSetUp(hl); err != nil {
			return err
		}
		if err := syncAddrs(gh, l, addrs); err != nil {
			return fmt.Errorf("%s: %w", inside, err)
		}
		return gh.LinkSetUp(l)
	}
	for i, leg := range g.Legs {
		if err := nic(leg.Bridge, "leg"+strconv.Itoa(i), "l"+strconv.Itoa(i), []netip.Prefix{leg.Address}); err != nil {
			return err
		}
	}
	up := []netip.Prefix{g.Uplink.Address}
	for _, o := range g.OneToOne {
		up = append(up, netip.PrefixFrom(o.Public, g.Uplink.Address.Bits()))
	}
	for _, pf := range g.PortForwards {
		if p := netip.PrefixFrom(pf.PublicAddr, g.Uplink.Address.Bits()); !slices.Contains(up, p) {
			up = append(up, p)
		}
	}
	for _, b := range g.Balancers {
		if p := netip.PrefixFrom(b.Public, g.Uplink.Address.Bits()); !slices.Contains(up, p) {
			up = append(up, p)
		}
	}
	if err := nic(g.Uplink.Bridge, "uplink", "u", up); err != nil {
		return err
	}
	links, err := gh.LinkList()
	if err != nil {
		return err
	}
	for _, l := range links {
		if n := l.Attrs().Name; len(n) > 3 && n[:3] == "leg" && !want[n] {
			if err := gh.LinkDel(l); err != nil {
				return err
			}
		}
	}
	if g.Uplink.Gateway.IsValid() {
		ul, err := gh.LinkByName("uplink")
		if err != nil {
			return err
		}
		if err := gh.RouteReplace(&netlink.Route{LinkIndex: ul.Attrs().Index, Gw: g.Uplink.Gateway.AsSlice()}); err != nil {
			return fmt.Errorf("default route: %w", err)
		}
	}
	return nil
}

// syncAddrs gives l exactly the IPv4 addresses want.
func syncAddrs(h *netlink.Handle, l netlink.Link, want []netip.Prefix) error {
	have, err := h.AddrList(l, unix.AF_INET)
	if err != nil {
		return err
	}
	got := map[netip.Prefix]bool{}
	for _, a := range have {
		ip, _ := netip.AddrFromSlice(a.IP.To4())
		ones, _ := a.Mask.Size()
		p := netip.PrefixFrom(ip, ones)
		if !slices.Contains(want, p) {
			if err := h.AddrDel(l, &a); err != nil {
				return err
			}
			continue
		}
		got[p] = true
	}
	for _, p := range want {
		if got[p] {
			continue
		}
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}
		if err := h.AddrAdd(l, a); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("address %s: %w", p, err)
		}
	}
	return nil
}

// conn is a lasting nftables connection into the named namespace: one netlink socket
// for every request and the transaction (opening a socket in another namespace costs
// a thread of its own each time).
func conn(ns string) (*nftables.Conn, func(), error) {
	fd, err := nsnet.Open(ns)
	if err != nil {
		return nil, nil, err
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(fd)), nftables.WithSockOptions(bigBuffers), nftables.AsLasting())
	if err != nil {
		fd.Close()
		return nil, nil, fmt.Errorf("nftables: %w", err)
	}
	return c, func() { _ = c.CloseLasting(); fd.Close() }, nil
}

// bigBuffers lets one transaction carry a large ruleset (and the kernel its
// acknowledgements): 16 MiB each way, beyond the sysctl maximum (the agent runs as
// root).
func bigBuffers(c *mdnetlink.Conn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = errors.Join(
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 16<<20),
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20))
	}); err != nil {
		return err
	}
	return serr
}
