package orchestrator

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
)

// unreachableCatalog is a catalog whose backend does not answer.
type unreachableCatalog struct{ catalog.Store }

func (unreachableCatalog) List(context.Context, catalog.Kind) ([]catalog.Object, error) {
	return nil, errors.New("kube-apiserver: connection refused")
}

// TestProbes: /healthz answers while the process serves; /readyz answers
// 503 naming each missing part (the mesh node not up, the catalog not
// open or not answering) until all are there. TestReplicasFailover sees
// it answer 200 on running replicas.
func TestProbes(t *testing.T) {
	t.Parallel()
	p := &probe{}
	mux := http.NewServeMux()
	p.mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, body := get(HealthzPath); code != http.StatusOK {
		t.Errorf("healthz: %d %q, want 200", code, body)
	}
	p.expectAPI()
	code, body := get(ReadyzPath)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "mesh node: not up") || !strings.Contains(body, "catalog: not open") {
		t.Errorf("readyz before start: %d %q, want 503 naming the mesh node and the catalog", code, body)
	}
	p.setCatalog(unreachableCatalog{})
	code, body = get(ReadyzPath)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "catalog: kube-apiserver: connection refused") {
		t.Errorf("readyz with an unreachable catalog: %d %q, want 503 naming the catalog's error", code, body)
	}
	if code, body := get(HealthzPath); code != http.StatusOK {
		t.Errorf("healthz while not ready: %d %q, want 200 (alive)", code, body)
	}
}
