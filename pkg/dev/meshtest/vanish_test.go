package meshtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
)

// TestReadsFailOverFromAVanishedAgent: an agent whose node loses power
// while the orchestrator holds a connection to it sends nothing more; a
// zone-wide read that goes to it must still end, on another agent of the
// zone, within the keepalive bound, not hang on the silent connection.
func TestReadsFailOverFromAVanishedAgent(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "pair", Nodes: 2}))
	h.WaitOnline(t, 30*time.Second)
	c := h.Clusters[0]
	client := h.Orchestrator.Zones().Client(h.Zone(t, c).ID)
	ctx := t.Context()
	// A read now opens the connection to the first agent (zone-wide reads
	// go to pve1 first).
	if _, err := client.Nodes(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Agents[0].Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	nodes, err := client.Nodes(rctx)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("zone read after pve1's agent vanished: %v (after %v)", err, took.Round(time.Millisecond))
	}
	if len(nodes) != 2 {
		t.Errorf("nodes = %d, want 2", len(nodes))
	}
	t.Logf("read answered %v after the agent vanished", took.Round(time.Millisecond))
}
