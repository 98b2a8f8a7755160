package graph

import (
	"slices"
	"testing"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

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
	if !(vmCursorKey(a) < vmCursorKey(b) && vmCursorKey(b) < vmCursorKey(c)) || estate.Order(b, c) >= 0 {
		t.Error("cursor keys do not order as estate.Order")
	}
}

// TestVMStatusIsPveapiState: every status the estate gives a guest
// (pveapi's one mapping) is a status of the schema.
func TestVMStatusIsPveapiState(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"running", "stopped", "paused", "suspended", "unknown", ""} {
		for _, lock := range []string{"", "clone", "create", "suspended", "backup"} {
			for _, tags := range []string{"", tenancy.GuestTags("red"), tenancy.GuestTags("red", tenancy.CreatingTag)} {
				res := pveapi.Resource{Type: "qemu", VMID: 7, Status: status, Lock: lock, RawTags: tags}
				for _, creating := range []map[int]bool{nil, {7: true}} {
					if got := model.VMStatus(estate.GuestStatus(res, creating)); !got.IsValid() {
						t.Errorf("%+v: %q is no status of the schema", res, got)
					}
				}
			}
		}
	}
}
