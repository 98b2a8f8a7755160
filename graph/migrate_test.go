package graph_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

type gqlProgress struct {
	BytesMoved, BytesTotal, BytesPerSecond float64
}

type gqlMigrateOp struct {
	gqlOp
	Progress *gqlProgress
}

const migrateVM = `mutation($in: MigrateVMInput!) { migrateVM(input: $in) { id kind state step vmId progress { bytesMoved bytesTotal bytesPerSecond } } }`

// vmHost returns the status and host name of VM id as user sees it.
func vmHost(t *testing.T, h *meshtest.Harness, user, vdc, id string) (status, host string, addrs []string) {
	t.Helper()
	var vm struct {
		Status      string
		IPAddresses []string
		Host        *struct{ Name string }
	}
	h.GraphQL(t, user, vdc, `query($id: ID!) { vm(id: $id) { status ipAddresses host { name } } }`, map[string]any{"id": id}).OK(t).Into(t, "vm", &vm)
	if vm.Host == nil {
		return vm.Status, "", vm.IPAddresses
	}
	return vm.Status, vm.Host.Name, vm.IPAddresses
}

// migrationHosts returns the hosts user sees VM id can move to.
func migrationHosts(t *testing.T, h *meshtest.Harness, user, vdc, id string) []string {
	t.Helper()
	var vm struct{ MigrationHosts []string }
	h.GraphQL(t, user, vdc, `query($id: ID!) { vm(id: $id) { migrationHosts } }`, map[string]any{"id": id}).OK(t).Into(t, "vm", &vm)
	return vm.MigrationHosts
}

