package compute_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// crashAfterClone creates a VM with a service whose runner is stopped
// (context canceled, as when the orchestrator dies) right after the clone
// task ended; it returns the VM and the create's operation.
func crashAfterClone(t *testing.T, e *env) (*compute.VM, *compute.Operation) {
	t.Helper()
	ctx := vmtest.Ctx(t)
	crashed := make(chan struct{})
	var once sync.Once
	var dying *compute.Service
	cfg := e.cfg
	cfg.AfterStep = func(ctx context.Context, _ string, step string) {
		if step != "clone" {
			return
		}
		once.Do(func() {
			go func() {
				_ = dying.Shutdown(context.Background())
				close(crashed)
			}()
		})
		<-ctx.Done() // the process dies here
	}
	dying = e.newService(cfg)
	vm, op, err := dying.CreateVM(ctx, e.input("alpha", "phoenix"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-crashed:
	case <-ctx.Done():
		t.Fatal("the runner did not stop")
	}
	g, ok, err := pveapi.FindGuest(ctx, e.zones[0].Client, vm.Ref.VMID)
	if err != nil || !ok {
		t.Fatalf("guest after crash: %v, %v", ok, err)
	}
	if g.Status != "stopped" || !isCreatingGuest(g) {
		t.Fatalf("guest after crash %+v, want stopped and unfinished", g)
	}
	return vm, op
}

func isCreatingGuest(g pveapi.Resource) bool {
	vdc, _ := tenancy.VDCOf(g.Tags())
	return g.HasTag(tenancy.CreatingTag) || vdc == ""
}

// TestCrashBetweenCloneAndStart: a fresh service (a new orchestrator)
// finishes a create whose runner died after the clone: one VM, running,
// unmarked, with its one address, and no reservation left.
func TestCrashBetweenCloneAndStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	e.stage(e.zones[0])
	ctx := vmtest.Ctx(t)
	vm, op := crashAfterClone(t, e)

	fresh := e.newService(e.cfg)
	// Before recovery, the fresh replica sees the create running.
	if got, err := fresh.Operation(ctx, "blue", op.ID); err != nil || got.State != compute.OpRunning {
		t.Fatalf("operation on a fresh replica: %+v, %v", got, err)
	}
	if err := fresh.Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	got, err := fresh.VM(ctx, "blue", vm.ID)
	if err != nil || got.Status != compute.StatusRunning || len(got.Addresses) != 1 {
		t.Fatalf("vm after recovery: %+v, %v", got, err)
	}
	// A third replica derives the create's outcome from Proxmox alone.
	third := e.newService(e.cfg)
	if fin, err := third.Operation(ctx, "blue", op.ID); err != nil || fin.State != compute.OpSucceeded {
		t.Fatalf("operation on a third replica: %+v, %v", fin, err)
	}
	guests, err := pveapi.Guests(ctx, e.zones[0].Client)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range guests {
		if g.Name == "phoenix" {
			n++
			if g.RawTags != tenancy.GuestTags("blue") {
				t.Errorf("tags %q", g.RawTags)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d guests named phoenix, want 1", n)
	}
	if ms := e.flexMappings(e.zones[0]); len(ms) != 1 || ms[0].IP != got.Addresses[0] {
		t.Errorf("mappings %+v, want one for %v", ms, got.Addresses)
	}
	if s := e.snapshot(); s.reserved != 0 {
		t.Errorf("%d reservations left", s.reserved)
	}
	// Recovering again changes nothing.
	before := e.snapshot()
	if err := third.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if after := e.snapshot(); !before.equal(after) {
		t.Errorf("second recovery changed state:\n%+v\n%+v", before, after)
	}
}

// TestRecoverCleansUpWhatCannotFinish: when the guest cannot be started,
// recovery deletes it and releases its address and reservation.
func TestRecoverCleansUpWhatCannotFinish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	e.stage(e.zones[0])
	ctx := vmtest.Ctx(t)
	vm, _ := crashAfterClone(t, e)
	e.zones[0].Sim.FailRequests("POST", "/nodes/*/qemu/*/status/start", 500, 1000)
	fresh := e.newService(e.cfg)
	if err := fresh.Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	if _, ok, err := pveapi.FindGuest(ctx, e.zones[0].Client, vm.Ref.VMID); err != nil || ok {
		t.Fatalf("guest still there after cleanup: %v, %v", ok, err)
	}
	if ms := e.flexMappings(e.zones[0]); len(ms) != 0 {
		t.Errorf("mappings left: %+v", ms)
	}
	if s := e.snapshot(); s.reserved != 0 {
		t.Errorf("%d reservations left", s.reserved)
	}
}

// TestOrphanedAddressReleased: a flexplane mapping no guest uses is
// released on the scan after the grace period; other mappings stay.
func TestOrphanedAddressReleased(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	ctx := vmtest.Ctx(t)
	z := e.zones[0]
	sub := ipam.Subnet{Zone: tenancy.SDNZoneID("blue"), VNet: tenancy.VNetID("blue", "lan"),
		Prefix: netip.MustParsePrefix("10.1.0.0/24"), Gateway: netip.MustParseAddr("10.1.0.1")}
	if _, err := ipam.Claim(ctx, z.Client, sub, netip.MustParseAddr("10.1.0.50"), ipam.NewMAC()); err != nil {
		t.Fatal(err)
	}
	if _, err := ipam.Claim(ctx, z.Client, sub, netip.MustParseAddr("10.1.0.51"), "BC:24:11:00:00:01"); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if ms := e.flexMappings(z); len(ms) != 1 {
		t.Fatalf("released within the grace period: %+v", ms)
	}
	if err := e.svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if ms := e.flexMappings(z); len(ms) != 0 {
		t.Fatalf("orphan not released: %+v", ms)
	}
	all, err := ipam.Mappings(ctx, z.Client)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range all {
		found = found || m.IP == "10.1.0.51"
	}
	if !found {
		t.Error("a mapping flexplane did not make was released")
	}
}

// TestTwoReplicasRecoverAtOnce: two fresh replicas finish one crashed
// create at the same time; their conditional, idempotent steps converge on
// one running VM with one address and no reservation left.
func TestTwoReplicasRecoverAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	e.stage(e.zones[0])
	ctx := vmtest.Ctx(t)
	vm, _ := crashAfterClone(t, e)
	a, b := e.newService(e.cfg), e.newService(e.cfg)
	var wg sync.WaitGroup
	for _, svc := range []*compute.Service{a, b} {
		wg.Go(func() {
			if err := svc.Recover(ctx); err != nil {
				t.Errorf("recover: %v", err)
			}
		})
	}
	wg.Wait()
	got, err := a.VM(ctx, "blue", vm.ID)
	if err != nil || got.Status != compute.StatusRunning {
		t.Fatalf("vm after two recoveries: %+v, %v", got, err)
	}
	guests, err := pveapi.Guests(ctx, e.zones[0].Client)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range guests {
		if g.Name == "phoenix" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d guests named phoenix, want 1", n)
	}
	if ms := e.flexMappings(e.zones[0]); len(ms) != 1 {
		t.Errorf("mappings %+v, want 1", ms)
	}
	if s := e.snapshot(); s.reserved != 0 {
		t.Errorf("%d reservations left", s.reserved)
	}
}

