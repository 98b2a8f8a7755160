package benchmark

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"tailscale.com/control/controlclient"
	"tailscale.com/net/netmon"
	"tailscale.com/net/tsdial"
	"tailscale.com/tailcfg"
	"tailscale.com/types/key"
	"tailscale.com/types/netmap"
	"tailscale.com/util/eventbus"
)

// ControlNodesConfig configures StartControlNodes.
type ControlNodesConfig struct {
	// ServerURL is the control server: the orchestrator's public URL.
	// Required.
	ServerURL string
	// AuthKey enrolls the nodes; it must be reusable for more than one.
	// Required.
	AuthKey string
	// Count is how many nodes to register.
	Count int
	// Prefix starts the nodes' host names (Prefix0001, ...). Default "cp".
	Prefix string
	// Concurrency is how many nodes register at a time (default 16).
	Concurrency int
	// Logger receives reconnections; nil discards them.
	Logger *slog.Logger
}

// ControlNodes are mesh nodes that speak only the control protocol:
// each registered with the control server through tailscale's control
// client (Noise, real machine and node keys) and holding its map stream
// open, with no data plane (no WireGuard, no DERP, no sockets but the one
// to the control server). They cost the control server what any node of
// the mesh costs it: a place in the netmaps and the policy of every node
// that may see it, and a map stream of its own to update.
type ControlNodes struct {
	cfg    ControlNodesConfig
	log    *slog.Logger
	bus    *eventbus.Bus
	dialer *tsdial.Dialer
	cancel context.CancelFunc
	ctx    context.Context
	wg     sync.WaitGroup

	mu    sync.Mutex
	nodes []*ControlNode // protected by mu
	watch *PeerWatch     // the join being timed, protected by mu
}

// ControlNode is one of ControlNodes.
type ControlNode struct {
	// Name is its host name.
	Name string
	set  *ControlNodes
	d    *controlclient.Direct

	mu    sync.Mutex
	peers int  // peers of its last netmap, protected by mu
	maps  int  // netmaps received, protected by mu
	seen  bool // saw the peer of set's watch, protected by mu
}

// PeerWatch times a node's join: how long after Begin each control node's
// map stream carried it.
type PeerWatch struct {
	name  string
	began time.Time

	mu   sync.Mutex
	took []time.Duration // protected by mu
	done chan struct{}
	want int
}

// StartControlNodes registers cfg.Count nodes with the control server and
// opens their map streams; it returns once each has received its first
// netmap. Close ends them.
func StartControlNodes(ctx context.Context, cfg ControlNodesConfig) (*ControlNodes, error) {
	if cfg.ServerURL == "" || cfg.AuthKey == "" {
		return nil, errors.New("benchmark: control nodes: ServerURL and AuthKey are required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "cp"
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	bus := eventbus.New()
	dialer := tsdial.NewDialer(netmon.NewStatic())
	dialer.SetBus(bus)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &ControlNodes{cfg: cfg, log: cfg.Logger, bus: bus, dialer: dialer, ctx: runCtx, cancel: cancel}
	if err := s.Add(ctx, cfg.Count); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Add registers n more nodes, cfg.Concurrency at a time, and returns once
// each has received its first netmap.
func (s *ControlNodes) Add(ctx context.Context, n int) error {
	s.mu.Lock()
	first := len(s.nodes)
	s.mu.Unlock()
	sem := make(chan struct{}, s.cfg.Concurrency)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			name := fmt.Sprintf("%s%04d", s.cfg.Prefix, first+i+1)
			cn, err := s.join(ctx, name, s.cfg.AuthKey)
			if err != nil {
				errs[i] = err
				return
			}
			s.mu.Lock()
			s.nodes = append(s.nodes, cn)
			s.mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("benchmark: control nodes: %w", err)
	}
	return nil
}

// Len is the number of nodes registered.
func (s *ControlNodes) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.nodes)
}

// Peers is the smallest and largest peer count of the nodes' last netmaps.
func (s *ControlNodes) Peers() (lo, hi int) {
	s.mu.Lock()
	nodes := s.nodes
	s.mu.Unlock()
	lo = -1
	for _, n := range nodes {
		n.mu.Lock()
		p := n.peers
		n.mu.Unlock()
		if lo < 0 || p < lo {
			lo = p
		}
		hi = max(hi, p)
	}
	return max(lo, 0), hi
}

// Maps is how many netmaps the nodes' control clients built in all: one
// per map response that carried a change (keepalives are not counted).
func (s *ControlNodes) Maps() int {
	s.mu.Lock()
	nodes := s.nodes
	s.mu.Unlock()
	var n int
	for _, cn := range nodes {
		cn.mu.Lock()
		n += cn.maps
		cn.mu.Unlock()
	}
	return n
}

