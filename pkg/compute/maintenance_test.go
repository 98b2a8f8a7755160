package compute_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// createOn creates n VMs named prefix-i pinned to host ("" for any) at
// once and waits for each to run.
func (e *env) createOn(z *vmtest.Zone, host, prefix string, n int) {
	e.t.Helper()
	ctx := vmtest.Ctx(e.t)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			in := e.input(z.Name, fmt.Sprintf("%s-%d", prefix, i))
			in.Host = host
			_, op, err := e.svc.CreateVM(ctx, in)
			if err != nil {
				errs[i] = err
				return
			}
			if last := e.waitQuiet(op.ID); last.State != compute.OpSucceeded {
				errs[i] = fmt.Errorf("create %d: %+v", i, last)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.t.Fatal(err)
	}
}

// codeOf is the API's code for err.
func codeOf(err error) apierr.Code { c, _ := code(err); return c }

// runService runs svc's background work (Run) until the returned stop is
// called (or the test ends).
func runService(t testing.TB, svc *compute.Service) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// guestsOf returns the VMs of VDC blue in z (templates aside) by name.
func guestsOf(t testing.TB, z *vmtest.Zone) map[string]pveapi.Resource {
	t.Helper()
	gs, err := pveapi.Guests(vmtest.Ctx(t), z.Client)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]pveapi.Resource{}
	for _, g := range gs {
		if g.Template == 0 && g.HasTag(tenancy.VDCTag("blue")) {
			out[g.Name] = g
		}
	}
	return out
}

// waitState polls host's maintenance until it is want and returns it.
func waitState(t testing.TB, svc *compute.Service, host string, want compute.HostMaintenanceState) compute.HostMaintenance {
	t.Helper()
	var hm compute.HostMaintenance
	poll.Until(t, 45*time.Second, "maintenance "+string(want), func() error {
		var err error
		if hm, err = svc.Hosts().Maintenance(vmtest.Ctx(t), host); err != nil {
			return err
		}
		if hm.State != want {
			return fmt.Errorf("state %s, drain %+v", hm.State, hm.Drain)
		}
		return nil
	})
	return hm
}

// TestHostMaintenanceDrains: enabling maintenance on a host of a zone of
// three moves its running VMs to the other two, running all the while,
// and placement takes the host for no new VM until maintenance is
// disabled; enabling it again while it is in maintenance is CONFLICT, an
// unknown host BAD_USER_INPUT.
func TestHostMaintenanceDrains(t *testing.T) {
	t.Parallel()
	e, z := stagedThreeNodes(t)
	ctx := vmtest.Ctx(t)
	e.createOn(z, "pve1", "drain", 5)
	runService(t, e.svc)
	pve1 := tenancy.HostRef{ZoneID: z.Name, Node: "pve1"}.ID()

	hm, err := e.svc.Hosts().SetMaintenance(ctx, pve1, true)
	if err != nil {
		t.Fatal(err)
	}
	if hm.State == compute.MaintenanceNone {
		t.Fatalf("state after enabling: %+v", hm)
	}
	hm = waitState(t, e.svc, pve1, compute.MaintenanceDone)
	if len(hm.Drain) != 5 {
		t.Errorf("drain items %+v: want the 5 VMs", hm.Drain)
	}
	for _, it := range hm.Drain {
		if it.Status != compute.DrainDone || !strings.HasPrefix(it.VMName, "drain-") {
			t.Errorf("drain item %+v: want DONE", it)
		}
	}
	for name, g := range guestsOf(t, z) {
		if g.Node == "pve1" || g.Status != "running" {
			t.Errorf("VM %s on %s %s: want running on another host", name, g.Node, g.Status)
		}
	}
	tasks, err := pveapi.NodeTasksOfType(ctx, z.Client, "pve1", "qmstop", 100)
	if err != nil || len(tasks) != 0 {
		t.Errorf("stops on pve1: %v %v: want none", tasks, err)
	}

	// Placement refuses the host: a pinned create is BAD_USER_INPUT, an
	// unpinned one goes elsewhere.
	in := e.input(z.Name, "pinned")
	in.Host = "pve1"
	if _, _, err := e.svc.CreateVM(ctx, in); codeOf(err) != apierr.BadUserInput {
		t.Errorf("create pinned to a host in maintenance: %v, want BAD_USER_INPUT", err)
	}
	e.createAll(z, "after", 2)
	if n := e.hostsOf(z)["pve1"]; n != 0 {
		t.Errorf("%d VMs placed on a host in maintenance", n)
	}

	if _, err := e.svc.Hosts().SetMaintenance(ctx, pve1, true); codeOf(err) != apierr.Conflict {
		t.Errorf("enable twice: %v, want CONFLICT", err)
	}
	for _, bad := range []string{"nope", tenancy.HostRef{ZoneID: z.Name, Node: "pve9"}.ID(), tenancy.HostRef{ZoneID: "gamma", Node: "pve1"}.ID()} {
		if _, err := e.svc.Hosts().SetMaintenance(ctx, bad, true); codeOf(err) != apierr.BadUserInput {
			t.Errorf("enable on %q: %v, want BAD_USER_INPUT", bad, err)
		}
	}

	if hm, err = e.svc.Hosts().SetMaintenance(ctx, pve1, false); err != nil || hm.State != compute.MaintenanceNone {
		t.Fatalf("disable: %+v %v", hm, err)
	}
	e.createOn(z, "pve1", "back", 1)
	if n := e.hostsOf(z)["pve1"]; n != 1 {
		t.Errorf("%d VMs on pve1 after maintenance: want the pinned one", n)
	}
}

