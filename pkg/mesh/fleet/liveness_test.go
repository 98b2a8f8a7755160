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
