//go:build linux

package simnet

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/support/nsnet"
)

// The firewall of a node's guests, as proxmox-firewall makes it, in the node's
// namespace:
//
//	table bridge pvesim-fw       the filter: the bridge family sees the bridge's ports,
//	                             so a frame's tap (iifname: from the guest, oifname: to
//	                             it) picks the NIC's chain in one verdict-map lookup
//	                             (maps vm-out and vm-in; base chains on the forward hook,
//	                             out before in so that guest-to-guest traffic passes
//	                             both, and on input and output for the node's own
//	                             addresses); per NIC the chains vm<VMID>-net<N>-out and
//	                             -in; per ipset the interval sets <scope>_<name>_4/_6
//	table inet pvesim-fw-ct      conntrack: the kernel has no conntrack in the bridge
//	                             family (nf_conntrack_bridge) here, so br_netfilter
//	                             (bridge-nf-call-iptables and -ip6tables, on by default;
//	                             the plane makes sure) passes bridged IP packets through
//	                             the inet hooks, where this table (its conntrack only
//	                             there while a NIC of the node is filtered) marks
//	                             established and related ones (estMark) for the
//	                             bridge chains to accept
//
// A NIC's out chain: frames from another MAC dropped (macfilter); with ipfilter, IPv4,
// IPv6 and ARP from a source outside the ipfilter set dropped; established and related
// accepted; DHCP requests, ARP and neighbour discovery accepted; the rules; policy_out.
// Its in chain: established and related accepted; DHCP replies, ARP and neighbour
// discovery accepted; the rules; policy_in. REJECT drops: the kernel has no reject in the bridge family.
//
// A node's ruleset is applied in one transaction, only when it changed: when only the
// ipsets' entries changed, the transaction replaces just those sets' elements.
const (
	fwTable = "pvesim-fw"
	ctTable = "pvesim-fw-ct"
	// estMark is the packet mark bit of established and related traffic.
	estMark = 0x40000000
)

// fwState is what the plane applied to a node's firewall.
type fwState struct {
	structure string            // everything but the sets' elements
	sets      map[string]string // nft set name -> its elements, printed
}

// nodeFW is a node's firewalled NICs and the sets they use.
type nodeFW struct {
	nics []fwNIC
	sets map[string][]nftables.SetElement // nft set name -> elements
	keys map[string]nftables.SetDatatype  // nft set name -> key type
}

type fwNIC struct {
	vmid  int
	index int
	mac   string
	fw    *pvesim.NICFirewall
}

func (n fwNIC) tap() string   { return fmt.Sprintf("tap%di%d", n.vmid, n.index) }
func (n fwNIC) chain() string { return fmt.Sprintf("vm%d-net%d", n.vmid, n.index) }

// setName is the nft name of a topology set for one family.
func setName(name string, v6 bool) string {
	s := strings.ReplaceAll(name, "/", "_")
	if v6 {
		return s + "_6"
	}
	return s + "_4"
}

// planFirewall collects what node's firewall holds.
func planFirewall(t pvesim.Topology, node string) nodeFW {
	f := nodeFW{sets: map[string][]nftables.SetElement{}, keys: map[string]nftables.SetDatatype{}}
	use := func(name string) {
		s := t.FirewallSets[name]
		f.sets[setName(name, false)] = intervalElems(s.V4)
		f.keys[setName(name, false)] = nftables.TypeIPAddr
		f.sets[setName(name, true)] = intervalElems(s.V6)
		f.keys[setName(name, true)] = nftables.TypeIP6Addr
	}
	for _, g := range t.Guests {
		if g.Node != node {
			continue
		}
		for _, nic := range g.NICs {
			if nic.Firewall == nil {
				continue
			}
			f.nics = append(f.nics, fwNIC{vmid: g.VMID, index: nic.Index, mac: nic.MAC, fw: nic.Firewall})
			if nic.Firewall.IPFilter != "" {
				use(nic.Firewall.IPFilter)
			}
			for _, r := range nic.Firewall.Rules {
				for _, a := range []pvesim.FirewallAddrs{r.Source, r.Dest} {
					if a.Set != "" {
						use(a.Set)
					}
				}
			}
		}
	}
	return f
}

