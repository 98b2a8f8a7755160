package estate

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/support/paging"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// candidates is zs zones of guests guests each, one slice per zone, in
// the order the zones' answers arrive (not page order).
func candidates(zs, guests int) [][]candidate {
	var byZone [][]candidate
	for i := zs - 1; i >= 0; i-- {
		var cs []candidate
		z := fleet.Zone{ID: fmt.Sprintf("%032x", i*7919), Name: fmt.Sprintf("z%02d", i)}
		for g := range guests {
			res := &pveapi.Resource{VMID: 1000 + (g*37)%guests, Name: fmt.Sprintf("vm-%d", g), Node: fmt.Sprintf("pve%d", g%2+1),
				Status: "running", MaxCPU: 2, MaxMem: 2 << 30, RawTags: tenancy.GuestTags("red")}
			cs = append(cs, candidate{zone: z, ref: tenancy.VMRef{ZoneID: z.ID, VMID: res.VMID}, res: res, status: GuestStatus(*res, nil)})
		}
		byZone = append(byZone, cs)
	}
	return append(byZone, nil) // a zone without candidates
}

// allSorted is how a page was cut before page: a Guest for every
// candidate, sorted by the refs parsed back from their ids.
func allSorted(byZone [][]candidate, n int) []Guest {
	cs := slices.Concat(byZone...)
	gs := make([]Guest, len(cs))
	for i, c := range cs {
		gs[i] = guestOf(c.zone, c.res, c.id, c.status)
	}
	slices.SortFunc(gs, func(a, b Guest) int {
		ra, _ := tenancy.ParseVMID(a.ID)
		rb, _ := tenancy.ParseVMID(b.ID)
		return Order(ra, rb)
	})
	return gs[:min(n, len(gs))]
}

func TestPageMatchesSortingEveryGuest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ zones, guests, n int }{{0, 0, 10}, {1, 5, 10}, {3, 50, 7}, {8, 200, 100}, {2, 10, 20}, {4, 30, 75}, {4, 30, 60}} {
		want := allSorted(candidates(tc.zones, tc.guests), tc.n)
		got := page(candidates(tc.zones, tc.guests), tc.n)
		if len(got) == 0 && len(want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%d zones × %d guests, first %d: pages differ", tc.zones, tc.guests, tc.n)
		}
	}
}

// BenchmarkPage pages 8 zones × 900 guests to 100 VMs (the benchmark's
// vms query) with page and, as the same-run baseline, as before.
func BenchmarkPage(b *testing.B) {
	for _, v := range []struct {
		name string
		page func([][]candidate, int) []Guest
	}{{"all-sorted", allSorted}, {"page", page}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				cs := candidates(8, 900)
				b.StartTimer()
				if gs := v.page(cs, 100); len(gs) != 100 {
					b.Fatal(len(gs))
				}
			}
		})
	}
}

// TestGuestStatusIsPveapiState: a guest's status is pveapi's one mapping.
func TestGuestStatusIsPveapiState(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"running", "stopped", "paused", "suspended", "unknown", ""} {
		for _, lock := range []string{"", "clone", "create", "suspended", "backup"} {
			for _, tags := range []string{"", tenancy.GuestTags("red"), tenancy.GuestTags("red", tenancy.CreatingTag)} {
				res := pveapi.Resource{Type: "qemu", Status: status, Lock: lock, RawTags: tags}
				if got := GuestStatus(res, nil); got != string(res.State(tenancy.Creating(res.Tags()))) {
					t.Errorf("%+v: %q, pveapi says %q", res, got, res.State(tenancy.Creating(res.Tags())))
				}
			}
		}
	}
}

// TestGuestStatusOfCreatesInFlight: a pool member (which lacks the lock
// and tags that tell a create) is CREATING while a live reservation of its
// VDC is bound to it, in its zone only.
func TestGuestStatusOfCreatesInFlight(t *testing.T) {
	t.Parallel()
	live := time.Now().Add(time.Hour)
	v := &catalog.VDC{Status: catalog.VDCStatus{Reservations: []catalog.QuotaReservation{
		{ID: "a", Zone: "z1", VMID: 101, Expires: live},
		{ID: "b", Zone: "z1", VMID: 102, Expires: time.Now().Add(-time.Minute)}, // expired
		{ID: "c", Zone: "z1", Expires: live},                                    // not cloned yet
	}}}
	creating := quota.Creating(v)
	for _, c := range []struct {
		zone string
		vmid int
		want pveapi.GuestState
	}{
		{"z1", 101, pveapi.StateCreating},
		{"z2", 101, pveapi.StateStopped},
		{"z1", 102, pveapi.StateStopped},
		{"z1", 103, pveapi.StateStopped},
	} {
		if got := GuestStatus(pveapi.Resource{Type: "qemu", VMID: c.vmid, Status: "stopped"}, creating[c.zone]); got != string(c.want) {
			t.Errorf("guest %d of %s: %s, want %s", c.vmid, c.zone, got, c.want)
		}
	}
}

func TestVMCursorRoundTrips(t *testing.T) {
	t.Parallel()
	for _, ref := range []tenancy.VMRef{{ZoneID: "a-b", VMID: 100}, {ZoneID: "a", VMID: 999999999}} {
		c := VMCursor(ref)
		got, err := ParseVMCursor(&c)
		if err != nil || *got != ref {
			t.Errorf("%+v: %+v, %v", ref, got, err)
		}
	}
	// Cursors order as VMs' pages do: zone identity, then VMID.
	key := func(ref tenancy.VMRef) string { k, _ := paging.Decode(VMCursor(ref)); return k }
	a, b, c := tenancy.VMRef{ZoneID: "a", VMID: 999}, tenancy.VMRef{ZoneID: "a", VMID: 1000}, tenancy.VMRef{ZoneID: "a-b", VMID: 100}
	if !(key(a) < key(b) && key(b) < key(c)) || Order(b, c) >= 0 {
		t.Error("cursor keys do not order as Order")
	}
	for _, bad := range []string{"", "x", paging.Cursor("a")} {
		if _, err := ParseVMCursor(&bad); err != paging.ErrBadAfter {
			t.Errorf("after %q: %v, want ErrBadAfter", bad, err)
		}
	}
}
