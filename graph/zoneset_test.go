package graph_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestVDCReadsFollowItsZones: a VDC's zone set names the zones it has
// resources in (a network's create adds its zone first), reads of its VMs,
// networks and usage ask only those zones (a third zone whose agent is
// stopped answers no error to them), a set that is lost is rebuilt from
// Proxmox by the next read, and another VDC's zones never join it.
func TestVDCReadsFollowItsZones(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithAPI(meshtest.APISpec{}), meshtest.WithClusters(
		meshtest.ClusterSpec{Name: "alpha"}, meshtest.ClusterSpec{Name: "beta"}, meshtest.ClusterSpec{Name: "gamma"}))
	h.WaitOnline(t, 60*time.Second)
	ctx := t.Context()
	st := h.Catalog(t)
	alpha, beta, gamma := h.Zone(t, h.Clusters[0]).ID, h.Zone(t, h.Clusters[1]).ID, h.Zone(t, h.Clusters[2]).ID
	zonesOf := func(vdc string) ([]string, bool) {
		t.Helper()
		v, err := catalog.Get[*catalog.VDC](ctx, st, vdc)
		if err != nil {
			t.Fatal(err)
		}
		return v.Status.Zones, v.Status.ZonesComplete
	}
	sorted := func(zs ...string) []string { slices.Sort(zs); return zs }

	// red's first read finds nothing anywhere: its set is rebuilt, empty.
	h.GraphQL(t, "alice", "red", `{ vms { id } }`, nil).OK(t)
	if zs, ok := zonesOf("red"); len(zs) != 0 || !ok {
		t.Fatalf("red's zone set after its first read: %v complete %v, want empty and complete", zs, ok)
	}
	// A network in alpha and beta each: the set grows with them.
	createNetworks(t, h, "alice", "red", "alpha", "beta")
	if zs, _ := zonesOf("red"); !slices.Equal(zs, sorted(alpha, beta)) {
		t.Fatalf("red's zones %v, want alpha and beta %v", zs, sorted(alpha, beta))
	}
	// blue has a network in gamma only: it never shows in red's set.
	h.GraphQL(t, "bob", "blue", `{ vms { id } }`, nil).OK(t)
	createNetworks(t, h, "bob", "blue", "gamma")
	if zs, _ := zonesOf("blue"); !slices.Equal(zs, []string{gamma}) {
		t.Fatalf("blue's zones %v, want gamma %s", zs, gamma)
	}
	if zs, _ := zonesOf("red"); slices.Contains(zs, gamma) {
		t.Fatalf("blue's zone leaked into red's set: %v", zs)
	}
	// red's guests in alpha and beta, as its creates leave them.
	for _, c := range h.Clusters[:2] {
		addPoolGuest(t, ctx, c.Proxmox(t), "red", 100)
	}

	// Red's set is lost: the next read rebuilds it from Proxmox.
	v, err := catalog.Get[*catalog.VDC](ctx, st, "red")
	if err != nil {
		t.Fatal(err)
	}
	v.Status.Zones, v.Status.ZonesComplete = nil, false
	if _, err := catalog.Update(ctx, st, v); err != nil {
		t.Fatal(err)
	}
	var vms []struct{ ID string }
	h.GraphQL(t, "alice", "red", `{ vms { id } }`, nil).OK(t).Into(t, "vms", &vms)
	if len(vms) != 2 {
		t.Fatalf("red's VMs while its set is rebuilt: %v, want 2", vms)
	}
	if zs, ok := zonesOf("red"); !slices.Equal(zs, sorted(alpha, beta)) || !ok {
		t.Fatalf("red's rebuilt zones %v complete %v, want alpha and beta %v", zs, ok, sorted(alpha, beta))
	}

	// gamma goes down: red's reads do not ask it, so none fails.
	for _, a := range h.Clusters[2].Agents {
		if err := a.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	var nets []struct{ ID string }
	r := h.GraphQL(t, "alice", "red", `{ vms { id } networks { id } currentVDC { usage { vms } } }`, nil).OK(t)
	r.Into(t, "vms", &vms)
	r.Into(t, "networks", &nets)
	if len(vms) != 2 || len(nets) != 2 {
		t.Fatalf("red with gamma down: %d VMs and %d networks, want 2 and 2", len(vms), len(nets))
	}
	// blue lives in gamma: its read says so.
	if r := h.GraphQL(t, "bob", "blue", `{ networks { id } }`, nil); !r.HasCode("ZONE_UNAVAILABLE") {
		t.Fatalf("blue's networks with gamma down: %v, want ZONE_UNAVAILABLE", r.Codes())
	}
}

// addPoolGuest creates the guest vmid of vdc on node pve1 of the zone of
// c, tagged and in the VDC's pool as flexplane's creates leave it.
func addPoolGuest(t *testing.T, ctx context.Context, c *proxmox.Client, vdc string, vmid int) {
	t.Helper()
	if err := c.Post(ctx, "/pools", map[string]any{"poolid": tenancy.PoolID(vdc)}, nil); err != nil && !pveapi.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := pveapi.Run(ctx, c, "POST", "/nodes/pve1/qemu", map[string]any{
		"vmid": vmid, "name": vdc + "-vm", "cores": 1, "memory": 512, "tags": tenancy.GuestTags(vdc), "pool": tenancy.PoolID(vdc),
	}); err != nil {
		t.Fatal(err)
	}
}
