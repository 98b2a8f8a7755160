package fleet_test

import (
	"context"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// healthCounter is agentServer counting the Health calls it answers; it
// answers none once down is set.
type healthCounter struct {
	agentServer
	health *atomic.Int64
	down   *atomic.Bool
}

func (a healthCounter) Health(ctx context.Context, req *agentv1.HealthRequest) (*agentv1.HealthResponse, error) {
	if a.down.Load() {
		<-ctx.Done() // an agent that is gone answers nothing
		return nil, ctx.Err()
	}
	a.health.Add(1)
	return a.agentServer.Health(ctx, req)
}

// TestLivenessFollowsTheMesh: an idle agent the mesh keeps showing online
// is not Health-checked at every refresh, only once per HealthInterval;
// when the mesh stops showing it, the next refresh calls it and finds it
// gone.
func TestLivenessFollowsTheMesh(t *testing.T) {
	t.Parallel()
	certs := pvetest.NewCerts(t, "pve1")
	var health atomic.Int64
	var down atomic.Bool
	addr := netip.MustParseAddr("100.64.0.1")
	m := &fakeMesh{dialTo: serveAgent(t, healthCounter{agentServer: agentServer{certs: certs}, health: &health, down: &down}),
		reachable: map[netip.Addr]bool{addr: true}, nodes: []fleet.MeshNode{
			{ID: 1, Name: "alpha-pve1", Addr: addr, Tags: []string{meshnode.TagAgent}, Online: true}}}
	r, err := fleet.New(fleet.Config{Mesh: m, CallTimeout: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	host := func() fleet.Host {
		t.Helper()
		z, ok := r.Zone(certs.ID)
		if !ok {
			t.Fatalf("no zone: %v", r.Zones())
		}
		h, _ := z.Host("pve1")
		return h
	}
	for range 10 {
		if err := r.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if h := host(); h.Status != fleet.StatusOnline {
		t.Fatalf("host after 10 refreshes: %+v", h)
	}
	if n := health.Load(); n != 1 {
		t.Fatalf("10 refreshes of an idle agent the mesh shows online made %d Health calls, want 1", n)
	}

	// The agent goes away; the control server sees its session end.
	down.Store(true)
	m.mu.Lock()
	m.nodes[0].Online = false
	m.reachable = map[netip.Addr]bool{}
	m.mu.Unlock()
	if err := r.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if h := host(); h.Status != fleet.StatusOffline {
		t.Fatalf("host one refresh after the mesh dropped it: %+v", h)
	}
}

// pingMesh is fakeMesh with mesh pings: the pingsLost first pings (and
// every ping once down is set) are never answered, the others after
// pingDelay.
type pingMesh struct {
	*fakeMesh
	down      *atomic.Bool
	pingsLost int64
	pingDelay time.Duration
	pings     atomic.Int64
}

func (m *pingMesh) PingPeer(ctx context.Context, _ netip.Addr) error {
	if n := m.pings.Add(1); m.down.Load() || n <= m.pingsLost {
		<-ctx.Done()
		return ctx.Err()
	}
	return wait(ctx, m.pingDelay)
}

// wait waits for d or the end of ctx, whichever comes first.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// lateAgent is agentServer whose Health, once slow is set, answers after
// healthDelay; it answers none once down is set.
type lateAgent struct {
	agentServer
	healthDelay time.Duration
	slow, down  *atomic.Bool
}

func (a lateAgent) Health(ctx context.Context, req *agentv1.HealthRequest) (*agentv1.HealthResponse, error) {
	if a.down.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if a.slow.Load() {
		if err := wait(ctx, a.healthDelay); err != nil {
			return nil, err
		}
	}
	return a.agentServer.Health(ctx, req)
}

// livenessRegistry is a registry of one agent, pve1 of a zone of its own,
// served by impl behind a mesh that pings it as m says (m.fakeMesh is set
// here); its host is online after a first refresh.
func livenessRegistry(t *testing.T, m *pingMesh, impl agentv1.AgentServiceServer, cfg fleet.Config) (*fleet.Registry, func() fleet.Host) {
	t.Helper()
	addr := netip.MustParseAddr("100.64.0.1")
	m.fakeMesh = &fakeMesh{dialTo: serveAgent(t, impl), reachable: map[netip.Addr]bool{addr: true}, nodes: []fleet.MeshNode{
		{ID: 1, Name: "alpha-pve1", Addr: addr, Tags: []string{meshnode.TagAgent}, Online: true}}}
	cfg.Mesh, cfg.Logger = m, slog.New(slog.DiscardHandler)
	r, err := fleet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	id := impl.(interface{ zoneID() string }).zoneID()
	host := func() fleet.Host {
		t.Helper()
		z, ok := r.Zone(id)
		if !ok {
			t.Fatalf("no zone: %v", r.Zones())
		}
		h, _ := z.Host("pve1")
		return h
	}
	if err := r.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if h := host(); h.Status != fleet.StatusOnline {
		t.Fatalf("host after the first refresh: %+v", h)
	}
	return r, host
}

func (a agentServer) zoneID() string { return a.certs.ID }

// TestSilentAgentOfflineWithinLivenessTimeout: an agent that was online and
// then answers nothing over the mesh (a node that lost power: no ping
// answered, its Health call hangs) is offline once LivenessTimeout has
// passed since its check began, not when its Health call's own timeout
// ends.
func TestSilentAgentOfflineWithinLivenessTimeout(t *testing.T) {
	t.Parallel()
	var slow, down atomic.Bool
	m := &pingMesh{down: &down}
	impl := lateAgent{agentServer: agentServer{certs: pvetest.NewCerts(t, "pve1")}, slow: &slow, down: &down}
	const liveness = 1500 * time.Millisecond
	r, host := livenessRegistry(t, m, impl, fleet.Config{CallTimeout: 10 * time.Second, LivenessTimeout: liveness})

	down.Store(true) // the mesh still shows it: only the ping can tell
	start := time.Now()
	if err := r.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if h := host(); h.Status != fleet.StatusOffline {
		t.Fatalf("host of a silent agent after a refresh: %+v", h)
	}
	// The check ends at the liveness timeout; the Health call's own
	// timeout (10s) would be far later.
	if took > liveness+time.Second {
		t.Fatalf("a silent agent was found offline after %v, want within the liveness timeout %v", took, liveness)
	}
	if n := m.pings.Load(); n < 2 {
		t.Fatalf("%d mesh pings before the agent was marked offline, want a retry", n)
	}
	t.Logf("silent agent offline after %v, %d pings", took.Round(time.Millisecond), m.pings.Load())
}

// TestSlowAgentStaysOnline: an agent that is slow but alive is not marked
// offline. One's first ping is lost and its Health takes longer than the
// liveness timeout (2s), but a later ping is answered, so its Health
// call runs on to its CallTimeout; another's pings are never answered (TSMP
// not getting through) but its sampled Health is answered within the
// liveness timeout.
func TestSlowAgentStaysOnline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		pingsLost   int64
		healthDelay time.Duration
		sampled     bool // its Health is due (CheckSoon), no ping first
	}{
		{"first ping lost, slow health", 1, 2 * time.Second, false},
		{"no ping answered, sampled health", 1 << 30, 1200 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var slow, down atomic.Bool
			m := &pingMesh{down: &down, pingsLost: tc.pingsLost, pingDelay: 100 * time.Millisecond}
			impl := lateAgent{agentServer: agentServer{certs: pvetest.NewCerts(t, "pve1")}, healthDelay: tc.healthDelay, slow: &slow, down: &down}
			r, host := livenessRegistry(t, m, impl, fleet.Config{CallTimeout: 5 * time.Second})
			slow.Store(true)
			m.pings.Store(0)
			if tc.sampled {
				r.CheckSoon(1)
			}
			start := time.Now()
			if err := r.Refresh(t.Context()); err != nil {
				t.Fatal(err)
			}
			if h := host(); h.Status != fleet.StatusOnline {
				t.Fatalf("host of a slow but alive agent after %v: %+v", time.Since(start).Round(time.Millisecond), h)
			}
			if took := time.Since(start); took < tc.healthDelay {
				t.Fatalf("the refresh took %v: the slow Health (%v) was not called", took, tc.healthDelay)
			}
		})
	}
}
