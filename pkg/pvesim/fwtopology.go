package pvesim

import (
	"net"
	"net/netip"
	"slices"
	"strconv"

	"github.com/flexplane/flexplane/pkg/pvesim/pveschema"
)

// AddrRange is an inclusive range of addresses of one family.
type AddrRange = pveschema.AddrRange

// PortRange is an inclusive range of TCP/UDP ports.
type PortRange = pveschema.PortRange

// FirewallSet is an ipset as the data plane matches it: its members as sorted, disjoint
// ranges per family (the most specific entry holding an address decides whether it is a
// member, as in the kernel's hash:net ipsets with nomatch entries).
type FirewallSet struct {
	V4, V6 []AddrRange
}

// NICFirewall is what the firewall enforces on a guest's NIC: set when the NIC has
// firewall=1, the guest's firewall options enable=1 and the cluster's enable=1.
type NICFirewall struct {
	// PolicyIn and PolicyOut end the chains: ACCEPT, DROP or REJECT (defaults DROP and
	// ACCEPT, as Proxmox's).
	PolicyIn, PolicyOut string
	// MACFilter drops frames from the guest whose source MAC is not the NIC's
	// (macfilter, default on).
	MACFilter bool
	// IPFilter names the set of Topology.FirewallSets holding the addresses the guest
	// may send from (ipfilter=1): its ipfilter-netN ipset, or without one the NIC's
	// configured and IPAM addresses, plus its IPv6 link-local address; "" without
	// ipfilter.
	IPFilter string
	// Rules are the guest's enabled rules for this NIC in order, security groups
	// expanded in place.
	Rules []FirewallRule
}

// FirewallRule is one rule as the data plane matches it.
type FirewallRule struct {
	// In is a rule for traffic to the guest; otherwise from it.
	In bool
	// Action is ACCEPT, DROP or REJECT.
	Action string
	// Proto is the IP protocol number; -1 matches any.
	Proto int
	// DPorts and SPorts are the ports matched (none: any).
	DPorts, SPorts []PortRange
	// ICMPType is the ICMP (ICMPv6 with Proto 58) type; -1 matches any.
	ICMPType int
	// Source and Dest are the addresses matched.
	Source, Dest FirewallAddrs
}

// FirewallAddrs are a rule's source or destination: a set of Topology.FirewallSets, or
// literal ranges of one family; neither matches any address.
type FirewallAddrs struct {
	Set    string
	V4, V6 []AddrRange
}

// Any reports whether the match is on every address.
func (a FirewallAddrs) Any() bool { return a.Set == "" && len(a.V4) == 0 && len(a.V6) == 0 }

// firewallTopology sets the NICs' firewalls and the sets they name; the caller holds mu.
func (st *state) firewallTopology(t *Topology) {
	if st.fw.Options["enable"] != "1" {
		return
	}
	for gi := range t.Guests {
		tg := &t.Guests[gi]
		g := st.guests[tg.VMID]
		if g == nil || g.fw == nil || g.fw.Options["enable"] != "1" {
			continue
		}
		for ni := range tg.NICs {
			nic := &tg.NICs[ni]
			key := "net" + strconv.Itoa(nic.Index)
			s, _ := g.conf[key].(string)
			if parseProperty(s).get("firewall") != "1" {
				continue
			}
			nic.Firewall = st.nicFirewall(t, g, key, nic)
		}
	}
}

func optionOr(o map[string]string, k, def string) string {
	if v, ok := o[k]; ok && v != "" {
		return v
	}
	return def
}

