package compute_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/compute/images"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestHAVMRecovered: in a zone of three nodes whose HA manager fences a
// node offline for 300 ms, a VM on shared storage is highly available by
// default, one created with NoHA is not; when their host goes offline the
// HA VM is UNKNOWN, then RUNNING on another host, while the other stays
// UNKNOWN on it. Two HA VMs of a SPREAD
// placement group are an HA rule that keeps them apart.
func TestHAVMRecovered(t *testing.T) {
	t.Parallel()
	// The fence delay leaves the Recover passes (every 20 ms) time to see
	// the VM on its failed host.
	e, z := haZone(t, pvesim.Timing{FenceDelay: 300 * time.Millisecond})
	ctx := vmtest.Ctx(t)
	if _, err := e.svc.PlacementGroups().Create(ctx, compute.PlacementGroupInput{VDC: "blue", Name: "apart", Zone: "alpha", Policy: compute.PolicySpread}); err != nil {
		t.Fatal(err)
	}
	create := func(name, host, storage, group string, noHA bool) *compute.VM {
		in := e.input("alpha", name)
		in.Host, in.StorageProfile, in.NoHA, in.PlacementGroup = host, storage, noHA, group
		vm, op, err := e.svc.CreateVM(ctx, in)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if last := e.wait(e.svc, "blue", op.ID); last.State != compute.OpSucceeded {
			t.Fatalf("create %s: %+v", name, last)
		}
		if vm == nil {
			t.Fatalf("create %s: no VM (the image was not staged)", name)
		}
		got, err := e.svc.VM(ctx, "blue", vm.ID)
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		return got
	}
	ha := create("ha", "pve3", "nfs", "apart", false)
	peer := create("peer", "pve2", "nfs", "apart", false)
	noHA := create("noha", "pve3", "nfs", "", true)
	for _, c := range []struct {
		vm   *compute.VM
		want bool
	}{{ha, true}, {peer, true}, {noHA, false}} {
		if c.vm.HighAvailability != c.want || c.vm.Status != compute.StatusRunning {
			t.Errorf("VM %s: highly available %v, %s; want %v, RUNNING", c.vm.Name, c.vm.HighAvailability, c.vm.Status, c.want)
		}
	}
	var rules []map[string]any
	if err := z.Client.Get(ctx, "/cluster/ha/rules?"+url.Values{"type": {"resource-affinity"}}.Encode(), &rules); err != nil {
		t.Fatal(err)
	}
	if len(rules) != 1 || rules[0]["affinity"] != "negative" ||
		rules[0]["resources"] != haSIDs(ha, peer) {
		t.Errorf("HA rules %v: want the group's two VMs apart", rules)
	}

	// A service whose Recover passes tell the recoveries they see.
	told := make(chan compute.HARecovery, 10)
	cfg := e.cfg
	cfg.RecoverInterval = 20 * time.Millisecond
	cfg.HARecovered = func(_ context.Context, r compute.HARecovery) { told <- r }
	runService(t, e.newService(cfg))
	z.Sim.SetNodeOnline("pve3", false)
	// The VMs' state as every reader maps it (pveapi's State): a VM of an
	// offline host is UNKNOWN, and stays so while Proxmox recovers it.
	state := func(name string) (string, pveapi.GuestState) {
		g := guestsOf(t, z)[name]
		return g.Node, g.State(false)
	}
	if _, st := state("ha"); st != pveapi.StateUnknown {
		t.Errorf("the HA VM on its offline host: %s, want UNKNOWN", st)
	}
	poll.Until(t, 20*time.Second, "the HA VM running on another host", func() error {
		node, st := state("ha")
		if st != pveapi.StateRunning || node == "pve3" {
			return fmt.Errorf("VM on %s, %s", node, st)
		}
		if node == peer.Node {
			t.Errorf("recovered onto %s, its SPREAD peer's host", node)
		}
		return nil
	})
	if node, st := state("noha"); st != pveapi.StateUnknown || node != "pve3" {
		t.Errorf("the VM out of HA: %s on %s, want UNKNOWN on pve3", st, node)
	}
	vm, err := e.svc.VM(ctx, "blue", ha.ID)
	if err != nil || vm.Status != compute.StatusRunning || !vm.HighAvailability {
		t.Errorf("the recovered VM: %+v %v", vm, err)
	}
	select {
	case r := <-told:
		if r.VM != ha.ID || r.VDC != "blue" || r.Zone != "alpha" || r.From != "pve3" || r.To != vm.Node {
			t.Errorf("recovery told: %+v, want %s from pve3 to %s", r, ha.ID, vm.Node)
		}
	case <-ctx.Done():
		t.Error("the recovery was not told")
	}
}

