package graph_test

import (
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
)

// TestHostMaintenanceAPI: a platform admin puts a host in maintenance and
// takes it out; enabling it twice is CONFLICT, an unknown host
// BAD_USER_INPUT on input.host; anyone else finds neither the mutation
// nor the fields (NOT_FOUND), and changes nothing.
func TestHostMaintenanceAPI(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2}), meshtest.WithAPI(meshtest.APISpec{}))
	h.WaitOnline(t, 30*time.Second)
	var zones []struct {
		Hosts []struct{ ID, Name string }
	}
	h.GraphQL(t, "admin", "", `{ zones { hosts { id name } } }`, nil).OK(t).Into(t, "zones", &zones)
	var host string
	for _, z := range zones {
		for _, hs := range z.Hosts {
			if hs.Name == "pve2" {
				host = hs.ID
			}
		}
	}
	if host == "" {
		t.Fatalf("no host pve2 in %+v", zones)
	}
	const set = `mutation($h: ID!, $on: Boolean!) { setHostMaintenance(input: {host: $h, enabled: $on}) { id name maintenance drain { vm vmName status message } } }`
	const read = `query($h: ID!) { node(id: $h) { ... on Host { maintenance drain { vm } } } }`
	type hostState struct {
		ID, Name, Maintenance string
		Drain                 []struct{ VM string }
	}

	// Others first: NOT_FOUND, and nothing changes.
	for _, who := range []struct{ user, vdc string }{{"bob", "blue"}, {"alice", "red"}} {
		if r := h.GraphQL(t, who.user, who.vdc, set, map[string]any{"h": host, "on": true}); r.Code(t) != "NOT_FOUND" {
			t.Errorf("setHostMaintenance by %s: %s", who.user, r.Raw)
		}
		if r := h.GraphQL(t, who.user, who.vdc, read, map[string]any{"h": host}); r.Code(t) != "NOT_FOUND" {
			t.Errorf("Host.maintenance read by %s: %s", who.user, r.Raw)
		}
	}
	var st hostState
	h.GraphQL(t, "admin", "", read, map[string]any{"h": host}).OK(t).Into(t, "node", &st)
	if st.Maintenance != "NONE" || len(st.Drain) != 0 {
		t.Fatalf("before: %+v", st)
	}

	h.GraphQL(t, "admin", "", set, map[string]any{"h": host, "on": true}).OK(t).Into(t, "setHostMaintenance", &st)
	if st.ID != host || st.Name != "pve2" || st.Maintenance != "MAINTENANCE" || len(st.Drain) != 0 {
		t.Errorf("enabled on a host without VMs: %+v, want MAINTENANCE", st)
	}
	if r := h.GraphQL(t, "admin", "", set, map[string]any{"h": host, "on": true}); r.Code(t) != "CONFLICT" {
		t.Errorf("enable twice: %s", r.Raw)
	}
	r := h.GraphQL(t, "admin", "", set, map[string]any{"h": "nosuch", "on": true})
	if r.Code(t) != "BAD_USER_INPUT" || len(r.Errors) == 0 || r.Errors[0].Extensions["field"] != "input.host" {
		t.Errorf("unknown host: %s", r.Raw)
	}
	h.GraphQL(t, "admin", "", set, map[string]any{"h": host, "on": false}).OK(t).Into(t, "setHostMaintenance", &st)
	if st.Maintenance != "NONE" {
		t.Errorf("disabled: %+v", st)
	}
}
