package gateways_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/edge/gateways"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// fleet is one zone, alpha (id z-alpha), whose pool fp-prod holds VMs 100
// and 101; down fails every read.
type fleet struct{ down bool }

func (fleet) ZoneName(id string) (string, bool) { return "alpha", id == "z-alpha" }

func (f fleet) PoolVMs(_ context.Context, zoneID, pool string) ([]int, error) {
	if f.down {
		return nil, errors.New("no agent")
	}
	if zoneID == "z-alpha" && pool == tenancy.PoolID("prod") {
		return []int{100, 101}, nil
	}
	return nil, nil
}

func setup(t *testing.T, f fleet) (*gateways.Service, catalog.Store) {
	t.Helper()
	s, err := catalog.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	en := &catalog.ExternalNetwork{}
	en.Name, en.Bridge, en.CIDR, en.Gateway, en.PoolStart, en.PoolEnd = "alpha", "vmbr0", "203.0.113.0/24", "203.0.113.1", "203.0.113.10", "203.0.113.20"
	if _, err := catalog.Create(t.Context(), s, en); err != nil {
		t.Fatal(err)
	}
	v := &catalog.VDC{}
	v.Name, v.Quotas = "prod", catalog.VDCQuotas{VCPUs: 8, MemoryMiB: 8192, StorageGiB: 100, VMs: 4}
	if _, err := catalog.Create(t.Context(), s, v); err != nil {
		t.Fatal(err)
	}
	svc, err := gateways.New(gateways.Config{Store: s, Fleet: f})
	if err != nil {
		t.Fatal(err)
	}
	return svc, s
}

func ptr[T any](v T) *T { return &v }

func wantFault(t *testing.T, what string, err error, kind fault.Kind, field string) {
	t.Helper()
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Kind != kind || fe.Field != field {
		t.Errorf("%s: %v, want a fault of kind %d on %q", what, err, kind, field)
	}
}

func rule(pos *int) gateways.RuleSpec {
	return gateways.RuleSpec{Direction: catalog.DirectionInbound, Protocol: "tcp", Action: "allow", FromPort: ptr(22), Position: pos}
}

// TestFirewallRules: rules go where asked (the end by default, a position
// beyond it refused), bad ports are refused naming the field before
// anything is written, and a deleted rule is gone, a second delete
// NOT_FOUND.
func TestFirewallRules(t *testing.T) {
	t.Parallel()
	svc, _ := setup(t, fleet{})
	ctx := t.Context()
	first, pos, err := svc.CreateFirewallRule(ctx, "prod", gateways.Zone("alpha"), rule(nil))
	if err != nil || pos != 0 {
		t.Fatalf("first rule: %d, %v", pos, err)
	}
	if first.FromPort != 22 || first.ToPort != 22 {
		t.Errorf("one port given: %d-%d, want 22-22", first.FromPort, first.ToPort)
	}
	if _, pos, err := svc.CreateFirewallRule(ctx, "prod", gateways.Zone("alpha"), rule(ptr(0))); err != nil || pos != 0 {
		t.Fatalf("rule at 0: %d, %v", pos, err)
	}
	_, _, err = svc.CreateFirewallRule(ctx, "prod", gateways.Zone("alpha"), rule(ptr(3)))
	wantFault(t, "beyond the end", err, fault.BadInput, "position")
	_, _, err = svc.CreateFirewallRule(ctx, "prod", gateways.Zone("alpha"), rule(ptr(-1)))
	wantFault(t, "below 0", err, fault.BadInput, "position")
	bad := rule(nil)
	bad.FromPort = ptr(0)
	_, _, err = svc.CreateFirewallRule(ctx, "prod", gateways.Zone("alpha"), bad)
	wantFault(t, "port 0", err, fault.BadInput, "fromPort")
	gws, err := svc.List(ctx, "prod")
	if err != nil || len(gws) != 1 || len(gws[0].FirewallRules) != 2 || gws[0].FirewallRules[1].ID != first.ID {
		t.Fatalf("gateways after the creates: %+v, %v", gws, err)
	}
	if err := svc.DeleteFirewallRule(ctx, "prod", first.ID); err != nil {
		t.Fatal(err)
	}
	wantFault(t, "second delete", svc.DeleteFirewallRule(ctx, "prod", first.ID), fault.NotFound, "")
	wantFault(t, "another VDC's", svc.DeleteFirewallRule(ctx, "dev", gws[0].FirewallRules[0].ID), fault.NotFound, "")
}