func (f nodeFW) state() fwState {
	var b strings.Builder
	for _, n := range f.nics {
		fmt.Fprintf(&b, "%d/%d/%s/%+v\n", n.vmid, n.index, n.mac, *n.fw)
	}
	for _, name := range slices.Sorted(maps.Keys(f.sets)) {
		fmt.Fprintf(&b, "set %s\n", name)
	}
	st := fwState{structure: b.String(), sets: map[string]string{}}
	for name, elems := range f.sets {
		st.sets[name] = fmt.Sprint(elems)
	}
	return st
}

// intervalElems are the elements of an interval set holding the ranges.
func intervalElems(rs []pvesim.AddrRange) []nftables.SetElement {
	out := []nftables.SetElement{}
	for _, r := range rs {
		out = append(out, nftables.SetElement{Key: r.From.AsSlice()})
		if next := r.To.Next(); next.IsValid() {
			out = append(out, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
		}
	}
	return out
}

// applyFirewall makes node's firewall match t, in one transaction when it changed.
func (p *Plane) applyFirewall(t pvesim.Topology, node string) error {
	plan := planFirewall(t, node)
	want := plan.state()
	prev, known := p.fw[node]
	if !known && len(plan.nics) == 0 {
		return nil
	}
	if known && prev.structure == want.structure && maps.Equal(prev.sets, want.sets) {
		return nil
	}
	ns := p.NodeNS(node)
	if len(plan.nics) > 0 {
		for _, key := range []string{"net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables"} {
			if err := nsnet.Sysctl(ns, key, "1"); err != nil {
				return fmt.Errorf("firewall: %w", err)
			}
		}
	}
	fd, err := nsnet.Open(ns)
	if err != nil {
		return err
	}
	defer fd.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(fd)))
	if err != nil {
		return fmt.Errorf("firewall: nftables: %w", err)
	}
	b := &fwBatch{c: c, t: &nftables.Table{Family: nftables.TableFamilyBridge, Name: fwTable}}
	if known && prev.structure == want.structure {
		// Only entries changed: replace those sets' elements, nothing else.
		for name, elems := range want.sets {
			if prev.sets[name] == elems {
				continue
			}
			s := &nftables.Set{Table: b.t, Name: name, KeyType: plan.keys[name], Interval: true}
			c.FlushSet(s)
			if len(plan.sets[name]) > 0 {
				if err := c.SetAddElements(s, plan.sets[name]); err != nil {
					return fmt.Errorf("firewall: set %s: %w", name, err)
				}
			}
		}
		p.log.Info("simnet: firewall ipsets updated", "node", node)
	} else {
		if err := b.replace(plan); err != nil {
			return fmt.Errorf("firewall: %w", err)
		}
		p.log.Info("simnet: firewall applied", "node", node, "nics", len(plan.nics))
	}
	if err := c.Flush(); err != nil {
		delete(p.fw, node)
		return fmt.Errorf("firewall: apply: %w", err)
	}
	if len(plan.nics) == 0 {
		delete(p.fw, node)
	} else {
		p.fw[node] = want
	}
	return nil
}

// fwBatch builds a node's firewall into one nftables transaction.
type fwBatch struct {
	c     *nftables.Conn
	t     *nftables.Table
	setID uint32 // the batch's set ids, given here: the library's own counter is shared unguarded
}

func (b *fwBatch) nextID() uint32 {
	b.setID++
	return b.setID
}