func (st *state) nicFirewall(t *Topology, g *guest, iface string, nic *TopologyNIC) *NICFirewall {
	o := g.fw.Options
	f := &NICFirewall{
		PolicyIn:  optionOr(o, "policy_in", "DROP"),
		PolicyOut: optionOr(o, "policy_out", "ACCEPT"),
		MACFilter: optionOr(o, "macfilter", "1") == "1",
	}
	if o["ipfilter"] == "1" {
		f.IPFilter = st.ipfilterSet(t, g, iface, nic)
	}
	for _, r := range g.fw.Rules {
		if r.Enable == 0 || (r.Opts["iface"] != "" && r.Opts["iface"] != iface) {
			continue
		}
		if r.Type != "group" {
			if fr, ok := st.compileRule(t, g, r); ok {
				f.Rules = append(f.Rules, fr)
			}
			continue
		}
		grp := st.fw.Groups[r.Action]
		if grp == nil {
			continue
		}
		for _, gr := range grp.Rules {
			if gr.Enable == 0 || (gr.Opts["iface"] != "" && gr.Opts["iface"] != iface) {
				continue
			}
			if fr, ok := st.compileRule(t, g, gr); ok {
				f.Rules = append(f.Rules, fr)
			}
		}
	}
	return f
}

// ipfilterSet makes the set of addresses the NIC may send from and returns its name.
func (st *state) ipfilterSet(t *Topology, g *guest, iface string, nic *TopologyNIC) string {
	name := "ipfilter-" + iface
	var entries []setEntry
	if set := g.fw.IPSets[name]; set != nil {
		entries = setEntries(set)
	} else {
		if nic.Address.IsValid() {
			entries = append(entries, hostEntry(nic.Address.Addr()))
		}
		for _, m := range st.sdn.ips {
			if m.vmid != g.vmid || (m.mac != "" && !macEqual(m.mac, nic.MAC)) {
				continue
			}
			if a, err := netip.ParseAddr(m.ip); err == nil {
				entries = append(entries, hostEntry(a))
			}
		}
	}
	// The unspecified addresses (DHCP, duplicate address detection, ARP probes) and
	// the link-local address of the MAC are always the guest's own.
	ll, _ := netip.ParseAddr(linkLocal(nic.MAC))
	for _, a := range []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified(), ll} {
		if a.IsValid() {
			entries = append(entries, hostEntry(a))
		}
	}
	full := "guest/" + strconv.Itoa(g.vmid) + "/" + name
	addSet(t, full, entries)
	return full
}

func macEqual(a, b string) bool {
	x, err1 := net.ParseMAC(a)
	y, err2 := net.ParseMAC(b)
	return err1 == nil && err2 == nil && x.String() == y.String()
}

// setEntry is an ipset entry: its addresses, its prefix length and whether it is a
// nomatch entry.
type setEntry struct {
	r       AddrRange
	bits    int
	nomatch bool
}

func hostEntry(a netip.Addr) setEntry {
	return setEntry{r: AddrRange{From: a, To: a}, bits: a.BitLen()}
}

// setEntries parses an ipset's entries.
func setEntries(s *fwIPSet) []setEntry {
	var out []setEntry
	for _, e := range s.Entries {
		r, err := pveschema.ParseFirewallAddr(e.CIDR)
		if err != nil {
			continue // an alias: not simulated
		}
		bits := r.From.BitLen()
		if p, err := netip.ParsePrefix(e.CIDR); err == nil {
			bits = p.Bits()
		}
		out = append(out, setEntry{r: r, bits: bits, nomatch: e.NoMatch})
	}
	return out
}

// addSet puts a set into the topology as disjoint ranges per family. As in the
// kernel's hash:net ipsets, the most specific entry holding an address decides: a
// nomatch entry cuts its addresses out of wider entries, a narrower entry inside a
// nomatch one puts its addresses back.
func addSet(t *Topology, name string, entries []setEntry) {
	if t.FirewallSets == nil {
		t.FirewallSets = map[string]FirewallSet{}
	}
	entries = slices.Clone(entries)
	slices.SortStableFunc(entries, func(a, b setEntry) int { return a.bits - b.bits })
	var s FirewallSet
	for _, e := range entries {
		res := &s.V4
		if e.r.From.Is6() {
			res = &s.V6
		}
		*res = subtractRanges(*res, []AddrRange{e.r})
		if !e.nomatch {
			*res = mergeRanges(append(*res, e.r))
		}
	}
	t.FirewallSets[name] = s
}

