//go:build linux

package edge

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// tableName is the gateway's nftables table (family ip) in its namespace.
const tableName = "flexplane_edge"

// The ruleset, in the gateway's namespace (the uplink is "uplink", the legs "legN"):
//
//	prerouting (nat, dstnat):   1:1 and port-forward DNAT of traffic arriving on the uplink
//	postrouting (nat, srcnat):  1:1 SNAT, then SNAT of everything else leaving by the
//	                            uplink to the VDC's public address
//	forward (filter, drop):     established/related accepted, invalid dropped; between
//	                            legs accepted; from the uplink back to it dropped; from
//	                            the uplink without DNAT (conntrack status) dropped,
//	                            counted by the named counter NotDNATedID; the
//	                            rules, as one verdict-map lookup per level (below), each
//	                            rule an element with its counter; port forwards accepted
//	                            (their connections carry a conntrack mark: a port forward
//	                            opens its port unless a rule denies it; 1:1 addresses
//	                            need rules); inbound dropped (counted by the named
//	                            counter DefaultDenyID); outbound accepted
//	input (filter, drop):       established, the legs and ICMP accepted
//	state (no hook):            one rule whose user data is the ruleset's fingerprint
//
// Levels: a rule's level is one more than the highest level of the earlier rules one
// packet can match together with it (0 without any). Two rules of one level never
// match one packet, so a level is one lookup per direction and key shape in a verdict
// map (a concatenated, interval-keyed map, each element with its counter), and trying
// the levels in order decides as the rules in order would: of the rules a packet
// matches, the first has the lowest level, as every later one meets it. A rule's level
// depends only on the rules before it that it meets, so an edit moves few elements.
//
// An apply compiles the gateway into a plan and compares its fingerprint with the one
// in the state chain: the same, nothing is sent. Otherwise, when the manager knows what
// it applied last (that fingerprint), one transaction sends only the difference: map
// elements added and deleted (the others, with their counters, stay), a map made again
// only when most of it changes, a chain's rules replaced only when they changed. Without
// that knowledge (an agent restarted, a table of another format) the table is replaced
// whole in one transaction, the counters read first and carried over in the elements'
// comments ("packets bytes id": an element's counter starts at zero).

// rulesetVersion changes the fingerprint when the ruleset's format changes.
const rulesetVersion = "edge-ruleset-4"

// stateChain holds the fingerprint.
const stateChain = "state"

// plan is the ruleset a gateway compiles to.
type plan struct {
	chains map[string][][]expr.Any // rules by chain (none for a chain taken over)
	canon  map[string]string       // each chain's rules, canonically
	maps   map[string]*ruleMap     // by name
	fp     string
}

// ruleMap is one verdict map of a level.
type ruleMap struct {
	name   string
	level  int
	ported bool
	elems  []element
}

// element is one rule in a map.
type element struct {
	key, end []byte
	verdict  expr.VerdictKind
	id       string // counter id
	ident    string // names the element within its map: the above
}

func newElement(key, end []byte, v expr.VerdictKind, id string) element {
	e := element{key: key, end: end, verdict: v, id: id}
	e.ident = string(key) + string(end) + string(rune('0'+int(v)+1)) + id
	return e
}

// applied is what a manager last applied in a namespace.
type applied struct {
	input  Gateway // the gateway it was compiled from, without what the ruleset ignores
	fp     string
	chains map[string]string             // each chain's rules, canonically
	maps   map[string]map[string]element // each map's elements by ident
}

var chainNames = []string{"prerouting", "postrouting", "forward", "input", stateChain}

