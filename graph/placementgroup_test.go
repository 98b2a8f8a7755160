package graph_test

import (
	"testing"
)

// TestPlacementGroupsAPI: a VDC's members create, list and delete
// placement groups; a VM created in one shows it and is listed in it;
// another VDC's group is NOT_FOUND (to delete, or to create a VM in) and
// never listed; a viewer cannot create one; a SPREAD group of a zone of
// one host takes one VM and refuses the second (CAPACITY_EXCEEDED); a
// group in use cannot be deleted; bad input names its field.
func TestPlacementGroupsAPI(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "pgroups")
	const (
		create = `mutation($in: CreatePlacementGroupInput!) { createPlacementGroup(input: $in) { id name zone policy vms { id } } }`
		del    = `mutation($id: ID!) { deletePlacementGroup(id: $id) { id } }`
		list   = `{ placementGroups { id name zone policy vms { id name } } }`
	)
	type group struct {
		ID, Name, Zone, Policy string
		VMs                    []struct{ ID, Name string } `json:"vms"`
	}
	in := func(name, zone, policy string) map[string]any {
		return map[string]any{"in": map[string]any{"name": name, "zone": zone, "policy": policy}}
	}
	var db group
	h.GraphQL(t, tn.bob, tn.blue, create, in("db", "alpha", "SPREAD")).OK(t).Into(t, "createPlacementGroup", &db)
	if db.Name != "db" || db.Zone != "alpha" || db.Policy != "SPREAD" || len(db.VMs) != 0 || db.ID == "" {
		t.Fatalf("createPlacementGroup: %+v", db)
	}
	for _, c := range []struct {
		in          map[string]any
		code, field string
	}{
		{in("Bad_Name", "alpha", "PACK"), "BAD_USER_INPUT", "input.name"},
		{in("x", "nowhere", "PACK"), "BAD_USER_INPUT", "input.zone"},
		{in("db", "alpha", "PACK"), "CONFLICT", "input.name"},
	} {
		r := h.GraphQL(t, tn.bob, tn.blue, create, c.in)
		if got := r.Code(t); got != c.code || fieldOf(t, r) != c.field {
			t.Errorf("%v: %s at %q, want %s at %q (%s)", c.in, got, fieldOf(t, r), c.code, c.field, r.Raw)
		}
	}
	if got := h.GraphQL(t, tn.vera, tn.red, create, in("view", "alpha", "PACK")).Code(t); got != "FORBIDDEN" {
		t.Errorf("a viewer creates a placement group: %s, want FORBIDDEN", got)
	}

	// Red sees nothing of blue's group, and cannot use or delete it.
	var redGroups []group
	h.GraphQL(t, tn.alice, tn.red, list, nil).OK(t).Into(t, "placementGroups", &redGroups)
	if len(redGroups) != 0 {
		t.Errorf("red lists %+v", redGroups)
	}
	if got := h.GraphQL(t, tn.alice, tn.red, del, map[string]any{"id": db.ID}).Code(t); got != "NOT_FOUND" {
		t.Errorf("red deletes blue's group: %s, want NOT_FOUND", got)
	}
	vmInput := func(name string) map[string]any {
		return map[string]any{"in": map[string]any{"name": name, "zone": "alpha", "image": "tiny", "computeProfile": "small", "storageProfile": "ssd",
			"diskGiB": 4, "nics": []any{map[string]any{"network": tn.net}}, "sshKeys": []string{sshKey}, "user": "bob", "placementGroup": "db"}}
	}
	redNet := createNetworks(t, h, tn.alice, tn.red, "alpha")["alpha"]
	redIn := vmInput("intruder")
	redIn["in"].(map[string]any)["nics"] = []any{map[string]any{"network": redNet}}
	if r := h.GraphQL(t, tn.alice, tn.red, createVM, redIn); r.Code(t) != "NOT_FOUND" || fieldOf(t, r) != "input.placementGroup" {
		t.Errorf("red creates a VM in blue's group: %s", r.Raw)
	}

	// One VM in the SPREAD group; the zone's one host takes no second.
	var created struct{ Operation gqlOp }
	h.GraphQL(t, tn.bob, tn.blue, createVM, vmInput("db-0")).OK(t).Into(t, "createVM", &created)
	vm := awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)
	var got struct{ PlacementGroup *group }
	h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { vm(id: $id) { placementGroup { id name policy } } }`, map[string]any{"id": vm}).OK(t).Into(t, "vm", &got)
	if got.PlacementGroup == nil || got.PlacementGroup.ID != db.ID {
		t.Fatalf("the VM's placement group: %+v, want db", got.PlacementGroup)
	}
	if r := h.GraphQL(t, tn.bob, tn.blue, createVM, vmInput("db-1")); r.Code(t) != "CAPACITY_EXCEEDED" {
		t.Errorf("a second VM of a SPREAD group on a zone of one host: %s", r.Raw)
	}
	var groups []group
	h.GraphQL(t, tn.bob, tn.blue, list, nil).OK(t).Into(t, "placementGroups", &groups)
	if len(groups) != 1 || len(groups[0].VMs) != 1 || groups[0].VMs[0].ID != vm {
		t.Fatalf("blue's placement groups: %+v, want db with %s", groups, vm)
	}
	if got := h.GraphQL(t, tn.bob, tn.blue, del, map[string]any{"id": db.ID}).Code(t); got != "CONFLICT" {
		t.Errorf("deleting a group in use: %s, want CONFLICT", got)
	}
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { deleteVM(id: $id) { id } }`, map[string]any{"id": vm}).OK(t)
	var gone struct{ ID string }
	h.GraphQL(t, tn.bob, tn.blue, del, map[string]any{"id": db.ID}).OK(t).Into(t, "deletePlacementGroup", &gone)
	if gone.ID != db.ID {
		t.Errorf("deletePlacementGroup: %+v", gone)
	}
}
