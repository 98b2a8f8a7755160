package quota_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// addGuests creates guests of vdc's pool (as flexplane's creates leave
// them: tagged and in the pool) with the given VMIDs.
func addGuests(t *testing.T, z *vmtest.Zone, vdc string, vmids ...int) {
	t.Helper()
	ctx := vmtest.Ctx(t)
	if err := z.Client.Post(ctx, "/pools", map[string]any{"poolid": tenancy.PoolID(vdc)}, nil); err != nil && !pveapi.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, vmid := range vmids {
		if _, err := pveapi.Run(ctx, z.Client, "POST", "/nodes/pve1/qemu", map[string]any{
			"vmid": vmid, "cores": 2, "memory": 1024, "tags": tenancy.GuestTags(vdc), "scsi0": "local-lvm:2", "pool": tenancy.PoolID(vdc),
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// zonesOf lists zs as the ledger sees them; those in down cannot be reached.
func zonesOf(zs []*vmtest.Zone, down map[string]bool) func(context.Context) []quota.Zone {
	return func(context.Context) []quota.Zone {
		var out []quota.Zone
		for _, z := range zs {
			qz := quota.Zone{ID: z.Sim.Identity(), Name: z.Name, Client: z.Client}
			if down[z.Name] {
				qz.Client = nil
			}
			out = append(out, qz)
		}
		return out
	}
}

// TestReserveTwoReplicas races reservations from two ledgers on two stores
// over one catalog directory (two orchestrator replicas): the quota of 6 VMs,
// 2 of them used by guests in Proxmox, admits exactly 4 of 20 creates.
func TestReserveTwoReplicas(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "alpha", 1)
	ctx := vmtest.Ctx(t)
	st := vmtest.Catalog(t, []string{"prod"}, catalog.VDCQuotas{VCPUs: 100, MemoryMiB: 1 << 20, StorageGiB: 1000, VMs: 6}, "http://127.0.0.1/x.qcow2", "sha256:"+fmt.Sprintf("%064d", 0), z)
	st2, err := catalog.OpenDir(st.Dir())
	if err != nil {
		t.Fatal(err)
	}
	addGuests(t, z, "prod", 100, 101)
	zs := zonesOf([]*vmtest.Zone{z}, nil)
	// Twenty racing reserves re-count on every conflict: a generous zone
	// timeout keeps a loaded machine from failing counts this test is not about.
	ledgers := []*quota.Ledger{{Store: st, Zones: zs, ZoneTimeout: time.Minute}, {Store: st2, Zones: zs, ZoneTimeout: time.Minute}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for i := range 20 {
		wg.Go(func() {
			err := ledgers[i%2].Reserve(ctx, "prod", fmt.Sprintf("op%d", i), z.Sim.Identity(), quota.Usage{VCPUs: 1, MemoryMiB: 512, StorageGiB: 1})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, quota.ErrExceeded):
				refused++
			default:
				t.Errorf("reserve: %v", err)
			}
		})
	}
	wg.Wait()
	if ok != 4 || refused != 16 {
		t.Fatalf("%d reserved, %d refused; want 4 and 16", ok, refused)
	}
	rs, err := ledgers[0].Reservations(ctx, "prod")
	if err != nil || len(rs) != 4 {
		t.Fatalf("reservations %v, %v; want 4", rs, err)
	}
	// Releasing frees room; a refusal names the resource.
	if err := ledgers[1].Release(ctx, "prod", rs[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := ledgers[0].Reserve(ctx, "prod", "again", z.Sim.Identity(), quota.Usage{VCPUs: 1}); err != nil {
		t.Fatalf("reserve after release: %v", err)
	}
	var qe *quota.ExceededError
	if err := ledgers[0].Reserve(ctx, "prod", "big", z.Sim.Identity(), quota.Usage{VCPUs: 1}); !errors.As(err, &qe) || qe.Resource != "vms" || qe.Limit != 6 {
		t.Fatalf("over quota: %v; want vms of 6", err)
	}
	if err := ledgers[0].Reserve(ctx, "prod", "again", z.Sim.Identity(), quota.Usage{VCPUs: 1}); err != nil {
		t.Fatalf("reserving an id twice: %v", err)
	}
}

// TestBoundGuestsCountOnce: the guest of a create in flight, bound to its
// reservation, is counted through the reservation only; its pool counts
// it once the reservation is released.
func TestBoundGuestsCountOnce(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "beta", 1)
	ctx := vmtest.Ctx(t)
	st := vmtest.Catalog(t, []string{"prod"}, catalog.VDCQuotas{VCPUs: 100, MemoryMiB: 1 << 20, StorageGiB: 1000, VMs: 10}, "http://127.0.0.1/x.qcow2", "sha256:"+fmt.Sprintf("%064d", 0), z)
	l := &quota.Ledger{Store: st, Zones: zonesOf([]*vmtest.Zone{z}, nil)}
	addGuests(t, z, "prod", 100)
	if err := l.Reserve(ctx, "prod", "x1", z.Sim.Identity(), quota.Usage{VCPUs: 2, MemoryMiB: 1024, StorageGiB: 2}); err != nil {
		t.Fatal(err)
	}
	addGuests(t, z, "prod", 101) // x1's clone
	if err := l.Bind(ctx, "prod", "x1", 101); err != nil {
		t.Fatal(err)
	}
	usage := func() quota.Usage {
		t.Helper()
		v, err := catalog.Get[*catalog.VDC](ctx, st, "prod")
		if err != nil {
			t.Fatal(err)
		}
		u, err := l.Usage(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	two := quota.Usage{VCPUs: 4, MemoryMiB: 2048, StorageGiB: 4, VMs: 2}
	if u := usage(); u != two {
		t.Fatalf("usage with x1 bound: %+v, want %+v", u, two)
	}
	if err := l.Release(ctx, "prod", "x1"); err != nil {
		t.Fatal(err)
	}
	if u := usage(); u != two {
		t.Fatalf("usage after x1: %+v, want %+v", u, two)
	}
	if u, err := quota.PoolUsage(ctx, z.Client, "other", nil); err != nil || u != (quota.Usage{}) {
		t.Fatalf("a VDC without a pool: %+v, %v", u, err)
	}
}

// TestZoneOutageNeverLetsAVDCOverQuota: while a zone cannot be reached,
// its guests count as last counted; a zone never counted refuses creates.
func TestZoneOutageNeverLetsAVDCOverQuota(t *testing.T) {
	t.Parallel()
	a, b := vmtest.StartZone(t, "alpha", 1), vmtest.StartZone(t, "beta", 1)
	ctx := vmtest.Ctx(t)
	st := vmtest.Catalog(t, []string{"prod", "dev"}, catalog.VDCQuotas{VCPUs: 100, MemoryMiB: 1 << 20, StorageGiB: 1000, VMs: 4}, "http://127.0.0.1/x.qcow2", "sha256:"+fmt.Sprintf("%064d", 0), a, b)
	addGuests(t, a, "prod", 100, 101, 102)
	down := map[string]bool{}
	var mu sync.Mutex
	zs := zonesOf([]*vmtest.Zone{a, b}, down)
	l := &quota.Ledger{Store: st, Zones: func(ctx context.Context) []quota.Zone {
		mu.Lock()
		defer mu.Unlock()
		return zs(ctx)
	}}
	setDown := func(zone string, d bool) {
		mu.Lock()
		defer mu.Unlock()
		down[zone] = d
	}
	// Both zones up: 3 guests counted, a fourth VM fits.
	if err := l.Reserve(ctx, "prod", "op1", b.Sim.Identity(), quota.Usage{VCPUs: 1}); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "prod", "op1"); err != nil {
		t.Fatal(err)
	}
	// alpha goes down: its 3 guests still count, so one VM fits and a
	// second does not.
	setDown("alpha", true)
	if err := l.Reserve(ctx, "prod", "op2", b.Sim.Identity(), quota.Usage{VCPUs: 1}); err != nil {
		t.Fatalf("the fourth VM while alpha is down: %v", err)
	}
	var qe *quota.ExceededError
	if err := l.Reserve(ctx, "prod", "op3", b.Sim.Identity(), quota.Usage{VCPUs: 1}); !errors.As(err, &qe) || qe.Used != 4 {
		t.Fatalf("a fifth VM while alpha is down: %v, want quota exceeded with 4 used", err)
	}
	v, err := catalog.Get[*catalog.VDC](ctx, st, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Status.Counted[a.Sim.Identity()]; c.VMs != 3 || c.VCPUs != 6 || c.At.IsZero() {
		t.Errorf("alpha's last count on the VDC: %+v", c)
	}
	if u, err := l.Usage(ctx, v); err != nil || u.VMs != 4 {
		t.Errorf("usage while alpha is down: %+v, %v", u, err)
	}
	// dev was never counted in alpha: its creates are refused while alpha
	// is down, and admitted once it is back.
	var ze *quota.ZoneUnavailableError
	if err := l.Reserve(ctx, "dev", "op4", b.Sim.Identity(), quota.Usage{VCPUs: 1}); !errors.As(err, &ze) || ze.Zone != "alpha" {
		t.Fatalf("dev while alpha was never counted: %v, want zone alpha unavailable", err)
	}
	setDown("alpha", false)
	if err := l.Reserve(ctx, "dev", "op4", b.Sim.Identity(), quota.Usage{VCPUs: 1}); err != nil {
		t.Fatalf("dev once alpha is back: %v", err)
	}
}

// TestCountsZonesInParallel: zones are counted at once, each within the
// zone timeout; a zone slower than it counts as last counted.
func TestCountsZonesInParallel(t *testing.T) {
	t.Parallel()
	var zs []*vmtest.Zone
	for _, name := range []string{"a", "b", "c", "d"} {
		zs = append(zs, vmtest.StartZone(t, name, 1))
	}
	ctx := vmtest.Ctx(t)
	st := vmtest.Catalog(t, []string{"prod"}, catalog.VDCQuotas{VCPUs: 100, MemoryMiB: 1 << 20, StorageGiB: 1000, VMs: 10}, "http://127.0.0.1/x.qcow2", "sha256:"+fmt.Sprintf("%064d", 0), zs...)
	for i, z := range zs {
		addGuests(t, z, "prod", 100+i)
	}
	l := &quota.Ledger{Store: st, Zones: zonesOf(zs, nil), ZoneTimeout: 2 * time.Second}
	if err := l.Reserve(ctx, "prod", "first", zs[0].Sim.Identity(), quota.Usage{VCPUs: 1}); err != nil {
		t.Fatal(err)
	}
	const latency = 400 * time.Millisecond
	for _, z := range zs {
		z.Sim.SetLatency(latency)
	}
	start := time.Now()
	if err := l.Reserve(ctx, "prod", "second", zs[0].Sim.Identity(), quota.Usage{VCPUs: 1}); err != nil {
		t.Fatal(err)
	}
	// A zone's count is two round trips (its pool, then its guests'
	// snapshot lists): one zone after the other would take at least
	// 4 × 2 × 400 ms, all at once 2 × 400 ms.
	if d := time.Since(start); d >= 6*latency {
		t.Errorf("counting 4 zones of %v each took %v", latency, d)
	}
	// d is slower than the zone timeout: it counts as before (1 VM), and
	// the count does not wait for it.
	zs[3].Sim.SetLatency(10 * time.Second)
	l.ZoneTimeout = 800 * time.Millisecond
	start = time.Now()
	v, err := catalog.Get[*catalog.VDC](ctx, st, "prod")
	if err != nil {
		t.Fatal(err)
	}
	u, err := l.Usage(ctx, v)
	if err != nil || u.VMs != 6 {
		t.Errorf("usage with d too slow: %+v, %v; want 4 guests and 2 reservations", u, err)
	}
	if d := time.Since(start); d >= 2*time.Second {
		t.Errorf("usage waited %v for a zone of 10 s with a timeout of 800 ms", d)
	}
}

// TestReserveGrowsTheZoneSet: a reservation adds its zone to the VDC's
// zone set in its own write, and once the set is complete only its zones
// are counted: a zone outside it that is down, never counted, refuses
// nothing.
func TestReserveGrowsTheZoneSet(t *testing.T) {
	t.Parallel()
	a, b := vmtest.StartZone(t, "alpha", 1), vmtest.StartZone(t, "beta", 1)
	ctx := vmtest.Ctx(t)
	st := vmtest.Catalog(t, []string{"prod"}, catalog.VDCQuotas{VCPUs: 100, MemoryMiB: 1 << 20, StorageGiB: 1000, VMs: 4}, "http://127.0.0.1/x.qcow2", "sha256:"+fmt.Sprintf("%064d", 0), a, b)
	v, err := catalog.Get[*catalog.VDC](ctx, st, "prod")
	if err != nil {
		t.Fatal(err)
	}
	v.Status.ZonesComplete = true // a new VDC: nothing anywhere
	if _, err := catalog.Update(ctx, st, v); err != nil {
		t.Fatal(err)
	}
	l := &quota.Ledger{Store: st, Zones: zonesOf([]*vmtest.Zone{a, b}, map[string]bool{"beta": true})}
	if err := l.Reserve(ctx, "prod", "op1", a.Sim.Identity(), quota.Usage{VCPUs: 1}); err != nil {
		t.Fatalf("a create in alpha while beta, where prod has nothing, is down: %v", err)
	}
	v, err = catalog.Get[*catalog.VDC](ctx, st, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{a.Sim.Identity()}; !slices.Equal(v.Status.Zones, want) {
		t.Fatalf("zone set after the reservation: %v, want %v", v.Status.Zones, want)
	}
	if u, err := l.Usage(ctx, v); err != nil || u.VMs != 1 {
		t.Fatalf("usage: %+v, %v; want the one reservation", u, err)
	}
}