// compile makes g's plan; the NAT chains of reuse (non-nil) are taken as they are
// when g's NAT is reuse's.
func compile(g Gateway, reuse *applied) *plan {
	p := &plan{chains: map[string][][]expr.Any{}, maps: map[string]*ruleMap{}, canon: map[string]string{}}
	add := func(chain string, es ...expr.Any) { p.chains[chain] = append(p.chains[chain], es) }
	fromUplink := ifname(unix.NFT_META_IIFNAME, "uplink")
	toUplink := ifname(unix.NFT_META_OIFNAME, "uplink")

	if reuse != nil && sameNAT(reuse.input, g) {
		p.canon["prerouting"], p.canon["postrouting"] = reuse.chains["prerouting"], reuse.chains["postrouting"]
	} else {
		compileNAT(g, add)
	}

	add("forward", cat(ctBits(unix.NFT_CT_STATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))...)
	add("forward", cat(ctBits(unix.NFT_CT_STATE, expr.CtStateBitINVALID), verdict(expr.VerdictDrop))...)
	add("forward", cat(notIfname(unix.NFT_META_IIFNAME, "uplink"), notIfname(unix.NFT_META_OIFNAME, "uplink"), verdict(expr.VerdictAccept))...)
	// A balancer's listeners (uplink to uplink, to the replicas) and relays
	// (from the replicas to the VDC's VMs): before the rules, as the address is
	// the balancer's alone.
	add("forward", cat(fromUplink, toUplink, ctMarkIs(balancerMark), verdict(expr.VerdictAccept))...)
	add("forward", cat(fromUplink, notIfname(unix.NFT_META_OIFNAME, "uplink"), ctMarkIs(relayMark), verdict(expr.VerdictAccept))...)
	// Traffic from the external network back to it is no VDC's: the gateway routes
	// for its VDC only (and so inbound and outbound rules never meet one packet).
	add("forward", cat(fromUplink, toUplink, verdict(expr.VerdictDrop))...)
	// A new flow from the external network into the VDC that no DNAT of the
	// gateway's addressed (a host on the external network sending to a VM's
	// private address by way of the uplink): dropped before the rules, whatever
	// they allow, and counted apart. Inbound rules are for what the port
	// forwards, 1:1 addresses and relays let in; they see the VM's address only
	// because the DNAT put it there.
	add("forward", cat(fromUplink, ctBitsClear(unix.NFT_CT_STATUS, ctStatusDNAT), counterRef(NotDNATedID), verdict(expr.VerdictDrop))...)
	// The platform's endpoints (from a leg to the external network): before the
	// rules, which are the tenant's.
	add("forward", cat(toUplink, ctMarkIs(endpointMark), verdict(expr.VerdictAccept))...)
	for _, m := range ruleMaps(g.Rules) {
		p.maps[m.name] = m
		dir := Inbound
		if strings.Contains(m.name, "_"+Outbound+"_") {
			dir = Outbound
		}
		add("forward", cat(direction(dir), mapKey(m.ported), []expr.Any{&expr.Lookup{SourceRegister: regKey, SetName: m.name, IsDestRegSet: true}})...)
	}
	add("forward", cat(fromUplink, ctMarkIs(forwardedMark), verdict(expr.VerdictAccept))...)
	add("forward", cat(fromUplink, counterRef(DefaultDenyID), verdict(expr.VerdictDrop))...)
	add("forward", cat(toUplink, verdict(expr.VerdictAccept))...)

	add("input", cat(ctBits(unix.NFT_CT_STATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))...)
	add("input", cat(notIfname(unix.NFT_META_IIFNAME, "uplink"), verdict(expr.VerdictAccept))...)
	add("input", cat(proto("icmp"), verdict(expr.VerdictAccept))...)

	h := sha256.New()
	fmt.Fprintln(h, rulesetVersion)
	for _, name := range chainNames {
		if _, ok := p.canon[name]; !ok {
			p.canon[name] = canonical(p.chains[name])
		}
		fmt.Fprintln(h, name, p.canon[name])
	}
	for _, name := range slices.Sorted(mapsKeys(p.maps)) {
		fmt.Fprintln(h, name)
		for _, e := range p.maps[name].elems {
			h.Write([]byte(e.ident))
			h.Write([]byte{0})
		}
	}
	p.fp = hex.EncodeToString(h.Sum(nil))
	return p
}

// compileNAT adds the NAT chains' rules.
func compileNAT(g Gateway, add func(chain string, es ...expr.Any)) {
	fromUplink := ifname(unix.NFT_META_IIFNAME, "uplink")
	toUplink := ifname(unix.NFT_META_OIFNAME, "uplink")
	for _, o := range g.OneToOne {
		add("prerouting", cat(fromUplink, addrIs(16, o.Public), natTo(expr.NATTypeDestNAT, o.Private, 0))...)
	}
	for _, pf := range g.PortForwards {
		add("prerouting", cat(fromUplink, addrIs(16, pf.PublicAddr), proto(pf.Protocol), portRange(pf.PublicPort, pf.PublicPort),
			setCtMark(forwardedMark), natTo(expr.NATTypeDestNAT, pf.Target, pf.TargetPort))...)
	}
	for _, b := range g.Balancers {
		for _, fw := range b.Frontends {
			add("prerouting", cat(fromUplink, addrIs(16, b.Public), proto("tcp"), portRange(fw.Port, fw.Port),
				setCtMark(balancerMark), natTo(expr.NATTypeDestNAT, fw.Target, fw.TargetPort))...)
		}
		for _, fw := range b.Relays {
			for _, src := range b.Sources {
				add("prerouting", cat(fromUplink, prefixIs(12, src), addrIs(16, b.Public), proto("tcp"), portRange(fw.Port, fw.Port),
					setCtMark(relayMark), natTo(expr.NATTypeDestNAT, fw.Target, fw.TargetPort))...)
			}
		}
		if len(b.Frontends) > 0 {
			// The replicas answer the gateway, which answers the client.
			add("postrouting", cat(toUplink, ctMarkIs(balancerMark), natTo(expr.NATTypeSourceNAT, b.Public, 0))...)
		}
	}
	for _, e := range g.Endpoints {
		add("prerouting", cat(notIfname(unix.NFT_META_IIFNAME, "uplink"), addrIs(16, e.Address), proto("tcp"), portRange(e.Port, e.Port),
			setCtMark(endpointMark), natTo(expr.NATTypeDestNAT, e.Target, e.TargetPort))...)
	}
	for _, o := range g.OneToOne {
		add("postrouting", cat(toUplink, addrIs(12, o.Private), natTo(expr.NATTypeSourceNAT, o.Public, 0))...)
	}
	add("postrouting", cat(toUplink, natTo(expr.NATTypeSourceNAT, g.Uplink.Address.Addr(), 0))...)
}

