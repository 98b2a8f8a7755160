package sgsync

import (
	"regexp"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// pveName is Proxmox's pattern of a security group's and an IP set's name.
var pveName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9\-_]+$`)

// TestNamesAndTenancy: every object a VDC's groups make has a name Proxmox
// takes (at most 18 characters) that no other VDC's group has, and a
// comment that says it is flexplane's and whose it is; a changed group is
// a new Proxmox group; a VM's outbound policy is DROP only when one of
// its groups has an outbound rule.
func TestNamesAndTenancy(t *testing.T) {
	t.Parallel()
	group := func(vdc, name string, rules ...catalog.SecurityRule) *catalog.SecurityGroup {
		g := &catalog.SecurityGroup{}
		g.Name, g.VDC, g.Rules = catalog.SecurityGroupName(vdc, name), vdc, rules
		return g
	}
	in5432 := catalog.SecurityRule{Direction: catalog.DirectionInbound, Protocol: "tcp", Ports: "5432", PeerGroup: "app"}
	out443 := catalog.SecurityRule{Direction: catalog.DirectionOutbound, Protocol: "tcp", Ports: "443"}
	vm := func(id int, addr string, groups ...string) compute.Member {
		return compute.Member{Groups: groups, NICs: []compute.NICIntent{{Address: addr, Bits: 24, Gateway: "10.1.0.1"}}}
	}
	want := func(vdc string, gs []*catalog.SecurityGroup, vms ...compute.Member) *zoneWant {
		w := newZoneWant()
		w.addVDC(vdc, gs, vms)
		return w
	}
	red := want("red", []*catalog.SecurityGroup{group("red", "app"), group("red", "db", in5432, out443)},
		vm(1, "10.1.0.10", "app"), vm(2, "10.1.0.11", "db"), vm(3, "10.1.0.12"))
	blue := want("blue", []*catalog.SecurityGroup{group("blue", "app"), group("blue", "db", in5432, out443)},
		vm(1, "10.1.0.10", "app"), vm(2, "10.1.0.11", "db"))
	for name, g := range red.groups {
		if len(name) > 18 || !pveName.MatchString(name) {
			t.Errorf("group name %q", name)
		}
		if v, ok := owned(name, g.comment); !ok || v != "red" {
			t.Errorf("group %s comment %q: owned by %q, %v", name, g.comment, v, ok)
		}
		if _, clash := blue.groups[name]; clash {
			t.Errorf("red's group %s is blue's too", name)
		}
	}
	for name, s := range red.sets {
		if len(name) > 18 || !pveName.MatchString(name) {
			t.Errorf("set name %q", name)
		}
		if v, ok := owned(name, s.comment); !ok || v != "red" {
			t.Errorf("set %s comment %q", name, s.comment)
		}
		if _, clash := blue.sets[name]; clash {
			t.Errorf("red's set %s is blue's too", name)
		}
	}
	if got := red.sets[MemberSet("red", "app")].entries; len(got) != 1 || got[0] != (pveapi.IPSetEntry{CIDR: "10.1.0.10"}) {
		t.Errorf("app's members: %v", got)
	}
	if len(red.vms) != 2 || len(red.others) != 1 {
		t.Fatalf("members %d, others %d", len(red.vms), len(red.others))
	}
	if red.vms[0].options.PolicyOut != "ACCEPT" || red.vms[1].options.PolicyOut != "DROP" || red.vms[1].options.PolicyIn != "DROP" ||
		red.vms[1].options.IPFilter != 1 {
		t.Errorf("options: %+v, %+v", red.vms[0].options, red.vms[1].options)
	}
	changed := want("red", []*catalog.SecurityGroup{group("red", "app"), group("red", "db", out443)},
		vm(1, "10.1.0.10", "app"), vm(2, "10.1.0.11", "db"))
	if changed.groupOf["red.db"] == red.groupOf["red.db"] || changed.groupOf["red.app"] != red.groupOf["red.app"] {
		t.Errorf("Proxmox groups before and after db changed: %v, %v", red.groupOf, changed.groupOf)
	}
	if _, ok := owned("fpabc", "someone else's"); ok {
		t.Error("a group with another comment taken for flexplane's")
	}
	if _, ok := owned("web", comment("red", "group=web")); ok {
		t.Error("a group without the fp prefix taken for flexplane's")
	}
}
