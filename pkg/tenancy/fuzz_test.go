package tenancy

import (
	"slices"
	"strings"
	"testing"
)

// FuzzParseID checks the parsers of the opaque ids the API hands out and
// takes back from any client (testdata/fuzz/FuzzParseID): an id parses only
// if it is exactly the id of what it parses to, so one object has one id,
// and the kinds never parse as each other.
func FuzzParseID(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string) {
		vm, verr := ParseVMID(id)
		if verr == nil && vm.ID() != id {
			t.Errorf("ParseVMID(%q) = %+v, whose id is %q", id, vm, vm.ID())
		}
		if verr == nil && (vm.VMID < 100 || vm.VMID > 999999999) {
			t.Errorf("ParseVMID(%q) = %+v: VMID out of Proxmox's range", id, vm)
		}
		n, nerr := ParseNetworkID(id)
		if nerr == nil && n.ID() != id {
			t.Errorf("ParseNetworkID(%q) = %+v, whose id is %q", id, n, n.ID())
		}
		h, herr := ParseHostID(id)
		if herr == nil && h.ID() != id {
			t.Errorf("ParseHostID(%q) = %+v, whose id is %q", id, h, h.ID())
		}
		if ok := btoi(verr == nil) + btoi(nerr == nil) + btoi(herr == nil); ok > 1 {
			t.Errorf("%q parses as %d kinds of id", id, ok)
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FuzzTags checks the reading of a guest's Proxmox tags, which anyone with
// access to the guest can edit (testdata/fuzz/FuzzTags): JoinTags gives the
// canonical form (sorted, unique, no separator inside a tag) and reading
// that again changes nothing; a VDC is found only when the guest carries the
// managed tag and exactly one VDC tag, and GuestTags of that VDC reads back
// as it.
func FuzzTags(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw string) {
		tags := SplitTags(raw)
		joined := JoinTags(tags)
		again := SplitTags(joined)
		if JoinTags(again) != joined || !slices.IsSorted(again) || len(slices.Compact(slices.Clone(again))) != len(again) {
			t.Fatalf("tags %q: JoinTags gives %q, which reads back as %q", raw, joined, again)
		}
		for _, tag := range again {
			if tag == "" || strings.ContainsAny(tag, ";, ") {
				t.Fatalf("tags %q: tag %q is empty or holds a separator", raw, tag)
			}
		}
		vdc, managed := VDCOf(tags)
		if managed != slices.Contains(tags, ManagedTag) {
			t.Fatalf("VDCOf(%q): managed = %v", raw, managed)
		}
		if vdc != "" {
			if !managed || !slices.Contains(tags, VDCTag(vdc)) {
				t.Fatalf("VDCOf(%q) = %q without the managed tag or its VDC tag", raw, vdc)
			}
			if got, ok := VDCOf(SplitTags(GuestTags(vdc, OpTag("x")))); got != vdc || !ok {
				t.Fatalf("VDCOf(GuestTags(%q)) = %q, %v", vdc, got, ok)
			}
		}
		if op := OpOf(tags); op != "" && !slices.Contains(tags, OpTag(op)) {
			t.Fatalf("OpOf(%q) = %q, which is not among the tags", raw, op)
		}
	})
}

// FuzzVNetAlias checks the reading of a VNet's alias, which anyone who can
// edit the VNet can write (testdata/fuzz/FuzzVNetAlias): what parses is
// exactly the alias flexplane would write for it.
func FuzzVNetAlias(f *testing.F) {
	f.Fuzz(func(t *testing.T, alias string) {
		vdc, network, ok := ParseVNetAlias(alias)
		if !ok {
			if vdc != "" || network != "" {
				t.Fatalf("ParseVNetAlias(%q) failed but returned %q, %q", alias, vdc, network)
			}
			return
		}
		if vdc == "" || network == "" || strings.Contains(vdc, ":") || VNetAlias(vdc, network) != alias {
			t.Fatalf("ParseVNetAlias(%q) = %q, %q, whose alias is %q", alias, vdc, network, VNetAlias(vdc, network))
		}
	})
}