// sameNAT says whether a and b make the same NAT chains.
func sameNAT(a, b Gateway) bool {
	return a.Uplink.Address == b.Uplink.Address && slices.Equal(a.PortForwards, b.PortForwards) && slices.Equal(a.OneToOne, b.OneToOne) &&
		reflect.DeepEqual(a.Balancers, b.Balancers) && slices.Equal(a.Endpoints, b.Endpoints)
}

func mapsKeys(m map[string]*ruleMap) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// canonical is a digest of a chain's rules, to compare.
func canonical(rules [][]expr.Any) string {
	h := sha256.New()
	for _, r := range rules {
		writeRule(h, r)
	}
	// 64 bits: the state rule keeps four of these and the fingerprint in the
	// 256 bytes a rule's user data may have.
	return hex.EncodeToString(h.Sum(nil)[:8])
}

func writeRule(h hash.Hash, r []expr.Any) {
	for _, e := range r {
		b, err := expr.Marshal(byte(nftables.TableFamilyIPv4), e)
		if err != nil {
			fmt.Fprintf(h, "%T%+v", e, e)
		}
		h.Write(b)
	}
	h.Write([]byte{0})
}

// levels gives each rule its level (see above).
func levels(rules []Rule) ([]int, []box) {
	lv := make([]int, len(rules))
	boxes := make([]box, len(rules))
	// By direction (rules of two directions never meet), in order.
	type placed struct {
		b     box
		level int
	}
	var seen [2][]placed
	for j, r := range rules {
		b, d := boxOf(r), 0
		boxes[j] = b
		if r.Direction == Outbound {
			d = 1
		}
		l := 0
		ps := seen[d]
		for i := range ps {
			if p := &ps[i]; p.level >= l && p.b.meets(b) {
				l = p.level + 1
			}
		}
		lv[j] = l
		seen[d] = append(seen[d], placed{b, l})
	}
	return lv, boxes
}

// ruleMaps puts the rules into their levels' maps: per level and direction one
// keyed by source, destination, protocol and port for the rules with ports, one
// without the port for the others; in the order the forward chain looks them up.
func ruleMaps(rules []Rule) []*ruleMap {
	lv, boxes := levels(rules)
	type shape struct {
		level  int
		dir    string
		ported bool
	}
	byShape := map[shape]*ruleMap{}
	var out []*ruleMap
	for i, r := range rules {
		sh := shape{lv[i], r.Direction, r.FromPort != 0}
		m := byShape[sh]
		if m == nil {
			name := fmt.Sprintf("rules%d_%s_any", sh.level, sh.dir)
			if sh.ported {
				name = fmt.Sprintf("rules%d_%s_port", sh.level, sh.dir)
			}
			m = &ruleMap{name: name, level: sh.level, ported: sh.ported}
			byShape[sh] = m
			out = append(out, m)
		}
		fields := 3
		if sh.ported {
			fields = 4
		}
		kb := make([]byte, 0, 32)
		for i, f := range boxes[i].fields[:fields] {
			kb = appendField(kb, i, f.lo)
		}
		for i, f := range boxes[i].fields[:fields] {
			kb = appendField(kb, i, f.hi)
		}
		m.elems = append(m.elems, newElement(kb[:4*fields:4*fields], kb[4*fields:], ruleVerdict(r), CounterID(r.ID)))
	}
	// Level first, then direction and shape.
	slices.SortFunc(out, func(a, b *ruleMap) int { return cmp.Or(cmp.Compare(a.level, b.level), strings.Compare(a.name, b.name)) })
	return out
}