// join registers one node with key and starts its map stream; it returns
// once the first netmap came.
func (s *ControlNodes) join(ctx context.Context, name, authKey string) (*ControlNode, error) {
	d, err := s.newDirect(name, authKey)
	if err != nil {
		return nil, fmt.Errorf("join %s: %w", name, err)
	}
	url, err := d.TryLogin(ctx, controlclient.LoginDefault)
	if err == nil && url != "" {
		err = fmt.Errorf("the control server asks for an interactive login (%s)", url)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("join %s: %w", name, err)
	}
	cn := &ControlNode{Name: name, set: s, d: d}
	first := make(chan struct{})
	var once sync.Once
	s.wg.Go(func() {
		backoff := 100 * time.Millisecond
		for s.ctx.Err() == nil {
			err := d.PollNetMap(s.ctx, updater{cn, func() { once.Do(func() { close(first) }) }})
			if s.ctx.Err() != nil {
				return
			}
			s.log.Warn("benchmark: control node's map stream ended; reconnecting", "node", name, "err", err)
			select {
			case <-s.ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	})
	select {
	case <-first:
		return cn, nil
	case <-ctx.Done():
		d.Close()
		return nil, fmt.Errorf("join %s: no netmap: %w", name, ctx.Err())
	}
}

// newDirect is a control client of a node named name, with a new machine
// key, that registers with authKey.
func (s *ControlNodes) newDirect(name, authKey string) (*controlclient.Direct, error) {
	machine := key.NewMachine()
	logID := make([]byte, 32)
	if _, err := rand.Read(logID); err != nil {
		return nil, err
	}
	return controlclient.NewDirect(controlclient.Options{
		ServerURL:            s.cfg.ServerURL,
		AuthKey:              authKey,
		GetMachinePrivateKey: func() (key.MachinePrivate, error) { return machine, nil },
		Hostinfo: &tailcfg.Hostinfo{
			Hostname: name, OS: "linux", BackendLogID: hex.EncodeToString(logID),
			NetInfo: &tailcfg.NetInfo{},
		},
		DiscoPublicKey:        key.NewDisco().Public(),
		Dialer:                s.dialer,
		Bus:                   s.bus,
		Logf:                  func(string, ...any) {},
		SkipIPForwardingCheck: true,
	})
}

// updater takes a control node's netmaps.
type updater struct {
	n     *ControlNode
	first func()
}

// UpdateFullNetmap implements controlclient.NetmapUpdater.
func (u updater) UpdateFullNetmap(nm *netmap.NetworkMap) {
	n := u.n
	n.set.mu.Lock()
	w := n.set.watch
	n.set.mu.Unlock()
	n.mu.Lock()
	n.peers, n.maps = len(nm.Peers), n.maps+1
	check := w != nil && !n.seen
	n.mu.Unlock()
	if check {
		for _, p := range nm.Peers {
			if p.Hostinfo().Hostname() == w.name {
				n.mu.Lock()
				n.seen = true
				n.mu.Unlock()
				w.saw(time.Since(w.began))
				break
			}
		}
	}
	u.first()
}

func (w *PeerWatch) saw(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.took = append(w.took, d)
	if len(w.took) == w.want {
		close(w.done)
	}
}

// JoinTimes is what Join measured.
type JoinTimes struct {
	// Seen is, for each control node whose map stream carried the joined
	// node in time, how long after the start of its registration.
	Seen []time.Duration
	// Register is how long its registration took (until the control server
	// answered it).
	Register time.Duration
	// Missed counts the control nodes that had not seen it in time.
	Missed int
}

// Join times a node's join: it registers a node named name with authKey
// (which must give it a tag the control nodes may see), opens its map
// stream, and waits at most within for every control node's map stream
// to carry it. The joined node is closed before Join returns; remove it
// from the control server by its name.
func (s *ControlNodes) Join(ctx context.Context, name, authKey string, within time.Duration) (JoinTimes, error) {
	s.mu.Lock()
	nodes := s.nodes
	w := &PeerWatch{name: name, began: time.Now(), done: make(chan struct{}), want: len(nodes)}
	for _, n := range nodes {
		n.mu.Lock()
		n.seen = false
		n.mu.Unlock()
	}
	s.watch = w
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.watch = nil
		s.mu.Unlock()
	}()
	jctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	// The joining node: registered and streaming like the others (a node
	// appears in its peers' maps once it is registered).
	d, err := s.newDirect(name, authKey)
	if err != nil {
		return JoinTimes{}, fmt.Errorf("benchmark: join %s: %w", name, err)
	}
	defer d.Close()
	joined := make(chan error, 1)
	var register time.Duration // written before joined is sent on
	var polling sync.WaitGroup
	defer polling.Wait()
	defer cancel()
	polling.Go(func() {
		if _, err := d.TryLogin(jctx, controlclient.LoginDefault); err != nil {
			joined <- err
			return
		}
		register = time.Since(w.began)
		joined <- nil
		_ = d.PollNetMap(jctx, updater{&ControlNode{Name: name, set: &ControlNodes{}}, func() {}})
	})
	var reg time.Duration
	timer := time.NewTimer(within)
	defer timer.Stop()
	for done := false; !done; {
		select {
		case err := <-joined:
			if err != nil {
				return JoinTimes{}, fmt.Errorf("benchmark: join %s: %w", name, err)
			}
			reg = register
		case <-w.done:
			done = true
		case <-timer.C:
			done = true
		case <-ctx.Done():
			return JoinTimes{}, fmt.Errorf("benchmark: join %s: %w", name, ctx.Err())
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return JoinTimes{Seen: slices.Clone(w.took), Register: reg, Missed: len(nodes) - len(w.took)}, nil
}

// Close ends every node's map stream and its connection to the control
// server (the nodes stay registered; the control server sees them go
// offline).
func (s *ControlNodes) Close() {
	s.cancel()
	s.mu.Lock()
	nodes := s.nodes
	s.mu.Unlock()
	for _, n := range nodes {
		n.d.Close()
	}
	s.wg.Wait()
	s.bus.Close()
}