// replace removes both tables and, with NICs to filter, makes them again.
func (b *fwBatch) replace(plan nodeFW) error {
	ct := &nftables.Table{Family: nftables.TableFamilyINet, Name: ctTable}
	for _, t := range []*nftables.Table{b.t, ct} {
		b.c.AddTable(t) // so that the delete finds it
		b.c.DelTable(t)
	}
	if len(plan.nics) == 0 {
		return nil
	}
	b.c.AddTable(ct)
	for _, hook := range []*nftables.ChainHook{nftables.ChainHookPrerouting, nftables.ChainHookOutput} {
		name := "prerouting"
		if hook == nftables.ChainHookOutput {
			name = "output"
		}
		ch := b.c.AddChain(&nftables.Chain{Table: ct, Name: name, Type: nftables.ChainTypeFilter, Hooknum: hook,
			Priority: nftables.ChainPriorityRef(-150)})
		b.c.AddRule(&nftables.Rule{Table: ct, Chain: ch, Exprs: markEstablished()})
	}

	b.c.AddTable(b.t)
	for _, name := range slices.Sorted(maps.Keys(plan.sets)) {
		s := &nftables.Set{Table: b.t, Name: name, ID: b.nextID(), KeyType: plan.keys[name], Interval: true}
		if err := b.c.AddSet(s, plan.sets[name]); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	vmaps := map[bool]*nftables.Set{}
	for _, in := range []bool{false, true} {
		name := "vm-out"
		if in {
			name = "vm-in"
		}
		m := &nftables.Set{Table: b.t, Name: name, ID: b.nextID(), IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
		var elems []nftables.SetElement
		for _, n := range plan.nics {
			chain := n.chain() + "-out"
			if in {
				chain = n.chain() + "-in"
			}
			elems = append(elems, nftables.SetElement{Key: ifnameKey(n.tap()), VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: chain}})
		}
		// The chains the map jumps to must exist before its elements.
		for _, n := range plan.nics {
			if err := b.nicChain(n, in); err != nil {
				return err
			}
		}
		if err := b.c.AddSet(m, elems); err != nil {
			return fmt.Errorf("map %s: %w", name, err)
		}
		vmaps[in] = m
	}
	base := []struct {
		name string
		hook *nftables.ChainHook
		prio int32
		in   bool
	}{
		{"forward-out", nftables.ChainHookForward, -200, false},
		{"forward-in", nftables.ChainHookForward, -199, true},
		{"input", nftables.ChainHookInput, -200, false},
		{"output", nftables.ChainHookOutput, -200, true},
	}
	for _, bc := range base {
		ch := b.c.AddChain(&nftables.Chain{Table: b.t, Name: bc.name, Type: nftables.ChainTypeFilter, Hooknum: bc.hook,
			Priority: nftables.ChainPriorityRef(nftables.ChainPriority(bc.prio))})
		key := expr.MetaKeyIIFNAME
		if bc.in {
			key = expr.MetaKeyOIFNAME
		}
		m := vmaps[bc.in]
		b.c.AddRule(&nftables.Rule{Table: b.t, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: key, Register: 1},
			&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: m.Name, SetID: m.ID},
		}})
	}
	return nil
}

// markEstablished sets estMark on established and related packets and clears it on
// the others.
func markEstablished() []expr.Any {
	ne := binaryutil.NativeEndian.PutUint32
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ne(^uint32(estMark)), Xor: ne(0)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
		&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ne(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: ne(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ne(0)},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ne(^uint32(estMark)), Xor: ne(estMark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	}
}

func ifnameKey(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

// accept and drop are the verdicts of a rule, made anew for each rule.
func accept() *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictAccept} }
func drop() *expr.Verdict   { return &expr.Verdict{Kind: expr.VerdictDrop} }

func verdict(action string) expr.Any {
	if action == "ACCEPT" {
		return accept()
	}
	return drop()
}

const (
	ethIPv4 = 0x0800
	ethIPv6 = 0x86dd
	ethARP  = 0x0806
)

func etherType(v uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(v)},
	}
}

