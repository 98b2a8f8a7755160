package sgsync

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// comment is the comment of a security group or IP set of vdc: the
// tenancy tags of its guests (tenancy.ManagedTag and tenancy.VDCTag), then
// what it is. With the name's "fp" prefix they mark it as flexplane's and
// say whose it is.
func comment(vdc, what string) string {
	return tenancy.ManagedTag + " " + tenancy.VDCTag(vdc) + " " + what
}

// objName is the Proxmox name of one of flexplane's firewall objects: "fp"
// and 14 hex digits of a hash of what it is (kind and parts), 16
// characters, within Proxmox's 18 and its [A-Za-z][A-Za-z0-9-_]+.
func objName(kind string, parts ...string) string {
	h := sha256.Sum256([]byte(kind + "\x00" + strings.Join(parts, "\x00")))
	return "fp" + hex.EncodeToString(h[:])[:14]
}

// owned reports whether a group or set of this name and comment is
// flexplane's, and of which VDC.
func owned(name, comment string) (vdc string, ok bool) {
	words := strings.Fields(comment)
	if !strings.HasPrefix(name, "fp") || len(words) < 2 || words[0] != tenancy.ManagedTag {
		return "", false
	}
	vdc, _ = tenancy.VDCOf(words[:2])
	return vdc, vdc != ""
}

// MemberSet is the name of the cluster IP set holding the addresses of
// the members of vdc's group in a zone (the same in every zone).
func MemberSet(vdc, group string) string { return objName("members", vdc, group) }

// set is an IP set as flexplane wants it.
type set struct {
	comment string
	entries []pveapi.IPSetEntry
}

// group is a security group as flexplane wants it.
type group struct {
	comment string
	rules   []pveapi.FirewallRule
}

// vmWant is what flexplane wants of a member VM's firewall.
type vmWant struct {
	m       compute.Member
	groups  []string // the Proxmox groups attached, in order
	options pveapi.FirewallOptions
}

// zoneWant is what flexplane wants of one zone's firewall.
type zoneWant struct {
	sets   map[string]set
	groups map[string]group
	vms    []vmWant
	// others are the VDCs' VMs in no group: none of flexplane's groups
	// stays attached to them.
	others []compute.Member
	// groupOf is the Proxmox group of each of the catalog's groups
	// (<vdc>.<name>) wanted in the zone.
	groupOf map[string]string
}

func newZoneWant() *zoneWant {
	return &zoneWant{sets: map[string]set{}, groups: map[string]group{}, groupOf: map[string]string{}}
}