// TestHostMaintenanceFailedVM: a VM no other host can take makes the
// drain FAILED, naming it; it stays where it is, running, and the host
// refuses placements until maintenance is disabled.
func TestHostMaintenanceFailedVM(t *testing.T) {
	t.Parallel()
	e, z := stagedThreeNodes(t)
	ctx := vmtest.Ctx(t)
	e.createOn(z, "pve1", "stuck", 1)
	z.Sim.SetNodeOnline("pve2", false)
	z.Sim.SetNodeOnline("pve3", false)
	runService(t, e.svc)
	pve1 := tenancy.HostRef{ZoneID: z.Name, Node: "pve1"}.ID()
	if _, err := e.svc.Hosts().SetMaintenance(ctx, pve1, true); err != nil {
		t.Fatal(err)
	}
	hm := waitState(t, e.svc, pve1, compute.MaintenanceFailed)
	if len(hm.Drain) != 1 || hm.Drain[0].Status != compute.DrainFailed || hm.Drain[0].VMName != "stuck-0" ||
		!strings.Contains(hm.Drain[0].Message, "stuck-0") {
		t.Fatalf("drain %+v: want stuck-0 FAILED, named", hm.Drain)
	}
	if g := guestsOf(t, z)["stuck-0"]; g.Node != "pve1" || g.Status != "running" {
		t.Errorf("stuck-0 on %s %s: want running on pve1", g.Node, g.Status)
	}
	z.Sim.SetNodeOnline("pve2", true)
	z.Sim.SetNodeOnline("pve3", true)
	in := e.input(z.Name, "pinned")
	in.Host = "pve1"
	if _, _, err := e.svc.CreateVM(ctx, in); codeOf(err) != apierr.BadUserInput {
		t.Errorf("create pinned to a FAILED host: %v, want BAD_USER_INPUT", err)
	}
	if hm, _ := e.svc.Hosts().Maintenance(ctx, pve1); hm.State != compute.MaintenanceFailed {
		t.Errorf("state once hosts are back: %s, want FAILED until disabled", hm.State)
	}
	if hm, err := e.svc.Hosts().SetMaintenance(ctx, pve1, false); err != nil || hm.State != compute.MaintenanceNone {
		t.Fatalf("disable: %+v %v", hm, err)
	}
}

// TestDrainResumesAfterRestart: the replica draining a host stops
// mid-drain (one migration at a time, each taking a while); another
// service over the same catalog and zone finishes the drain, moving each
// VM once.
func TestDrainResumesAfterRestart(t *testing.T) {
	t.Parallel()
	e := newEnvTimed(t, 3, pvesim.Timing{PerGiB: 150 * time.Millisecond}, bigQuota, "alpha")
	z := e.zones[0]
	e.stage(z)
	ctx := vmtest.Ctx(t)
	e.createOn(z, "pve1", "resume", 4)
	cfg := e.cfg
	cfg.DrainParallel = 1
	first := e.newService(cfg)
	stop := runService(t, first)
	pve1 := tenancy.HostRef{ZoneID: z.Name, Node: "pve1"}.ID()
	if _, err := first.Hosts().SetMaintenance(ctx, pve1, true); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "one VM moved", func() error {
		hm, err := first.Hosts().Maintenance(ctx, pve1)
		if err != nil {
			return err
		}
		for _, it := range hm.Drain {
			if it.Status == compute.DrainDone {
				return nil
			}
		}
		return fmt.Errorf("drain %+v", hm.Drain)
	})
	stop()
	if hm, _ := first.Hosts().Maintenance(ctx, pve1); hm.State != compute.MaintenanceDraining {
		t.Fatalf("state when the first replica stopped: %+v: want DRAINING", hm)
	}
	second := e.newService(cfg)
	runService(t, second)
	waitState(t, second, pve1, compute.MaintenanceDone)
	for name, g := range guestsOf(t, z) {
		if g.Node == "pve1" || g.Status != "running" {
			t.Errorf("VM %s on %s %s: want running on another host", name, g.Node, g.Status)
		}
	}
	tasks, err := pveapi.NodeTasksOfType(ctx, z.Client, "pve1", "qmigrate", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 4 {
		t.Errorf("%d migrations off pve1: want one per VM (4)", len(tasks))
	}
}