func l4proto(n int) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(n)}},
	}
}

func transport(offset, length uint32, data []byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: offset, Len: length},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data},
	}
}

func rule(es ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, e := range es {
		out = append(out, e...)
	}
	return out
}

// ndp accepts neighbour discovery (ICMPv6 types 133 to 136).
func ndp() []expr.Any {
	return rule(etherType(ethIPv6), l4proto(unix.IPPROTO_ICMPV6), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Cmp{Op: expr.CmpOpGte, Register: 1, Data: []byte{133}},
		&expr.Cmp{Op: expr.CmpOpLte, Register: 1, Data: []byte{136}},
		accept(),
	})
}

func established() []expr.Any {
	ne := binaryutil.NativeEndian.PutUint32
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ne(estMark), Xor: ne(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ne(0)},
		accept(),
	}
}

// lookup matches the address at offset of the network header against the named set
// (invert: not in it).
func lookupAddr(offset, length uint32, set *nftables.Set, invert bool) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: length},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID, Invert: invert},
	}
}

func (b *fwBatch) named(name string, v6 bool) *nftables.Set {
	kt := nftables.TypeIPAddr
	if v6 {
		kt = nftables.TypeIP6Addr
	}
	return &nftables.Set{Table: b.t, Name: setName(name, v6), KeyType: kt, Interval: true}
}

// nicChain adds the NIC's chain of one direction with its rules.
func (b *fwBatch) nicChain(n fwNIC, in bool) error {
	name := n.chain() + "-out"
	if in {
		name = n.chain() + "-in"
	}
	ch := b.c.AddChain(&nftables.Chain{Table: b.t, Name: name})
	add := func(es []expr.Any) { b.c.AddRule(&nftables.Rule{Table: b.t, Chain: ch, Exprs: es}) }
	f := n.fw
	dhcpReply := rule(etherType(ethIPv4), l4proto(unix.IPPROTO_UDP), transport(0, 4, []byte{0, 67, 0, 68}), []expr.Any{accept()})
	// The spoofing checks come first; then established traffic, most of the packets,
	// leaves after as few expressions as possible.
	if !in {
		if mac, err := net.ParseMAC(n.mac); err == nil && f.MACFilter {
			add([]expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: mac},
				drop(),
			})
		}
		if f.IPFilter != "" {
			v4, v6 := b.named(f.IPFilter, false), b.named(f.IPFilter, true)
			// ARP's sender address (after hardware and protocol types and
			// sizes, the operation and the sender's MAC).
			add(rule(etherType(ethARP), lookupAddr(14, 4, v4, true), []expr.Any{drop()}))
			add(rule(etherType(ethIPv4), lookupAddr(12, 4, v4, true), []expr.Any{drop()}))
			add(rule(etherType(ethIPv6), lookupAddr(8, 16, v6, true), []expr.Any{drop()}))
		}
		add(established())
		add(rule(etherType(ethIPv4), l4proto(unix.IPPROTO_UDP), transport(0, 4, []byte{0, 68, 0, 67}), []expr.Any{accept()}))
	} else {
		add(established())
		add(dhcpReply)
	}
	add(rule(etherType(ethARP), []expr.Any{accept()}))
	add(ndp())
	for _, r := range f.Rules {
		if r.In != in {
			continue
		}
		variants, err := b.ruleExprs(r)
		if err != nil {
			return err
		}
		for _, es := range variants {
			add(es)
		}
	}
	policy := f.PolicyOut
	if in {
		policy = f.PolicyIn
	}
	add([]expr.Any{verdict(policy)})
	return nil
}