// mapKey loads a map's key: source, destination, protocol (and port).
func mapKey(ported bool) []expr.Any {
	es := []expr.Any{
		&expr.Payload{DestRegister: regKey, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Payload{DestRegister: regKey + 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regKey + 2},
	}
	if ported {
		es = append(es, &expr.Payload{DestRegister: regKey + 3, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
	}
	return es
}

func mapSet(t *nftables.Table, m *ruleMap, id uint32) *nftables.Set {
	kt, _ := nftables.ConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr, nftables.TypeInetProto)
	if m.ported {
		kt, _ = nftables.ConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	}
	// The id names the map within the batch; given here, the library does not
	// take one from its package-wide counter (unguarded across connections).
	return &nftables.Set{Table: t, ID: id, Name: m.name, IsMap: true, DataType: nftables.TypeVerdict, KeyType: kt,
		Interval: true, Concatenation: true, Counter: true}
}

// RulesetApply is what one apply of a ruleset did.
type RulesetApply struct {
	// Took is how long the nftables transaction took (0 when none was needed).
	Took time.Duration
	// Mode is "unchanged" (nothing sent), "changes" (the difference sent) or
	// "replaced" (the table replaced whole).
	Mode string
}

// applyRuleset makes the gateway's table in ns match g in at most one nftables
// transaction; prev is what was applied there last (nil: not known), and the
// returned applied is what is there now (nil: not known).
func applyRuleset(ns string, g Gateway, prev *applied) (RulesetApply, *applied, error) {
	c, done, err := conn(ns)
	if err != nil {
		return RulesetApply{}, nil, err
	}
	defer done()
	t := &nftables.Table{Name: tableName, Family: nftables.TableFamilyIPv4}
	have, chains := fingerprint(c, t)
	in := rulesetInput(g)
	if prev == nil || prev.fp != have {
		prev = recall(c, t, have, chains)
	}
	if prev != nil && prev.fp == have && reflect.DeepEqual(prev.input, in) {
		return RulesetApply{Mode: "unchanged"}, prev, nil // not even compiled
	}
	reuse := prev
	if prev == nil || prev.fp != have {
		reuse = nil
	}
	p := compile(g, reuse)
	if have == p.fp {
		if prev == nil || prev.fp != have {
			// Applied by an earlier agent: what is in the maps is not known here,
			// so the next change replaces the table.
			return RulesetApply{Mode: "unchanged"}, nil, nil
		}
		prev.input = in
		return RulesetApply{Mode: "unchanged"}, prev, nil
	}
	var next *applied
	mode := "changes"
	if prev != nil && prev.fp == have {
		next, err = changes(c, t, p, prev)
	} else {
		mode = "replaced"
		next, err = replace(c, t, p)
	}
	if err != nil {
		return RulesetApply{}, nil, err
	}
	next.input = in
	start := time.Now()
	if err := c.Flush(); err != nil {
		return RulesetApply{}, nil, fmt.Errorf("edge: ruleset transaction: %w", err)
	}
	return RulesetApply{Took: time.Since(start), Mode: mode}, next, nil
}

// rulesetInput is g without what its ruleset does not depend on, copied.
func rulesetInput(g Gateway) Gateway {
	return Gateway{Uplink: Uplink{Address: g.Uplink.Address}, PortForwards: slices.Clone(g.PortForwards), OneToOne: slices.Clone(g.OneToOne),
		Rules: slices.Clone(g.Rules), Balancers: slices.Clone(g.Balancers), Endpoints: slices.Clone(g.Endpoints)}
}

// fingerprint is the state chain's fingerprint; "" without one.
func fingerprint(c *nftables.Conn, t *nftables.Table) (fp string, chains []string) {
	rules, err := c.GetRules(t, &nftables.Chain{Name: stateChain, Table: t})
	if err != nil || len(rules) != 1 {
		return "", nil
	}
	lines := strings.Split(string(rules[0].UserData), "\n")
	if len(lines) == 5 {
		chains = lines[1:]
	}
	return lines[0], chains
}

// recall rebuilds what was applied from the table (its maps dumped, the chains' digests
// the state rule keeps), so that an agent restarted applies changes, not a whole table;
// nil when the table does not tell.
func recall(c *nftables.Conn, t *nftables.Table, fp string, chains []string) *applied {
	if fp == "" || chains == nil {
		return nil
	}
	a := newApplied()
	a.fp = fp
	for i, name := range chainNames[:4] {
		a.chains[name] = chains[i]
	}
	sets, err := c.GetSets(t)
	if err != nil {
		return nil
	}
	for _, set := range sets {
		if !strings.HasPrefix(set.Name, "rules") {
			continue
		}
		elems, err := c.GetSetElements(set)
		if err != nil {
			return nil
		}
		m := map[string]element{}
		for _, e := range elems {
			v, ok := elementVerdict(e.Val)
			id := e.Comment[strings.LastIndex(e.Comment, " ")+1:]
			if !ok || id == "" {
				return nil
			}
			el := newElement(e.Key, e.KeyEnd, v, id)
			m[el.ident] = el
		}
		a.maps[set.Name] = m
	}
	return a
}

// elementVerdict is the verdict of a verdict map's element data.
func elementVerdict(val []byte) (expr.VerdictKind, bool) {
	ad, err := mdnetlink.NewAttributeDecoder(val)
	if err != nil {
		return 0, false
	}
	for ad.Next() {
		if ad.Type() == unix.NFTA_VERDICT_CODE {
			return expr.VerdictKind(int32(binary.BigEndian.Uint32(ad.Bytes()))), true
		}
	}
	return 0, false
}

// batch queues one transaction's messages.
type batch struct {
	c    *nftables.Conn
	t    *nftables.Table
	ids  map[string]uint32 // maps added in this batch
	next *applied
}

func (b *batch) chain(name string) *nftables.Chain { return &nftables.Chain{Name: name, Table: b.t} }

// rules adds chain's rules (canonically canon), the lookups naming the maps added in
// this batch by id too.
func (b *batch) rules(chain string, rules [][]expr.Any, canon string) {
	ch := b.chain(chain)
	for _, es := range rules {
		for i, e := range es {
			if l, ok := e.(*expr.Lookup); ok && b.ids[l.SetName] != 0 {
				l2 := *l
				l2.SetID = b.ids[l.SetName]
				es = slices.Clone(es)
				es[i] = &l2
			}
		}
		b.c.AddRule(&nftables.Rule{Table: b.t, Chain: ch, Exprs: es})
	}
	b.next.chains[chain] = canon
}

// addMap adds m with its elements, their counters starting from counts.
func (b *batch) addMap(m *ruleMap, counts map[string]Counter) error {
	b.ids[m.name] = uint32(len(b.ids) + 1)
	return b.elements(mapSet(b.t, m, b.ids[m.name]), m.elems, counts, true)
}

// elements adds elems to the map s (made too when create), counting from counts.
func (b *batch) elements(s *nftables.Set, elems []element, counts map[string]Counter, create bool) error {
	have := b.next.maps[s.Name]
	if have == nil {
		have = map[string]element{}
		b.next.maps[s.Name] = have
	}
	vals := make([]nftables.SetElement, len(elems))
	for i, e := range elems {
		cnt := counts[e.id]
		comment := fmt.Sprintf("%d %d %s", cnt.Packets, cnt.Bytes, e.id)
		vals[i] = nftables.SetElement{Key: e.key, KeyEnd: e.end, VerdictData: &expr.Verdict{Kind: e.verdict}, Comment: comment}
		have[e.ident] = e
	}
	var err error
	if create {
		err = b.c.AddSet(s, vals)
	} else if len(vals) > 0 {
		err = b.c.SetAddElements(s, vals)
	}
	if err != nil {
		return fmt.Errorf("edge: rules %s: %w", s.Name, err)
	}
	return nil
}

// fingerprint records fp and the chains' digests in the state chain.
func (b *batch) fingerprint(fp string) {
	data := fp
	for _, name := range chainNames[:4] {
		data += "\n" + b.next.chains[name]
	}
	b.c.AddRule(&nftables.Rule{Table: b.t, Chain: b.chain(stateChain), Exprs: verdict(expr.VerdictReturn), UserData: []byte(data)})
	b.next.fp = fp
}

// namedCounters adds the named counters, counting from counts. One the table
// has already is left as it is (a counter object has nothing to update), so a
// table of an earlier format that lacks one gets it with its changes.
func (b *batch) namedCounters(counts map[string]Counter) {
	for _, name := range namedCounterIDs() {
		cnt := counts[name]
		b.c.AddObj(&nftables.NamedObj{Table: b.t, Name: name, Type: nftables.ObjTypeCounter, Obj: &expr.Counter{Packets: cnt.Packets, Bytes: cnt.Bytes}})
	}
}

// namedCounterIDs are the ids of the forward chain's named counters.
func namedCounterIDs() []string { return []string{DefaultDenyID, NotDNATedID} }

func newApplied() *applied {
	return &applied{chains: map[string]string{}, maps: map[string]map[string]element{}}
}

// replace queues the whole table replaced by p's, the counters carried over.
func replace(c *nftables.Conn, t *nftables.Table, p *plan) (*applied, error) {
	counts, err := readCounters(c)
	if err != nil {
		return nil, err
	}
	b := &batch{c: c, t: t, ids: map[string]uint32{}, next: newApplied()}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	drop, accept := nftables.ChainPolicyDrop, nftables.ChainPolicyAccept
	c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	c.AddChain(&nftables.Chain{Name: stateChain, Table: t})
	b.namedCounters(counts)
	for _, name := range slices.Sorted(mapsKeys(p.maps)) {
		if err := b.addMap(p.maps[name], counts); err != nil {
			return nil, err
		}
	}
	for _, name := range chainNames[:4] {
		b.rules(name, p.chains[name], p.canon[name])
	}
	b.fingerprint(p.fp)
	return b.next, nil
}

// changes queues what turns prev into p.
func changes(c *nftables.Conn, t *nftables.Table, p *plan, prev *applied) (*applied, error) {
	b := &batch{c: c, t: t, ids: map[string]uint32{}, next: newApplied()}
	// What each map loses and gains; a map losing most of itself is made again
	// (an element whose verdict or rule changes is deleted and added again in
	// the same transaction).
	type diff struct {
		gone, kept, added []element
		keptSet           map[string]bool
		remake            bool
	}
	diffs := map[string]*diff{}
	wanted := map[string]bool{} // counter ids in p
	for name, m := range p.maps {
		d := &diff{}
		diffs[name] = d
		old, ok := prev.maps[name]
		d.remake = !ok
		d.keptSet = map[string]bool{}
		for _, e := range m.elems {
			wanted[e.id] = true
			if _, ok := old[e.ident]; ok {
				d.kept = append(d.kept, e)
				d.keptSet[e.ident] = true
			} else {
				d.added = append(d.added, e)
			}
		}
		for ident, e := range old {
			if !d.keptSet[ident] {
				d.gone = append(d.gone, e)
			}
		}
		if len(d.gone) > len(d.kept) {
			d.remake = true
		}
	}
	// Rules whose elements move (to another map, or into a map made again)
	// keep their counts: those maps are read first.
	var read []string
	for name, old := range prev.maps {
		d := diffs[name]
		for ident, e := range old {
			if wanted[e.id] && (d == nil || d.remake || !d.keptSet[ident]) {
				read = append(read, name)
				break
			}
		}
	}
	counts := map[string]Counter{}
	if len(read) > 0 {
		if err := readMapCounters(c, t, read, counts); err != nil {
			return nil, err
		}
	}
	forward := p.canon["forward"] != prev.chains["forward"]
	for name := range prev.maps {
		if d := diffs[name]; d == nil || d.remake {
			forward = true // its lookup goes or is bound to the map made again
		}
	}
	for _, name := range chainNames[:4] {
		if (name == "forward" && forward) || (name != "forward" && p.canon[name] != prev.chains[name]) {
			c.FlushChain(b.chain(name))
		} else {
			b.next.chains[name] = prev.chains[name]
		}
	}
	for name := range prev.maps {
		if d := diffs[name]; d == nil || d.remake {
			c.DelSet(&nftables.Set{Table: t, Name: name})
		}
	}
	b.namedCounters(nil)
	for _, name := range slices.Sorted(mapsKeys(p.maps)) {
		d, m := diffs[name], p.maps[name]
		if d.remake {
			if err := b.addMap(m, counts); err != nil {
				return nil, err
			}
			continue
		}
		s := &nftables.Set{Table: t, Name: name, IsMap: true, KeyType: mapSet(t, m, 0).KeyType, Interval: true, Concatenation: true}
		if len(d.gone) > 0 {
			vals := make([]nftables.SetElement, len(d.gone))
			for i, e := range d.gone {
				vals[i] = nftables.SetElement{Key: e.key, KeyEnd: e.end}
			}
			if err := c.SetDeleteElements(s, vals); err != nil {
				return nil, fmt.Errorf("edge: rules %s: %w", name, err)
			}
		}
		kept := map[string]element{}
		for _, e := range d.kept {
			kept[e.ident] = e
		}
		b.next.maps[name] = kept
		if err := b.elements(s, d.added, counts, false); err != nil {
			return nil, err
		}
	}
	for _, name := range chainNames[:4] {
		if _, same := b.next.chains[name]; !same {
			b.rules(name, p.chains[name], p.canon[name])
		}
	}
	c.FlushChain(b.chain(stateChain))
	b.fingerprint(p.fp)
	return b.next, nil
}

// CounterID is the counter id of the rule with id ruleID.
func CounterID(ruleID string) string { return "rule:" + ruleID }

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func ifnameBytes(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func ifname(key uint32, name string) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKey(key), Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifnameBytes(name)}}
}