// TestConcurrentChangesAllLand: changes racing for one gateway retry
// their conditional write until each lands; none is lost.
func TestConcurrentChangesAllLand(t *testing.T) {
	t.Parallel()
	svc, _ := setup(t, fleet{})
	ctx := t.Context()
	if _, _, err := svc.CreateFirewallRule(ctx, "prod", gateways.Zone("alpha"), rule(nil)); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, _, err := svc.CreateFirewallRule(ctx, "prod", gateways.Zone("alpha"), rule(nil)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	gws, err := svc.List(ctx, "prod")
	if err != nil || len(gws) != 1 || len(gws[0].FirewallRules) != n+1 {
		t.Fatalf("after %d racing creates: %+v, %v", n, gws, err)
	}
}

// TestPortForwardsAndOneToOne: a forward or 1:1 address names a VM of the
// VDC (another's is NOT_FOUND, a zone that does not answer
// ZONE_UNAVAILABLE), a public address of the gateway and a port not
// forwarded yet; a deleted 1:1 address goes back to the pool.
func TestPortForwardsAndOneToOne(t *testing.T) {
	t.Parallel()
	svc, s := setup(t, fleet{})
	ctx := t.Context()
	vm := tenancy.VMRef{ZoneID: "z-alpha", VMID: 100}.ID()
	pf := gateways.PortForwardSpec{VM: vm, Protocol: "tcp", PublicPort: 2222, TargetPort: 22}
	got, zoneID, err := svc.CreatePortForward(ctx, "prod", pf)
	if err != nil || zoneID != "z-alpha" || got.VMID != 100 || got.PublicAddress == "" {
		t.Fatalf("forward: %+v in %s, %v", got, zoneID, err)
	}
	_, _, err = svc.CreatePortForward(ctx, "prod", pf)
	wantFault(t, "the same port again", err, fault.BadInput, "publicPort")
	other := pf
	other.PublicPort, other.PublicAddress = 2223, ptr("203.0.113.19")
	_, _, err = svc.CreatePortForward(ctx, "prod", other)
	wantFault(t, "another public address", err, fault.BadInput, "publicAddress")
	other.PublicAddress = ptr("198.51.100.1")
	_, _, err = svc.CreatePortForward(ctx, "prod", other)
	wantFault(t, "outside the pool", err, fault.BadInput, "publicAddress")
	other.PublicAddress, other.VM = nil, tenancy.VMRef{ZoneID: "z-alpha", VMID: 900}.ID()
	_, _, err = svc.CreatePortForward(ctx, "prod", other)
	wantFault(t, "a VM of no pool", err, fault.NotFound, "")
	other.TargetPort = 0
	_, _, err = svc.CreatePortForward(ctx, "prod", other)
	wantFault(t, "target port 0", err, fault.BadInput, "targetPort")

	down, _ := setup(t, fleet{down: true})
	_, _, err = down.CreatePortForward(ctx, "prod", pf)
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Kind != fault.ZoneUnavailable || fe.Zone != "alpha" {
		t.Errorf("zone down: %v", err)
	}

	o, _, err := svc.CreateOneToOne(ctx, "prod", vm, nil)
	if err != nil {
		t.Fatal(err)
	}
	held := func() int {
		en, err := catalog.Get[*catalog.ExternalNetwork](ctx, s, "alpha")
		if err != nil {
			t.Fatal(err)
		}
		return len(en.Status.Allocations)
	}
	before := held()
	if err := svc.DeleteOneToOne(ctx, "prod", o.ID); err != nil {
		t.Fatal(err)
	}
	if after := held(); after != before-1 {
		t.Errorf("allocations %d after deleting a 1:1 address, want %d", after, before-1)
	}
	wantFault(t, "second delete", svc.DeleteOneToOne(ctx, "prod", o.ID), fault.NotFound, "")
}

// TestLimitsAndDelete: limits out of range are refused naming the field;
// a deleted gateway gives its address back, a second delete NOT_FOUND.
func TestLimitsAndDelete(t *testing.T) {
	t.Parallel()
	svc, _ := setup(t, fleet{})
	ctx := t.Context()
	_, err := svc.SetLimits(ctx, "prod", gateways.Zone("alpha"), ptr(-1), nil)
	wantFault(t, "negative egress", err, fault.BadInput, "egressMbps")
	g, err := svc.SetLimits(ctx, "prod", gateways.Zone("alpha"), ptr(100), ptr(50))
	if err != nil || g.EgressMbps != 100 || g.IngressMbps != 50 {
		t.Fatalf("limits: %+v, %v", g, err)
	}
	released, err := svc.Delete(ctx, "prod", "alpha")
	if err != nil || len(released) != 1 || released[0].String() != g.PublicAddress {
		t.Fatalf("delete: %v, %v (gateway address %s)", released, err, g.PublicAddress)
	}
	_, err = svc.Delete(ctx, "prod", "alpha")
	wantFault(t, "second delete", err, fault.NotFound, "")
	if st := svc.State(ctx, "z-alpha", g); st.Status != gateways.Pending {
		t.Errorf("state without a syncer: %+v", st)
	}
}
