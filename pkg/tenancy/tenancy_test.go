package tenancy

import (
	"errors"
	"regexp"
	"slices"
	"testing"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// Proxmox's own formats for the ids derived here (pve-common, pve-network).
var (
	tagRE   = regexp.MustCompile(`(?i)^[a-z0-9_][a-z0-9_\-+.]*$`)
	sdnRE   = regexp.MustCompile(`^[a-z][a-z0-9]*[a-z0-9]$`)
	poolRE  = regexp.MustCompile(`^[A-Za-z0-9.\-_]+$`)
	aliasRE = regexp.MustCompile(`^[\(\)-_.\w\d\s]{0,256}$`)
)

func TestDerivedNamesAreValidProxmoxIDs(t *testing.T) {
	t.Parallel()
	for _, vdc := range []string{"a", "prod", "staging-eu-1", "x123456789012345678901234567890123456789012345678901234567890ab"} {
		for _, tag := range SplitTags(GuestTags(vdc, "fp-creating")) {
			if !tagRE.MatchString(tag) {
				t.Errorf("tag %q of vdc %q is not a valid Proxmox tag", tag, vdc)
			}
		}
		if id := SDNZoneID(vdc); len(id) > 8 || !sdnRE.MatchString(id) {
			t.Errorf("SDN zone id %q of vdc %q is not valid", id, vdc)
		}
		if id := VNetID(vdc, "web.backend"); len(id) > 8 || !sdnRE.MatchString(id) {
			t.Errorf("VNet id %q is not valid", id)
		}
		if p := PoolID(vdc); !poolRE.MatchString(p) {
			t.Errorf("pool %q is not valid", p)
		}
		if a := VNetAlias(vdc, "web.backend-1"); !aliasRE.MatchString(a) {
			t.Errorf("alias %q is not valid", a)
		}
	}
}

func TestDerivedIDsSeparateVDCsAndNetworks(t *testing.T) {
	t.Parallel()
	if SDNZoneID("prod") == SDNZoneID("dev") {
		t.Error("two VDCs share an SDN zone")
	}
	if VNetID("prod", "web") == VNetID("dev", "web") || VNetID("prod", "web") == VNetID("prod", "db") {
		t.Error("two networks share a VNet id")
	}
	// The separator keeps ("ab","c") and ("a","bc") apart.
	if VNetID("ab", "c") == VNetID("a", "bc") {
		t.Error("VNet ids collide across the vdc/network boundary")
	}
	if a, b := SDNZoneID("prod"), SDNZoneID(string([]byte("prod"))); a != b {
		t.Errorf("SDN zone id is not deterministic: %q, %q", a, b)
	}
}

func TestVDCOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tags    string
		vdc     string
		managed bool
	}{
		{GuestTags("prod"), "prod", true},
		{GuestTags("prod", "web"), "prod", true},
		{"fp-vdc-prod", "", false},                // not managed: a look-alike tag set by hand
		{"flexplane;fp-vdc-a;fp-vdc-b", "", true}, // ambiguous: belongs to no VDC
		{"flexplane", "", true},                   // managed but no VDC
		{"flexplane,fp-vdc-dev web", "dev", true}, // input separators Proxmox accepts
		{"", "", false},
	} {
		vdc, managed := VDCOf(SplitTags(tc.tags))
		if vdc != tc.vdc || managed != tc.managed {
			t.Errorf("VDCOf(%q) = %q, %v; want %q, %v", tc.tags, vdc, managed, tc.vdc, tc.managed)
		}
	}
}

func TestJoinTagsIsCanonical(t *testing.T) {
	t.Parallel()
	if got := JoinTags([]string{"b", "a", "b"}); got != "a;b" {
		t.Errorf("JoinTags = %q", got)
	}
}

func TestVNetAliasRoundTrip(t *testing.T) {
	t.Parallel()
	vdc, network, ok := ParseVNetAlias(VNetAlias("prod", "web"))
	if !ok || vdc != "prod" || network != "web" {
		t.Errorf("round trip = %q %q %v", vdc, network, ok)
	}
	for _, a := range []string{"", "web", "flexplane:", "flexplane:prod", "flexplane::web", "flexplane:prod:"} {
		if _, _, ok := ParseVNetAlias(a); ok {
			t.Errorf("ParseVNetAlias(%q) accepted", a)
		}
	}
}

