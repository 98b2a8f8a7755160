package meshtest_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
)

// TestStaleOrchestratorMapIsAskedForAgain: the control server can drop the
// orchestrator's map stream for good (Headscale does when a node reads it
// too slowly in a burst of changes) while its session stays open; the
// orchestrator then never hears that an agent came back. Its registry
// sees the agent online at the control server and missing from its own
// map, asks for the whole map again, and the host is online again.
func TestStaleOrchestratorMapIsAskedForAgain(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "stale", Nodes: 1}))
	h.WaitOnline(t, 30*time.Second)
	a := h.Clusters[0].Agents[0]
	host, _ := a.Host()
	node := h.Orchestrator.MeshNode()
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	// The orchestrator's map has heard the agent is gone before it stops
	// hearing anything.
	poll.Until(t, 30*time.Second, "the agent offline in the orchestrator's map", func() error {
		online, err := node.PeerOnline(t.Context(), host.MeshAddr)
		if err == nil && online {
			err = errors.New("still online")
		}
		return err
	})
	if err := node.PauseMapForTest(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the restarted agent's host online", func() error {
		if h, ok := a.Host(); !ok || h.Status != fleet.StatusOnline {
			return fmt.Errorf("host %+v", h)
		}
		return nil
	})
}
