//go:build linux

package edge

import (
	"encoding/binary"
	"fmt"
	"net/netip"
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
//	                            legs accepted; the rules in order (each with its
//	                            counter); port forwards accepted (their connections
//	                            carry a conntrack mark: a port forward opens its port
//	                            unless a rule denies it; 1:1 addresses need rules);
//	                            inbound dropped (DefaultDenyID's counter); outbound
//	                            accepted
//	input (filter, drop):       established, the legs and ICMP accepted
//
// Every rule carries its counter id in its user data, so counters are read back by id
// and carried over into the next ruleset.

// ApplyRuleset replaces the gateway's table in one nftables transaction (the table
// added, deleted and built again in one batch: no moment without it), carrying the
// counters over, and returns how long the transaction took.
func ApplyRuleset(ns string, g Gateway) (time.Duration, error) {
	old, err := ReadCounters(ns)
	if err != nil {
		return 0, err
	}
	c, done, err := conn(ns)
	if err != nil {
		return 0, err
	}
	defer done()
	start := time.Now()
	build(c, g, old)
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
	return out, nil
}

// build queues the whole table into c's batch.
func build(c *nftables.Conn, g Gateway, counters map[string]Counter) {
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
	for _, o := range g.OneToOne {
		add(post, "", cat(toUplink, addrIs(12, o.Private), natTo(expr.NATTypeSourceNAT, o.Public, 0))...)
	}
	add(post, "", cat(toUplink, natTo(expr.NATTypeSourceNAT, g.Uplink.Address.Addr(), 0))...)

	add(fwd, "", cat(ctBits(unix.NFT_CT_STATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))...)
	add(fwd, "", cat(ctBits(unix.NFT_CT_STATE, expr.CtStateBitINVALID), verdict(expr.VerdictDrop))...)
	add(fwd, "", cat(notIfname(unix.NFT_META_IIFNAME, "uplink"), notIfname(unix.NFT_META_OIFNAME, "uplink"), verdict(expr.VerdictAccept))...)
	for _, r := range g.Rules {
		es := fromUplink
		if r.Direction == Outbound {
			es = toUplink
		}
		es = cat(es, prefixIs(12, r.Source), prefixIs(16, r.Destination))
		if r.Protocol != "any" {
			es = cat(es, proto(r.Protocol))
		}
		if r.FromPort != 0 {
			es = cat(es, portRange(r.FromPort, r.ToPort))
		}
		v := expr.VerdictDrop
		if r.Allow {
			v = expr.VerdictAccept
		}
		add(fwd, "rule:"+r.ID, cat(es, verdict(v))...)
	}
	add(fwd, "", cat(fromUplink, ctMarkIs(forwardedMark), verdict(expr.VerdictAccept))...)
	add(fwd, DefaultDenyID, cat(fromUplink, verdict(expr.VerdictDrop))...)
	add(fwd, "", cat(toUplink, verdict(expr.VerdictAccept))...)

	add(in, "", cat(ctBits(unix.NFT_CT_STATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))...)
	add(in, "", cat(notIfname(unix.NFT_META_IIFNAME, "uplink"), verdict(expr.VerdictAccept))...)
	add(in, "", cat(proto("icmp"), verdict(expr.VerdictAccept))...)
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

func proto(name string) []expr.Any {
	n := map[string]byte{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "icmp": unix.IPPROTO_ICMP}[strings.ToLower(name)]
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{n}}}
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