// ruleExprs compiles a rule into one nft rule per IP family it can match (one for
// both when it names no address and no ICMP type).
func (b *fwBatch) ruleExprs(r pvesim.FirewallRule) ([][]expr.Any, error) {
	fams := []int{4, 6}
	switch {
	case r.Proto == unix.IPPROTO_ICMP:
		fams = []int{4}
	case r.Proto == unix.IPPROTO_ICMPV6:
		fams = []int{6}
	case r.Source.Any() && r.Dest.Any():
		fams = []int{0}
	}
	var out [][]expr.Any
	for _, fam := range fams {
		var es []expr.Any
		switch fam {
		case 4:
			es = etherType(ethIPv4)
		case 6:
			es = etherType(ethIPv6)
		}
		skip := false
		for i, a := range []pvesim.FirewallAddrs{r.Source, r.Dest} {
			if a.Any() {
				continue
			}
			m, ok, err := b.addrMatch(a, fam, i == 1)
			if err != nil {
				return nil, err
			}
			if !ok {
				skip = true
				break
			}
			es = append(es, m...)
		}
		if skip {
			continue
		}
		if r.Proto >= 0 {
			es = append(es, l4proto(r.Proto)...)
		}
		for i, ports := range [][]pvesim.PortRange{r.SPorts, r.DPorts} {
			if len(ports) == 0 {
				continue
			}
			m, err := b.portMatch(ports, uint32(2*i))
			if err != nil {
				return nil, err
			}
			es = append(es, m...)
		}
		if r.ICMPType >= 0 {
			es = append(es, transport(0, 1, []byte{byte(r.ICMPType)})...)
		}
		out = append(out, append(es, verdict(r.Action)))
	}
	return out, nil
}

// addrMatch matches a packet's source (dest: destination) address of family fam
// against a; false when a holds no address of that family.
func (b *fwBatch) addrMatch(a pvesim.FirewallAddrs, fam int, dest bool) ([]expr.Any, bool, error) {
	off, n := uint32(12), uint32(4)
	if fam == 6 {
		off, n = 8, 16
	}
	if dest {
		off += n
	}
	if a.Set != "" {
		return lookupAddr(off, n, b.named(a.Set, fam == 6), false), true, nil
	}
	ranges, kt := a.V4, nftables.TypeIPAddr
	if fam == 6 {
		ranges, kt = a.V6, nftables.TypeIP6Addr
	}
	if len(ranges) == 0 {
		return nil, false, nil
	}
	s := &nftables.Set{Table: b.t, Name: "__set%d", ID: b.nextID(), Anonymous: true, Constant: true, Interval: true, KeyType: kt}
	if err := b.c.AddSet(s, intervalElems(ranges)); err != nil {
		return nil, false, err
	}
	return lookupAddr(off, n, s, false), true, nil
}

// portMatch matches the transport header's port at offset (0 source, 2 destination).
func (b *fwBatch) portMatch(ports []pvesim.PortRange, offset uint32) ([]expr.Any, error) {
	if len(ports) == 1 && ports[0].From == ports[0].To {
		return transport(offset, 2, binaryutil.BigEndian.PutUint16(ports[0].From)), nil
	}
	var elems []nftables.SetElement
	sorted := slices.Clone(ports)
	slices.SortFunc(sorted, func(a, b pvesim.PortRange) int { return int(a.From) - int(b.From) })
	// Join overlapping ranges: an interval set refuses overlaps.
	var merged []pvesim.PortRange
	for _, p := range sorted {
		if n := len(merged); n > 0 && int(p.From) <= int(merged[n-1].To)+1 {
			merged[n-1].To = max(merged[n-1].To, p.To)
			continue
		}
		merged = append(merged, p)
	}
	for _, p := range merged {
		elems = append(elems, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(p.From)})
		if p.To < 65535 {
			elems = append(elems, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(p.To + 1), IntervalEnd: true})
		}
	}
	s := &nftables.Set{Table: b.t, Name: "__set%d", ID: b.nextID(), Anonymous: true, Constant: true, Interval: true, KeyType: nftables.TypeInetService}
	if err := b.c.AddSet(s, elems); err != nil {
		return nil, err
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: offset, Len: 2},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
	}, nil
}
