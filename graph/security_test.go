package graph_test

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestTenantAttacks replays what an attack on the dev stack as a tenant
// found, through the API of the full harness: each request is refused with
// the code a client can act on and changes nothing it must not.
func TestTenantAttacks(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "attacks")
	var redNet struct{ ID string }
	h.GraphQL(t, tn.alice, tn.red, `mutation { createNetwork(input: {name: "lan", zone: "alpha", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`, nil).
		OK(t).Into(t, "createNetwork", &redNet)
	in := func(name, network string) map[string]any {
		return map[string]any{"in": map[string]any{"name": name, "zone": "alpha", "image": "tiny", "computeProfile": "small",
			"storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": network}},
			"sshKeys": []string{sshKey}, "user": "ops"}}
	}
	create := func(user, vdc, name, network string) string {
		var created struct{ Operation gqlOp }
		h.GraphQL(t, user, vdc, createVM, in(name, network)).OK(t).Into(t, "createVM", &created)
		return awaitCreate(t, h, user, vdc, created.Operation.ID)
	}
	blueVM := create(tn.bob, tn.blue, "web", tn.net)
	redVM := create(tn.alice, tn.red, "db", redNet.ID)

	t.Run("forged operation ids", func(t *testing.T) {
		// red stops its VM; bob wraps that task in his own VM's id.
		var stop gqlOp
		h.GraphQL(t, tn.alice, tn.red, `mutation($id: ID!) { stopVM(id: $id) { id } }`, map[string]any{"id": redVM}).OK(t).Into(t, "stopVM", &stop)
		raw, _ := base64.RawURLEncoding.DecodeString(stop.ID)
		upid := strings.SplitN(string(raw), "/", 5)[4]
		ref, err := tenancy.ParseVMID(blueVM)
		if err != nil {
			t.Fatal(err)
		}
		forged := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "t/%s/%d/STOP_VM/%s", ref.ZoneID, ref.VMID, upid))
		if r := h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { operation(id: $id) { kind state step error } }`, map[string]any{"id": forged}); r.Code(t) != "NOT_FOUND" {
			t.Errorf("query of red's task in blue's VM id: %s", r.Raw)
		}
		msgs := subscribe(t, h.GraphQLURL(), h.Token(t, tn.bob), tn.blue, `subscription { operation(id: "`+forged+`") { kind state step error } }`)
		if len(msgs) != 1 || !strings.Contains(string(msgs[0]), `"NOT_FOUND"`) || strings.Contains(string(msgs[0]), "qmstop") {
			t.Errorf("subscription to red's task in blue's VM id: %s", msgs)
		}
	})

	t.Run("deleteVDC", func(t *testing.T) {
		deleteVDC := `mutation($n: String!) { deleteVDC(name: $n) { name } }`
		blue := map[string]any{"n": tn.blue}
		refused := func(what string) {
			t.Helper()
			r := h.GraphQL(t, "admin", "", deleteVDC, blue)
			if r.Code(t) != "CONFLICT" || !strings.Contains(r.Errors[0].Message, what) {
				t.Errorf("deleteVDC with %s: %s", what, r.Raw)
			}
			h.GraphQL(t, tn.bob, tn.blue, `{ currentVDC { name } }`, nil).OK(t)
		}
		refused("1 VM")
		h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { deleteVM(id: $id) { state } }`, map[string]any{"id": blueVM}).OK(t)
		refused("1 network")
		h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { deleteNetwork(id: $id) { id } }`, map[string]any{"id": tn.net}).OK(t)
		h.GraphQL(t, "admin", "", deleteVDC, blue).OK(t)

		// Its pool and SDN zone are gone from Proxmox; red's are not.
		c := h.Clusters[0].Proxmox(t)
		ctx := t.Context()
		var pools []struct{ PoolID string }
		if err := c.Get(ctx, "/pools", &pools); err != nil {
			t.Fatal(err)
		}
		var zones []struct{ Zone string }
		if err := c.Get(ctx, "/cluster/sdn/zones", &zones); err != nil {
			t.Fatal(err)
		}
		hasPool := func(vdc string) bool {
			return slices.ContainsFunc(pools, func(p struct{ PoolID string }) bool { return p.PoolID == tenancy.PoolID(vdc) })
		}
		hasZone := func(vdc string) bool {
			return slices.ContainsFunc(zones, func(z struct{ Zone string }) bool { return z.Zone == tenancy.SDNZoneID(vdc) })
		}
		if hasPool(tn.blue) || hasZone(tn.blue) || !hasPool(tn.red) || !hasZone(tn.red) {
			t.Errorf("after deleteVDC %s: pools %v, SDN zones %v", tn.blue, pools, zones)
		}
	})
}
