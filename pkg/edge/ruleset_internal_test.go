//go:build linux

package edge

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/flexplane/flexplane/pkg/support/nsnet"
)

// A rule's level is one more than the highest of the earlier rules one packet can
// match together with it, so that no two rules of a level meet.
func TestRulesetLevels(t *testing.T) {
	t.Parallel()
	web := Rule{ID: "web", Direction: Inbound, Protocol: "tcp", FromPort: 80, ToPort: 80, Destination: netip.MustParsePrefix("10.1.0.11/32"), Allow: true}
	ssh := Rule{ID: "ssh", Direction: Inbound, Protocol: "tcp", FromPort: 22, ToPort: 22, Destination: netip.MustParsePrefix("10.1.0.11/32")}
	dns := Rule{ID: "dns", Direction: Outbound, Protocol: "udp", FromPort: 53, ToPort: 53}
	anyIn := Rule{ID: "any", Direction: Inbound, Protocol: "any", Source: netip.MustParsePrefix("198.51.100.0/24")}
	ping := Rule{ID: "ping", Direction: Inbound, Protocol: "icmp", Destination: netip.MustParsePrefix("10.1.0.0/24"), Allow: true}
	otherNet := Rule{ID: "other", Direction: Inbound, Protocol: "tcp", FromPort: 1, ToPort: 65535, Destination: netip.MustParsePrefix("10.2.0.0/16")}
	for _, tc := range []struct {
		name  string
		rules []Rule
		want  []int
	}{
		{"disjoint ports, directions, networks", []Rule{web, ssh, dns, otherNet}, []int{0, 0, 0, 0}},
		{"any protocol from a network meets a port", []Rule{web, anyIn, dns, ssh}, []int{0, 1, 0, 2}},
		{"icmp never meets tcp", []Rule{web, ping, ssh}, []int{0, 0, 0}},
		{"icmp meets any protocol", []Rule{ping, anyIn}, []int{0, 1}},
		{"a rule meets itself", []Rule{web, web, web}, []int{0, 1, 2}},
		{"a later rule below an earlier level", []Rule{web, web, dns, ssh, anyIn}, []int{0, 1, 0, 0, 2}},
		{"none", nil, []int{}},
	} {
		if got, _ := levels(tc.rules); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: levels %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Trying the levels' maps in order decides every packet as the first matching rule
// would, and counts it on that rule: random rulesets against random packets.
func TestRulesetMapsDecideAsTheRulesInOrder(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(14, 1000))
	prefixes := []string{"", "10.1.0.0/24", "10.1.0.11/32", "10.1.0.12/32", "10.0.0.0/8", "198.51.100.0/24", "198.51.100.7/32", "0.0.0.0/1"}
	addrs := []string{"10.1.0.11", "10.1.0.12", "10.2.3.4", "198.51.100.7", "198.51.100.200", "203.0.113.254"}
	protos := []string{"tcp", "udp", "icmp", "any"}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	prefix := func() netip.Prefix {
		if s := pick(prefixes); s != "" {
			return netip.MustParsePrefix(s)
		}
		return netip.Prefix{}
	}
	for round := range 300 {
		rules := make([]Rule, 1+rng.IntN(40))
		for i := range rules {
			r := Rule{ID: fmt.Sprint(i), Direction: []string{Inbound, Outbound}[rng.IntN(2)], Protocol: pick(protos),
				Source: prefix(), Destination: prefix(), Allow: rng.IntN(2) == 0}
			if (r.Protocol == "tcp" || r.Protocol == "udp") && rng.IntN(3) > 0 {
				r.FromPort = uint16(20 + rng.IntN(10))
				r.ToPort = r.FromPort + uint16(rng.IntN(4))
			}
			rules[i] = r
		}
		maps := ruleMaps(rules)
		for range 200 {
			pk := packet{dir: []string{Inbound, Outbound}[rng.IntN(2)], src: netip.MustParseAddr(pick(addrs)), dst: netip.MustParseAddr(pick(addrs)),
				proto: protoNumber(pick(protos[:3])), port: uint16(18 + rng.IntN(16))}
			wantID, wantVerdict := "", expr.VerdictKind(-100)
			for _, r := range rules {
				if pk.matches(r) {
					wantID, wantVerdict = CounterID(r.ID), ruleVerdict(r)
					break
				}
			}
			gotID, gotVerdict := "", expr.VerdictKind(-100)
		lookup:
			for _, m := range maps {
				if !bytes.Contains([]byte(m.name), []byte("_"+pk.dir+"_")) {
					continue
				}
				hits := 0
				for _, e := range m.elems {
					if pk.in(e, m.ported) {
						hits++
						gotID, gotVerdict = e.id, e.verdict
					}
				}
				switch {
				case hits > 1:
					t.Fatalf("round %d: %v is in %d elements of %s", round, pk, hits, m.name)
				case hits == 1:
					break lookup
				}
			}
			if gotID != wantID || gotVerdict != wantVerdict {
				t.Fatalf("round %d: %+v decided by %q (%v) in the maps, by %q (%v) in the rules %+v", round, pk, gotID, gotVerdict, wantID, wantVerdict, rules)
			}
		}
	}
}

// packet is what the forward chain's rules look at.
type packet struct {
	dir      string
	src, dst netip.Addr
	proto    byte
	port     uint16
}

func (p packet) matches(r Rule) bool {
	switch {
	case r.Direction != p.dir,
		r.Source.IsValid() && !r.Source.Contains(p.src),
		r.Destination.IsValid() && !r.Destination.Contains(p.dst),
		r.Protocol != "any" && protoNumber(r.Protocol) != p.proto,
		r.FromPort != 0 && (p.port < r.FromPort || p.port > r.ToPort):
		return false
	}
	return true
}

// in says whether the packet's key falls in the element's intervals, field by field.
func (p packet) in(e element, ported bool) bool {
	key := appendField(appendField(appendField(nil, 0, be32(p.src)), 1, be32(p.dst)), 2, uint32(p.proto))
	if ported {
		key = appendField(key, 3, uint32(p.port))
	}
	if len(key) != len(e.key) {
		panic("key length")
	}
	for i := 0; i < len(key); i += 4 {
		if bytes.Compare(key[i:i+4], e.key[i:i+4]) < 0 || bytes.Compare(key[i:i+4], e.end[i:i+4]) > 0 {
			return false
		}
	}
	return true
}

func be32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// A run of edits (rules added, deleted, inserted in front of the ones they overlap,
// their verdicts and ports changed), each applied as changes to the last apply, leaves
// the kernel's maps exactly as a fresh compile of the rules says; the same ruleset
// again sends nothing, and a restarted agent reads what the table holds and sends changes.
func TestRulesetChangesMatchTheRules(t *testing.T) {
	t.Parallel()
	ns := ScratchNS(t)
	g := Gateway{VDC: "changes", Uplink: Uplink{Bridge: "vmbr0", Address: netip.MustParsePrefix("203.0.113.10/24")}}
	rng := rand.New(rand.NewPCG(14, 2))
	next := 0
	rule := func() Rule {
		next++
		r := Rule{ID: fmt.Sprint("r", next), Direction: []string{Inbound, Outbound}[rng.IntN(2)], Protocol: []string{"tcp", "udp", "any"}[rng.IntN(3)],
			Source: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(rng.IntN(8))}), 29+rng.IntN(4)).Masked(), Allow: rng.IntN(2) == 0}
		if r.Protocol != "any" {
			r.FromPort = uint16(1 + rng.IntN(100))
			r.ToPort = r.FromPort + uint16(rng.IntN(3))
		}
		return r
	}
	for range 60 {
		g.Rules = append(g.Rules, rule())
	}
	m := NewManager(Config{})
	for step := range 40 {
		edit := "first"
		if step > 0 {
			edit = "none"
			i := rng.IntN(len(g.Rules))
			switch rng.IntN(5) {
			case 0:
				edit, g.Rules = "append", append(g.Rules, rule())
			case 1:
				edit, g.Rules = "delete", slices.Delete(g.Rules, i, i+1)
			case 2:
				// In front of everything, overlapping many: later levels move.
				r := rule()
				r.Direction, r.Protocol, r.FromPort, r.ToPort, r.Source = g.Rules[i].Direction, "any", 0, 0, netip.MustParsePrefix("198.51.100.0/24")
				edit, g.Rules = "insert in front", slices.Insert(g.Rules, 0, r)
			case 3:
				edit = "verdict"
				g.Rules[i].Allow = !g.Rules[i].Allow
			case 4:
				if g.Rules[i].FromPort != 0 {
					edit = "port"
					g.Rules[i].ToPort++
				}
			}
		}
		ra, err := m.ApplyRuleset(ns, g)
		if err != nil {
			t.Fatalf("step %d (%s): %v", step, edit, err)
		}
		if want := map[bool]string{true: "replaced", false: "changes"}[step == 0]; ra.Mode != want && edit != "none" {
			t.Errorf("step %d (%s): mode %s, want %s", step, edit, ra.Mode, want)
		}
		if got, want := kernelMaps(t, ns), planMaps(compile(g, nil)); got != want {
			t.Fatalf("step %d (%s): the kernel's maps\n%s\nwant\n%s", step, edit, got, want)
		}
	}
	if ra, err := m.ApplyRuleset(ns, g); err != nil || ra.Mode != "unchanged" || ra.Took != 0 {
		t.Errorf("the same ruleset again: %+v, %v", ra, err)
	}
	if ra, err := NewManager(Config{}).ApplyRuleset(ns, g); err != nil || ra.Mode != "unchanged" {
		t.Errorf("the same ruleset by a restarted agent: %+v, %v", ra, err)
	}
	g.Rules = g.Rules[1:]
	if ra, err := NewManager(Config{}).ApplyRuleset(ns, g); err != nil || ra.Mode != "changes" {
		t.Errorf("another ruleset by a restarted agent (it reads what the table holds): %+v, %v", ra, err)
	}
	if got, want := kernelMaps(t, ns), planMaps(compile(g, nil)); got != want {
		t.Fatalf("after a restarted agent's changes, the kernel's maps\n%s\nwant\n%s", got, want)
	}
}

