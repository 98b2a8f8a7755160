package graph_test

import (
	"slices"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
)

type gqlZone struct {
	Name        string
	Region      *string
	Dedicated   bool
	DedicatedTo []string
}

func zoneNames(zs []gqlZone) []string {
	var out []string
	for _, z := range zs {
		out = append(out, z.Name)
	}
	return out
}

// fieldOf is extensions.field of the only error of r.
func fieldOf(t *testing.T, r *gqltest.Response) string {
	t.Helper()
	r.Code(t)
	f, _ := r.Errors[0].Extensions["field"].(string)
	return f
}

// TestRegionsAndDedicatedZones: the platform admin groups zones alpha and
// beta into region eu-central and dedicates beta to VDC blue. Blue's member
// sees both, red's member finds beta nowhere (not listed, NOT_FOUND by
// name, not in its region, refused as a zone that does not exist when
// placing a network or a VM there, even when the admin asks for red), and
// sees it again once it is open to every VDC. Bad input to updateZone is
// refused with its field and changes nothing.
func TestRegionsAndDedicatedZones(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}, meshtest.ClusterSpec{Name: "beta", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{}))
	h.WaitOnline(t, 30*time.Second)

	const zonesQ = `query($r: String) { zones(region: $r) { name region dedicated } }`
	zonesOf := func(user, vdc string, region any) []string {
		t.Helper()
		var zs []gqlZone
		h.GraphQL(t, user, vdc, zonesQ, map[string]any{"r": region}).OK(t).Into(t, "zones", &zs)
		return zoneNames(zs)
	}
	update := func(vars map[string]any) *gqltest.Response {
		t.Helper()
		return h.GraphQL(t, "admin", "", `mutation($in: UpdateZoneInput!) { updateZone(input: $in) { name region dedicatedTo } }`, map[string]any{"in": vars})
	}
	var z gqlZone
	update(map[string]any{"name": "alpha", "region": "eu-central"}).OK(t).Into(t, "updateZone", &z)
	if z.Name != "alpha" || z.Region == nil || *z.Region != "eu-central" || len(z.DedicatedTo) != 0 {
		t.Fatalf("updateZone alpha: %+v", z)
	}
	update(map[string]any{"name": "beta", "region": "eu-central", "dedicatedTo": []string{"blue"}}).OK(t).Into(t, "updateZone", &z)
	if len(z.DedicatedTo) != 1 || z.DedicatedTo[0] != "blue" {
		t.Fatalf("updateZone beta: %+v", z)
	}

	// Refusals: each names its field; none changes a policy.
	for _, c := range []struct {
		in    map[string]any
		field string
	}{
		{map[string]any{"name": "gamma", "region": "eu"}, "input.name"},
		{map[string]any{"name": "beta", "dedicatedTo": []string{"blue", "nosuch"}}, "input.dedicatedTo[1]"},
		{map[string]any{"name": "beta", "region": "EU Central"}, "input.region"},
		{map[string]any{"name": "beta", "dedicatedTo": []string{"blue", "blue"}}, "input.dedicatedTo[1]"},
	} {
		r := update(c.in)
		if r.Code(t) != "BAD_USER_INPUT" || fieldOf(t, r) != c.field {
			t.Errorf("updateZone %v: %s, want BAD_USER_INPUT on %s", c.in, r.Raw, c.field)
		}
	}
	if r := h.GraphQL(t, "bob", "blue", `mutation { updateZone(input: {name: "beta", dedicatedTo: []}) { name } }`, nil); r.Code(t) != "NOT_FOUND" {
		t.Errorf("updateZone by a VDC member: %s", r.Raw)
	}

	// The admin sees everything, with the dedication.
	if got := zonesOf("admin", "", nil); !slices.Equal(got, []string{"alpha", "beta"}) {
		t.Errorf("admin's zones: %v", got)
	}
	h.GraphQL(t, "admin", "", `{ zone(name: "beta") { name region dedicated dedicatedTo } }`, nil).OK(t).Into(t, "zone", &z)
	if !z.Dedicated || !slices.Equal(z.DedicatedTo, []string{"blue"}) || *z.Region != "eu-central" {
		t.Errorf("admin's beta: %+v", z)
	}
	var hosts []struct{ Name string }
	h.GraphQL(t, "admin", "", `{ hosts(region: "eu-central") { name } }`, nil).OK(t).Into(t, "hosts", &hosts)
	if len(hosts) != 2 {
		t.Errorf("hosts of eu-central: %+v", hosts)
	}
	h.GraphQL(t, "admin", "", `{ hosts(region: "us-east") { name } }`, nil).OK(t).Into(t, "hosts", &hosts)
	if len(hosts) != 0 {
		t.Errorf("hosts of a region without zones: %+v", hosts)
	}

	// Blue's member sees beta, dedicated (to blue).
	if got := zonesOf("bob", "blue", "eu-central"); !slices.Equal(got, []string{"alpha", "beta"}) {
		t.Errorf("bob's zones of eu-central: %v", got)
	}
	// Red's member does not.
	if got := zonesOf("alice", "red", nil); !slices.Equal(got, []string{"alpha"}) {
		t.Errorf("alice's zones: %v", got)
	}
	if got := zonesOf("alice", "red", "eu-central"); !slices.Equal(got, []string{"alpha"}) {
		t.Errorf("alice's zones of eu-central: %v", got)
	}
	if got := zonesOf("alice", "", nil); !slices.Equal(got, []string{"alpha"}) {
		t.Errorf("alice's zones without a VDC: %v", got)
	}
	if r := h.GraphQL(t, "alice", "red", `{ zone(name: "beta") { name } }`, nil); r.Code(t) != "NOT_FOUND" {
		t.Errorf("alice's zone(beta): %s", r.Raw)
	}
	var regions []struct {
		Name  string
		Zones []gqlZone
	}
	h.GraphQL(t, "alice", "red", `{ regions { name zones { name } } }`, nil).OK(t).Into(t, "regions", &regions)
	if len(regions) != 1 || regions[0].Name != "eu-central" || !slices.Equal(zoneNames(regions[0].Zones), []string{"alpha"}) {
		t.Errorf("alice's regions: %+v", regions)
	}
	if r := h.GraphQL(t, "alice", "red", `{ zones { name dedicatedTo } }`, nil); r.Code(t) != "NOT_FOUND" {
		t.Errorf("a member asking for dedicatedTo: %s", r.Raw)
	}
	const createNet = `mutation { createNetwork(input: {name: "lan", zone: "beta", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`
	for _, user := range []string{"alice", "admin"} {
		r := h.GraphQL(t, user, "red", createNet, nil)
		if r.Code(t) != "BAD_USER_INPUT" || fieldOf(t, r) != "input.zone" {
			t.Errorf("%s: a network of red in beta: %s", user, r.Raw)
		}
	}
	r := h.GraphQL(t, "alice", "red", createVM, map[string]any{"in": map[string]any{"name": "x", "zone": "beta", "image": "tiny",
		"computeProfile": "small", "storageProfile": "ssd", "diskGiB": 4, "nics": []any{}, "user": "ops"}})
	if r.Code(t) != "BAD_USER_INPUT" || fieldOf(t, r) != "input.zone" {
		t.Errorf("a VM of red in beta: %s", r.Raw)
	}
	var nets []struct{ Name string }
	h.GraphQL(t, "alice", "red", `{ networks { name } }`, nil).OK(t).Into(t, "networks", &nets)
	if len(nets) != 0 {
		t.Errorf("red has networks after the refusals: %+v", nets)
	}
	// Blue may place there.
	h.GraphQL(t, "bob", "blue", createNet, nil).OK(t)

	// Open to every VDC again: red sees beta.
	update(map[string]any{"name": "beta", "dedicatedTo": []string{}}).OK(t)
	if got := zonesOf("alice", "red", nil); !slices.Equal(got, []string{"alpha", "beta"}) {
		t.Errorf("alice's zones after the dedication ended: %v", got)
	}
}
