//go:build linux

package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
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

	applied map[string]*applied // the ruleset last applied, by namespace; protected by mu
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
	return &Manager{cfg: cfg, log: log, applied: map[string]*applied{}}
}

// Namespace is the namespace of vdc's gateway.
func (m *Manager) Namespace(vdc string) string { return Namespace(m.cfg.NamespacePrefix, vdc) }

// Status is what a gateway reports.
type Status struct {
	// Namespace is the gateway's network namespace.
	Namespace string
	// Counters are the packets and bytes each rule matched, by rule id; the default
	// inbound deny is DefaultDenyID, the drop of inbound traffic no DNAT
	// addressed NotDNATedID.
	Counters map[string]Counter
	// RulesetApply is how long the apply's nftables transaction took (0 when the
	// ruleset was already the desired one and none was sent).
	RulesetApply time.Duration
}

// Counter is what one rule matched.
type Counter struct{ Packets, Bytes uint64 }

// DefaultDenyID is the counter of inbound traffic no rule allowed.
const DefaultDenyID = "default-deny-inbound"

// NotDNATedID is the counter of traffic from the external network that no port
// forward, 1:1 address or load balancer relay addressed to the VDC (sent to a
// VM's private address by way of the gateway's uplink): dropped before the
// rules, whatever they allow.
const NotDNATedID = "deny-inbound-not-dnated"

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
	h, err := nsnet.Handle(ns)
	if err != nil {
		return Status{}, fmt.Errorf("edge: apply %s: %w", g.VDC, err)
	}
	defer h.Close()
	// The namespace names its VDC from the start (List finds a gateway cut
	// short too), and no revision while the state may be partly applied.
	lb, err := readLabel(h)
	if err == nil && (lb.vdc != g.VDC || lb.revision != g.Revision && lb.revision != "") {
		lb = label{vdc: g.VDC}
		err = writeLabel(h, lb)
	}
	if err != nil {
		return Status{}, fmt.Errorf("edge: apply %s: %w", g.VDC, err)
	}
	if err := nsnet.Sysctl(ns, "net/ipv4/ip_forward", "1"); err != nil {
		return Status{}, fmt.Errorf("edge: apply %s: %w", g.VDC, err)
	}
	if err := m.links(g, ns); err != nil {
		return Status{}, fmt.Errorf("edge: apply %s: %w", g.VDC, err)
	}
	ra, err := m.applyRuleset(ns, g)
	if err != nil {
		return Status{}, fmt.Errorf("edge: apply %s: %w", g.VDC, err)
	}
	if ra.Mode != "unchanged" {
		m.log.Info("edge: ruleset applied", "vdc", g.VDC, "rules", len(g.Rules), "mode", ra.Mode, "took", ra.Took)
	}
	if err := shape(ns, g); err != nil {
		return Status{}, fmt.Errorf("edge: apply %s: bandwidth: %w", g.VDC, err)
	}
	if lb.revision != g.Revision {
		if err := writeLabel(h, label{vdc: g.VDC, revision: g.Revision}); err != nil {
			return Status{}, fmt.Errorf("edge: apply %s: %w", g.VDC, err)
		}
	}
	// The counters are read by Status, not here: an apply sends at most one
	// transaction and reads back only the fingerprint.
	return Status{Namespace: ns, RulesetApply: ra.Took}, nil
}

// ApplyRuleset makes the ruleset in the namespace ns match g (see
// applyRuleset), nothing else.
func (m *Manager) ApplyRuleset(ns string, g Gateway) (RulesetApply, error) {
	if err := g.Validate(); err != nil {
		return RulesetApply{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.applyRuleset(ns, g)
}

// applyRuleset applies g's ruleset in ns from what was applied last; the caller
// holds mu.
func (m *Manager) applyRuleset(ns string, g Gateway) (RulesetApply, error) {
	ra, next, err := applyRuleset(ns, g, m.applied[ns])
	if next == nil {
		delete(m.applied, ns)
	} else {
		m.applied[ns] = next
	}
	return ra, err
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

// Running is a gateway found on the node.
type Running struct {
	// VDC is the gateway's VDC.
	VDC string
	// Namespace is the gateway's network namespace.
	Namespace string
	// Revision is Gateway.Revision of the last Apply that completed; "" when it
	// gave none, or while an Apply of another revision has not completed.
	Revision string
}

// List reports every gateway on the node, read from the kernel (the gateway
// namespaces of NamespacePrefix and what each records), not from memory: a
// restarted agent's List is its predecessor's, and a namespace deleted behind
// the manager's back is not in it.
func (m *Manager) List(ctx context.Context) ([]Running, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	names, err := nsnet.List(namespaces(m.cfg.NamespacePrefix))
	if err != nil {
		return nil, fmt.Errorf("edge: list: %w", err)
	}
	var out []Running
	for _, ns := range names {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("edge: list: %w", err)
		}
		if !nsnet.Exists(ns) {
			continue // a bare file: no namespace
		}
		lb, err := readNSLabel(ns)
		if err != nil {
			return nil, fmt.Errorf("edge: list: %s: %w", ns, err)
		}
		if lb.vdc == "" || m.Namespace(lb.vdc) != ns {
			// No Apply runs while mu is held, and each names its VDC
			// right after making the namespace: one that names none (or
			// a VDC whose namespace it is not) was left by an agent that
			// died in between, carries nothing, and no VDC's removal
			// would ever name it.
			if err := nsnet.Delete(ns); err != nil {
				return nil, fmt.Errorf("edge: list: remove %s, which names no VDC: %w", ns, err)
			}
			m.log.Info("edge: removed a gateway namespace that names no VDC", "namespace", ns)
			continue
		}
		out = append(out, Running{VDC: lb.vdc, Namespace: ns, Revision: lb.revision})
	}
	return out, nil
}

// label is what a gateway namespace records of itself, in the alias of its
// loopback device (there from the namespace's start, and gone with it).
type label struct{ vdc, revision string }

// labelTag starts a gateway namespace's label.
const labelTag = "flexplane-edge-gateway "

func readNSLabel(ns string) (label, error) {
	h, err := nsnet.Handle(ns)
	if err != nil {
		return label{}, err
	}
	defer h.Close()
	return readLabel(h)
}

// readLabel reads the label of the namespace of h; the zero label without one.
func readLabel(h *netlink.Handle) (label, error) {
	lo, err := h.LinkByName("lo")
	if err != nil {
		return label{}, fmt.Errorf("label: %w", err)
	}
	alias, ok := strings.CutPrefix(lo.Attrs().Alias, labelTag)
	if !ok {
		return label{}, nil
	}
	v, err := url.ParseQuery(alias)
	if err != nil {
		return label{}, nil
	}
	return label{vdc: v.Get("vdc"), revision: v.Get("revision")}, nil
}

// writeLabel records lb in the namespace of h.
func writeLabel(h *netlink.Handle, lb label) error {
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetAlias(lo, labelTag+url.Values{"vdc": {lb.vdc}, "revision": {lb.revision}}.Encode())
	}
	if err != nil {
		return fmt.Errorf("label: %w", err)
	}
	return nil
}

// Remove removes vdc's gateway (its namespace, and with it its NICs); one that does
// not run is no error.
func (m *Manager) Remove(ctx context.Context, vdc string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.applied, m.Namespace(vdc))
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
