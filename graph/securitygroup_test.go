package graph_test

import (
	"fmt"
	"slices"
	"testing"
)

const (
	createGroup = `mutation($in: CreateSecurityGroupInput!) { createSecurityGroup(input: $in) {
  id name description rules { direction protocol ports peerCidr peerGroup description } } }`
	listGroups = `{ securityGroups { id name members { vmId zone addresses } } }`
	setGroups  = `mutation($vm: ID!, $g: [String!]!) { setVMSecurityGroups(input: {vm: $vm, securityGroups: $g}) { id securityGroups } }`
)

type gqlGroup struct {
	ID, Name, Description string
	Rules                 []map[string]any
	Members               []struct {
		VMID      string `json:"vmId"`
		Zone      string
		Addresses []string
	}
}

// groupInput is a createSecurityGroup input of rules.
func groupInput(name string, rules ...map[string]any) map[string]any {
	if rules == nil {
		rules = []map[string]any{}
	}
	return map[string]any{"in": map[string]any{"name": name, "rules": rules}}
}

// TestSecurityGroupsAPI: a VDC's members make, change and delete security
// groups; bad rules are refused naming the rule's index and change
// nothing; another VDC's groups are NOT_FOUND and never listed, and cannot
// be a peer; a group a VM is in, or a rule names as its peer, or the
// default is, cannot be deleted; a VM's groups are set and read; the
// default group is put on new VMs.
func TestSecurityGroupsAPI(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "secgroups")
	var app, db gqlGroup
	h.GraphQL(t, tn.bob, tn.blue, createGroup, groupInput("app",
		map[string]any{"direction": "INBOUND", "protocol": "TCP", "ports": "8080", "peerCidr": "10.0.0.0/8", "description": "web"})).
		OK(t).Into(t, "createSecurityGroup", &app)
	h.GraphQL(t, tn.bob, tn.blue, createGroup, groupInput("db",
		map[string]any{"direction": "INBOUND", "protocol": "TCP", "ports": "5432", "peerGroup": "app"},
		map[string]any{"direction": "OUTBOUND", "protocol": "UDP", "ports": "53,123"})).
		OK(t).Into(t, "createSecurityGroup", &db)
	if app.Name != "app" || len(app.Rules) != 1 || app.Rules[0]["ports"] != "8080" || app.Rules[0]["direction"] != "INBOUND" ||
		app.Rules[0]["protocol"] != "TCP" || app.Rules[0]["peerGroup"] != nil {
		t.Fatalf("createSecurityGroup: %+v", app)
	}
	if len(db.Rules) != 2 || db.Rules[0]["peerGroup"] != "app" || db.Rules[1]["direction"] != "OUTBOUND" {
		t.Fatalf("createSecurityGroup: %+v", db)
	}

	// Bad input names the rule and changes nothing.
	rule := func(kv ...string) map[string]any {
		r := map[string]any{"direction": "INBOUND", "protocol": "TCP"}
		for i := 0; i < len(kv); i += 2 {
			r[kv[i]] = kv[i+1]
		}
		return r
	}
	many := make([]map[string]any, 201)
	for i := range many {
		many[i] = rule("ports", "22")
	}
	for _, c := range []struct {
		in          map[string]any
		code, field string
	}{
		{groupInput("x", rule(), rule(), rule(), rule("ports", "80:22")), "BAD_USER_INPUT", "input.rules[3].ports"},
		{groupInput("x", rule("ports", "70000")), "BAD_USER_INPUT", "input.rules[0].ports"},
		{groupInput("x", rule("ports", "http")), "BAD_USER_INPUT", "input.rules[0].ports"},
		{groupInput("x", rule(), rule("peerCidr", "10.0.0.1/8")), "BAD_USER_INPUT", "input.rules[1].peerCidr"},
		{groupInput("x", rule("peerCidr", "10.0.0.0/33")), "BAD_USER_INPUT", "input.rules[0].peerCidr"},
		{groupInput("x", map[string]any{"direction": "INBOUND", "protocol": "ICMP", "ports": "22"}), "BAD_USER_INPUT", "input.rules[0].ports"},
		{groupInput("x", rule("peerCidr", "10.0.0.0/8", "peerGroup", "app")), "BAD_USER_INPUT", "input.rules[0].peerGroup"},
		{groupInput("x", many...), "BAD_USER_INPUT", "input.rules"},
		{groupInput("Bad_Name"), "BAD_USER_INPUT", "input.name"},
		{groupInput("x", rule(), rule("peerGroup", "nope")), "NOT_FOUND", "input.rules[1].peerGroup"},
		{groupInput("app"), "CONFLICT", ""},
	} {
		r := h.GraphQL(t, tn.bob, tn.blue, createGroup, c.in)
		if got := r.Code(t); got != c.code || fieldOf(t, r) != c.field {
			t.Errorf("%v: %s at %q, want %s at %q (%s)", c.in, got, fieldOf(t, r), c.code, c.field, r.Raw)
		}
	}
	r := h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { updateSecurityGroup(input: {id: $id, rules: [{direction: INBOUND, protocol: UDP, ports: "9:8"}]}) { id } }`,
		map[string]any{"id": db.ID})
	if r.Code(t) != "BAD_USER_INPUT" || fieldOf(t, r) != "input.rules[0].ports" {
		t.Errorf("updateSecurityGroup with bad ports: %s", r.Raw)
	}
	groups := func(user, vdc string) []gqlGroup {
		var gs []gqlGroup
		h.GraphQL(t, user, vdc, listGroups, nil).OK(t).Into(t, "securityGroups", &gs)
		return gs
	}
	if gs := groups(tn.bob, tn.blue); len(gs) != 2 || gs[0].Name != "app" || gs[1].Name != "db" {
		t.Fatalf("securityGroups after refused changes: %+v", gs)
	}
	var upd gqlGroup
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { updateSecurityGroup(input: {id: $id, description: "the database"}) { id description rules { ports } } }`,
		map[string]any{"id": db.ID}).OK(t).Into(t, "updateSecurityGroup", &upd)
	if upd.Description != "the database" || len(upd.Rules) != 2 {
		t.Errorf("updateSecurityGroup of the description: %+v", upd)
	}

	// Another VDC sees none of them, cannot change them nor name them.
	if gs := groups(tn.alice, tn.red); len(gs) != 0 {
		t.Errorf("red lists blue's groups: %+v", gs)
	}
	for _, q := range []string{
		`mutation($id: ID!) { updateSecurityGroup(input: {id: $id, description: "mine"}) { id } }`,
		`mutation($id: ID!) { deleteSecurityGroup(id: $id) { id } }`,
	} {
		if got := h.GraphQL(t, tn.alice, tn.red, q, map[string]any{"id": db.ID}).Code(t); got != "NOT_FOUND" {
			t.Errorf("%s of blue's group by red: %s, want NOT_FOUND", q, got)
		}
	}
	if r := h.GraphQL(t, tn.alice, tn.red, createGroup, groupInput("steal", rule("peerGroup", "app"))); r.Code(t) != "NOT_FOUND" || fieldOf(t, r) != "input.rules[0].peerGroup" {
		t.Errorf("red's rule naming blue's group: %s", r.Raw)
	}
	if got := h.GraphQL(t, tn.vera, tn.red, createGroup, groupInput("view")).Code(t); got != "FORBIDDEN" {
		t.Errorf("a viewer creates a group: %s, want FORBIDDEN", got)
	}

	// A VM in db; db cannot be deleted while it is, app not while db's rule names it.
	var created struct{ Operation gqlOp }
	vmInput := func(name string, groups any) map[string]any {
		in := map[string]any{"name": name, "zone": "alpha", "image": "tiny", "computeProfile": "small", "storageProfile": "ssd",
			"diskGiB": 4, "nics": []any{map[string]any{"network": tn.net}}, "sshKeys": []string{sshKey}, "user": "bob"}
		if groups != nil {
			in["securityGroups"] = groups
		}
		return map[string]any{"in": in}
	}
	if r := h.GraphQL(t, tn.bob, tn.blue, createVM, vmInput("nope", []string{"nope"})); r.Code(t) != "NOT_FOUND" || fieldOf(t, r) != "input.securityGroups[0]" {
		t.Errorf("createVM in an unknown group: %s", r.Raw)
	}
	h.GraphQL(t, tn.bob, tn.blue, createVM, vmInput("pg", []string{"db"})).OK(t).Into(t, "createVM", &created)
	vm := awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)
	vmGroups := func(id string) []string {
		var v struct{ SecurityGroups []string }
		h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { vm(id: $id) { securityGroups } }`, map[string]any{"id": id}).OK(t).Into(t, "vm", &v)
		return v.SecurityGroups
	}
	if g := vmGroups(vm); !slices.Equal(g, []string{"db"}) {
		t.Fatalf("the VM's groups: %v, want [db]", g)
	}
	if gs := groups(tn.bob, tn.blue); len(gs[1].Members) != 1 || gs[1].Members[0].VMID != vm || len(gs[1].Members[0].Addresses) != 1 {
		t.Errorf("db's members: %+v", gs[1].Members)
	}
	del := `mutation($id: ID!) { deleteSecurityGroup(id: $id) { id } }`
	for _, id := range []string{db.ID, app.ID} {
		if got := h.GraphQL(t, tn.bob, tn.blue, del, map[string]any{"id": id}).Code(t); got != "CONFLICT" {
			t.Errorf("delete %s: %s, want CONFLICT", id, got)
		}
	}
	if got := h.GraphQL(t, tn.alice, tn.red, setGroups, map[string]any{"vm": vm, "g": []string{}}).Code(t); got != "NOT_FOUND" {
		t.Errorf("red sets blue's VM's groups: %s", got)
	}
	seventeen := make([]string, 17)
	for i := range seventeen {
		seventeen[i] = fmt.Sprintf("g%d", i)
	}
	for _, c := range []struct {
		groups      []string
		code, field string
	}{
		{seventeen, "BAD_USER_INPUT", "input.securityGroups"},
		{[]string{"app", "nope"}, "NOT_FOUND", "input.securityGroups[1]"},
		{[]string{"app", "app"}, "BAD_USER_INPUT", "input.securityGroups[1]"},
	} {
		r := h.GraphQL(t, tn.bob, tn.blue, setGroups, map[string]any{"vm": vm, "g": c.groups})
		if got := r.Code(t); got != c.code || fieldOf(t, r) != c.field {
			t.Errorf("setVMSecurityGroups %v: %s at %q, want %s at %q", c.groups, got, fieldOf(t, r), c.code, c.field)
		}
	}
	if g := vmGroups(vm); !slices.Equal(g, []string{"db"}) {
		t.Fatalf("the VM's groups after refused changes: %v, want [db]", g)
	}
	var set struct{ SecurityGroups []string }
	h.GraphQL(t, tn.bob, tn.blue, setGroups, map[string]any{"vm": vm, "g": []string{"app"}}).OK(t).Into(t, "setVMSecurityGroups", &set)
	if !slices.Equal(set.SecurityGroups, []string{"app"}) || !slices.Equal(vmGroups(vm), []string{"app"}) {
		t.Fatalf("setVMSecurityGroups: %v, then %v", set.SecurityGroups, vmGroups(vm))
	}

	// The default: an admin's to set (a member's is FORBIDDEN), put on new VMs.
	setDefault := `mutation($n: String) { setDefaultSecurityGroup(name: $n) { name defaultSecurityGroup } }`
	if got := h.GraphQL(t, tn.bob, tn.blue, setDefault, map[string]any{"n": "db"}).Code(t); got != "FORBIDDEN" {
		t.Errorf("a member sets the default: %s", got)
	}
	if r := h.GraphQL(t, "admin", tn.blue, setDefault, map[string]any{"n": "nope"}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("an unknown default: %s", r.Raw)
	}
	var v struct{ DefaultSecurityGroup *string }
	h.GraphQL(t, "admin", tn.blue, setDefault, map[string]any{"n": "db"}).OK(t).Into(t, "setDefaultSecurityGroup", &v)
	if v.DefaultSecurityGroup == nil || *v.DefaultSecurityGroup != "db" {
		t.Fatalf("setDefaultSecurityGroup: %+v", v)
	}
	h.GraphQL(t, tn.bob, tn.blue, createVM, vmInput("pg2", nil)).OK(t).Into(t, "createVM", &created)
	vm2 := awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)
	if g := vmGroups(vm2); !slices.Equal(g, []string{"db"}) {
		t.Errorf("a new VM's groups with the default db: %v", g)
	}
	if got := h.GraphQL(t, tn.bob, tn.blue, del, map[string]any{"id": db.ID}).Code(t); got != "CONFLICT" {
		t.Errorf("delete the default: %s, want CONFLICT", got)
	}
	h.GraphQL(t, "admin", tn.blue, setDefault, map[string]any{"n": nil}).OK(t).Into(t, "setDefaultSecurityGroup", &v)
	if v.DefaultSecurityGroup != nil {
		t.Errorf("the default after removing it: %v", *v.DefaultSecurityGroup)
	}
	h.GraphQL(t, tn.bob, tn.blue, createVM, vmInput("open", []string{})).OK(t).Into(t, "createVM", &created)
	vm3 := awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)
	if g := vmGroups(vm3); len(g) != 0 {
		t.Errorf("a VM created in no group: %v", g)
	}
	h.GraphQL(t, tn.bob, tn.blue, setGroups, map[string]any{"vm": vm2, "g": []string{}}).OK(t)
	h.GraphQL(t, tn.bob, tn.blue, del, map[string]any{"id": db.ID}).OK(t)
	if gs := groups(tn.bob, tn.blue); len(gs) != 1 || gs[0].Name != "app" {
		t.Errorf("groups after deleting db: %+v", gs)
	}
}

// TestSecurityRuleNullFields: a rule's nullable fields sent as explicit
// nulls (as the schema allows, and as clients that send every field do)
// are taken as absent, on create and on update.
func TestSecurityRuleNullFields(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "sgnulls")
	null := map[string]any{"direction": "INBOUND", "protocol": "ICMP", "ports": nil, "peerCidr": nil, "peerGroup": nil, "description": nil}
	var g gqlGroup
	h.GraphQL(t, tn.bob, tn.blue, createGroup, map[string]any{"in": map[string]any{"name": "nulls", "description": nil, "rules": []any{null}}}).
		OK(t).Into(t, "createSecurityGroup", &g)
	if len(g.Rules) != 1 || g.Rules[0]["protocol"] != "ICMP" || g.Rules[0]["ports"] != nil || g.Rules[0]["peerCidr"] != nil ||
		g.Rules[0]["peerGroup"] != nil || g.Rules[0]["description"] != nil {
		t.Fatalf("createSecurityGroup with null fields: %+v", g)
	}
	tcp := map[string]any{"direction": "INBOUND", "protocol": "TCP", "ports": "22", "peerCidr": nil, "peerGroup": "nulls", "description": nil}
	h.GraphQL(t, tn.bob, tn.blue, `mutation($in: UpdateSecurityGroupInput!) { updateSecurityGroup(input: $in) {
  id name description rules { direction protocol ports peerCidr peerGroup description } } }`,
		map[string]any{"in": map[string]any{"id": g.ID, "rules": []any{tcp}}}).OK(t).Into(t, "updateSecurityGroup", &g)
	if len(g.Rules) != 1 || g.Rules[0]["ports"] != "22" || g.Rules[0]["peerGroup"] != "nulls" || g.Rules[0]["peerCidr"] != nil {
		t.Fatalf("updateSecurityGroup with null fields: %+v", g)
	}
}
