//go:build linux

package edge_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"
	"github.com/vishvananda/netlink"

	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/edge"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/pvesim/simnet"
	"github.com/flexplane/flexplane/pkg/support/nsnet"
)

const token = "flexplane@pve!test=0123456789abcdef"

var (
	upstream = netip.MustParsePrefix("203.0.113.254/24") // the internet's router on the external network
	public   = netip.MustParsePrefix("203.0.113.10/24")  // the VDC's public address
	oneToOne = netip.MustParseAddr("203.0.113.11")
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// lab is a simulated two-node cluster with a data plane, VDC red's network 10.1.0.0/24
// and a VM on each node (10.1.0.11 on pve1, 10.1.0.12 on pve2).
type lab struct {
	plane *simnet.Plane
	c     *proxmox.Client
	vnet  string
}

func newLab(t *testing.T) *lab {
	t.Helper()
	nettest.NeedRoot(t)
	p, err := simnet.New(simnet.Config{Prefix: fmt.Sprintf("fpe%d", time.Now().UnixNano()%1e9), Upstream: []netip.Prefix{upstream}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	_, c := pvetest.Start(t, pvesim.Config{Cluster: "lab", Nodes: 2, DataPlane: p}, token)
	n, err := network.Create(ctx(t), c, network.Spec{VDC: "red", Name: "main", CIDR: "10.1.0.0/24", Gateway: "10.1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	l := &lab{plane: p, c: c, vnet: n.VNet}
	l.vm(t, "pve1", 101, "10.1.0.11")
	l.vm(t, "pve2", 102, "10.1.0.12")
	return l
}

func (l *lab) vm(t *testing.T, node string, vmid int, ip string) {
	t.Helper()
	vmtest.BareGuest(t, l.c, node, vmid, l.vnet, ip, "10.1.0.1")
	nettest.WaitNS(t, l.plane.GuestNS(vmid), true, 20*time.Second)
}

// gateway is red's gateway on the external network with a port forward of
// 203.0.113.10:8080 to the first VM's port 80 and 203.0.113.11 1:1 to the second VM.
func (l *lab) gateway() edge.Gateway {
	return edge.Gateway{
		VDC:    "red",
		Legs:   []edge.Leg{{Bridge: l.vnet, Address: netip.MustParsePrefix("10.1.0.1/24")}},
		Uplink: edge.Uplink{Bridge: "vmbr0", Address: public, Gateway: upstream.Addr()},
		PortForwards: []edge.PortForward{{ID: "web", Protocol: "tcp", PublicAddr: public.Addr(), PublicPort: 8080,
			Target: netip.MustParseAddr("10.1.0.11"), TargetPort: 80}},
		OneToOne: []edge.OneToOne{{ID: "db", Public: oneToOne, Private: netip.MustParseAddr("10.1.0.12")}},
	}
}

func (l *lab) manager(node string) *edge.Manager {
	return edge.NewManager(edge.Config{BridgeNamespace: l.plane.NodeNS(node), NamespacePrefix: l.plane.NodeNS(node) + "-"})
}

func apply(t *testing.T, m *edge.Manager, g edge.Gateway) edge.Status {
	t.Helper()
	st, err := m.Apply(ctx(t), g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Remove(context.Background(), g.VDC) })
	return st
}

// The gateway SNATs egress to the public address, forwards a public port to a VM, drops
// inbound traffic no rule allows (and counts it) until a rule allows it.
func TestGatewayNATAndFirewall(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	m := l.manager("pve1")
	g := l.gateway()
	apply(t, m, g)
	inet := l.plane.InternetNS()
	nettest.Serve(t, inet, 9000, "internet")
	nettest.Serve(t, l.plane.GuestNS(101), 80, "vm101")
	nettest.Serve(t, l.plane.GuestNS(102), 80, "vm102")

	// Egress from both nodes' VMs (the second over VXLAN to the gateway's node).
	for _, vmid := range []int{101, 102} {
		got := nettest.WaitReach(t, l.plane.GuestNS(vmid), upstream.Addr().String()+":9000", 20*time.Second)
		want := public.Addr().String()
		if vmid == 102 {
			want = oneToOne.String() // a VM with a 1:1 address leaves by it
		}
		if ip := nettest.PeerIP(got); ip != want {
			t.Errorf("vm%d's egress seen from %s, want %s (%q)", vmid, ip, want, got)
		}
	}
	// The port forward reaches the VM, which sees the client's own address.
	got := nettest.WaitReach(t, inet, public.Addr().String()+":8080", 10*time.Second)
	if !strings.HasPrefix(got, "vm101 from "+upstream.Addr().String()+":") {
		t.Errorf("port forward answered %q", got)
	}
	// Inbound to the 1:1 address without a rule is dropped, and counted.
	before := counters(t, m, "red")[edge.DefaultDenyID].Packets
	if got := nettest.Reach(inet, oneToOne.String()+":80", 2*time.Second); got != "" {
		t.Fatalf("inbound without a rule answered %q", got)
	}
	if after := counters(t, m, "red")[edge.DefaultDenyID].Packets; after <= before {
		t.Errorf("default deny counter %d → %d after a dropped connection", before, after)
	}
	// A rule opens it; its counter counts it; a deny before it closes the port forward.
	g.Rules = []edge.Rule{
		{ID: "no-web", Direction: edge.Inbound, Protocol: "tcp", FromPort: 80, ToPort: 80, Source: netip.MustParsePrefix("198.51.100.0/24"), Allow: false},
		{ID: "db-80", Direction: edge.Inbound, Protocol: "tcp", FromPort: 80, ToPort: 80, Destination: netip.MustParsePrefix("10.1.0.12/32"), Allow: true},
	}
	apply(t, m, g)
	got = nettest.WaitReach(t, inet, oneToOne.String()+":80", 10*time.Second)
	if !strings.HasPrefix(got, "vm102 from ") {
		t.Errorf("1:1 with a rule answered %q", got)
	}
	cs := counters(t, m, "red")
	if cs[edge.CounterID("db-80")].Packets == 0 || cs[edge.CounterID("no-web")].Packets != 0 {
		t.Errorf("rule counters %v", cs)
	}
	if cs[edge.DefaultDenyID].Packets < before+1 {
		t.Errorf("the default deny counter was not carried over the new ruleset: %v", cs)
	}
	g.Rules = []edge.Rule{{ID: "close-web", Direction: edge.Inbound, Protocol: "tcp", FromPort: 80, ToPort: 80, Destination: netip.MustParsePrefix("10.1.0.11/32")}}
	apply(t, m, g)
	if got := nettest.Reach(inet, public.Addr().String()+":8080", 2*time.Second); got != "" {
		t.Errorf("a denied port forward answered %q", got)
	}
	if c := counters(t, m, "red")[edge.CounterID("close-web")]; c.Packets == 0 {
		t.Errorf("the deny rule counted nothing: %v", c)
	}
}

// Rules no packet can match two of are one map lookup (a run): they still decide by
// rule, count by rule, and their counts survive a changed ruleset.
func TestGatewayRulesInMaps(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	m := l.manager("pve1")
	g := l.gateway()
	db := netip.MustParsePrefix("10.1.0.12/32")
	g.Rules = []edge.Rule{
		{ID: "db-80", Direction: edge.Inbound, Protocol: "tcp", FromPort: 80, ToPort: 80, Destination: db, Allow: true},
		{ID: "db-81", Direction: edge.Inbound, Protocol: "tcp", FromPort: 81, ToPort: 81, Destination: db, Allow: false},
		{ID: "db-ping", Direction: edge.Inbound, Protocol: "icmp", Destination: db, Allow: true},
		{ID: "no-dns", Direction: edge.Outbound, Protocol: "udp", FromPort: 53, ToPort: 53, Allow: false},
	}
	apply(t, m, g)
	inet := l.plane.InternetNS()
	nettest.Serve(t, l.plane.GuestNS(102), 80, "vm102")
	nettest.Serve(t, l.plane.GuestNS(102), 81, "vm102 on 81")
	if got := nettest.WaitReach(t, inet, oneToOne.String()+":80", 10*time.Second); !strings.HasPrefix(got, "vm102 from ") {
		t.Errorf("an allowed port answered %q", got)
	}
	deny := counters(t, m, "red")[edge.DefaultDenyID].Packets
	if got := nettest.Reach(inet, oneToOne.String()+":81", 2*time.Second); got != "" {
		t.Errorf("a denied port answered %q", got)
	}
	cs := counters(t, m, "red")
	if cs[edge.CounterID("db-80")].Packets == 0 || cs[edge.CounterID("db-81")].Packets == 0 || cs[edge.CounterID("no-dns")].Packets != 0 {
		t.Errorf("rule counters %v", cs)
	}
	if cs[edge.DefaultDenyID].Packets != deny {
		t.Errorf("the default deny counted %d → %d: the deny rule did not decide", deny, cs[edge.DefaultDenyID].Packets)
	}
	// A changed ruleset carries the counts over and still decides by rule.
	g.Rules = append(g.Rules, edge.Rule{ID: "web", Direction: edge.Inbound, Protocol: "tcp", FromPort: 80, ToPort: 80,
		Destination: netip.MustParsePrefix("10.1.0.11/32"), Allow: true})
	apply(t, m, g)
	after := counters(t, m, "red")
	for _, id := range []string{"db-80", "db-81"} {
		if c := after[edge.CounterID(id)]; c.Packets < cs[edge.CounterID(id)].Packets || c.Bytes < cs[edge.CounterID(id)].Bytes {
			t.Errorf("%s counted %v, then %v after a new ruleset", id, cs[edge.CounterID(id)], c)
		}
	}
	if got := nettest.Reach(inet, oneToOne.String()+":81", 2*time.Second); got != "" {
		t.Errorf("a denied port answered %q after a new ruleset", got)
	}
	if got := nettest.WaitReach(t, inet, oneToOne.String()+":80", 10*time.Second); !strings.HasPrefix(got, "vm102 from ") {
		t.Errorf("an allowed port answered %q after a new ruleset", got)
	}
	// A rule put in front that overlaps them moves their elements to the next
	// level's map: they keep their counts and still decide.
	cs = counters(t, m, "red")
	g.Rules = append([]edge.Rule{{ID: "front", Direction: edge.Inbound, Protocol: "tcp", FromPort: 80, ToPort: 81,
		Source: netip.MustParsePrefix("198.51.100.0/24"), Allow: false}}, g.Rules...)
	apply(t, m, g)
	moved := counters(t, m, "red")
	for _, id := range []string{"db-80", "db-81"} {
		if c := moved[edge.CounterID(id)]; c.Packets < cs[edge.CounterID(id)].Packets || c.Packets == 0 {
			t.Errorf("%s counted %v, then %v after a rule in front of it", id, cs[edge.CounterID(id)], c)
		}
	}
	if got := nettest.WaitReach(t, inet, oneToOne.String()+":80", 10*time.Second); !strings.HasPrefix(got, "vm102 from ") {
		t.Errorf("an allowed port answered %q after a rule in front of it", got)
	}
	if got := nettest.Reach(inet, oneToOne.String()+":81", 2*time.Second); got != "" {
		t.Errorf("a denied port answered %q after a rule in front of it", got)
	}
}

// An inbound rule sees the VM's address only because a DNAT put it there: a host
// on the external network that routes the VDC's private network to the
// gateway's uplink reaches no VM through it, even with an inbound rule allowing
// everything, and the drop is counted apart; that rule still lets the port
// forward and the 1:1 address in, and outbound traffic and every reply pass.
func TestGatewayInboundOnlyThroughDNAT(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	m := l.manager("pve1")
	g := l.gateway()
	g.Rules = []edge.Rule{{ID: "open", Direction: edge.Inbound, Protocol: "any", Allow: true}}
	apply(t, m, g)
	inet := l.plane.InternetNS()
	nettest.Serve(t, inet, 9000, "internet")
	nettest.Serve(t, l.plane.GuestNS(101), 80, "vm101")
	nettest.Serve(t, l.plane.GuestNS(102), 80, "vm102")

	// Outbound, and its replies.
	for _, vmid := range []int{101, 102} {
		if got := nettest.WaitReach(t, l.plane.GuestNS(vmid), upstream.Addr().String()+":9000", 20*time.Second); !strings.HasPrefix(got, "internet from ") {
			t.Errorf("vm%d's egress answered %q", vmid, got)
		}
	}
	// The port forward and the 1:1 address, and their replies.
	throughDNAT := func(when string) {
		t.Helper()
		if got := nettest.WaitReach(t, inet, public.Addr().String()+":8080", 10*time.Second); !strings.HasPrefix(got, "vm101 from "+upstream.Addr().String()+":") {
			t.Errorf("%s: the port forward answered %q", when, got)
		}
		if got := nettest.WaitReach(t, inet, oneToOne.String()+":80", 10*time.Second); !strings.HasPrefix(got, "vm102 from "+upstream.Addr().String()+":") {
			t.Errorf("%s: the 1:1 address answered %q", when, got)
		}
	}
	throughDNAT("with an inbound rule allowing everything")

	// The internet (a host on the external network) sends to the VMs'
	// private addresses by way of the gateway's uplink.
	h, err := nsnet.Handle(inet)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	vdcNet := netip.MustParsePrefix("10.1.0.0/24")
	if err := h.RouteAdd(&netlink.Route{Dst: &net.IPNet{IP: vdcNet.Addr().AsSlice(), Mask: net.CIDRMask(vdcNet.Bits(), 32)}, Gw: public.Addr().AsSlice()}); err != nil {
		t.Fatal(err)
	}
	before := counters(t, m, "red")
	for _, vm := range []string{"10.1.0.11:80", "10.1.0.12:80"} {
		if got := nettest.Reach(inet, vm, 2*time.Second); got != "" {
			t.Errorf("the internet reached the private address %s through the uplink: %q", vm, got)
		}
	}
	after := counters(t, m, "red")
	if b, a := before[edge.NotDNATedID].Packets, after[edge.NotDNATedID].Packets; a <= b {
		t.Errorf("%s counted %d → %d packets after two connections to private addresses", edge.NotDNATedID, b, a)
	}
	if b, a := before[edge.CounterID("open")], after[edge.CounterID("open")]; a != b {
		t.Errorf("the rule was consulted for packets no DNAT addressed: it counted %v → %v", b, a)
	}
	throughDNAT("with the private network routed to the uplink")
}

func counters(t *testing.T, m *edge.Manager, vdc string) map[string]edge.Counter {
	t.Helper()
	st, err := m.Status(ctx(t), vdc)
	if err != nil {
		t.Fatal(err)
	}
	return st.Counters
}

// An established TCP connection through the gateway survives the agent's restart (a
// new Manager applying the same state) and a changed ruleset.
func TestGatewayReapplyKeepsEstablishedFlows(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	g := l.gateway()
	apply(t, l.manager("pve1"), g)
	inet := l.plane.InternetNS()
	nettest.Echo(t, inet, 7)
	conn, err := nsnet.Dial(ctx(t), l.plane.GuestNS(101), "tcp4", upstream.Addr().String()+":7")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	ping := func(i int) {
		t.Helper()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintf(conn, "ping %d\n", i); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		line, err := r.ReadString('\n')
		if err != nil || line != fmt.Sprintf("ping %d\n", i) {
			t.Fatalf("echo %d: %q %v", i, line, err)
		}
	}
	ping(1)
	// New connections through the port forward, all the while.
	nettest.Serve(t, l.plane.GuestNS(101), 80, "vm101")
	nettest.WaitReach(t, inet, public.Addr().String()+":8080", 10*time.Second)
	stop := make(chan struct{})
	failed := make(chan int, 1)
	go func() {
		n := 0
		defer func() { failed <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if got := nettest.Reach(inet, public.Addr().String()+":8080", 3*time.Second); !strings.HasPrefix(got, "vm101 ") {
				n++
			}
		}
	}()
	restarted := l.manager("pve1") // the agent restarted: nothing in memory
	for i := 2; i < 6; i++ {
		// Alternately 1,000 rules and one: each change is one transaction.
		g.Rules = rulesetGateway(1000).Rules
		if i%2 == 1 {
			g.Rules = []edge.Rule{{ID: "x", Direction: edge.Outbound, Protocol: "udp", FromPort: 53, ToPort: 53, Allow: false}}
		}
		st := apply(t, restarted, g)
		t.Logf("%d rules applied in one transaction of %s", len(g.Rules), st.RulesetApply)
		ping(i)
	}
	close(stop)
	if n := <-failed; n > 0 {
		t.Errorf("%d new connections through the port forward failed while rulesets changed", n)
	}
}

// Egress and ingress are limited to the configured rates within ±5 %.
func TestGatewayBandwidthLimits(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	g := l.gateway()
	g.EgressMbps, g.IngressMbps = 40, 20
	g.PortForwards = append(g.PortForwards, edge.PortForward{ID: "sink", Protocol: "tcp", PublicAddr: public.Addr(), PublicPort: 5001,
		Target: netip.MustParseAddr("10.1.0.11"), TargetPort: 5001})
	apply(t, l.manager("pve1"), g)
	inet := l.plane.InternetNS()
	out := nettest.Sink(t, inet, 5001)
	in := nettest.Sink(t, l.plane.GuestNS(101), 5001)
	for _, tc := range []struct {
		what     string
		from, to string
		m        *nettest.Meter
		limit    int
	}{
		{"egress", l.plane.GuestNS(101), upstream.Addr().String() + ":5001", out, g.EgressMbps},
		{"ingress", inet, public.Addr().String() + ":5001", in, g.IngressMbps},
	} {
		payload := nettest.Throughput(t, tc.from, tc.to, tc.m, 3*time.Second)
		// The limit counts IP bytes: a full segment of the VDC network's MTU carries
		// MTU-52 bytes of payload (IP and TCP headers with timestamps).
		rate := payload * network.VXLANMTU / (network.VXLANMTU - 52)
		t.Logf("%s: %.2f Mbit/s of TCP payload, %.2f Mbit/s of IP, limit %d", tc.what, payload, rate, tc.limit)
		if math.Abs(rate-float64(tc.limit)) > 0.05*float64(tc.limit) {
			t.Errorf("%s: %.2f Mbit/s, want %d ±5%%", tc.what, rate, tc.limit)
		}
	}
}

// List reports the gateways the kernel runs, by VDC and the revision of the last
// apply that completed, also to a restarted agent (a new Manager); an apply cut
// short leaves its gateway listed without a revision, and a namespace deleted
// behind the manager's back is not listed.
func TestGatewayListAfterRestart(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	m := l.manager("pve1")
	red := l.gateway()
	red.Revision = "r1"
	apply(t, m, red)
	blue := edge.Gateway{VDC: "blue", Uplink: edge.Uplink{Bridge: "vmbr0", Address: netip.MustParsePrefix("203.0.113.20/24")}, Revision: "b1"}
	apply(t, m, blue)
	green := edge.Gateway{VDC: "green", Uplink: edge.Uplink{Bridge: "vmbr0", Address: netip.MustParsePrefix("203.0.113.30/24")}}
	apply(t, m, green)
	if err := m.Remove(ctx(t), "green"); err != nil {
		t.Fatal(err)
	}
	// blue's next revision is cut short (its leg's bridge is not there).
	broken := blue
	broken.Revision, broken.Legs = "b2", []edge.Leg{{Bridge: "nosuchbr", Address: netip.MustParsePrefix("10.9.0.1/24")}}
	if _, err := m.Apply(ctx(t), broken); err == nil {
		t.Fatal("an apply onto a missing bridge succeeded")
	}
	// A gateway whose namespace goes behind the agent's back.
	gone := edge.Gateway{VDC: "gone", Uplink: edge.Uplink{Bridge: "vmbr0", Address: netip.MustParsePrefix("203.0.113.40/24")}, Revision: "g1"}
	apply(t, m, gone)
	if err := nsnet.Delete(m.Namespace("gone")); err != nil {
		t.Fatal(err)
	}

	// An agent that died between making a namespace and naming its VDC in
	// it left one that names none.
	orphan := m.Namespace("orphan")
	if err := nsnet.Ensure(orphan); err != nil {
		t.Fatal(err)
	}

	restarted := l.manager("pve1") // nothing in memory
	got, err := restarted.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []edge.Running{
		{VDC: "blue", Namespace: m.Namespace("blue")}, // cut short: no revision
		{VDC: "red", Namespace: m.Namespace("red"), Revision: "r1"},
	}
	slices.SortFunc(got, func(a, b edge.Running) int { return strings.Compare(a.VDC, b.VDC) })
	if !slices.Equal(got, want) {
		t.Errorf("listed %+v, want %+v", got, want)
	}
	// What is listed is what the kernel has: every gateway namespace of the node.
	var listed []string
	for _, r := range got {
		listed = append(listed, r.Namespace)
	}
	kernel, err := nsnet.List(l.plane.NodeNS("pve1") + "-gw-")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(listed)
	slices.Sort(kernel)
	if !slices.Equal(listed, kernel) {
		t.Errorf("listed namespaces %v, the kernel has %v", listed, kernel)
	}
	if nsnet.Exists(orphan) {
		t.Errorf("the namespace %s that names no VDC is still there after List", orphan)
	}

	// The restarted agent completes blue's apply: it is listed at its revision.
	blue.Revision = "b3"
	apply(t, restarted, blue)
	got, err = restarted.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(got, func(r edge.Running) bool { return r.VDC == "blue" }); i < 0 || got[i].Revision != "b3" {
		t.Errorf("after a completed apply: %+v", got)
	}
}
