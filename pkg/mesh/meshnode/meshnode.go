// Package meshnode runs one userspace mesh node (tailscale's tsnet) for the
// orchestrator or an agent: it joins the mesh of the flexplane control server
// with an enrollment key, and answers who a peer is (its tags) for the
// identity checks of both sides.
package meshnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/envknob"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"
	"tailscale.com/tsnet"

	"github.com/flexplane/flexplane/pkg/support/closectx"
)

// Tags used on the mesh. Node tags come from the enrollment key.
const (
	// TagOrchestrator marks the orchestrator's mesh nodes: the only callers
	// agents accept.
	TagOrchestrator = "tag:orchestrator"
	// TagAgent marks agents.
	TagAgent = "tag:agent"
)

// PrepareProcess sets the process-wide knobs of the tailscale client that a
// flexplane mesh needs, before any node starts. It is called once by the
// mains (cmd/agent, cmd/orchestrator) and by test harnesses:
//   - no log upload to tailscale's log service (nothing outside is reachable
//     and nothing should be sent there);
//   - DERP over plain HTTP when the control URL is http:// (the embedded DERP
//     relay is served on the control server's own address and scheme).
func PrepareProcess(controlURL string) {
	// The knobs are read without locks by running nodes: write each only
	// when it changes, so that repeated calls (several harnesses in one test
	// process) do not race with nodes already up.
	if os.Getenv("TS_NO_LOGS_NO_SUPPORT") != "true" {
		envknob.SetNoLogsNoSupport()
	}
	if strings.HasPrefix(controlURL, "http://") && os.Getenv("TS_DEBUG_USE_DERP_HTTP") != "true" {
		envknob.Setenv("TS_DEBUG_USE_DERP_HTTP", "true")
	}
}

// Config configures a mesh node.
type Config struct {
	// Hostname is the node's name in the mesh. Required.
	Hostname string
	// Dir keeps the node's state (its keys); with the same Dir a restarted
	// node is the same mesh node and needs no new enrollment key. Required.
	Dir string
	// ControlURL is the control server (the orchestrator's public URL).
	// Required.
	ControlURL string
	// AuthKey is the enrollment key; only needed when Dir holds no state yet.
	AuthKey string
	// Logger receives the node's logs (at debug level). Default slog.Default().
	Logger *slog.Logger
}

// Node is a running mesh node.
type Node struct {
	srv *tsnet.Server
	lc  *local.Client
	log *slog.Logger

	// whois identifies the callers of the node's connections (WhoIs);
	// stopWhois ends its lookups when the node closes.
	whois     *whoisCache
	stopWhois context.CancelFunc

	mu sync.Mutex
	// introduced are the peers that answered a disco ping of this node,
	// or were waited for IntroduceWait (see Dial); protected by mu.
	introduced map[netip.Addr]bool
	// introducing is when a dial first waited for each peer not yet
	// introduced; protected by mu.
	introducing map[netip.Addr]time.Time
	// peers are the peers of the node's current map of the mesh by mesh
	// address, kept by watchPeers; nil while not known. Protected by mu.
	peers map[netip.Addr]Peer
	// resynced is when ResyncMap last asked for the whole map; protected
	// by mu.
	resynced time.Time
	// watching ends when watchPeers has returned.
	watching chan struct{}
}