func notIfname(key uint32, name string) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKey(key), Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifnameBytes(name)}}
}

// addrIs matches the IPv4 header's source (offset 12) or destination (16) address.
func addrIs(offset uint32, a netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()},
	}
}

// prefixIs matches the source or destination address in p; nothing for the zero p.
func prefixIs(offset uint32, p netip.Prefix) []expr.Any {
	if !p.IsValid() || p.Bits() == 0 {
		return nil
	}
	p = p.Masked()
	mask := make([]byte, 4)
	binary.BigEndian.PutUint32(mask, ^uint32(0)<<(32-p.Bits()))
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Addr().AsSlice()},
	}
}

func protoNumber(name string) byte {
	return map[string]byte{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "icmp": unix.IPPROTO_ICMP}[strings.ToLower(name)]
}

// proto matches the transport protocol name; nothing for "any".
func proto(name string) []expr.Any {
	if name == "any" {
		return nil
	}
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{protoNumber(name)}}}
}

func be16(v uint16) []byte { b := make([]byte, 2); binary.BigEndian.PutUint16(b, v); return b }

// portRange matches the transport destination port in from..to.
func portRange(from, to uint16) []expr.Any {
	es := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}}
	if from == to {
		return append(es, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(from)})
	}
	return append(es, &expr.Cmp{Op: expr.CmpOpGte, Register: 1, Data: be16(from)}, &expr.Cmp{Op: expr.CmpOpLte, Register: 1, Data: be16(to)})
}