// addVDC adds what vdc wants in the zone: its groups (the catalog's),
// given its VMs there. A VDC whose VMs there are in no group wants
// nothing of the zone but that they carry none of flexplane's groups.
func (w *zoneWant) addVDC(vdc string, groups []*catalog.SecurityGroup, vms []compute.Member) {
	var members []compute.Member
	for _, m := range vms {
		if len(m.Groups) > 0 {
			members = append(members, m)
		} else {
			w.others = append(w.others, m)
		}
	}
	if len(members) == 0 {
		return
	}
	// The platform's traffic: whatever does not come from the VDC's own
	// networks came through its edge gateway, whose rules decided it; the
	// gateways' own addresses (their health checks, the Kubernetes API
	// endpoints they forward) both ways.
	var nets, gws []string
	for _, m := range vms {
		for _, n := range m.NICs {
			a, err := netip.ParseAddr(n.Address)
			if err != nil {
				continue
			}
			p := netip.PrefixFrom(a, n.Bits).Masked()
			if p.IsValid() && !slices.Contains(nets, p.String()) {
				nets = append(nets, p.String())
			}
			if n.Gateway != "" && !slices.Contains(gws, n.Gateway) {
				gws = append(gws, n.Gateway)
			}
		}
	}
	slices.Sort(nets)
	slices.Sort(gws)
	outside := objName("outside", append([]string{vdc}, nets...)...)
	o := set{comment: comment(vdc, "platform: not the VDC's networks")}
	o.entries = []pveapi.IPSetEntry{{CIDR: "0.0.0.0/1"}, {CIDR: "128.0.0.0/1"}}
	for _, n := range nets {
		o.entries = append(o.entries, pveapi.IPSetEntry{CIDR: n, NoMatch: 1})
	}
	w.sets[outside] = o
	gwSet := objName("gateways", append([]string{vdc}, gws...)...)
	g := set{comment: comment(vdc, "platform: the edge gateway's addresses")}
	for _, a := range gws {
		g.entries = append(g.entries, pveapi.IPSetEntry{CIDR: a})
	}
	w.sets[gwSet] = g
	platform := objName("platform", vdc, outside, gwSet)
	w.groups[platform] = group{comment: comment(vdc, "platform"), rules: []pveapi.FirewallRule{
		{Type: "in", Action: "ACCEPT", Enable: 1, Source: "+dc/" + outside, Comment: "what the edge gateway forwards"},
		{Type: "in", Action: "ACCEPT", Enable: 1, Source: "+dc/" + gwSet, Comment: "the edge gateway's own traffic"},
		{Type: "out", Action: "ACCEPT", Enable: 1, Dest: "+dc/" + gwSet, Comment: "to the edge gateway"},
	}}

	// Every group of the VDC has its members' set (peers name it), and
	// its Proxmox group, named after its content.
	outbound := map[string]bool{}
	for _, sg := range groups {
		name := sg.ShortName()
		ms := set{comment: comment(vdc, "group="+name+" members")}
		for _, m := range members {
			if slices.Contains(m.Groups, name) {
				for _, n := range m.NICs {
					ms.entries = append(ms.entries, pveapi.IPSetEntry{CIDR: n.Address})
				}
			}
		}
		slices.SortFunc(ms.entries, func(a, b pveapi.IPSetEntry) int { return strings.Compare(a.CIDR, b.CIDR) })
		ms.entries = slices.Compact(ms.entries)
		w.sets[MemberSet(vdc, name)] = ms
		rules := translate(vdc, sg)
		pg := objName("group", vdc, name, fmt.Sprint(rules))
		w.groups[pg] = group{comment: comment(vdc, "group="+name), rules: rules}
		w.groupOf[sg.Name] = pg
		outbound[name] = sg.HasOutbound()
	}
	for _, m := range members {
		want := vmWant{m: m, groups: []string{platform},
			options: pveapi.FirewallOptions{Enable: 1, IPFilter: 1, DHCP: 1, PolicyIn: "DROP", PolicyOut: "ACCEPT"}}
		for _, name := range m.Groups {
			pg, ok := w.groupOf[catalog.SecurityGroupName(vdc, name)]
			if !ok {
				continue // a group deleted meanwhile: the VM no longer has it
			}
			want.groups = append(want.groups, pg)
			if outbound[name] {
				want.options.PolicyOut = "DROP"
			}
		}
		w.vms = append(w.vms, want)
	}
}

// translate is the Proxmox rules of a group: inbound from its own members,
// then each of its rules, in order, each allowing what it matches.
func translate(vdc string, sg *catalog.SecurityGroup) []pveapi.FirewallRule {
	out := []pveapi.FirewallRule{{Type: "in", Action: "ACCEPT", Enable: 1, Source: "+dc/" + MemberSet(vdc, sg.ShortName()),
		Comment: "members of the same group"}}
	for i, r := range sg.Rules {
		fr := pveapi.FirewallRule{Type: r.Direction, Action: "ACCEPT", Enable: 1, DPort: r.Ports, Comment: fmt.Sprintf("rule %d", i)}
		if r.Protocol != catalog.SecurityProtocolAny {
			fr.Proto = r.Protocol
		}
		peer := r.PeerCIDR
		if r.PeerGroup != "" {
			peer = "+dc/" + MemberSet(vdc, r.PeerGroup)
		}
		if r.Direction == catalog.DirectionInbound {
			fr.Source = peer
		} else {
			fr.Dest = peer
		}
		out = append(out, fr)
	}
	return out
}