// Start starts a node and waits until it is up in the mesh or ctx ends. An
// invalid, expired or revoked enrollment key makes Start fail.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Hostname == "" || cfg.Dir == "" || cfg.ControlURL == "" {
		return nil, errors.New("meshnode: start: Hostname, Dir and ControlURL are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("meshnode: start: %w", err)
	}
	logger := cfg.Logger.With("component", "tsnet", "node", cfg.Hostname)
	srv := &tsnet.Server{
		Hostname:   cfg.Hostname,
		Dir:        cfg.Dir,
		ControlURL: cfg.ControlURL,
		AuthKey:    cfg.AuthKey,
		Logf: func(format string, args ...any) {
			logger.Debug(fmt.Sprintf(format, args...))
		},
		UserLogf: func(format string, args ...any) {
			logger.Info(fmt.Sprintf(format, args...))
		},
	}
	if HasState(cfg.Dir) {
		// A node that stopped in the middle of a ResyncMap kept its
		// control client paused in its state: it would never come up.
		if err := unpause(ctx, srv); err != nil {
			srv.Close()
			return nil, fmt.Errorf("meshnode: start %s: %w", cfg.Hostname, err)
		}
	}
	lc, err := up(ctx, srv)
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("meshnode: start %s: %w", cfg.Hostname, err)
	}
	n := &Node{srv: srv, lc: lc, log: logger, introduced: make(map[netip.Addr]bool), introducing: make(map[netip.Addr]time.Time),
		watching: make(chan struct{})}
	var wctx context.Context
	wctx, n.stopWhois = context.WithCancel(context.Background())
	n.whois = newWhoisCache(wctx, n.lookupWhoIs)
	go func() {
		defer close(n.watching)
		n.watchPeers(wctx)
	}()
	return n, nil
}

// up starts srv and waits until it runs in the mesh or ctx ends, as tsnet's
// Up does, except that it watches the node's notifications with their maps
// of the mesh rate-limited (at most one every 3 s; a change of state comes
// at once). tsnet's Up gets every map, JSON-encoded, until the node runs:
// with a mesh of a hundred nodes joining it decoded maps for minutes, and
// some nodes never came up.
func up(ctx context.Context, srv *tsnet.Server) (*local.Client, error) {
	lc, err := srv.LocalClient() // starts srv
	if err != nil {
		return nil, err
	}
	w, err := lc.WatchIPNBus(ctx, ipn.NotifyInitialState|ipn.NotifyRateLimit)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	for {
		note, err := w.Next()
		if err != nil {
			return nil, err
		}
		if note.ErrMessage != nil {
			return nil, fmt.Errorf("backend: %s", *note.ErrMessage)
		}
		if note.State != nil && *note.State == ipn.Running {
			if v4, _ := srv.TailscaleIPs(); !v4.IsValid() {
				return nil, errors.New("running, but without a mesh address")
			}
			return lc, nil
		}
	}
}

// HasState reports whether dir holds the state of an enrolled node, so that
// no enrollment key is needed to start it.
func HasState(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "tailscaled.state"))
	return err == nil && fi.Size() > 0
}

// Close leaves the mesh, waiting for the node's network stack to stop
// until ctx ends.
func (n *Node) Close(ctx context.Context) error {
	return closectx.Do(ctx, "meshnode: close", func() error {
		n.stopWhois()
		n.whois.wait()
		<-n.watching
		return n.srv.Close()
	})
}

// Listen listens on the node's mesh addresses only.
func (n *Node) Listen(network, addr string) (net.Listener, error) {
	return n.srv.Listen(network, addr)
}

// Dial dials over the mesh. The first dials of a peer wait (until ctx
// ends, and for at most 20 s from the first of them) for the peer to
// answer a disco ping of this node, see introduce.
func (n *Node) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := n.introduce(ctx, addr); err != nil {
		return nil, fmt.Errorf("meshnode: dial %s: %w", addr, err)
	}
	return n.srv.Dial(ctx, network, addr)
}

