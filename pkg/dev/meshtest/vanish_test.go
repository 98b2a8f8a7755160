package meshtest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
)

// TestReadsFailOverFromAVanishedAgent: an agent whose node loses power
// while the orchestrator holds a connection to it sends nothing more; a
// zone-wide read that goes to it must still end, on another agent of the
// zone, within the keepalive bound, not hang on the silent connection.
// Meanwhile, at the production refresh interval, an idle agent that loses
// power (pve3: nobody talks to it, only the mesh and the liveness checks
// can tell) is OFFLINE within 5 s of the kill, while pve2 stays ONLINE
// throughout.
func TestReadsFailOverFromAVanishedAgent(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "trio", Nodes: 3}),
		meshtest.WithRefreshInterval(2*time.Second))
	h.WaitOnline(t, 30*time.Second)
	c := h.Clusters[0]
	t.Run("idle agent killed", func(t *testing.T) {
		t.Parallel()
		killedIdleAgentOffline(t, h, c.Agents[2], c.Agents[1:2])
	})
	t.Run("read fails over", func(t *testing.T) {
		t.Parallel()
		client := h.Orchestrator.Zones().Client(h.Zone(t, c).ID)
		ctx := t.Context()
		// A read now opens the connection to the first agent (zone-wide
		// reads go to pve1 first).
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
		if len(nodes) != 3 {
			t.Errorf("nodes = %d, want 3", len(nodes))
		}
		t.Logf("read answered %v after the agent vanished", took.Round(time.Millisecond))
	})
}

// killedIdleAgentOffline kills victim and checks that its host is OFFLINE
// within 5 s of the kill (the liveness goal), and that no host of others
// leaves ONLINE meanwhile: every change of the registry is looked at.
func killedIdleAgentOffline(t *testing.T, h *meshtest.Harness, victim *meshtest.Agent, others []*meshtest.Agent) {
	t.Helper()
	const goal = 5 * time.Second
	reg := h.Orchestrator.Zones()
	type seen struct {
		offline time.Duration // since the kill; 0 until seen
		flapped string        // a host of others not online
	}
	var (
		mu    sync.Mutex
		state seen // protected by mu
	)
	start := time.Now()
	ctx, stop := context.WithCancel(t.Context())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			changed := reg.Changed()
			host, ok := victim.Host()
			mu.Lock()
			if ok && host.Status == fleet.StatusOffline && state.offline == 0 {
				state.offline = time.Since(start)
			}
			for _, a := range others {
				if oh, ok := a.Host(); (!ok || oh.Status != fleet.StatusOnline) && state.flapped == "" {
					state.flapped = fmt.Sprintf("%s %s (%s) %v after the kill", a.MeshName, oh.Status, oh.Detail, time.Since(start).Round(time.Millisecond))
				}
			}
			mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 2*goal, victim.MeshName+" offline", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return state.offline != 0
	})
	stop()
	<-watched
	host, _ := victim.Host()
	t.Logf("killed idle agent offline %v after the kill (%s)", state.offline.Round(time.Millisecond), host.Detail)
	if state.offline > goal {
		t.Errorf("killed idle agent offline %v after the kill, want within %v", state.offline.Round(time.Millisecond), goal)
	}
	if state.flapped != "" {
		t.Errorf("a live host left ONLINE: %s", state.flapped)
	}
}
