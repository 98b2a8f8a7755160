package compute_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
)

// createInGroup creates n VMs named prefix-i in zone z and placement
// group group at once, waits for each, and returns them.
func (e *env) createInGroup(z *vmtest.Zone, prefix, group string, n int) []*compute.VM {
	e.t.Helper()
	ctx := vmtest.Ctx(e.t)
	var wg sync.WaitGroup
	errs := make([]error, n)
	vms := make([]*compute.VM, n)
	for i := range n {
		wg.Go(func() {
			in := e.input(z.Name, fmt.Sprintf("%s-%d", prefix, i))
			in.PlacementGroup = group
			vm, op, err := e.svc.CreateVM(ctx, in)
			if err != nil {
				errs[i] = err
				return
			}
			if last := e.waitQuiet(op.ID); last.State != compute.OpSucceeded {
				errs[i] = fmt.Errorf("create %d: %+v", i, last)
			}
			vms[i] = vm
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			e.t.Fatal(err)
		}
	}
	return vms
}

// pin creates VM name pinned to host of z and waits for it.
func (e *env) pin(z *vmtest.Zone, name, host string) {
	e.t.Helper()
	in := e.input(z.Name, name)
	in.Host = host
	_, op, err := e.svc.CreateVM(vmtest.Ctx(e.t), in)
	if err != nil {
		e.t.Fatal(err)
	}
	if last := e.wait(e.svc, "blue", op.ID); last.State != compute.OpSucceeded {
		e.t.Fatalf("create %s: %+v", name, last)
	}
}

// TestPlacementGroupSpread: three VMs created at once into a SPREAD group
// of a zone of three nodes land on three hosts, though one host is far
// emptier than the others (placement by load alone would put two there);
// a fourth is CAPACITY_EXCEEDED and leaves nothing behind; a move of one
// onto another's host is BAD_USER_INPUT; the group cannot be deleted while
// its VMs are in it, and lists them.
func TestPlacementGroupSpread(t *testing.T) {
	t.Parallel()
	e, z := stagedThreeNodes(t)
	ctx := vmtest.Ctx(t)
	for i, host := range []string{"pve2", "pve2", "pve3", "pve3"} {
		e.pin(z, fmt.Sprintf("load-%d", i), host)
	}
	g, err := e.svc.PlacementGroups().Create(ctx, compute.PlacementGroupInput{VDC: "blue", Name: "db", Zone: "alpha", Policy: compute.PolicySpread})
	if err != nil {
		t.Fatal(err)
	}
	vms := e.createInGroup(z, "db", "db", 3)
	nodes := map[string]string{}
	for _, vm := range vms {
		got, err := e.svc.VM(ctx, "blue", vm.ID)
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := nodes[got.Node]; ok {
			t.Fatalf("%s and %s of SPREAD group db both on %s", got.Name, other, got.Node)
		}
		nodes[got.Node] = got.Name
		pg, err := e.svc.PlacementGroups().OfVM(ctx, "blue", vm.ID)
		if err != nil || pg == nil || pg.Name != "db" {
			t.Fatalf("VM %s's placement group: %+v, %v", vm.Name, pg, err)
		}
	}

	before := e.snapshot()
	in := e.input("alpha", "db-3")
	in.PlacementGroup = "db"
	_, _, err = e.svc.CreateVM(ctx, in)
	if c, _ := code(err); c != apierr.CapacityExceeded || !strings.Contains(err.Error(), "placement group") {
		t.Fatalf("a fourth VM in SPREAD group db: %v (%s), want CAPACITY_EXCEEDED naming the group", err, c)
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Errorf("a refused create changed state:\n%+v\n%+v", before, after)
	}
	if n := len(e.flexMappings(z)); n != 7 {
		t.Errorf("%d IPAM mappings, want the 7 VMs'", n)
	}

	a, err := e.svc.VM(ctx, "blue", vms[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.svc.VM(ctx, "blue", vms[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.MigrateVM(ctx, compute.MigrateInput{VDC: "blue", ID: a.ID, Host: b.Node})
	if c, f := code(err); c != apierr.BadUserInput || f != "input.host" || !strings.Contains(err.Error(), "placement group") {
		t.Fatalf("moving %s onto %s's host: %v (%s %s), want BAD_USER_INPUT on input.host", a.Name, b.Name, err, c, f)
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Errorf("a refused move changed state:\n%+v\n%+v", before, after)
	}

	_, err = e.svc.PlacementGroups().Delete(ctx, "blue", g.ID)
	if c, _ := code(err); c != apierr.Conflict {
		t.Fatalf("deleting a group in use: %v (%s), want CONFLICT", err, c)
	}
	gs, _, err := e.svc.PlacementGroups().List(ctx, "blue")
	if err != nil || len(gs) != 1 || len(gs[0].VMs) != 3 || gs[0].Policy != compute.PolicySpread {
		t.Fatalf("placement groups: %+v, %v; want db with its 3 VMs", gs, err)
	}
	for _, vm := range vms {
		if !slices.Contains(gs[0].VMs, vm.ID) {
			t.Errorf("group db lists %v, not %s", gs[0].VMs, vm.ID)
		}
		if op, err := e.svc.DeleteVM(ctx, "blue", vm.ID); err != nil || op.State != compute.OpSucceeded {
			t.Fatalf("delete %s: %+v, %v", vm.Name, op, err)
		}
	}
	if _, err := e.svc.PlacementGroups().Delete(ctx, "blue", g.ID); err != nil {
		t.Fatalf("deleting the emptied group: %v", err)
	}
}

// TestPlacementGroupPack: VMs of a PACK group land on one host, though
// load alone would spread them.
func TestPlacementGroupPack(t *testing.T) {
	t.Parallel()
	e, z := stagedThreeNodes(t)
	ctx := vmtest.Ctx(t)
	if _, err := e.svc.PlacementGroups().Create(ctx, compute.PlacementGroupInput{VDC: "blue", Name: "cache", Zone: "alpha", Policy: compute.PolicyPack}); err != nil {
		t.Fatal(err)
	}
	e.createInGroup(z, "cache-a", "cache", 1)
	e.createInGroup(z, "cache-b", "cache", 2)
	if hosts := e.hostsOf(z); len(hosts) != 1 {
		t.Fatalf("VMs per node %v: want the PACK group's three on one", hosts)
	}
}

// TestPlacementGroupRefusals: a group of another VDC is NOT_FOUND, one of
// another zone BAD_USER_INPUT on input.placementGroup; a group name taken,
// a bad policy or zone are refused; nothing changes.
func TestPlacementGroupRefusals(t *testing.T) {
	t.Parallel()
	e, _ := stagedThreeNodes(t)
	ctx := vmtest.Ctx(t)
	red, err := e.svc.PlacementGroups().Create(ctx, compute.PlacementGroupInput{VDC: "red", Name: "db", Zone: "alpha", Policy: compute.PolicySpread})
	if err != nil {
		t.Fatal(err)
	}
	other := &catalog.PlacementGroup{}
	other.TypeMeta = catalog.TypeMeta{APIVersion: catalog.APIVersion, Kind: catalog.KindPlacementGroup}
	other.Name, other.VDC, other.Zone, other.Policy = catalog.PlacementGroupName("blue", "far"), "blue", "beta", catalog.PlacementPack
	if _, err := e.store.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	for group, want := range map[string]apierr.Code{"db": apierr.NotFound, "far": apierr.BadUserInput, "Bad Name": apierr.NotFound} {
		in := e.input("alpha", "x")
		in.PlacementGroup = group
		_, _, err := e.svc.CreateVM(ctx, in)
		if c, f := code(err); c != want || f != "input.placementGroup" {
			t.Errorf("create in group %q: %v (%s %s), want %s on input.placementGroup", group, err, c, f, want)
		}
	}
	for _, in := range []compute.PlacementGroupInput{
		{VDC: "red", Name: "db", Zone: "alpha", Policy: compute.PolicyPack},
		{VDC: "blue", Name: "x", Zone: "alpha", Policy: "SCATTER"},
		{VDC: "blue", Name: "x", Zone: "nowhere", Policy: compute.PolicyPack},
		{VDC: "blue", Name: "X_", Zone: "alpha", Policy: compute.PolicyPack},
	} {
		if _, err := e.svc.PlacementGroups().Create(ctx, in); err == nil {
			t.Errorf("create group %+v: no error", in)
		}
	}
	if _, err := e.svc.PlacementGroups().Delete(ctx, "blue", red.ID); err == nil {
		t.Error("blue deleted red's group")
	} else if c, _ := code(err); c != apierr.NotFound {
		t.Errorf("blue deleting red's group: %v (%s), want NOT_FOUND", err, c)
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Errorf("refused requests changed state:\n%+v\n%+v", before, after)
	}
	if gs, _, err := e.svc.PlacementGroups().List(ctx, "blue"); err != nil || len(gs) != 1 || gs[0].Name != "far" {
		t.Errorf("blue's groups: %+v, %v; want far only", gs, err)
	}
}