func TestIDsRoundTripAndRejectForgeries(t *testing.T) {
	t.Parallel()
	ref := VMRef{ZoneID: "c0ffee", VMID: 4242}
	got, err := ParseVMID(ref.ID())
	if err != nil || got != ref {
		t.Fatalf("ParseVMID(ID) = %v, %v", got, err)
	}
	nref := NetworkRef{ZoneID: "c0ffee", VNet: "nabcdefg"}
	if got, err := ParseNetworkID(nref.ID()); err != nil || got != nref {
		t.Fatalf("ParseNetworkID(ID) = %v, %v", got, err)
	}
	for _, bad := range []string{
		"", "!!", nref.ID(), // a network id is not a VM id
		encodeID("vm", "z", "99"), encodeID("vm", "z", "x"), encodeID("vm", "", "100"),
		encodeID("vm", "z", "100", "extra"),
	} {
		if _, err := ParseVMID(bad); !errors.Is(err, ErrBadID) {
			t.Errorf("ParseVMID(%q) err = %v, want ErrBadID", bad, err)
		}
	}
	if _, err := ParseNetworkID(ref.ID()); !errors.Is(err, ErrBadID) {
		t.Errorf("ParseNetworkID(vm id) err = %v", err)
	}
}

func TestOpTag(t *testing.T) {
	t.Parallel()
	tags := SplitTags(GuestTags("prod", CreatingTag, OpTag("abc123")))
	if got := OpOf(tags); got != "abc123" {
		t.Errorf("OpOf = %q, want abc123", got)
	}
	if got := OpOf(SplitTags(GuestTags("prod"))); got != "" {
		t.Errorf("OpOf without op tag = %q", got)
	}
	if vdc, ok := VDCOf(tags); !ok || vdc != "prod" {
		t.Errorf("VDCOf = %q, %v", vdc, ok)
	}
}

func TestHostID(t *testing.T) {
	ref := HostRef{ZoneID: "c0ffee", Node: "pve2"}
	got, err := ParseHostID(ref.ID())
	if err != nil || got != ref {
		t.Fatalf("ParseHostID(%q) = %+v, %v", ref.ID(), got, err)
	}
	for _, bad := range []string{"", "!!", VMRef{ZoneID: "c0ffee", VMID: 100}.ID(), NetworkRef{ZoneID: "z", VNet: "n"}.ID()} {
		if _, err := ParseHostID(bad); !errors.Is(err, ErrBadID) {
			t.Errorf("ParseHostID(%q) = %v, want ErrBadID", bad, err)
		}
	}
}

// TestVNetBelongs is the one check that a VNet is a VDC's: its alias names
// the VDC and it lies in the VDC's SDN zone.
func TestVNetBelongs(t *testing.T) {
	t.Parallel()
	alias := VNetAlias("red", "web")
	for _, c := range []struct {
		vdc, zone, alias string
		want             bool
	}{
		{"red", SDNZoneID("red"), alias, true},
		{"blue", SDNZoneID("red"), alias, false},
		{"red", SDNZoneID("blue"), alias, false}, // an alias copied onto another VDC's VNet
		{"red", "localnet", alias, false},
		{"red", SDNZoneID("red"), "web", false},
		{"red", SDNZoneID("red"), "", false},
	} {
		if got := VNetBelongs(c.vdc, c.zone, c.alias); got != c.want {
			t.Errorf("VNetBelongs(%q, %q, %q) = %v", c.vdc, c.zone, c.alias, got)
		}
	}
	if vdc, name, ok := VNetOf(SDNZoneID("red"), alias); !ok || vdc != "red" || name != "web" {
		t.Errorf("VNetOf: %q %q %v", vdc, name, ok)
	}
}

// TestCreating: a guest is marked creating by CreatingTag, or by being
// managed without a VDC tag yet; a guest of a VDC, and one flexplane does
// not manage, are not.
func TestCreating(t *testing.T) {
	t.Parallel()
	for tags, want := range map[string]bool{
		GuestTags("red", CreatingTag): true,
		ManagedTag:                    true,
		CreatingTag:                   true,
		GuestTags("red"):              false,
		GuestTags("red", OpTag("x")):  false,
		"":                            false,
		"web;db":                      false,
	} {
		if got := Creating(SplitTags(tags)); got != want {
			t.Errorf("Creating(%q) = %v, want %v", tags, got, want)
		}
	}
}

// TestSplitTagsReadsAsProxmoxDoes: tenancy writes and reads Proxmox tag
// lists; pveapi reads them on its own, the same way.
func TestSplitTagsReadsAsProxmoxDoes(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "a", "flexplane;fp-vdc-red", "a,b c", ";;a;;", GuestTags("red", CreatingTag)} {
		if got, want := SplitTags(in), pveapi.SplitTags(in); !slices.Equal(got, want) {
			t.Errorf("SplitTags(%q) = %q, pveapi reads %q", in, got, want)
		}
	}
}