// haZone is an environment of one zone "alpha" of three nodes timed by
// timing, with the storage profile "nfs" of the shared storage, where the
// image is staged.
func haZone(t testing.TB, timing pvesim.Timing) (*env, *vmtest.Zone) {
	t.Helper()
	e := newEnvTimed(t, 3, timing, bigQuota, "alpha")
	z := e.zones[0]
	ctx := vmtest.Ctx(t)
	nfs := &catalog.StorageProfile{ObjectMeta: catalog.ObjectMeta{Name: "nfs"},
		StorageProfileSpec: catalog.StorageProfileSpec{Tier: "ssd", Pools: []catalog.ZonePool{{Zone: "alpha", Pool: "shared"}}}}
	if _, err := catalog.Create(ctx, e.store, nfs); err != nil {
		t.Fatal(err)
	}
	img, err := catalog.Get[*catalog.Image](ctx, e.store, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Images().Stager().Ensure(ctx, images.Target{Zone: z.Name, Client: z.Client, Storages: []string{"shared"}}, img); err != nil {
		t.Fatalf("stage on shared storage: %v", err)
	}
	return e, z
}

// BenchmarkHARecovery creates 6 HA VMs on one host of a zone of three
// whose HA manager fences a node offline for 2 s (starts taking 500 ms),
// takes the host offline and waits until every one of them is RUNNING on
// another host. It reports that time over the fence delay (at most 1.3)
// and the VMs recovered (6).
func BenchmarkHARecovery(b *testing.B) {
	const vms, delay = 6, 2 * time.Second
	for b.Loop() {
		e, z := haZone(b, pvesim.Timing{FenceDelay: delay, Start: 500 * time.Millisecond})
		ctx := vmtest.Ctx(b)
		for i := range vms {
			in := e.input("alpha", fmt.Sprintf("ha-%d", i))
			in.Host, in.StorageProfile = "pve3", "nfs"
			_, op, err := e.svc.CreateVM(ctx, in)
			if err != nil {
				b.Fatal(err)
			}
			if last := e.waitQuiet(op.ID); last.State != compute.OpSucceeded {
				b.Fatalf("create %d: %+v", i, last)
			}
		}
		start := time.Now()
		z.Sim.SetNodeOnline("pve3", false)
		recovered := 0
		poll.Until(b, 10*delay, "every HA VM running on another host", func() error {
			recovered = 0
			for _, g := range guestsOf(b, z) {
				if g.Node != "pve3" && g.State(false) == pveapi.StateRunning {
					recovered++
				}
			}
			if recovered < vms {
				return fmt.Errorf("%d of %d recovered", recovered, vms)
			}
			return nil
		})
		took := time.Since(start)
		b.ReportMetric(took.Seconds()/delay.Seconds(), "recovery/fence-delay")
		b.ReportMetric(float64(recovered), "vms-recovered")
	}
}

// haSIDs is the resources of an HA rule of vms, as Proxmox lists them.
func haSIDs(vms ...*compute.VM) string {
	var out []string
	for _, vm := range vms {
		out = append(out, "vm:"+strconv.Itoa(vm.Ref.VMID))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// TestHAActionsWaitForTheManager: Proxmox's hastart, hastop and hamigrate
// tasks end once the request is queued to the HA manager, which acts on
// its next cycle (here 200 ms later); a create of an HA VM waits for the
// manager to start it (a start of 500 ms, as the dev stack's take seconds)
// rather than asking again; a stop, start or migration of an HA
// VM is done only once the VM is stopped, running or on its new host; one
// the manager does not do fails after Config.HARequestTimeout; a delete of
// the running HA VM waits for the manager to stop it.
func TestHAActionsWaitForTheManager(t *testing.T) {
	t.Parallel()
	e, z := haZone(t, pvesim.Timing{HACycle: 200 * time.Millisecond, Start: 500 * time.Millisecond})
	ctx := vmtest.Ctx(t)
	in := e.input("alpha", "managed")
	in.Host, in.StorageProfile = "pve1", "nfs"
	vm, op, err := e.svc.CreateVM(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	e.waitTask(op)
	guest := func() pveapi.Resource { return guestsOf(t, z)["managed"] }
	poll.True(t, 20*time.Second, "the HA VM running", func() bool { g := guest(); return g.Status == "running" && g.HAState == "started" })
	for _, c := range []struct {
		act          func() (*compute.Operation, error)
		step, status string
		node         string
	}{
		{func() (*compute.Operation, error) { return e.svc.StopVM(ctx, "blue", vm.ID) }, "hastop", "stopped", "pve1"},
		{func() (*compute.Operation, error) { return e.svc.StartVM(ctx, "blue", vm.ID) }, "hastart", "running", "pve1"},
		{func() (*compute.Operation, error) {
			return e.svc.MigrateVM(ctx, compute.MigrateInput{VDC: "blue", ID: vm.ID, Host: "pve2"})
		}, "hamigrate", "running", "pve2"},
	} {
		op, err := c.act()
		if err != nil {
			t.Fatalf("%s: %v", c.step, err)
		}
		if op.Step != c.step {
			t.Errorf("the operation's step %q, want %q", op.Step, c.step)
		}
		e.waitTask(op)
		if g := guest(); g.Status != c.status || g.Node != c.node || g.Lock != "" {
			t.Errorf("after the %s operation succeeded: the VM %s on %s (lock %q), want %s on %s", c.step, g.Status, g.Node, g.Lock, c.status, c.node)
		}
	}

	// A migration the manager does not do (a strict node-affinity rule of
	// the VM's names only pve2) fails after the deadline, saying so.
	if _, err := pveapi.Run(ctx, z.Client, "POST", "/cluster/ha/rules", map[string]any{"rule": "pinned", "type": "node-affinity",
		"resources": haSIDs(vm), "nodes": "pve2", "strict": 1}); err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.HARequestTimeout = time.Second
	svc := e.newService(cfg)
	op, err = svc.MigrateVM(ctx, compute.MigrateInput{VDC: "blue", ID: vm.ID, Host: "pve3"})
	if err != nil {
		t.Fatal(err)
	}
	last := e.wait(svc, "blue", op.ID)
	if last.State != compute.OpFailed || !strings.Contains(last.Error, "HA manager did not move the VM to pve3 within 1s") {
		t.Errorf("a migration the HA manager does not do: %+v", last)
	}
	if g := guest(); g.Node != "pve2" {
		t.Errorf("the VM moved to %s", g.Node)
	}

	// A delete of the running HA VM stops it through the manager first.
	del, err := e.svc.DeleteVM(ctx, "blue", vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.waitTask(del)
	if g, ok := guestsOf(t, z)["managed"]; ok {
		t.Errorf("the deleted HA VM is still there: %+v", g)
	}
}

// TestMaintenanceExcludedForHA: a host in maintenance is left out of an
// HA node-affinity rule of the zone's HA VMs, so that Proxmox's HA manager
// moves the HA VM on it away (the drain waits for it) and recovers a
// failed host's HA VM onto another host, though the host in maintenance
// is the least loaded; the rule goes when maintenance ends.
func TestMaintenanceExcludedForHA(t *testing.T) {
	t.Parallel()
	e, z := haZone(t, pvesim.Timing{FenceDelay: 300 * time.Millisecond, HACycle: 100 * time.Millisecond})
	ctx := vmtest.Ctx(t)
	create := func(name, host string) *compute.VM {
		in := e.input("alpha", name)
		in.Host, in.StorageProfile = host, "nfs"
		vm, op, err := e.svc.CreateVM(ctx, in)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		e.waitTask(op)
		return vm
	}
	keep, moved := create("keep", "pve3"), create("moved", "pve1")
	runService(t, e.svc)
	pve1 := tenancy.HostRef{ZoneID: z.Name, Node: "pve1"}.ID()
	if _, err := e.svc.Hosts().SetMaintenance(ctx, pve1, true); err != nil {
		t.Fatal(err)
	}
	rule := func() map[string]any {
		var rules []map[string]any
		if err := z.Client.Get(ctx, "/cluster/ha/rules?"+url.Values{"type": {"node-affinity"}}.Encode(), &rules); err != nil {
			t.Fatal(err)
		}
		if len(rules) == 0 {
			return nil
		}
		return rules[0]
	}
	if r := rule(); r == nil || r["nodes"] != "pve2,pve3" || r["resources"] != haSIDs(keep, moved) || fmt.Sprint(r["strict"]) != "1" {
		t.Errorf("the maintenance rule: %v, want %s strict on pve2,pve3", r, haSIDs(keep, moved))
	}
	waitState(t, e.svc, pve1, compute.MaintenanceDone)
	if g := guestsOf(t, z)["moved"]; g.Node == "pve1" || g.Status != "running" {
		t.Errorf("the HA VM of the host in maintenance: %s on %s", g.Status, g.Node)
	}

	z.Sim.SetNodeOnline("pve3", false)
	poll.Until(t, 20*time.Second, "the HA VM recovered", func() error {
		g := guestsOf(t, z)["keep"]
		if g.Node == "pve3" || g.State(false) != pveapi.StateRunning {
			return fmt.Errorf("VM on %s, %s", g.Node, g.State(false))
		}
		return nil
	})
	if g := guestsOf(t, z)["keep"]; g.Node == "pve1" {
		t.Error("the HA VM was recovered onto the host in maintenance")
	}

	if _, err := e.svc.Hosts().SetMaintenance(ctx, pve1, false); err != nil {
		t.Fatal(err)
	}
	if r := rule(); r != nil {
		t.Errorf("the maintenance rule after maintenance: %v", r)
	}
}