// planMaps lists a plan's maps and elements, sorted.
func planMaps(p *plan) string {
	var lines []string
	for name, m := range p.maps {
		for _, e := range m.elems {
			lines = append(lines, fmt.Sprintf("%s %x-%x %v %s", name, e.key, e.end, e.verdict, e.id))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// kernelMaps lists the kernel's rule maps and elements as planMaps does, and checks
// that the forward chain looks each map up once.
func kernelMaps(t *testing.T, ns string) string {
	t.Helper()
	c, done, err := conn(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	tb := &nftables.Table{Name: tableName, Family: nftables.TableFamilyIPv4}
	sets, err := c.GetSets(tb)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := c.GetRules(tb, &nftables.Chain{Name: "forward", Table: tb})
	if err != nil {
		t.Fatal(err)
	}
	lookups := map[string]int{}
	for _, r := range rules {
		for _, e := range r.Exprs {
			if l, ok := e.(*expr.Lookup); ok {
				lookups[l.SetName]++
			}
		}
	}
	var lines []string
	for _, s := range sets {
		if lookups[s.Name] != 1 {
			t.Errorf("the forward chain looks %s up %d times", s.Name, lookups[s.Name])
		}
		elems, err := c.GetSetElements(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range elems {
			v, ok := elementVerdict(e.Val)
			if !ok {
				t.Fatalf("%s: an element without a verdict", s.Name)
			}
			id := e.Comment[strings.LastIndex(e.Comment, " ")+1:]
			lines = append(lines, fmt.Sprintf("%s %x-%x %v %s", s.Name, e.Key, e.KeyEnd, v, id))
		}
	}
	if len(lookups) != len(sets) {
		t.Errorf("the forward chain looks up %v, the table has %d maps", lookups, len(sets))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// ScratchNS is a network namespace of its own for a ruleset (the ruleset names
// interfaces, it does not need them), deleted when tb ends; for this package's
// tests and benchmarks.
func ScratchNS(tb testing.TB) string {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Fatal("this test builds a network namespace: run it as root")
	}
	ns := fmt.Sprintf("fpr%d", time.Now().UnixNano()%1e9)
	if err := nsnet.Ensure(ns); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nsnet.Delete(ns) })
	return ns
}

// A restarted agent that finds a table of the earlier format (a forward chain
// without the drop of what no DNAT addressed, and without its counter) sends
// the new ruleset as changes: the counter is made in the same transaction, and
// the forward chain counts in it.
func TestRulesetChangesAddTheNamedCounters(t *testing.T) {
	t.Parallel()
	ns := ScratchNS(t)
	g := Gateway{VDC: "upgrade", Uplink: Uplink{Bridge: "vmbr0", Address: netip.MustParsePrefix("203.0.113.10/24")},
		Rules: []Rule{{ID: "web", Direction: Inbound, Protocol: "tcp", FromPort: 80, ToPort: 80, Allow: true}}}
	if _, err := NewManager(Config{}).ApplyRuleset(ns, g); err != nil {
		t.Fatal(err)
	}
	c, done, err := conn(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	tb := &nftables.Table{Name: tableName, Family: nftables.TableFamilyIPv4}
	state := &nftables.Chain{Name: stateChain, Table: tb}
	_, chains := fingerprint(c, tb)
	if chains == nil {
		t.Fatal("the state rule records no chains")
	}
	chains[slices.Index(chainNames, "forward")] = "earlier"
	c.FlushChain(&nftables.Chain{Name: "forward", Table: tb})
	c.DeleteObject(&nftables.NamedObj{Table: tb, Name: NotDNATedID, Type: nftables.ObjTypeCounter})
	c.FlushChain(state)
	c.AddRule(&nftables.Rule{Table: tb, Chain: state, Exprs: verdict(expr.VerdictReturn), UserData: []byte("earlier\n" + strings.Join(chains, "\n"))})
	if err := c.Flush(); err != nil {
		t.Fatalf("making the table of the earlier format: %v", err)
	}
	counter := &nftables.NamedObj{Table: tb, Name: NotDNATedID, Type: nftables.ObjTypeCounter}
	// The library does not wrap the kernel's ENOENT here: any error is its absence.
	if _, err := c.GetObject(counter); err == nil {
		t.Fatalf("the table of the earlier format has the counter %s", NotDNATedID)
	}

	ra, err := NewManager(Config{}).ApplyRuleset(ns, g)
	if err != nil || ra.Mode != "changes" {
		t.Fatalf("the ruleset over a table of the earlier format: %+v, %v", ra, err)
	}
	if _, err := c.GetObject(counter); err != nil {
		t.Errorf("after the changes: the counter %s: %v", NotDNATedID, err)
	}
	rules, err := c.GetRules(tb, &nftables.Chain{Name: "forward", Table: tb})
	if err != nil {
		t.Fatal(err)
	}
	refs := 0
	for _, r := range rules {
		for _, e := range r.Exprs {
			if o, ok := e.(*expr.Objref); ok && o.Name == NotDNATedID {
				refs++
			}
		}
	}
	if refs != 1 {
		t.Errorf("the forward chain counts in %s %d times, want once", NotDNATedID, refs)
	}
}