// TestRecoverReleasesReservationsOfDeadCreates: the quota reservation of a
// create whose process died between reserving and cloning (no guest carries
// its intent) is released by Recover once older than StaleAfter; a younger
// one stays (its create may be live in another replica).
func TestRecoverReleasesReservationsOfDeadCreates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	ctx := vmtest.Ctx(t)
	if err := e.svc.Quota().Reserve(ctx, "blue", "deadcreate", "alpha", quota.Usage{VCPUs: 1, MemoryMiB: 512, StorageGiB: 4}); err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.StaleAfter = time.Hour
	if err := e.newService(cfg).Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	if s := e.snapshot(); s.reserved != 1 {
		t.Fatalf("%d reservations after a Recover with StaleAfter 1h, want the young one", s.reserved)
	}
	if err := e.newService(e.cfg).Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	if s := e.snapshot(); s.reserved != 0 {
		t.Errorf("%d reservations left after Recover, want the dead create's released", s.reserved)
	}
}

// TestRecoverPassFollowsChange: Run's recovery pass lists each zone's
// guests once and reads the config only of the guests that may have
// changed. Once a pass has read every managed guest, an idle pass reads no
// guest's config and not the IPAM; a VM that stops has its config (and
// only its) read again; an unfinished create that appears is still
// finished, and an address of a NIC added to another VM without a change
// of its listing is not taken for an orphan then.
func TestRecoverPassFollowsChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	z := e.zones[0]
	e.stage(z)
	ctx := vmtest.Ctx(t)
	vm := e.create(e.svc, e.input("alpha", "steady"))

	client, asked := pvetest.CountingClient(t, z.Sim, vmtest.Token)
	cfg := e.cfg
	cfg.Zones = compute.StaticZones{{ID: z.Name, Name: z.Name, Client: client}}
	cfg.RecoverInterval, cfg.RecoverResyncInterval = 20*time.Millisecond, time.Hour
	// It takes over the create made to crash below only once that has
	// crashed.
	const stale = 2 * time.Second
	cfg.StaleAfter = stale
	runService(t, e.newService(cfg))
	// A pass starts with the zone's listing: count passes by it.
	passes := func() int64 { return asked.Matching("GET", "/cluster/resources") }
	configs := func() int64 { return asked.Matching("GET", "/config") }
	ipamReads := func() int64 { return asked.Matching("GET", pveapi.IPAMStatusPath) }
	ofVM := func() int64 { return asked.Matching("GET", fmt.Sprintf("/qemu/%d/config", vm.Ref.VMID)) }
	waitPasses := func(n int64) {
		t.Helper()
		from := passes()
		poll.True(t, 20*time.Second, fmt.Sprintf("%d recovery passes", n), func() bool { return passes() >= from+n })
	}

	poll.True(t, 20*time.Second, "the first pass read the VM's config and the IPAM", func() bool { return ofVM() > 0 && ipamReads() > 0 })
	waitPasses(1) // the first pass has ended
	before, beforeIPAM := configs(), ipamReads()
	waitPasses(3)
	if n, m := configs()-before, ipamReads()-beforeIPAM; n != 0 || m != 0 {
		t.Fatalf("idle recovery passes read %d guest configs and the IPAM %d times, want none", n, m)
	}

	// The VM stops: its listing changes, its config is read again.
	before, beforeVM := configs(), ofVM()
	path := fmt.Sprintf("/nodes/%s/qemu/%d", vm.Node, vm.Ref.VMID)
	if _, err := pveapi.Run(ctx, z.Client, "POST", path+"/status/stop", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 20*time.Second, "the stopped VM's config read", func() bool { return ofVM() > beforeVM })
	waitPasses(2)
	if all, mine := configs()-before, ofVM()-beforeVM; all != mine {
		t.Errorf("after one VM stopped the passes read %d configs, %d of them its own: want only its own", all, mine)
	}

	// A NIC added to the VM's config shows nowhere in its listing.
	mac := ipam.NewMAC()
	vnet := tenancy.VNetID("blue", "lan")
	if _, err := pveapi.Run(ctx, z.Client, "POST", path+"/config", map[string]any{"net1": "virtio=" + mac + ",bridge=" + vnet}); err != nil {
		t.Fatal(err)
	}
	sub := ipam.Subnet{Zone: tenancy.SDNZoneID("blue"), VNet: vnet, Prefix: netip.MustParsePrefix("10.1.0.0/24"), Gateway: netip.MustParseAddr("10.1.0.1")}
	if _, err := ipam.Claim(ctx, z.Client, sub, netip.MustParseAddr("10.1.0.77"), mac); err != nil {
		t.Fatal(err)
	}

	// A create whose runner died right after the clone is finished by the
	// passes, which read the IPAM again then: the NIC's address is not
	// released (every config is read before an address is).
	began := time.Now()
	crashed, _ := crashAfterClone(t, e)
	if took := time.Since(began); took >= stale {
		t.Fatalf("the create took %v to crash, longer than the recovering service's StaleAfter (%v)", took, stale)
	}
	beforeIPAM = ipamReads()
	poll.Until(t, 30*time.Second, "the crashed create finished", func() error {
		got, err := e.svc.VM(ctx, "blue", crashed.ID)
		if err != nil {
			return err
		}
		if got.Status != compute.StatusRunning {
			return fmt.Errorf("status %s", got.Status)
		}
		return nil
	})
	waitPasses(2)
	if ipamReads() == beforeIPAM {
		t.Error("the passes that saw a new guest did not read the IPAM")
	}
	if !slices.ContainsFunc(e.flexMappings(z), func(m ipam.Mapping) bool { return strings.EqualFold(m.MAC, mac) }) {
		t.Errorf("the address of a NIC added without a change of the VM's listing was released")
	}
}
