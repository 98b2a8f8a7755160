//go:build linux

package edge

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
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
//	                            legs accepted; from the uplink back to it dropped; the
//	                            rules in order, in runs of verdict maps (below; each
//	                            rule with its counter); port forwards accepted (their connections
//	                            carry a conntrack mark: a port forward opens its port
//	                            unless a rule denies it; 1:1 addresses need rules);
//	                            inbound dropped (DefaultDenyID's counter); outbound
//	                            accepted
//	input (filter, drop):       established, the legs and ICMP accepted
//
// Every rule carries its counter id in its user data (a map element in its comment),
// so counters are read back by id and carried over into the next ruleset.

// ApplyRuleset replaces the gateway's table in one nftables transaction (the table
// added, deleted and built again in one batch: no moment without it), carrying the
// counters over, and returns how long the transaction took.
func ApplyRuleset(ns string, g Gateway) (time.Duration, error) {
	c, done, err := conn(ns)
	if err != nil {
		return 0, err
	}
	defer done()
	old, err := readCounters(c)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := build(c, g, old); err != nil {
		return 0, err
	}
	if err := c.Flush(); err != nil {
		return 0, fmt.Errorf("edge: ruleset transaction: %w", err)
	}
	return time.Since(start), nil
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

func readCounters(c *nftables.Conn) (map[string]Counter, error) {
	out := map[string]Counter{}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return nil, fmt.Errorf("edge: list tables: %w", err)
	}
	var t *nftables.Table
	for _, tt := range tables {
		if tt.Name == tableName {
			t = tt
		}
	}
	if t == nil {
		return out, nil
	}
	for _, chain := range []string{"forward"} {
		rules, err := c.GetRules(t, &nftables.Chain{Name: chain, Table: t})
		if err != nil {
			return nil, fmt.Errorf("edge: read rules: %w", err)
		}
		for _, r := range rules {
			id := string(r.UserData)
			if id == "" {
				continue
			}
			for _, e := range r.Exprs {
				if ce, ok := e.(*expr.Counter); ok {
					cur := out[id]
					cur.Packets += ce.Packets
					cur.Bytes += ce.Bytes
					out[id] = cur
				}
			}
		}
	}
	if err := readMapCounters(c, t, out); err != nil {
		return nil, err
	}
	return out, nil
}