func family(rs []AddrRange, v6 bool) []AddrRange {
	var out []AddrRange
	for _, r := range rs {
		if r.From.Is6() == v6 {
			out = append(out, r)
		}
	}
	return out
}

// mergeRanges sorts ranges and joins those that overlap or touch.
func mergeRanges(rs []AddrRange) []AddrRange {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b AddrRange) int { return a.From.Compare(b.From) })
	var out []AddrRange
	for _, r := range rs {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if next := last.To.Next(); !next.IsValid() || r.From.Compare(next) <= 0 {
				if r.To.Compare(last.To) > 0 {
					last.To = r.To
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// subtractRanges removes the (merged) ranges cut from the (merged) ranges rs.
func subtractRanges(rs, cut []AddrRange) []AddrRange {
	var out []AddrRange
	for _, r := range rs {
		cur := []AddrRange{r}
		for _, c := range cut {
			var next []AddrRange
			for _, x := range cur {
				if c.To.Compare(x.From) < 0 || c.From.Compare(x.To) > 0 {
					next = append(next, x)
					continue
				}
				if c.From.Compare(x.From) > 0 {
					next = append(next, AddrRange{From: x.From, To: c.From.Prev()})
				}
				if c.To.Compare(x.To) < 0 {
					next = append(next, AddrRange{From: c.To.Next(), To: x.To})
				}
			}
			cur = next
		}
		out = append(out, cur...)
	}
	return out
}

// compileRule turns a rule into its data-plane form; false for a rule pve-firewall
// would skip (a set or alias that no longer resolves).
func (st *state) compileRule(t *Topology, g *guest, r fwRule) (FirewallRule, bool) {
	fr := FirewallRule{In: r.Type == "in", Action: r.Action, Proto: -1, ICMPType: -1}
	if p := r.Opts["proto"]; p != "" {
		fr.Proto, _ = pveschema.FirewallProtocol(p)
	}
	for _, k := range []string{"dport", "sport"} {
		if v := r.Opts[k]; v != "" {
			ports, icmp, err := pveschema.ParseFirewallPorts(v, k == "dport")
			if err != nil {
				return fr, false
			}
			if k == "dport" {
				fr.DPorts = ports
				if len(icmp) == 1 {
					fr.ICMPType, _ = pveschema.ICMPType(icmp[0], fr.Proto == 58)
				}
			} else {
				fr.SPorts = ports
			}
		}
	}
	if v := r.Opts["icmp-type"]; v != "" {
		n, ok := pveschema.ICMPType(v, fr.Proto == 58)
		if !ok {
			if n, ok = pveschema.ICMPType(v, fr.Proto != 58); !ok {
				return fr, false
			}
		}
		fr.ICMPType = n
	}
	var ok bool
	if fr.Source, ok = st.compileAddrs(t, g, r.Opts["source"]); !ok {
		return fr, false
	}
	if fr.Dest, ok = st.compileAddrs(t, g, r.Opts["dest"]); !ok {
		return fr, false
	}
	return fr, true
}

func (st *state) compileAddrs(t *Topology, g *guest, v string) (FirewallAddrs, bool) {
	if v == "" {
		return FirewallAddrs{}, true
	}
	if scope, name, ok := pveschema.FirewallSetRef(v); ok {
		if scope != "dc" && g.fw.IPSets[name] != nil {
			full := "guest/" + strconv.Itoa(g.vmid) + "/" + name
			addSet(t, full, setEntries(g.fw.IPSets[name]))
			return FirewallAddrs{Set: full}, true
		}
		if (scope == "dc" || scope == "") && st.fw.IPSets[name] != nil {
			full := "dc/" + name
			addSet(t, full, setEntries(st.fw.IPSets[name]))
			return FirewallAddrs{Set: full}, true
		}
		return FirewallAddrs{}, false
	}
	ranges, _, err := pveschema.ParseFirewallAddrList(v)
	if err != nil {
		return FirewallAddrs{}, false
	}
	return FirewallAddrs{V4: mergeRanges(family(ranges, false)), V6: mergeRanges(family(ranges, true))}, true
}
