package graph_test

import (
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
)

type gqlSnapshot struct {
	Name, Description string
	CreatedAt         *string
	WithRAM           bool `json:"withRAM"`
	Parent            *string
	Current           bool
	StorageGiB        int
}

// TestSnapshotsEndToEnd takes, lists, rolls back and deletes snapshots of
// a VM through the API, the mesh and the agent's allowlist to simulated
// Proxmox: each mutation is an operation following its task, the VDC's
// storage usage counts the snapshots, another VDC gets NOT_FOUND for all
// of it, and bad input names its field.
func TestSnapshotsEndToEnd(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "snapshots")
	vm := createBlueVM(t, h, tn, "snap")
	usage := func() int { return storageUsage(t, h, tn) }
	base := usage()

	// run starts a snapshot mutation and polls its operation to success.
	run := func(field, query string, vars map[string]any, kind string) {
		t.Helper()
		vars["vm"] = vm
		var op gqlOp
		h.GraphQL(t, tn.bob, tn.blue, query, vars).OK(t).Into(t, field, &op)
		if op.Kind != kind || op.State != "RUNNING" || op.VMID == nil || *op.VMID != vm {
			t.Fatalf("%s: %+v", field, op)
		}
		poll.True(t, 30*time.Second, field, func() bool {
			h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { operation(id: $id) { kind state error } }`, map[string]any{"id": op.ID}).OK(t).Into(t, "operation", &op)
			if op.State == "FAILED" {
				t.Fatalf("%s failed: %+v", field, op)
			}
			return op.State == "SUCCEEDED"
		})
	}
	const create = `mutation($vm: ID!, $in: CreateSnapshotInput!) { createSnapshot(vm: $vm, input: $in) { id kind state vmId } }`
	run("createSnapshot", create, map[string]any{"in": map[string]any{"name": "clean", "description": "fresh"}}, "CREATE_SNAPSHOT")
	run("createSnapshot", create, map[string]any{"in": map[string]any{"name": "live", "withRAM": true}}, "CREATE_SNAPSHOT")
	const list = `query($id: ID!) { vm(id: $id) { status snapshots { name description createdAt withRAM parent current storageGiB } } }`
	var got struct {
		Status    string
		Snapshots []gqlSnapshot
	}
	h.GraphQL(t, tn.bob, tn.blue, list, map[string]any{"id": vm}).OK(t).Into(t, "vm", &got)
	if s := got.Snapshots; len(s) != 2 || s[0].Name != "clean" || s[0].Description != "fresh" || s[0].WithRAM || s[0].CreatedAt == nil ||
		s[1].Name != "live" || !s[1].WithRAM || !s[1].Current || s[1].Parent == nil || *s[1].Parent != "clean" || s[0].StorageGiB+s[1].StorageGiB != 9 {
		t.Fatalf("snapshots: %+v", s)
	}
	poll.True(t, 20*time.Second, "the usage to count both snapshots once", func() bool { return usage() == base+9 })

	// Refusals.
	for _, c := range []struct {
		user, vdc, query string
		vars             map[string]any
		code, field      string
	}{
		{tn.bob, tn.blue, create, map[string]any{"vm": vm, "in": map[string]any{"name": "current"}}, "BAD_USER_INPUT", "input.name"},
		{tn.bob, tn.blue, create, map[string]any{"vm": vm, "in": map[string]any{"name": "live"}}, "CONFLICT", "input.name"},
		{tn.bob, tn.blue, `mutation($vm: ID!) { rollbackSnapshot(vm: $vm, name: "nope") { id } }`, map[string]any{"vm": vm}, "NOT_FOUND", "name"},
		{tn.alice, tn.red, create, map[string]any{"vm": vm, "in": map[string]any{"name": "theirs"}}, "NOT_FOUND", ""},
		{tn.alice, tn.red, `mutation($vm: ID!) { rollbackSnapshot(vm: $vm, name: "clean") { id } }`, map[string]any{"vm": vm}, "NOT_FOUND", ""},
		{tn.alice, tn.red, `mutation($vm: ID!) { deleteSnapshot(vm: $vm, name: "clean") { id } }`, map[string]any{"vm": vm}, "NOT_FOUND", ""},
		{tn.alice, tn.red, `query($vm: ID!) { vm(id: $vm) { snapshots { name } } }`, map[string]any{"vm": vm}, "NOT_FOUND", ""},
		// A viewer of red may not take snapshots there: FORBIDDEN, whatever the VM.
		{tn.vera, tn.red, create, map[string]any{"vm": vm, "in": map[string]any{"name": "theirs"}}, "FORBIDDEN", ""},
	} {
		r := h.GraphQL(t, c.user, c.vdc, c.query, c.vars)
		if r.Code(t) != c.code || fieldOf(t, r) != c.field {
			t.Errorf("%s in %s: %s: %s, want %s %s", c.user, c.vdc, c.query, r.Raw, c.code, c.field)
		}
	}

	run("rollbackSnapshot", `mutation($vm: ID!) { rollbackSnapshot(vm: $vm, name: "clean") { id kind state vmId } }`, map[string]any{}, "ROLLBACK_SNAPSHOT")
	h.GraphQL(t, tn.bob, tn.blue, list, map[string]any{"id": vm}).OK(t).Into(t, "vm", &got)
	if got.Status != "STOPPED" || !got.Snapshots[0].Current {
		t.Errorf("after rolling back to a snapshot without RAM: %+v", got)
	}
	run("rollbackSnapshot", `mutation($vm: ID!) { rollbackSnapshot(vm: $vm, name: "live") { id kind state vmId } }`, map[string]any{}, "ROLLBACK_SNAPSHOT")
	h.GraphQL(t, tn.bob, tn.blue, list, map[string]any{"id": vm}).OK(t).Into(t, "vm", &got)
	if got.Status != "RUNNING" {
		t.Errorf("after rolling back to a snapshot with RAM: %+v", got)
	}
	run("deleteSnapshot", `mutation($vm: ID!) { deleteSnapshot(vm: $vm, name: "clean") { id kind state vmId } }`, map[string]any{}, "DELETE_SNAPSHOT")
	h.GraphQL(t, tn.bob, tn.blue, list, map[string]any{"id": vm}).OK(t).Into(t, "vm", &got)
	if len(got.Snapshots) != 1 || got.Snapshots[0].Name != "live" || got.Snapshots[0].Parent != nil {
		t.Errorf("after the delete: %+v", got.Snapshots)
	}
	if u := usage(); u != base+5 {
		t.Errorf("usage %d GiB with one snapshot with RAM, want %d", u, base+5)
	}
	// The VM's operations list them.
	var ops struct{ Operations []gqlOp }
	h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { vm(id: $id) { operations { kind state } } }`, map[string]any{"id": vm}).OK(t).Into(t, "vm", &ops)
	kinds := map[string]int{}
	for _, o := range ops.Operations {
		kinds[o.Kind]++
	}
	if kinds["CREATE_SNAPSHOT"] != 2 || kinds["ROLLBACK_SNAPSHOT"] != 2 || kinds["DELETE_SNAPSHOT"] != 1 {
		t.Errorf("operations: %v", kinds)
	}
}