// build queues the whole table into c's batch.
func build(c *nftables.Conn, g Gateway, counters map[string]Counter) error {
	t := &nftables.Table{Name: tableName, Family: nftables.TableFamilyIPv4}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	drop, accept := nftables.ChainPolicyDrop, nftables.ChainPolicyAccept
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	fwd := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	in := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	add := func(ch *nftables.Chain, id string, es ...expr.Any) {
		r := &nftables.Rule{Table: t, Chain: ch, Exprs: es}
		if id != "" {
			cnt := counters[id]
			r.Exprs = append(es[:len(es)-1:len(es)-1], &expr.Counter{Packets: cnt.Packets, Bytes: cnt.Bytes}, es[len(es)-1])
			r.UserData = []byte(id)
		}
		c.AddRule(r)
	}
	fromUplink := ifname(unix.NFT_META_IIFNAME, "uplink")
	toUplink := ifname(unix.NFT_META_OIFNAME, "uplink")

	for _, o := range g.OneToOne {
		add(pre, "", cat(fromUplink, addrIs(16, o.Public), natTo(expr.NATTypeDestNAT, o.Private, 0))...)
	}
	for _, pf := range g.PortForwards {
		add(pre, "", cat(fromUplink, addrIs(16, pf.PublicAddr), proto(pf.Protocol), portRange(pf.PublicPort, pf.PublicPort),
			setCtMark(forwardedMark), natTo(expr.NATTypeDestNAT, pf.Target, pf.TargetPort))...)
	}
	for _, b := range g.Balancers {
		for _, fw := range b.Frontends {
			add(pre, "", cat(fromUplink, addrIs(16, b.Public), proto("tcp"), portRange(fw.Port, fw.Port),
				setCtMark(balancerMark), natTo(expr.NATTypeDestNAT, fw.Target, fw.TargetPort))...)
		}
		for _, fw := range b.Relays {
			for _, src := range b.Sources {
				add(pre, "", cat(fromUplink, prefixIs(12, src), addrIs(16, b.Public), proto("tcp"), portRange(fw.Port, fw.Port),
					setCtMark(relayMark), natTo(expr.NATTypeDestNAT, fw.Target, fw.TargetPort))...)
			}
		}
		if len(b.Frontends) > 0 {
			// The replicas answer the gateway, which answers the client.
			add(post, "", cat(toUplink, ctMarkIs(balancerMark), natTo(expr.NATTypeSourceNAT, b.Public, 0))...)
		}
	}
	for _, o := range g.OneToOne {
		add(post, "", cat(toUplink, addrIs(12, o.Private), natTo(expr.NATTypeSourceNAT, o.Public, 0))...)
	}
	add(post, "", cat(toUplink, natTo(expr.NATTypeSourceNAT, g.Uplink.Address.Addr(), 0))...)

	add(fwd, "", cat(ctBits(unix.NFT_CT_STATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))...)
	add(fwd, "", cat(ctBits(unix.NFT_CT_STATE, expr.CtStateBitINVALID), verdict(expr.VerdictDrop))...)
	add(fwd, "", cat(notIfname(unix.NFT_META_IIFNAME, "uplink"), notIfname(unix.NFT_META_OIFNAME, "uplink"), verdict(expr.VerdictAccept))...)
	// A balancer's listeners (uplink to uplink, to the replicas) and relays
	// (from the replicas to the VDC's VMs): before the rules, as the address is
	// the balancer's alone.
	add(fwd, "", cat(fromUplink, toUplink, ctMarkIs(balancerMark), verdict(expr.VerdictAccept))...)
	add(fwd, "", cat(fromUplink, notIfname(unix.NFT_META_OIFNAME, "uplink"), ctMarkIs(relayMark), verdict(expr.VerdictAccept))...)
	// Traffic from the external network back to it is no VDC's: the gateway routes
	// for its VDC only (and so inbound and outbound rules never meet one packet).
	add(fwd, "", cat(fromUplink, toUplink, verdict(expr.VerdictDrop))...)
	for i, run := range runs(g.Rules) {
		if len(run) == 1 {
			r := run[0]
			add(fwd, CounterID(r.ID), cat(direction(r.Direction), prefixIs(12, r.Source), prefixIs(16, r.Destination),
				proto(r.Protocol), ports(r), verdict(ruleVerdict(r)))...)
			continue
		}
		for _, vm := range verdictMaps(t, i, run, counters) {
			if err := c.AddSet(vm.set, vm.elems); err != nil {
				return fmt.Errorf("edge: rules %s: %w", vm.set.Name, err)
			}
			add(fwd, "", cat(direction(vm.direction), vm.key, []expr.Any{&expr.Lookup{SourceRegister: regKey, SetName: vm.set.Name, SetID: vm.set.ID, IsDestRegSet: true, DestRegister: 0}})...)
		}
	}
	add(fwd, "", cat(fromUplink, ctMarkIs(forwardedMark), verdict(expr.VerdictAccept))...)
	add(fwd, DefaultDenyID, cat(fromUplink, verdict(expr.VerdictDrop))...)
	add(fwd, "", cat(toUplink, verdict(expr.VerdictAccept))...)

	add(in, "", cat(ctBits(unix.NFT_CT_STATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))...)
	add(in, "", cat(notIfname(unix.NFT_META_IIFNAME, "uplink"), verdict(expr.VerdictAccept))...)
	add(in, "", cat(proto("icmp"), verdict(expr.VerdictAccept))...)
	return nil
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
func ctBits(key uint32, bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKey(key)},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binary.NativeEndian.AppendUint32(nil, bits), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// forwardedMark is the conntrack mark of connections a port forward made.
const forwardedMark = 0x464e // "FN"

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

// The firewall rules go into the forward chain in runs: a run is a longest stretch of
// consecutive rules no two of which one packet can match, so within a run order does
// not matter and the run is one lookup per direction and key shape in a verdict map
// (a concatenated, interval-keyed map, each element with its counter) instead of one
// rule each: the kernel parses a handful of rules, not a thousand, and a packet does
// one lookup per run. A run of one rule stays a rule. An element's counter starts at
// zero, so its comment carries what the rule had counted before ("packets bytes id").

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

// maxRun bounds a run: checking a rule against the run's costs more the longer the
// run, while each map costs the transaction a little (measured: 1,000 rules in runs of
// 256 apply as fast as in one).
const maxRun = 256

// runs splits rules into runs, each as long as it can be up to maxRun.
func runs(rules []Rule) [][]Rule {
	var out [][]Rule
	var cur [2][]box // by direction: rules of two directions never meet
	start := 0
	for i, r := range rules {
		b := boxOf(r)
		d := 0
		if r.Direction == Outbound {
			d = 1
		}
		split := i-start == maxRun
		for _, c := range cur[d] {
			if split || c.meets(b) {
				split = true
				break
			}
		}
		if split {
			out = append(out, rules[start:i])
			start, cur = i, [2][]box{}
		}
		cur[d] = append(cur[d], b)
	}
	if start < len(rules) {
		out = append(out, rules[start:])
	}
	return out
}

// verdictMap is one map of a run and the key its lookup loads.
type verdictMap struct {
	direction string
	key       []expr.Any
	set       *nftables.Set
	elems     []nftables.SetElement
}

// verdictMaps makes run number n's maps: per direction one keyed by source,
// destination, protocol and port for the rules with ports, one without the port for
// the others.
func verdictMaps(t *nftables.Table, n int, run []Rule, counters map[string]Counter) []verdictMap {
	withPort, _ := nftables.ConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	noPort, _ := nftables.ConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr, nftables.TypeInetProto)
	loadAddrs := []expr.Any{
		&expr.Payload{DestRegister: regKey, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Payload{DestRegister: regKey + 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regKey + 2},
	}
	loadPort := &expr.Payload{DestRegister: regKey + 3, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
	var out []verdictMap
	for _, dir := range []string{Inbound, Outbound} {
		for _, ported := range []bool{true, false} {
			vm := verdictMap{direction: dir, key: loadAddrs}
			kt, shape := noPort, "any"
			if ported {
				vm.key, kt, shape = append(slices.Clip(loadAddrs), loadPort), withPort, "port"
			}
			for _, r := range run {
				if r.Direction != dir || (r.FromPort != 0) != ported {
					continue
				}
				b := boxOf(r)
				fields := 3
				if ported {
					fields = 4
				}
				key, end := make([]byte, 0, 16), make([]byte, 0, 16)
				for i, f := range b.fields[:fields] {
					key, end = appendField(key, i, f.lo), appendField(end, i, f.hi)
				}
				cnt := counters[CounterID(r.ID)]
				vm.elems = append(vm.elems, nftables.SetElement{Key: key, KeyEnd: end, VerdictData: &expr.Verdict{Kind: ruleVerdict(r)},
					Comment: fmt.Sprintf("%d %d %s", cnt.Packets, cnt.Bytes, CounterID(r.ID))})
			}
			if len(vm.elems) == 0 {
				continue
			}
			// The id names the map within the batch; given here, the library
			// does not take one from its package-wide counter (unguarded across
			// connections).
			vm.set = &nftables.Set{Table: t, ID: uint32(4*n + len(out) + 1), Name: fmt.Sprintf("rules%d_%s_%s", n, dir, shape), IsMap: true,
				DataType: nftables.TypeVerdict, KeyType: kt, Interval: true, Concatenation: true, Counter: true}
			out = append(out, vm)
		}
	}
	return out
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

// readMapCounters adds the counters of the runs' map elements to out.
func readMapCounters(c *nftables.Conn, t *nftables.Table, out map[string]Counter) error {
	sets, err := c.GetSets(t)
	if err != nil {
		return fmt.Errorf("edge: read sets: %w", err)
	}
	for _, s := range sets {
		if !strings.HasPrefix(s.Name, "rules") {
			continue
		}
		elems, err := c.GetSetElements(s)
		if err != nil {
			return fmt.Errorf("edge: read %s: %w", s.Name, err)
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

// ports matches r's port range; nothing for a rule without one.
func ports(r Rule) []expr.Any {
	if r.FromPort == 0 {
		return nil
	}
	return portRange(r.FromPort, r.ToPort)
}
