package meshtest_test

import (
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
)

// TestListsRightAfterAnOrchestratorRestart: a restarted orchestrator knows
// no zone until the agents, rejoining the mesh, have reported. Until then a
// list of zones, hosts or VMs must not answer a short list as if it were
// complete: it waits for the agents (within the zone timeout) or says
// ZONE_UNAVAILABLE; a zone named before it is known is ZONE_UNAVAILABLE, not
// "there is no zone".
func TestListsRightAfterAnOrchestratorRestart(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t,
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "east", Nodes: 2}, meshtest.ClusterSpec{Name: "west", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{}))
	h.WaitOnline(t, 60*time.Second)
	const query = `{ zones { name } hosts { name } }`
	type lists struct {
		Zones []struct{ Name string }
		Hosts []struct{ Name string }
	}
	h.GraphQL(t, "admin", "", query, nil).OK(t)
	for restart := range 2 {
		h.RestartOrchestrator(t)
		began := time.Now()
		complete, unavailable := false, 0
		for !complete {
			if time.Since(began) > 60*time.Second {
				t.Fatalf("restart %d: no complete answer 60s after the restart", restart)
			}
			r := h.GraphQL(t, "admin", "", query, nil)
			var l lists
			if err := r.Decode(&l); err != nil {
				t.Fatalf("restart %d: %v: %s", restart, err, r.Raw)
			}
			switch {
			case len(r.Errors) == 0:
				if len(l.Zones) != 2 || len(l.Hosts) != 3 {
					t.Fatalf("restart %d: %v after the restart: %d zones and %d hosts without an error, want 2 and 3: %s",
						restart, time.Since(began).Round(time.Millisecond), len(l.Zones), len(l.Hosts), r.Raw)
				}
				complete = true
			case r.HasCode("ZONE_UNAVAILABLE"):
				unavailable++
			default:
				t.Fatalf("restart %d: %s", restart, r.Raw)
			}
			// A zone asked for by name: known, or ZONE_UNAVAILABLE.
			r = h.GraphQL(t, "alice", "red", `query($z: String) { vms(filter: {zone: $z}) { name } }`, map[string]any{"z": "west"})
			if len(r.Errors) > 0 && !r.HasCode("ZONE_UNAVAILABLE") {
				t.Fatalf("restart %d: vms in west: %s", restart, r.Raw)
			}
		}
		t.Logf("restart %d: complete answer %v after the restart, %d ZONE_UNAVAILABLE answers before", restart, time.Since(began).Round(time.Millisecond), unavailable)
	}
}
