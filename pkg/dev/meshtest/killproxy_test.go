package meshtest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// TestAgentKilledDuringProxyCalls: an agent killed while it is forwarding
// calls to Proxmox (its node loses power mid-answer) makes none of those
// calls hang: each ends within the keepalive bound, answered through the
// zone's other agent or with an error; the zone keeps answering, and the
// agent, started again, serves again. Three times over.
func TestAgentKilledDuringProxyCalls(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "duo", Nodes: 2}))
	h.WaitOnline(t, 30*time.Second)
	c := h.Clusters[0]
	client := h.Orchestrator.Zones().Client(h.Zone(t, c).ID)
	for round := range 3 {
		c.Sim.SetLatency(1500 * time.Millisecond)
		const calls = 6
		var wg sync.WaitGroup
		errs := make(chan error, calls)
		took := make(chan time.Duration, calls)
		for range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
				defer cancel()
				began := time.Now()
				_, err := client.Nodes(ctx) // zone-wide: through pve1's agent first
				took <- time.Since(began)
				errs <- err
			}()
		}
		poll.True(t, 10*time.Second, "the calls to reach Proxmox", func() bool { return c.Sim.InFlight() >= calls })
		// (Its mesh node's Close gives up on the calls in flight: that is
		// the kill.)
		if err := c.Agents[0].Kill(); err != nil {
			t.Logf("round %d: kill: %v", round, err)
		}
		c.Sim.SetLatency(0)
		wg.Wait()
		close(errs)
		close(took)
		failed, longest := 0, time.Duration(0)
		for err := range errs {
			if err != nil {
				failed++
			}
		}
		for d := range took {
			longest = max(longest, d)
		}
		// Keepalive (10s) plus a ping's timeout (3s) bound a silent
		// connection; a call never waits for the 45s deadline.
		if longest > 30*time.Second {
			t.Errorf("round %d: a call in flight took %v", round, longest.Round(time.Millisecond))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if nodes, err := client.Nodes(ctx); err != nil || len(nodes) != 2 {
			t.Errorf("round %d: the zone after the kill: %d nodes, %v", round, len(nodes), err)
		}
		cancel()
		t.Logf("round %d: %d of %d calls in flight failed, the longest took %v", round, failed, calls, longest.Round(time.Millisecond))
		h.StartAgents(t, c.Agents[0])
		h.WaitOnline(t, 60*time.Second)
	}
}
