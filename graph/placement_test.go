package graph_test

import (
	"strings"
	"testing"
)

// TestCreateVMPlacement: createVM's host is an ADMIN's to pin (a MEMBER
// setting it is FORBIDDEN on input.host; BAD_USER_INPUT there is a host the zone does
// not have); a VM no host can hold is CAPACITY_EXCEEDED; an admin's pin
// on a host that can take the VM is honoured.
func TestCreateVMPlacement(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "placement")
	h.GraphQL(t, "admin", "", `mutation { createComputeProfile(input: {name: "placement-huge", vcpus: 2, memoryMiB: 100000}) { name } }`, nil).OK(t)
	in := func(host any, profile string) map[string]any {
		vm := map[string]any{"name": "pinned", "zone": "alpha", "image": "tiny", "computeProfile": profile,
			"storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": tn.net}}, "user": "ops"}
		if host != nil {
			vm["host"] = host
		}
		return map[string]any{"in": vm}
	}
	for _, c := range []struct {
		name, user string
		in         map[string]any
		code, why  string
	}{
		{"member pins", tn.bob, in("pve1", "small"), "FORBIDDEN", "only an ADMIN"},
		{"unknown host", tn.olga, in("pve9", "small"), "BAD_USER_INPUT", `no host "pve9"`},
		{"too big for the pinned host", tn.olga, in("pve1", "placement-huge"), "BAD_USER_INPUT", "not enough free memory"},
		{"too big for the zone", tn.bob, in(nil, "placement-huge"), "CAPACITY_EXCEEDED", "not enough free memory"},
	} {
		r := h.GraphQL(t, c.user, tn.blue, createVM, c.in)
		if r.Code(t) != c.code || !strings.Contains(r.Errors[0].Message, c.why) {
			t.Errorf("%s: %s, want %s saying %q", c.name, r.Raw, c.code, c.why)
			continue
		}
		if f := r.Errors[0].Extensions["field"]; c.code != "CAPACITY_EXCEEDED" && f != "input.host" {
			t.Errorf("%s: field %v, want input.host", c.name, f)
		}
	}
	var vms struct{ TotalCount int }
	h.GraphQL(t, tn.olga, tn.blue, `{ vmsConnection { totalCount } }`, nil).OK(t).Into(t, "vmsConnection", &vms)
	if vms.TotalCount != 0 {
		t.Errorf("refused creates left %d VMs", vms.TotalCount)
	}
	var created struct{ Operation gqlOp }
	h.GraphQL(t, tn.olga, tn.blue, createVM, in("pve1", "small")).OK(t).Into(t, "createVM", &created)
	awaitCreate(t, h, tn.olga, tn.blue, created.Operation.ID)
}
