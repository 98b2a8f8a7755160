package meshtest_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// TestShutdownDrainsRequestsInFlight: a request that is waiting for an
// agent when the orchestrator shuts down still gets its whole answer (the
// orchestrator leaves the mesh only after draining), and a request after
// Shutdown finds nothing listening.
func TestShutdownDrainsRequestsInFlight(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "solo", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{}))
	h.WaitOnline(t, 30*time.Second)
	token := h.Token(t, "alice")
	sim := h.Clusters[0].Sim
	sim.SetLatency(2 * time.Second)

	type answer struct {
		r   *gqltest.Response
		err error
	}
	post := func() answer {
		r, err := gqltest.Post(context.Background(), nil, h.GraphQLURL(),
			gqltest.Request{Query: `{ vms { name } }`, Authorization: "Bearer " + token, VDC: "red"})
		return answer{r, err}
	}
	got := make(chan answer, 1)
	go func() { got <- post() }()
	poll.True(t, 10*time.Second, "the request to reach the simulated cluster", func() bool { return sim.InFlight() > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := h.Orchestrator.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	a := <-got
	if a.err != nil {
		t.Fatalf("request in flight during Shutdown: %v", a.err)
	}
	var vms []any
	if err := a.r.Err(); err != nil {
		t.Fatalf("request in flight during Shutdown answered %s (%v), want a whole answer", a.r.Raw, err)
	}
	a.r.Into(t, "vms", &vms)
	if a := post(); !errors.Is(a.err, syscall.ECONNREFUSED) {
		t.Errorf("a request after Shutdown: %+v, %v; want connection refused", a.r, a.err)
	}
}
