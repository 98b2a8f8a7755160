package fleet_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
)

// staleMesh is a mesh whose orchestrator node's map is stale, as when the
// control server dropped the node's map stream: it lacks an agent the
// control server lists online, which therefore cannot be dialled, until
// the registry asks for the whole map again (ResyncMap).
type staleMesh struct {
	*fakeMesh
	agent   netip.Addr
	agentAt string // where the agent answers once the map has it
	calls   int    // ResyncMap calls; protected by mu
}

func (m *staleMesh) ResyncMap(context.Context) (bool, error) {
	m.mu.Lock()
	m.calls++
	m.reachable = map[netip.Addr]bool{m.agent: true}
	m.dialTo = m.agentAt
	m.mu.Unlock()
	return true, nil
}

// An agent online at the control server but missing from the
// orchestrator's node's map for StaleMapAfter makes the registry ask for
// the whole map again, once: the agent is then online in its zone. Without
// it the agent stays out of every zone for as long as the node's map stream
// is gone (for good, with Headscale).
func TestStaleMapIsAskedForAgain(t *testing.T) {
	t.Parallel()
	certs := pvetest.NewCerts(t, "pve1")
	addr := netip.MustParseAddr("100.64.0.7")
	m := &staleMesh{
		fakeMesh: &fakeMesh{nodes: []fleet.MeshNode{{ID: 7, Name: "alpha-pve1", Addr: addr, Tags: []string{meshnode.TagAgent}, Online: true}}},
		agent:    addr, agentAt: serveAgent(t, agentServer{certs: certs}),
	}
	r, err := fleet.New(fleet.Config{Mesh: m, RefreshInterval: 20 * time.Millisecond, StaleMapAfter: 100 * time.Millisecond,
		RejoinGrace: time.Millisecond, CallTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	poll.Until(t, 10*time.Second, "the agent online in its zone", func() error {
		z, ok := r.Zone(certs.ID)
		if !ok {
			return fmt.Errorf("no zone yet (map asked for again %d times)", m.count())
		}
		if h, _ := z.Host("pve1"); h.Status != fleet.StatusOnline {
			return fmt.Errorf("host %+v", h)
		}
		return nil
	})
	// A map that holds every agent is not asked for again.
	if err := r.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := m.count(); n != 1 {
		t.Fatalf("the map was asked for %d times, want once", n)
	}
}

func (m *staleMesh) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}