// ctBits matches a conntrack state or status with any of bits set.
func ctBits(key uint32, bits uint32) []expr.Any { return ctMasked(key, bits, expr.CmpOpNeq) }

// ctBitsClear matches a conntrack state or status with none of bits set.
func ctBitsClear(key uint32, bits uint32) []expr.Any { return ctMasked(key, bits, expr.CmpOpEq) }

// ctMasked compares a conntrack state or status masked by bits with zero.
func ctMasked(key uint32, bits uint32, op expr.CmpOp) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKey(key)},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binary.NativeEndian.AppendUint32(nil, bits), Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: 1, Data: make([]byte, 4)},
	}
}

// ctStatusDNAT is the conntrack status bit of a connection whose destination a
// DNAT changed (IPS_DST_NAT); a connection no DNAT rule matched has a null
// binding, without it.
const ctStatusDNAT = 1 << 5

// counterRef counts a packet in the named counter name.
func counterRef(name string) []expr.Any {
	return []expr.Any{&expr.Objref{Type: unix.NFT_OBJECT_COUNTER, Name: name}}
}

// forwardedMark is the conntrack mark of connections a port forward made.
const forwardedMark = 0x464e // "FN"

// endpointMark marks connections from the VDC's networks to a platform endpoint.
const endpointMark = 0x4550 // "EP"