// TestDisableEndsDrain: maintenance disabled while its drain runs (one
// migration at a time) lets the migration under way finish and starts no
// other: the VMs not yet moved stay on the host, running, and the host
// takes placements again.
func TestDisableEndsDrain(t *testing.T) {
	t.Parallel()
	e := newEnvTimed(t, 3, pvesim.Timing{PerGiB: 300 * time.Millisecond}, bigQuota, "alpha")
	z := e.zones[0]
	e.stage(z)
	ctx := vmtest.Ctx(t)
	e.createOn(z, "pve1", "stay", 3)
	cfg := e.cfg
	cfg.DrainParallel = 1
	svc := e.newService(cfg)
	runService(t, svc)
	pve1 := tenancy.HostRef{ZoneID: z.Name, Node: "pve1"}.ID()
	if _, err := svc.Hosts().SetMaintenance(ctx, pve1, true); err != nil {
		t.Fatal(err)
	}
	migrations := func() int {
		ts, err := pveapi.NodeTasksOfType(ctx, z.Client, "pve1", "qmigrate", 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(ts)
	}
	poll.True(t, 30*time.Second, "a migration started", func() bool { return migrations() > 0 })
	if hm, err := svc.Hosts().SetMaintenance(ctx, pve1, false); err != nil || hm.State != compute.MaintenanceNone {
		t.Fatalf("disable: %+v %v", hm, err)
	}
	poll.True(t, 30*time.Second, "the migration under way finished", func() bool {
		for _, g := range guestsOf(t, z) {
			if g.Lock != "" {
				return false
			}
		}
		return true
	})
	// A create on the host takes several of the drain's passes (clone,
	// configure, start at this timing): none of them may start a move.
	e.createOn(z, "pve1", "new", 1)
	if n := migrations(); n != 1 {
		t.Errorf("%d migrations off pve1: want only the one under way when maintenance ended", n)
	}
	on := 0
	for name, g := range guestsOf(t, z) {
		if g.Status != "running" {
			t.Errorf("VM %s %s: want running", name, g.Status)
		}
		if g.Node == "pve1" {
			on++
		}
	}
	if on != 3 {
		t.Errorf("%d VMs on pve1: want the 2 not moved and the new one", on)
	}
}

// TestDrainKeepsPlacementGroups: the drain moves a VM of a SPREAD group
// to a host without another VM of its group, though the other host is
// less loaded.
func TestDrainKeepsPlacementGroups(t *testing.T) {
	t.Parallel()
	e, z := stagedThreeNodes(t)
	ctx := vmtest.Ctx(t)
	if _, err := e.svc.PlacementGroups().Create(ctx, compute.PlacementGroupInput{VDC: "blue", Name: "apart", Zone: z.Name, Policy: compute.PolicySpread}); err != nil {
		t.Fatal(err)
	}
	for _, vm := range []struct{ name, host string }{{"a", "pve1"}, {"b", "pve2"}} {
		in := e.input(z.Name, vm.name)
		in.Host, in.PlacementGroup = vm.host, "apart"
		_, op, err := e.svc.CreateVM(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if last := e.wait(e.svc, "blue", op.ID); last.State != compute.OpSucceeded {
			t.Fatalf("create %s: %+v", vm.name, last)
		}
	}
	// pve3 holds more than pve2: without its group, a would go to pve2.
	e.createOn(z, "pve3", "load", 2)
	runService(t, e.svc)
	pve1 := tenancy.HostRef{ZoneID: z.Name, Node: "pve1"}.ID()
	if _, err := e.svc.Hosts().SetMaintenance(ctx, pve1, true); err != nil {
		t.Fatal(err)
	}
	waitState(t, e.svc, pve1, compute.MaintenanceDone)
	if g := guestsOf(t, z)["a"]; g.Node != "pve3" || g.Status != "running" {
		t.Errorf("a on %s %s: want running on pve3, apart from b", g.Node, g.Status)
	}
}
