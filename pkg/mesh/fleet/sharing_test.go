package fleet_test

import (
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
)

// board is what the replicas of TestOneReplicaSamplesAZone publish to
// each other (syncowner's ConfigMaps in the orchestrator), and which of
// them samples zone "alpha".
type board struct {
	mu      sync.Mutex
	sampler int                              // the replica sampling "alpha"; protected by mu
	docs    map[string]map[uint64]fleet.Down // protected by mu
	changed chan struct{}                    // protected by mu
}

func (b *board) signalLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// handOver makes replica i the sampler.
func (b *board) handOver(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sampler = i
	b.signalLocked()
}

// seat is replica i's fleet.Sharing of the board.
type seat struct {
	b *board
	i int
}

func (s seat) Samples(string) bool {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.b.sampler == s.i
}

func (s seat) Publish(_ context.Context, zone string, down map[uint64]fleet.Down) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.docs[zone] = maps.Clone(down)
	s.b.signalLocked()
	return nil
}

func (s seat) Published(zone string) (map[uint64]fleet.Down, bool) {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	d, ok := s.b.docs[zone]
	return maps.Clone(d), ok
}

func (s seat) Changed() <-chan struct{} {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.b.changed
}

// TestOneReplicaSamplesAZone: two replicas share the liveness checks of
// an agent that the mesh keeps showing online. Only the replica sampling
// its zone makes the sampled Health calls; the other makes none once it
// has read the agent's Info. The agent stops answering (the mesh still
// shows it: the control server marks a node offline 10 s after its session
// ends): the sampler finds it offline at its next sample, and the other
// replica has it offline as soon as that is published, without a call of
// its own. The sampling handed over, the new sampler calls the agent and
// finds it back; the old one no longer samples.
func TestOneReplicaSamplesAZone(t *testing.T) {
	t.Parallel()
	certs := pvetest.NewCerts(t, "pve1")
	var down atomic.Bool
	addr := netip.MustParseAddr("100.64.0.1")
	b := &board{docs: map[string]map[uint64]fleet.Down{}, changed: make(chan struct{})}
	var health [2]atomic.Int64
	var regs [2]*fleet.Registry
	for i := range regs {
		// Each replica reaches the agent at an address of its own, so that
		// its calls are counted apart.
		m := &fakeMesh{dialTo: serveAgent(t, healthCounter{agentServer: agentServer{certs: certs}, health: &health[i], down: &down}),
			reachable: map[netip.Addr]bool{addr: true}, nodes: []fleet.MeshNode{
				{ID: 1, Name: "alpha-pve1", Addr: addr, Tags: []string{meshnode.TagAgent}, Online: true}}}
		r, err := fleet.New(fleet.Config{Mesh: m, RefreshInterval: 50 * time.Millisecond, HealthInterval: 400 * time.Millisecond,
			CallTimeout: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		r.Share(seat{b: b, i: i})
		regs[i] = r
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = r.Run(ctx)
		}()
		t.Cleanup(func() {
			cancel()
			<-done
		})
	}
	host := func(i int) fleet.Host {
		z, _ := regs[i].Zone(certs.ID)
		h, _ := z.Host("pve1")
		return h
	}
	for i := range regs {
		poll.True(t, 10*time.Second, "the host online on each replica", func() bool { return host(i).Status == fleet.StatusOnline })
	}
	// The sampler's calls go on (one per HealthInterval and up to a
	// quarter more); the other's stop after its first.
	idle := health[1].Load()
	before := health[0].Load()
	poll.True(t, 10*time.Second, "3 sampled Health calls", func() bool { return health[0].Load() >= before+3 })
	if n := health[1].Load(); n != idle || n > 1 {
		t.Fatalf("the replica not sampling made %d Health calls (%d when online), want 1 (its first, with the agent's Info)", n, idle)
	}

	down.Store(true)
	start := time.Now()
	poll.True(t, 10*time.Second, "the host offline on the sampler", func() bool { return host(0).Status == fleet.StatusOffline })
	sampled := time.Since(start)
	poll.True(t, 2*time.Second, "the host offline on the other replica", func() bool { return host(1).Status == fleet.StatusOffline })
	t.Logf("offline on the sampler %v after the agent went silent, on the other %v", sampled.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if n := health[1].Load(); n != idle {
		t.Errorf("the replica not sampling called Health %d times to learn the host was offline, want none", n-idle)
	}
	if d := host(1).Detail; d == "" {
		t.Error("the other replica's offline host has no detail")
	}

	// The sampling moves to replica 1; the agent answers again.
	b.handOver(1)
	down.Store(false)
	for i := range regs {
		poll.True(t, 10*time.Second, "the host back online on each replica", func() bool { return host(i).Status == fleet.StatusOnline })
	}
	was0, was1 := health[0].Load(), health[1].Load()
	poll.True(t, 10*time.Second, "3 sampled Health calls by the new sampler", func() bool { return health[1].Load() >= was1+3 })
	if n := health[0].Load(); n != was0 {
		t.Errorf("the old sampler made %d Health calls after the hand-over, want none", n-was0)
	}
}