// balancerMark marks connections to a load balancer's listeners; relayMark those
// of its replicas to the VDC's VMs.
const (
	balancerMark = 0x4c42 // "LB"
	relayMark    = 0x4c52 // "LR"
)

func setCtMark(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binary.NativeEndian.AppendUint32(nil, mark)},
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK, SourceRegister: true},
	}
}

func ctMarkIs(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, mark)},
	}
}

// natTo rewrites the source or destination to a (and port, unless 0).
func natTo(typ expr.NATType, a netip.Addr, port uint16) []expr.Any {
	es := []expr.Any{&expr.Immediate{Register: 1, Data: a.AsSlice()}}
	n := &expr.NAT{Type: typ, Family: unix.NFPROTO_IPV4, RegAddrMin: 1}
	if port != 0 {
		es = append(es, &expr.Immediate{Register: 2, Data: be16(port)})
		n.RegProtoMin = 2
	}
	return append(es, n)
}

// regKey is the first 32-bit register a map's key is loaded into (NFT_REG32_00).
const regKey = 8

// span is an inclusive range of a key field.
type span struct{ lo, hi uint32 }

func (a span) meets(b span) bool { return a.lo <= b.hi && b.lo <= a.hi }

// box is the packets a rule of one direction matches: the ranges of source,
// destination, protocol and destination port.
type box struct{ fields [4]span }

func boxOf(r Rule) box {
	var b box
	b.fields[0], b.fields[1] = prefixSpan(r.Source), prefixSpan(r.Destination)
	b.fields[2] = span{0, 255}
	if r.Protocol != "any" {
		n := uint32(protoNumber(r.Protocol))
		b.fields[2] = span{n, n}
	}
	b.fields[3] = span{0, 65535}
	if r.FromPort != 0 {
		b.fields[3] = span{uint32(r.FromPort), uint32(r.ToPort)}
	}
	return b
}

