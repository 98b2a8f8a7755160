package graph_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// gqlMigrationZone is what migrationZones answers, as the tests read it.
type gqlMigrationZone struct {
	Zone  struct{ Name string }
	Hosts []string
	NICs  []struct {
		Index      int
		Network    *struct{ ID, Name string }
		Candidates []struct{ ID, Name string }
		SameName   *struct{ ID, Name string }
	} `json:"nics"`
}

const migrationZonesQuery = `query($id: ID!) { vm(id: $id) { migrationHosts migrationZones { zone { name } hosts
  nics { index network { id name } candidates { id name } sameName { id name } } } } }`

// TestMigrationZones reads where a VM can move across zones: the other
// zones its VDC may use, their online hosts and, per NIC, the VDC's
// networks there with the one of the same name preselected. A zone
// dedicated to another VDC is not offered, refuses the move as a zone
// that does not exist (changing nothing), and node(id:) does not find it
// or its hosts for the VM's VDC; another VDC's VM answers NOT_FOUND. Once
// the VM moved with the mapping offered (into the zone, now dedicated to
// its VDC among others), it is offered its old zone and the hosts of its
// new one.
func TestMigrationZones(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2}, meshtest.ClusterSpec{Name: "beta", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{}))
	h.WaitOnline(t, 30*time.Second)
	nets := seedVMs(t, h, "alpha", "beta")
	mkNet := func(name, zone, cidr string) string {
		var n struct{ ID string }
		h.GraphQL(t, "bob", "blue", `mutation($n: String!, $z: String!, $c: String!, $g: String!) { createNetwork(input: {name: $n, zone: $z, cidr: $c, gateway: $g}) { id } }`,
			map[string]any{"n": name, "z": zone, "c": cidr, "g": cidr[:len(cidr)-4] + "1"}).OK(t).Into(t, "createNetwork", &n)
		return n.ID
	}
	apps := mkNet("apps", "alpha", "10.2.0.0/24") // no namesake in beta
	dmz := mkNet("dmz", "beta", "10.3.0.0/24")
	var created struct{ Operation gqlOp }
	h.GraphQL(t, "bob", "blue", createVM, map[string]any{"in": map[string]any{"name": "mover", "zone": "alpha", "image": "tiny",
		"computeProfile": "small", "storageProfile": "ssd", "diskGiB": 1,
		"nics":    []any{map[string]any{"network": nets["alpha"]}, map[string]any{"network": apps}},
		"sshKeys": []string{sshKey}, "user": "bob"}}).OK(t).Into(t, "createVM", &created)
	id := awaitCreate(t, h, "bob", "blue", created.Operation.ID)

	read := func() []gqlMigrationZone {
		t.Helper()
		var vm struct{ MigrationZones []gqlMigrationZone }
		h.GraphQL(t, "bob", "blue", migrationZonesQuery, map[string]any{"id": id}).OK(t).Into(t, "vm", &vm)
		return vm.MigrationZones
	}
	zs := read()
	if len(zs) != 1 || zs[0].Zone.Name != "beta" || !slices.Equal(zs[0].Hosts, []string{"pve1"}) || len(zs[0].NICs) != 2 {
		t.Fatalf("migrationZones in alpha: %+v", zs)
	}
	for i, n := range zs[0].NICs {
		var names []string
		for _, c := range n.Candidates {
			names = append(names, c.Name)
		}
		if n.Index != i || n.Network == nil || !slices.Equal(names, []string{"dmz", "lan"}) {
			t.Errorf("NIC %d: %+v", i, n)
		}
	}
	if n := zs[0].NICs[0]; n.Network.ID != nets["alpha"] || n.SameName == nil || n.SameName.ID != nets["beta"] {
		t.Errorf("net0 on lan maps to lan of beta: %+v", n)
	}
	if n := zs[0].NICs[1]; n.Network.ID != apps || n.SameName != nil {
		t.Errorf("net1 on apps has no namesake in beta: %+v", n)
	}
	if r := h.GraphQL(t, "alice", "red", migrationZonesQuery, map[string]any{"id": id}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("another VDC's VM: %s", r.Raw)
	}

	// A zone dedicated to another VDC is not offered, the VM cannot move
	// there (refused as a zone that does not exist, changing nothing), and
	// node(id:) does not find the zone or its hosts for blue; red and the
	// admin find the zone, the admin its hosts too.
	dedicate := func(to []string) {
		h.GraphQL(t, "admin", "", `mutation($to: [String!]) { updateZone(input: {name: "beta", dedicatedTo: $to}) { name } }`, map[string]any{"to": to}).OK(t)
	}
	var beta struct {
		ID    string
		Hosts []struct{ ID string }
	}
	h.GraphQL(t, "admin", "", `{ zone(name: "beta") { id hosts { id } } }`, nil).OK(t).Into(t, "zone", &beta)
	if len(beta.Hosts) != 1 {
		t.Fatalf("beta: %+v", beta)
	}
	dedicate([]string{"red"})
	if zs := read(); len(zs) != 0 {
		t.Errorf("migrationZones with beta dedicated to red: %+v", zs)
	}
	r := h.GraphQL(t, "bob", "blue", migrateVM, map[string]any{"in": map[string]any{"id": id, "zone": "beta",
		"networks": []any{map[string]any{"from": apps, "to": dmz}}}})
	if code, field := errorOf(t, r); code != "BAD_USER_INPUT" || field != "input.zone" {
		t.Errorf("a move into beta, dedicated to red: %s", r.Raw)
	}
	unknown := h.GraphQL(t, "bob", "blue", migrateVM, map[string]any{"in": map[string]any{"id": id, "zone": "nosuch"}})
	if r.Errors[0].Message != strings.ReplaceAll(unknown.Errors[0].Message, "nosuch", "beta") {
		t.Errorf("the refusal of beta (%q) differs from that of a zone that does not exist (%q)", r.Errors[0].Message, unknown.Errors[0].Message)
	}
	var before struct{ Zone struct{ Name string } }
	h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { zone { name } } }`, map[string]any{"id": id}).OK(t).Into(t, "vm", &before)
	if before.Zone.Name != "alpha" {
		t.Errorf("the VM after the refused move: %+v", before)
	}
	const nodeQ = `query($id: ID!) { node(id: $id) { id } }`
	for _, c := range []struct {
		user, vdc, id string
		found         bool
	}{
		{"bob", "blue", beta.ID, false},
		{"bob", "", beta.ID, false},
		{"bob", "blue", beta.Hosts[0].ID, false},
		{"alice", "red", beta.ID, true},
		{"admin", "", beta.ID, true},
		{"admin", "", beta.Hosts[0].ID, true},
	} {
		r := h.GraphQL(t, c.user, c.vdc, nodeQ, map[string]any{"id": c.id})
		if c.found {
			var n struct{ ID string }
			if r.OK(t).Into(t, "node", &n); n.ID != c.id {
				t.Errorf("%s in %q: node(%s) = %+v", c.user, c.vdc, c.id, n)
			}
		} else if r.Code(t) != "NOT_FOUND" {
			t.Errorf("%s in %q: node(%s): %s, want NOT_FOUND", c.user, c.vdc, c.id, r.Raw)
		}
	}
	// Dedicated to blue (among others), it is blue's to move to.
	dedicate([]string{"blue", "red"})

	// It moves with the mapping offered; then its old zone is offered.
	// A move that failed and rolled back leaves the VM where it was, so
	// the user can move it again: this test, which is about the zones
	// offered, does so once (TestMigrateAcrossZones is about the move).
	var op gqlMigrateOp
	move := func() {
		h.GraphQL(t, "bob", "blue", migrateVM, map[string]any{"in": map[string]any{"id": id, "zone": "beta",
			"networks": []any{map[string]any{"from": apps, "to": dmz}}}}).OK(t).Into(t, "migrateVM", &op)
	}
	move()
	retried := false
	poll.True(t, 120*time.Second, "the move", func() bool {
		var o gqlOp
		h.GraphQL(t, "bob", "blue", `query($id: ID!) { operation(id: $id) { state step error vmId } }`, map[string]any{"id": op.ID}).OK(t).Into(t, "operation", &o)
		if o.State == "FAILED" && o.Step == "rollback" && !retried {
			t.Logf("the move rolled back (%s): moving again", opError(o))
			retried = true
			move()
			return false
		}
		if o.State == "FAILED" {
			t.Fatalf("the move failed at step %s: %s", o.Step, opError(o))
		}
		return o.State == "SUCCEEDED"
	})
	var vm struct {
		MigrationHosts []string
		MigrationZones []gqlMigrationZone
	}
	h.GraphQL(t, "bob", "blue", migrationZonesQuery, map[string]any{"id": id}).OK(t).Into(t, "vm", &vm)
	if len(vm.MigrationHosts) != 0 {
		t.Errorf("migrationHosts in beta (one host): %v", vm.MigrationHosts)
	}
	if zs := vm.MigrationZones; len(zs) != 1 || zs[0].Zone.Name != "alpha" || !slices.Equal(zs[0].Hosts, []string{"pve1", "pve2"}) ||
		len(zs[0].NICs) != 2 || zs[0].NICs[1].Network == nil || zs[0].NICs[1].Network.Name != "dmz" || zs[0].NICs[1].SameName != nil ||
		zs[0].NICs[0].SameName == nil || zs[0].NICs[0].SameName.ID != nets["alpha"] {
		t.Errorf("migrationZones in beta: %+v", zs)
	}
}
