package graph

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// candidates is zones zones of guests guests each, one slice per zone, in
// the order the zones' answers arrive (not page order).
func candidates(zones, guests int) [][]vmCandidate {
	var byZone [][]vmCandidate
	for z := zones - 1; z >= 0; z-- {
		var cs []vmCandidate
		zm := &model.Zone{ID: fmt.Sprintf("%032x", z*7919), Name: fmt.Sprintf("z%02d", z)}
		zm.Hosts = []*model.Host{{Name: "pve1", Zone: zm}, {Name: "pve2", Zone: zm}}
		for g := range guests {
			res := &pveapi.Resource{VMID: 1000 + (g*37)%guests, Name: fmt.Sprintf("vm-%d", g), Node: fmt.Sprintf("pve%d", g%2+1),
				Status: "running", MaxCPU: 2, MaxMem: 2 << 30, RawTags: tenancy.GuestTags("red")}
			cs = append(cs, vmCandidate{ref: tenancy.VMRef{ZoneID: zm.ID, VMID: res.VMID}, zone: zm, res: res})
		}
		byZone = append(byZone, cs)
	}
	return append(byZone, nil) // a zone without candidates
}

// allModelsSorted is how the vms resolver paged before pageVMs: a model for
// every candidate, sorted by the refs parsed back from their ids.
func allModelsSorted(byZone [][]vmCandidate, n int) []*model.VM {
	cs := slices.Concat(byZone...)
	vms := make([]*model.VM, len(cs))
	for i, c := range cs {
		vms[i] = vmModel(c.zone, *c.res, c.status)
	}
	type keyed struct {
		ref tenancy.VMRef
		vm  *model.VM
	}
	ks := make([]keyed, len(vms))
	for i, vm := range vms {
		ks[i] = keyed{mustVMRef(vm.ID), vm}
	}
	slices.SortFunc(ks, func(a, b keyed) int { return vmOrder(a.ref, b.ref) })
	for i, k := range ks {
		vms[i] = k.vm
	}
	return vms[:min(n, len(vms))]
}

func TestPageVMsMatchesSortingEveryModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ zones, guests, n int }{{0, 0, 10}, {1, 5, 10}, {3, 50, 7}, {8, 200, 100}, {2, 10, 20}, {4, 30, 75}, {4, 30, 60}} {
		want := allModelsSorted(candidates(tc.zones, tc.guests), tc.n)
		got := pageVMs(candidates(tc.zones, tc.guests), tc.n)
		if len(got) == 0 && len(want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%d zones × %d guests, first %d: pages differ", tc.zones, tc.guests, tc.n)
		}
	}
}

// BenchmarkPageVMs pages 8 zones × 900 guests to 100 VMs (the benchmark's
// vms query) with pageVMs and, as the same-run baseline, as before.
func BenchmarkPageVMs(b *testing.B) {
	for _, v := range []struct {
		name string
		page func([][]vmCandidate, int) []*model.VM
	}{{"all-models-sorted", allModelsSorted}, {"pageVMs", pageVMs}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				cs := candidates(8, 900)
				b.StartTimer()
				if vms := v.page(cs, 100); len(vms) != 100 {
					b.Fatal(len(vms))
				}
			}
		})
	}
}

// TestVMStatusIsPveapiState: the API's VM status is pveapi's one mapping,
// and every state it yields is a status of the schema.
func TestVMStatusIsPveapiState(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"running", "stopped", "paused", "suspended", "unknown", ""} {
		for _, lock := range []string{"", "clone", "create", "suspended", "backup"} {
			for _, tags := range []string{"", tenancy.GuestTags("red"), tenancy.GuestTags("red", tenancy.CreatingTag)} {
				res := pveapi.Resource{Type: "qemu", Status: status, Lock: lock, RawTags: tags}
				if got := vmStatus(res); !got.IsValid() || string(got) != string(res.State(tenancy.Creating(res.Tags()))) {
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
		want model.VMStatus
	}{
		{"z1", 101, model.VMStatusCreating},
		{"z2", 101, model.VMStatusStopped},
		{"z1", 102, model.VMStatusStopped},
		{"z1", 103, model.VMStatusStopped},
	} {
		if got := guestStatus(pveapi.Resource{Type: "qemu", VMID: c.vmid, Status: "stopped"}, creating[c.zone]); got != c.want {
			t.Errorf("guest %d of %s: %s, want %s", c.vmid, c.zone, got, c.want)
		}
	}
}

func TestPaginateFollowsKeysNotPositions(t *testing.T) {
	t.Parallel()
	key := func(s string) string { return s }
	items := []string{"d", "b", "a", "c", "e"}
	var got []string
	var after *string
	for {
		p, err := paginate(items, key, ptr(2), 20, after)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.items...)
		if p.total != len(items) || p.info.HasPreviousPage != (after != nil) || len(p.cursors) != len(p.items) {
			t.Fatalf("page after %v: %+v", after, p)
		}
		if !p.info.HasNextPage {
			break
		}
		// The item the cursor names goes away: the next page is still right.
		last := p.items[len(p.items)-1]
		items = slices.DeleteFunc(items, func(s string) bool { return s == last })
		after = p.info.EndCursor
	}
	if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(got, want) {
		t.Errorf("pages = %v, want %v", got, want)
	}
	p, err := paginate([]string{}, key, nil, 20, nil)
	if err != nil || p.items == nil || p.info.EndCursor != nil || p.info.HasNextPage {
		t.Errorf("empty list: %+v, %v", p, err)
	}
	for _, bad := range []string{"", "x", encodeCursor("a")[1:]} {
		if _, err := paginate(items, key, nil, 20, &bad); err == nil {
			t.Errorf("after %q: no error", bad)
		}
	}
	if _, err := paginate(items, key, ptr(-1), 20, nil); err == nil {
		t.Error("first -1: no error")
	}
}

func TestVMCursorRoundTrips(t *testing.T) {
	t.Parallel()
	for _, ref := range []tenancy.VMRef{{ZoneID: "a-b", VMID: 100}, {ZoneID: "a", VMID: 999999999}} {
		c := encodeCursor(vmCursorKey(ref))
		got, err := vmCursor(&c)
		if err != nil || *got != ref {
			t.Errorf("%+v: %+v, %v", ref, got, err)
		}
	}
	// Keys order as vms does: zone identity, then VMID.
	a, b, c := tenancy.VMRef{ZoneID: "a", VMID: 999}, tenancy.VMRef{ZoneID: "a", VMID: 1000}, tenancy.VMRef{ZoneID: "a-b", VMID: 100}
	if !(vmCursorKey(a) < vmCursorKey(b) && vmCursorKey(b) < vmCursorKey(c)) || vmOrder(b, c) >= 0 {
		t.Error("cursor keys do not order as vmOrder")
	}
}