// meets says whether one packet can match both boxes of one direction.
func (a box) meets(b box) bool {
	return a.fields[0].meets(b.fields[0]) && a.fields[1].meets(b.fields[1]) && a.fields[2].meets(b.fields[2]) && a.fields[3].meets(b.fields[3])
}

func prefixSpan(p netip.Prefix) span {
	if !p.IsValid() || p.Bits() == 0 {
		return span{0, ^uint32(0)}
	}
	p = p.Masked()
	lo := binary.BigEndian.Uint32(p.Addr().AsSlice())
	return span{lo, lo | ^uint32(0)>>p.Bits()}
}

// appendField appends field i of a key (addresses, protocol, port), each padded to a
// register's 4 bytes.
func appendField(b []byte, i int, v uint32) []byte {
	switch i {
	case 2:
		return append(b, byte(v), 0, 0, 0)
	case 3:
		return append(b, byte(v>>8), byte(v), 0, 0)
	}
	return binary.BigEndian.AppendUint32(b, v)
}

// ReadCounters reads every rule's counter by id; a namespace without the table has
// none.
func ReadCounters(ns string) (map[string]Counter, error) {
	c, done, err := conn(ns)
	if err != nil {
		return nil, err
	}
	defer done()
	return readCounters(c)
}

// readCounters reads the counters of the rules' map elements, of the rules
// carrying an id in their user data (a table of the earlier format) and the
// named counters (the default deny's, the drop of what no DNAT addressed).
func readCounters(c *nftables.Conn) (map[string]Counter, error) {
	out := map[string]Counter{}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return nil, fmt.Errorf("edge: list tables: %w", err)
	}
	if !slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == tableName }) {
		return out, nil
	}
	t := &nftables.Table{Name: tableName, Family: nftables.TableFamilyIPv4}
	rules, err := c.GetRules(t, &nftables.Chain{Name: "forward", Table: t})
	if err != nil {
		return nil, fmt.Errorf("edge: read rules: %w", err)
	}
	for _, r := range rules {
		id := string(r.UserData)
		for _, e := range r.Exprs {
			if ce, ok := e.(*expr.Counter); ok && id != "" {
				out[id] = Counter{out[id].Packets + ce.Packets, out[id].Bytes + ce.Bytes}
			}
		}
	}
	for _, name := range namedCounterIDs() {
		obj, err := c.GetObject(&nftables.NamedObj{Table: t, Name: name, Type: nftables.ObjTypeCounter})
		switch {
		case errors.Is(err, unix.ENOENT):
		case err != nil:
			return nil, fmt.Errorf("edge: read %s: %w", name, err)
		default:
			if o, ok := obj.(*nftables.NamedObj); ok {
				if ce, ok := o.Obj.(*expr.Counter); ok {
					out[name] = Counter{out[name].Packets + ce.Packets, out[name].Bytes + ce.Bytes}
				}
			}
		}
	}
	if err := readMapCounters(c, t, nil, out); err != nil {
		return nil, err
	}
	return out, nil
}

// readMapCounters adds the counters of the elements of the rules' maps named
// (every map for nil) to out.
func readMapCounters(c *nftables.Conn, t *nftables.Table, names []string, out map[string]Counter) error {
	if names == nil {
		sets, err := c.GetSets(t)
		if err != nil {
			return fmt.Errorf("edge: read sets: %w", err)
		}
		for _, s := range sets {
			if strings.HasPrefix(s.Name, "rules") {
				names = append(names, s.Name)
			}
		}
	}
	for _, name := range names {
		elems, err := c.GetSetElements(&nftables.Set{Table: t, Name: name})
		if err != nil {
			return fmt.Errorf("edge: read %s: %w", name, err)
		}
		for _, e := range elems {
			parts := strings.SplitN(e.Comment, " ", 3)
			if len(parts) != 3 {
				continue
			}
			var cur Counter
			cur.Packets, _ = strconv.ParseUint(parts[0], 10, 64)
			cur.Bytes, _ = strconv.ParseUint(parts[1], 10, 64)
			if e.Counter != nil {
				cur.Packets += e.Counter.Packets
				cur.Bytes += e.Counter.Bytes
			}
			out[parts[2]] = cur
		}
	}
	return nil
}

func direction(dir string) []expr.Any {
	if dir == Outbound {
		return ifname(unix.NFT_META_OIFNAME, "uplink")
	}
	return ifname(unix.NFT_META_IIFNAME, "uplink")
}

func ruleVerdict(r Rule) expr.VerdictKind {
	if r.Allow {
		return expr.VerdictAccept
	}
	return expr.VerdictDrop
}
