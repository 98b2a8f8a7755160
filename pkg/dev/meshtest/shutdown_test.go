package meshtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
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
		status int
		body   []byte
		err    error
	}
	post := func() answer {
		body, _ := json.Marshal(map[string]any{"query": `{ vms { name } }`})
		req, _ := http.NewRequest(http.MethodPost, h.GraphQLURL(), bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("FlexPlane-VDC-ID", "red")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return answer{err: err}
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		return answer{status: resp.StatusCode, body: raw, err: err}
	}
	got := make(chan answer, 1)
	go func() { got <- post() }()
	meshtest.WaitFor(t, 10*time.Second, "the request to reach the simulated cluster", func() bool { return sim.InFlight() > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := h.Orchestrator.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	a := <-got
	if a.err != nil || a.status != http.StatusOK {
		t.Fatalf("request in flight during Shutdown: status %d, %v", a.status, a.err)
	}
	var r struct {
		Data   struct{ VMs []any } `json:"data"`
		Errors []json.RawMessage   `json:"errors"`
	}
	if err := json.Unmarshal(a.body, &r); err != nil || len(r.Errors) > 0 {
		t.Fatalf("request in flight during Shutdown answered %s (%v), want a whole answer", a.body, err)
	}
	if a := post(); !errors.Is(a.err, syscall.ECONNREFUSED) {
		t.Errorf("a request after Shutdown: status %d, %v; want connection refused", a.status, a.err)
	}
}
