package compute_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// hostsOf counts the VMs (flexplane guests of VDC blue, templates aside)
// on each node of z.
func (e *env) hostsOf(z *vmtest.Zone) map[string]int {
	e.t.Helper()
	gs, err := pveapi.Guests(vmtest.Ctx(e.t), z.Client)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int{}
	for _, g := range gs {
		if g.Template == 0 && g.HasTag(tenancy.VDCTag("blue")) {
			out[g.Node]++
		}
	}
	return out
}

// createAll creates n VMs named prefix-i in zone z at once and waits for
// each to run.
func (e *env) createAll(z *vmtest.Zone, prefix string, n int) {
	e.t.Helper()
	e.createOn(z, "", prefix, n)
}

// waitQuiet is wait from any goroutine: it reports instead of failing.
func (e *env) waitQuiet(id string) compute.Operation {
	ch, err := e.svc.Watch(vmtest.Ctx(e.t), "blue", id)
	if err != nil {
		return compute.Operation{Error: err.Error()}
	}
	var last compute.Operation
	for op := range ch {
		last = op
	}
	return last
}

// stagedThreeNodes is an env of one zone "alpha" of three nodes, the
// image staged there.
func stagedThreeNodes(t *testing.T) (*env, *vmtest.Zone) {
	t.Helper()
	e := newEnvOf(t, 3, bigQuota, "alpha")
	e.stage(e.zones[0])
	return e, e.zones[0]
}

// TestPlacementSpreadsCreates creates nine VMs at once in a zone of three
// nodes: every node takes some, none more than four (without placement
// all nine landed on the template's node).
func TestPlacementSpreadsCreates(t *testing.T) {
	t.Parallel()
	e, z := stagedThreeNodes(t)
	e.createAll(z, "web", 9)
	hosts := e.hostsOf(z)
	if len(hosts) != 3 {
		t.Fatalf("VMs per node %v: want all three nodes used", hosts)
	}
	for n, c := range hosts {
		if c > 4 {
			t.Errorf("node %s holds %d of 9 VMs (%v)", n, c, hosts)
		}
	}
}

// TestPlacementPinnedHost: a pinned host is honoured even when it is the
// most loaded; an unknown or offline host is BAD_USER_INPUT on host.
func TestPlacementPinnedHost(t *testing.T) {
	t.Parallel()
	e, z := stagedThreeNodes(t)
	ctx := vmtest.Ctx(t)
	for i := range 2 {
		in := e.input("alpha", fmt.Sprintf("pinned-%d", i))
		in.Host = "pve2"
		if i == 1 {
			in.Host = tenancy.HostRef{ZoneID: z.Name, Node: "pve2"}.ID()
		}
		_, op, err := e.svc.CreateVM(ctx, in)
		if err != nil {
			t.Fatalf("pinned create %d: %v", i, err)
		}
		if last := e.wait(e.svc, "blue", op.ID); last.State != compute.OpSucceeded {
			t.Fatalf("pinned create %d: %+v", i, last)
		}
	}
	if hosts := e.hostsOf(z); hosts["pve2"] != 2 || len(hosts) != 1 {
		t.Fatalf("VMs per node %v: want both on pve2", hosts)
	}
	z.Sim.SetNodeOnline("pve3", false)
	before := e.snapshot()
	for host, why := range map[string]string{
		"pve9": "no host", "pve3": "offline",
		tenancy.HostRef{ZoneID: "beta", Node: "pve1"}.ID(): "not in zone",
	} {
		in := e.input("alpha", "refused")
		in.Host = host
		_, _, err := e.svc.CreateVM(ctx, in)
		if c, f := code(err); c != apierr.BadUserInput || f != "input.host" || !strings.Contains(err.Error(), why) {
			t.Errorf("host %s: %v (%s %s), want BAD_USER_INPUT on input.host saying %q", host, err, c, f, why)
		}
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Errorf("a refused pin changed state:\n%+v\n%+v", before, after)
	}
}

// TestPlacementCapacityExceeded: a VM no host can hold is
// CAPACITY_EXCEEDED, and nothing is left behind (no guest, no address, no
// quota reservation, the VDC unwritten); the zone's memory overcommit
// ratio (its ZonePolicy) then lets it in.
func TestPlacementCapacityExceeded(t *testing.T) {
	t.Parallel()
	e, z := stagedThreeNodes(t)
	ctx := vmtest.Ctx(t)
	// Each simulated node has 64 GiB.
	huge := &catalog.ComputeProfile{ObjectMeta: catalog.ObjectMeta{Name: "huge"}, ComputeProfileSpec: catalog.ComputeProfileSpec{VCPUs: 2, MemoryMiB: 80 << 10}}
	huge.TypeMeta = catalog.TypeMeta{APIVersion: catalog.APIVersion, Kind: catalog.KindComputeProfile}
	if _, err := e.store.Create(ctx, huge); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	in := e.input("alpha", "huge")
	in.ComputeProfile = "huge"
	_, _, err := e.svc.CreateVM(ctx, in)
	if c, _ := code(err); c != apierr.CapacityExceeded || !strings.Contains(err.Error(), "not enough free memory") {
		t.Fatalf("huge VM: %v (%s), want CAPACITY_EXCEEDED for memory", err, c)
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Errorf("a refused create changed state:\n%+v\n%+v", before, after)
	}
	if n := len(e.flexMappings(z)); n != 0 {
		t.Errorf("%d IPAM mappings left", n)
	}
	pol := &catalog.ZonePolicy{ObjectMeta: catalog.ObjectMeta{Name: "alpha"}, ZonePolicySpec: catalog.ZonePolicySpec{MemoryOvercommitPercent: 150}}
	pol.TypeMeta = catalog.TypeMeta{APIVersion: catalog.APIVersion, Kind: catalog.KindZonePolicy}
	if _, err := e.store.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	_, op, err := e.svc.CreateVM(ctx, in)
	if err != nil {
		t.Fatalf("huge VM with memory overcommitted 150%%: %v", err)
	}
	if last := e.wait(e.svc, "blue", op.ID); last.State != compute.OpSucceeded {
		t.Fatalf("huge VM: %+v", last)
	}
}

// TestPlacementSkipsOfflineNode: a node that is offline never takes a
// VM.
func TestPlacementSkipsOfflineNode(t *testing.T) {
	t.Parallel()
	e, z := stagedThreeNodes(t)
	z.Sim.SetNodeOnline("pve2", false)
	e.createAll(z, "db", 4)
	hosts := e.hostsOf(z)
	if hosts["pve2"] != 0 || hosts["pve1"] != 2 || hosts["pve3"] != 2 {
		t.Fatalf("VMs per node %v: want two on pve1 and pve3, none on offline pve2", hosts)
	}
}