// introduce waits until the peer at addr ("ip:port") holds this node's
// current disco key, shown by its answer to a disco ping (a peer drops
// disco messages of keys it does not know), once per peer for the node's
// lifetime: the key is made anew by every start of a node and reaches
// peers only through their control sessions.
//
// A peer that learns a new disco key of a node it has a WireGuard session
// with takes it for a restart of that node and drops the session's keys
// (tailscale's wgengine). If this node had started that session before the
// peer knew its new key (the tunnel works without it: the node key is the
// same), this node keeps sending on a session the peer no longer has and
// starts a new one only when WireGuard gives up on it, 15 s later; every
// call in between times out. That is what an orchestrator restarted on its
// state directory met: its agents, whose control sessions reconnect
// seconds later, answered its first calls and lost its tunnel when their
// new map came.
func (n *Node) introduce(ctx context.Context, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil // srv.Dial reports it
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	now := time.Now()
	n.mu.Lock()
	done := n.introduced[ip]
	first, ok := n.introducing[ip]
	if !ok {
		first = now
		n.introducing[ip] = first
	}
	n.mu.Unlock()
	if done {
		return nil
	}
	introduced := func() {
		n.mu.Lock()
		n.introduced[ip] = true
		delete(n.introducing, ip)
		n.mu.Unlock()
	}
	// The wait is bounded, over all the dials of the peer: the tunnel
	// works without the peer's control session (which is what brings it
	// the key), and a peer whose control session stays down is better
	// dialled, at the risk of the session being dropped once it gets the
	// key, than never.
	wctx, cancel := context.WithDeadline(ctx, first.Add(introduceWait))
	defer cancel()
	var last string
	// Each ping that goes unanswered waits twice as long as the one
	// before: on a loaded machine an answer can take longer than the
	// first timeout.
	timeout := introducePingTimeout
	for {
		pctx, pcancel := context.WithTimeout(wctx, timeout)
		pr, err := n.lc.Ping(pctx, ip, tailcfg.PingDisco)
		pcancel()
		switch {
		case err == nil && pr.Err == "":
			introduced()
			if d := time.Since(first); d > introducePingTimeout {
				n.log.Debug("meshnode: a peer knows this node now", "peer", ip, "waited", d.Round(time.Millisecond))
			}
			return nil
		case err == nil:
			last = pr.Err // e.g. no such peer yet in this node's map
		default:
			last = "no answer to a disco ping"
			timeout = min(2*timeout, introducePingTimeoutMax)
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return fmt.Errorf("peer %s does not know this node yet (%s): %w", ip, last, ctx.Err())
			}
			introduced()
			n.log.Warn("meshnode: dialling a peer that answered no disco ping", "peer", ip, "waited", time.Since(first).Round(time.Millisecond), "last", last)
			return nil
		case <-time.After(introduceRetry):
		}
	}
}

// The timeout of introduce's first disco ping and the most it grows to,
// its pause after a ping that failed at once, and how long, from a peer's
// first dial, it waits before dialling a peer that answered none.
const (
	introducePingTimeout    = time.Second
	introducePingTimeoutMax = 4 * time.Second
	introduceRetry          = 100 * time.Millisecond
	introduceWait           = 20 * time.Second
)

// Addr is the node's IPv4 mesh address.
func (n *Node) Addr() netip.Addr {
	v4, _ := n.srv.TailscaleIPs()
	return v4
}

// NodeKey is the node's WireGuard node key ("nodekey:<hex>"), as the control
// server lists it: the node's identity in the mesh.
func (n *Node) NodeKey(ctx context.Context) (string, error) {
	st, err := n.lc.StatusWithoutPeers(ctx)
	if err != nil {
		return "", fmt.Errorf("meshnode: node key: %w", err)
	}
	if st.Self == nil || st.Self.PublicKey.IsZero() {
		return "", errors.New("meshnode: node key: the node has no key yet")
	}
	return st.Self.PublicKey.String(), nil
}

// DERPMap is the DERP map the control server gave the node: the relays and
// their STUN ports.
func (n *Node) DERPMap(ctx context.Context) (*tailcfg.DERPMap, error) {
	m, err := n.lc.CurrentDERPMap(ctx)
	if err != nil {
		return nil, fmt.Errorf("meshnode: derp map: %w", err)
	}
	return m, nil
}

// Peer is the identity of a mesh peer.
type Peer struct {
	Name string
	Tags []string
}

// HasTag reports whether the peer carries tag.
func (p Peer) HasTag(tag string) bool { return slices.Contains(p.Tags, tag) }