// TestMigrateWithinZone moves a running VM to the other host of its zone
// through GraphQL: Proxmox's online migration with its local disk, followed
// over the subscription with the bytes moved; the VM keeps its id and
// address and runs on the other host. Another VDC's VM is NOT_FOUND, bad
// hosts are refused and change nothing, and a stopped VM moves back
// offline.
func TestMigrateWithinZone(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2,
		Timing: pvesim.Timing{PerGiB: 400 * time.Millisecond}}),
		meshtest.WithAPI(meshtest.APISpec{}))
	h.WaitOnline(t, 30*time.Second)
	nets := seedVMs(t, h, "alpha")
	var created struct{ Operation gqlOp }
	h.GraphQL(t, "bob", "blue", createVM, map[string]any{"in": map[string]any{"name": "mover", "zone": "alpha", "image": "tiny",
		"computeProfile": "small", "storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": nets["alpha"]}},
		"sshKeys": []string{sshKey}, "user": "bob"}}).OK(t).Into(t, "createVM", &created)
	id := awaitCreate(t, h, "bob", "blue", created.Operation.ID)
	status, from, addrs := vmHost(t, h, "bob", "blue", id)
	if status != "RUNNING" || from == "" {
		t.Fatalf("before the move: %s on %q", status, from)
	}
	to := map[string]string{"pve1": "pve2", "pve2": "pve1"}[from]
	// A member sees where it can move (hosts are the platform admin's);
	// another VDC sees no VM at all.
	if got := migrationHosts(t, h, "bob", "blue", id); !slices.Equal(got, []string{to}) {
		t.Errorf("migrationHosts on %s = %v, want [%s]", from, got, to)
	}
	if r := h.GraphQL(t, "bob", "blue", `{ hosts { name } }`, nil); r.Code(t) != "NOT_FOUND" {
		t.Errorf("hosts as a member: %s", r.Raw)
	}
	if r := h.GraphQL(t, "alice", "red", `query($id: ID!) { vm(id: $id) { migrationHosts } }`, map[string]any{"id": id}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("migrationHosts from red: %s", r.Raw)
	}

	// Refusals change nothing.
	for name, c := range map[string]struct {
		in          map[string]any
		code, field string
	}{
		"unknown host": {map[string]any{"id": id, "host": "pve9"}, "BAD_USER_INPUT", "input.host"},
		"same host":    {map[string]any{"id": id, "host": from}, "BAD_USER_INPUT", "input.host"},
		"no host":      {map[string]any{"id": id}, "BAD_USER_INPUT", "input.host"},
		"networks within a zone": {map[string]any{"id": id, "host": to, "networks": []any{map[string]any{"from": nets["alpha"], "to": nets["alpha"]}}},
			"BAD_USER_INPUT", "input.networks"},
	} {
		r := h.GraphQL(t, "bob", "blue", migrateVM, map[string]any{"in": c.in})
		if r.Code(t) != c.code || r.Errors[0].Extensions["field"] != c.field {
			t.Errorf("%s: %s", name, r.Raw)
		}
	}
	// Another VDC's VM does not exist for it.
	if r := h.GraphQL(t, "alice", "red", migrateVM, map[string]any{"in": map[string]any{"id": id, "host": to}}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("migrateVM from red: %s", r.Raw)
	}
	if st, host, _ := vmHost(t, h, "bob", "blue", id); st != "RUNNING" || host != from {
		t.Fatalf("after the refusals: %s on %s", st, host)
	}

	var op gqlMigrateOp
	h.GraphQL(t, "bob", "blue", migrateVM, map[string]any{"in": map[string]any{"id": id, "host": to}}).OK(t).Into(t, "migrateVM", &op)
	if op.Kind != "MIGRATE_VM" || op.State != "RUNNING" || op.VMID == nil || *op.VMID != id {
		t.Fatalf("migrateVM: %+v", op)
	}
	if r := h.GraphQL(t, "alice", "red", `query($id: ID!) { operation(id: $id) { id } }`, map[string]any{"id": op.ID}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("the migration's operation from red: %s", r.Raw)
	}
	msgs := subscribe(t, h.GraphQLURL(), h.Token(t, "bob"), "blue",
		`subscription { operation(id: "`+op.ID+`") { state step progress { bytesMoved bytesTotal bytesPerSecond } } }`)
	var midway bool
	var last gqlMigrateOp
	for _, m := range msgs {
		var d struct {
			Data struct{ Operation gqlMigrateOp }
		}
		if err := json.Unmarshal(m, &d); err != nil {
			t.Fatal(err)
		}
		last = d.Data.Operation
		if p := last.Progress; last.State == "RUNNING" && p != nil && p.BytesMoved > 0 && p.BytesMoved < p.BytesTotal {
			midway = true
		}
	}
	if !midway {
		t.Errorf("no progress seen while the migration ran: %s", msgs)
	}
	// The disk (4 GiB) and the memory (512 MiB) moved.
	if p := last.Progress; last.State != "SUCCEEDED" || p == nil || p.BytesMoved != p.BytesTotal || p.BytesTotal < 4.5*(1<<30) || p.BytesPerSecond <= 0 {
		t.Fatalf("the migration ended %+v %+v", last, last.Progress)
	}
	if st, host, after := vmHost(t, h, "bob", "blue", id); st != "RUNNING" || host != to || len(after) != 1 || after[0] != addrs[0] {
		t.Fatalf("after the move: %s on %s with %v (was %v)", st, host, after, addrs)
	}
	if got := migrationHosts(t, h, "bob", "blue", id); !slices.Equal(got, []string{from}) {
		t.Errorf("migrationHosts on %s = %v, want [%s]", to, got, from)
	}

	// Stopped, it moves back offline (by host id this time).
	h.GraphQL(t, "bob", "blue", `mutation($id: ID!) { stopVM(id: $id) { id } }`, map[string]any{"id": id}).OK(t)
	poll.True(t, 20*time.Second, "stop", func() bool { st, _, _ := vmHost(t, h, "bob", "blue", id); return st == "STOPPED" })
	var hosts []struct{ ID, Name string }
	h.GraphQL(t, "admin", "", `{ hosts { id name } }`, nil).OK(t).Into(t, "hosts", &hosts)
	var back string
	for _, x := range hosts {
		if x.Name == from {
			back = x.ID
		}
	}
	h.GraphQL(t, "bob", "blue", migrateVM, map[string]any{"in": map[string]any{"id": id, "host": back}}).OK(t).Into(t, "migrateVM", &op)
	poll.True(t, 20*time.Second, "the move back", func() bool {
		h.GraphQL(t, "bob", "blue", `query($id: ID!) { operation(id: $id) { state error } }`, map[string]any{"id": op.ID}).OK(t).Into(t, "operation", &op)
		if op.State == "FAILED" {
			t.Fatalf("the move back failed: %+v", op)
		}
		return op.State == "SUCCEEDED"
	})
	if st, host, _ := vmHost(t, h, "bob", "blue", id); st != "STOPPED" || host != from {
		t.Fatalf("after the move back: %s on %s", st, host)
	}
}
