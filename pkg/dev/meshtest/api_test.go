package meshtest_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
)

// TestAPI shows the GraphQL API served by the harness's orchestrator at
// /graphql with real tokens of the development provider, and that it
// survives an orchestrator restart; WithHandler serves the other paths on
// the same origin.
func TestAPI(t *testing.T) {
	t.Parallel()
	web := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "web "+r.URL.Path)
	})
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "solo", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{}), meshtest.WithHandler(web))
	h.WaitOnline(t, 30*time.Second)
	checkWeb := func() {
		t.Helper()
		resp, err := http.Get(h.Orchestrator.URL() + "/vms/x")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != "web /vms/x" {
			t.Errorf("GET /vms/x: %d %q", resp.StatusCode, body)
		}
	}
	checkWeb()

	var me struct {
		Name          string
		PlatformAdmin bool
		Vdcs          []struct{ Role string }
	}
	h.GraphQL(t, "alice", "red", `{ me { name platformAdmin vdcs { role } } currentVDC { name } }`, nil).OK(t).Into(t, "me", &me)
	if me.Name != "Alice" || me.PlatformAdmin || len(me.Vdcs) != 1 || me.Vdcs[0].Role != "MEMBER" {
		t.Errorf("me = %+v", me)
	}
	if r := h.GraphQL(t, "bob", "red", `{ currentVDC { name } }`, nil); r.Code(t) != "NOT_FOUND" {
		t.Errorf("bob in red: %s", r.Raw)
	}
	r := meshtest.PostGraphQL(t, h.GraphQLURL(), "", "", `{ me { name } }`, nil)
	if r.Status != http.StatusUnauthorized || r.Code(t) != "UNAUTHENTICATED" {
		t.Errorf("no token: %d %s", r.Status, r.Raw)
	}
	r = meshtest.PostGraphQL(t, h.GraphQLURL(), "Bearer "+h.Token(t, "admin")+"x", "", `{ me { name } }`, nil)
	if r.Status != http.StatusUnauthorized {
		t.Errorf("forged token: %d %s", r.Status, r.Raw)
	}

	h.RestartOrchestrator(t)
	checkWeb()
	var tenant struct{ Name string }
	h.GraphQL(t, "admin", "", `{ tenant { name } }`, nil).OK(t).Into(t, "tenant", &tenant)
	if tenant.Name != "Test Cloud" {
		t.Errorf("tenant = %+v", tenant)
	}
}