// WhoIs identifies the mesh peer behind remoteAddr ("ip:port", the remote
// end of a connection to this node) until ctx ends: from the node's current
// map of the mesh (watchPeers) when it holds the address, else by asking
// the node (a peer that joined since the last map the watch got, or no map
// yet). A peer the node was asked about stays identified for the calls of
// the same connection for 30 s (renewed in the background after 15 s, and
// forgotten as soon as a new map does not confirm it), and a lookup cut
// short by ctx goes on for the next call: see whoisCache.
func (n *Node) WhoIs(ctx context.Context, remoteAddr string) (Peer, error) {
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		if p, ok := n.knownPeer(ap.Addr().Unmap()); ok {
			return p.clone(), nil
		}
	}
	return n.whois.get(ctx, remoteAddr)
}

// lookupWhoIs asks the node's LocalAPI who the peer behind remoteAddr is.
func (n *Node) lookupWhoIs(ctx context.Context, remoteAddr string) (Peer, error) {
	who, err := n.lc.WhoIs(ctx, remoteAddr)
	if err != nil {
		return Peer{}, fmt.Errorf("meshnode: whois %s: %w", remoteAddr, err)
	}
	if who.Node == nil {
		return Peer{}, fmt.Errorf("meshnode: whois %s: unknown peer", remoteAddr)
	}
	return Peer{Name: who.Node.ComputedName, Tags: slices.Clone(who.Node.Tags)}, nil
}

// PeerOnline reports whether the peer with mesh address ip is in this node's
// view of the mesh and connected to the control server. Dialling a peer that
// is not yet in the node's view costs a handshake retry of several seconds.
func (n *Node) PeerOnline(ctx context.Context, ip netip.Addr) (bool, error) {
	st, err := n.lc.Status(ctx)
	if err != nil {
		return false, fmt.Errorf("meshnode: status: %w", err)
	}
	for _, p := range st.Peer {
		if slices.Contains(p.TailscaleIPs, ip) {
			return reachable(p), nil
		}
	}
	return false, nil
}

// PingPeer sends the peer with mesh address ip a ping of the mesh's own
// (TSMP: answered by the peer's mesh stack, not by any of its services)
// and reports an error when no answer came before ctx ended.
func (n *Node) PingPeer(ctx context.Context, ip netip.Addr) error {
	res, err := n.lc.Ping(ctx, ip, tailcfg.PingTSMP)
	if err != nil {
		return fmt.Errorf("meshnode: ping %s: %w", ip, err)
	}
	if res.Err != "" {
		return fmt.Errorf("meshnode: ping %s: %s", ip, res.Err)
	}
	return nil
}

// OnlinePeers is the mesh addresses of every peer PeerOnline would report
// online, from one read of the node's status (PeerOnline for many peers
// reads it once per peer).
func (n *Node) OnlinePeers(ctx context.Context) (map[netip.Addr]bool, error) {
	st, err := n.lc.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("meshnode: status: %w", err)
	}
	out := make(map[netip.Addr]bool, len(st.Peer))
	for _, p := range st.Peer {
		if reachable(p) {
			for _, ip := range p.TailscaleIPs {
				out[ip] = true
			}
		}
	}
	return out, nil
}

// reachable reports whether a peer is online and has said how to reach
// it: until it has reported its DERP home or an endpoint, a handshake to
// it is lost and retried only after 5s.
func reachable(p *ipnstate.PeerStatus) bool {
	return p.Online && (p.Relay != "" || len(p.Addrs) > 0)
}

// WaitPeer waits until the peer with mesh address ip is online in this
// node's view or ctx ends.
func (n *Node) WaitPeer(ctx context.Context, ip netip.Addr) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := n.PeerOnline(ctx, ip)
		if err == nil && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("meshnode: wait for peer %s: %w", ip, ctx.Err())
		case <-tick.C:
		}
	}
}
