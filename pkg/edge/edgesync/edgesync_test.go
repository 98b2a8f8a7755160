package edgesync_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/edge/edgesync"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// mesh is a mesh of agents on loopback: a real fleet.Registry finds them, checks
// their health over gRPC and dials their edge service.
type mesh struct {
	mu     sync.Mutex
	agents []*agent // protected by mu
}

// agent is one host's agent: Info and Health, and an edge service recording the
// calls it gets.
type agent struct {
	name  string
	id    uint64
	certs *pvetest.Certs // its cluster's, which it proves its membership with
	addr  netip.Addr     // its mesh address

	mu      sync.Mutex
	real    string            // the loopback address it listens on; "" while down; protected by mu
	srv     *grpc.Server      // protected by mu
	applied []string          // the VDCs of the ApplyGateway calls; protected by mu
	removed []string          // the VDCs of the RemoveGateway calls; protected by mu
	failing bool              // ApplyGateway fails; protected by mu
	runs    map[string]string // the revision of each VDC's gateway it runs (its kernel's); protected by mu
	lists   int               // ListGateways calls; protected by mu
	// watchers are the open WatchGateways streams' signals; protected by mu.
	watchers map[chan struct{}]bool
}

type agentAPI struct {
	agentv1.UnimplementedAgentServiceServer
	*agent
}

type edgeAPI struct {
	edgev1.UnimplementedEdgeServiceServer
	*agent
}

func (a agentAPI) Info(context.Context, *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	return &agentv1.InfoResponse{AgentVersion: "test", NodeName: a.name, ClusterName: "lab", ClusterId: a.certs.ID}, nil
}

func (a agentAPI) Prove(_ context.Context, req *agentv1.ProveRequest) (*agentv1.ProveResponse, error) {
	return a.certs.Prove(a.name, req, "")
}

func (a agentAPI) Health(context.Context, *agentv1.HealthRequest) (*agentv1.HealthResponse, error) {
	return &agentv1.HealthResponse{Status: agentv1.HealthStatus_HEALTH_STATUS_SERVING, AgentVersion: "test"}, nil
}

func (a edgeAPI) ApplyGateway(_ context.Context, req *edgev1.ApplyGatewayRequest) (*edgev1.ApplyGatewayResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failing {
		return nil, status.Error(codes.Internal, "no namespace today")
	}
	a.applied = append(a.applied, req.GetGateway().GetVdc())
	a.runs[req.GetGateway().GetVdc()] = req.GetRevision()
	a.signalLocked()
	return &edgev1.ApplyGatewayResponse{}, nil
}

// signalLocked tells the open streams that what the agent runs changed, as
// the agent does after an apply or a removal through it. a.mu must be held.
func (a *agent) signalLocked() {
	for ch := range a.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (a *agent) listLocked() []*edgev1.RunningGateway {
	var out []*edgev1.RunningGateway
	for vdc, rev := range a.runs {
		out = append(out, &edgev1.RunningGateway{Vdc: vdc, Namespace: "fpgw-" + vdc, Revision: rev})
	}
	// A namespace that names no VDC is listed too, and must be left alone.
	return append(out, &edgev1.RunningGateway{Namespace: "fpgw-0123456789"})
}

func (a edgeAPI) WatchGateways(_ *edgev1.WatchGatewaysRequest, st edgev1.EdgeService_WatchGatewaysServer) error {
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	a.mu.Lock()
	if a.watchers == nil {
		a.watchers = map[chan struct{}]bool{}
	}
	a.watchers[ch] = true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.watchers, ch)
		a.mu.Unlock()
	}()
	for {
		select {
		case <-st.Context().Done():
			return nil
		case <-ch:
		}
		a.mu.Lock()
		list := a.listLocked()
		a.mu.Unlock()
		if err := st.Send(&edgev1.WatchGatewaysResponse{Gateways: list}); err != nil {
			return err
		}
	}
}

func (a edgeAPI) RemoveGateway(_ context.Context, req *edgev1.RemoveGatewayRequest) (*edgev1.RemoveGatewayResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.removed = append(a.removed, req.GetVdc())
	delete(a.runs, req.GetVdc())
	a.signalLocked()
	return &edgev1.RemoveGatewayResponse{}, nil
}

func (a edgeAPI) ListGateways(context.Context, *edgev1.ListGatewaysRequest) (*edgev1.ListGatewaysResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lists++
	return &edgev1.ListGatewaysResponse{Gateways: a.listLocked()}, nil
}

// running is what the agent runs: each VDC's gateway's revision.
func (a *agent) running() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.runs)
}

// run makes the agent run vdc's gateway at rev ("" none), as a kernel left so.
func (a *agent) run(vdc, rev string, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ok {
		a.runs[vdc] = rev
	} else {
		delete(a.runs, vdc)
	}
}

// listed returns and forgets how many times the agent was asked what it runs.
func (a *agent) listed() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.lists
	a.lists = 0
	return n
}

// calls returns and forgets the calls so far.
func (a *agent) calls() (applied, removed []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	applied, removed = a.applied, a.removed
	a.applied, a.removed = nil, nil
	return applied, removed
}

func (a *agent) start(t testing.TB) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	agentv1.RegisterAgentServiceServer(srv, agentAPI{agent: a})
	edgev1.RegisterEdgeServiceServer(srv, edgeAPI{agent: a})
	go srv.Serve(l)
	a.mu.Lock()
	a.real, a.srv = l.Addr().String(), srv
	a.mu.Unlock()
	t.Cleanup(srv.Stop)
}

// stop takes the agent off the mesh (its node lost).
func (a *agent) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.srv.Stop()
	a.real = ""
}

func (a *agent) up() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.real != ""
}

func (m *mesh) Nodes(context.Context) ([]fleet.MeshNode, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []fleet.MeshNode
	for _, a := range m.agents {
		out = append(out, fleet.MeshNode{ID: a.id, Name: a.name, Addr: a.addr, Tags: []string{meshnode.TagAgent}, Online: a.up()})
	}
	return out, nil
}

func (m *mesh) OnlinePeers(ctx context.Context) (map[netip.Addr]bool, error) {
	nodes, _ := m.Nodes(ctx)
	out := map[netip.Addr]bool{}
	for _, n := range nodes {
		out[n.Addr] = n.Online
	}
	return out, nil
}

func (m *mesh) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	i := slices.IndexFunc(m.agents, func(a *agent) bool { return a.addr == ap.Addr() })
	m.mu.Unlock()
	if i < 0 {
		return nil, fmt.Errorf("no node %s", addr)
	}
	a := m.agents[i]
	a.mu.Lock()
	real := a.real
	a.mu.Unlock()
	if real == "" {
		return nil, errors.New("the node is down")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, real)
}

// lab is a zone of three hosts seen by a running registry.
func lab(t testing.TB) (*fleet.Registry, *mesh) {
	t.Helper()
	m := &mesh{}
	certs := pvetest.NewCerts(t, "host1", "host2", "host3")
	for i := range 3 {
		a := &agent{name: fmt.Sprintf("host%d", i+1), id: uint64(i + 1), certs: certs, addr: netip.AddrFrom4([4]byte{100, 64, 0, byte(i + 1)}), runs: map[string]string{}}
		a.start(t)
		m.agents = append(m.agents, a)
	}
	reg, err := fleet.New(fleet.Config{Mesh: m, RefreshInterval: 100 * time.Millisecond, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); reg.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	poll.True(t, 30*time.Second, "three hosts online", func() bool { return len(online(reg)) == 3 })
	return reg, m
}

func online(reg *fleet.Registry) []string {
	var out []string
	for _, z := range reg.Zones() {
		for _, h := range z.Hosts {
			if h.Status == fleet.StatusOnline {
				out = append(out, h.MeshName)
			}
		}
	}
	return out
}

func zone(t *testing.T, reg *fleet.Registry) fleet.Zone {
	t.Helper()
	zs := reg.Zones()
	if len(zs) != 1 {
		t.Fatalf("zones %v", zs)
	}
	return zs[0]
}

func (m *mesh) agent(name string) *agent {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.agents[slices.IndexFunc(m.agents, func(a *agent) bool { return a.name == name })]
}

// desired is a settable desired state.
type desired struct {
	mu  sync.Mutex
	gws []edgesync.Desired // protected by mu
}

func (d *desired) set(gws ...edgesync.Desired) { d.mu.Lock(); d.gws = gws; d.mu.Unlock() }

func (d *desired) get(context.Context) ([]edgesync.Desired, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.gws), nil
}

func gateway(zoneID, vdc string, rules int) edgesync.Desired {
	gw := &edgev1.Gateway{Vdc: vdc, Uplink: &edgev1.Uplink{Bridge: "vmbr0", Address: "203.0.113.10/24"}}
	for i := range rules {
		gw.Rules = append(gw.Rules, &edgev1.Rule{Id: fmt.Sprint(i), Direction: edgev1.Direction_DIRECTION_INBOUND, Protocol: "tcp", FromPort: 80, ToPort: 80})
	}
	return edgesync.Desired{ZoneID: zoneID, Gateway: gw}
}

func sync1(t *testing.T, s *edgesync.Syncer) {
	t.Helper()
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// placed is a lab, a syncer (Resync resync) and red's gateway placed by one pass.
func placed(t *testing.T, resync time.Duration) (*fleet.Registry, *mesh, fleet.Zone, *desired, *edgesync.Syncer) {
	t.Helper()
	reg, m := lab(t)
	z := zone(t, reg)
	d := &desired{}
	d.set(gateway(z.ID, "red", 1))
	s := edgesync.New(edgesync.Config{Zones: reg, Desired: d.get, Resync: resync})
	sync1(t, s)
	return reg, m, z, d, s
}

// A gateway runs on the host rendezvous hashing picks and on no other; the host lost,
// the next pass moves it to the next host of the order; the host back, it moves back
// and the interim host is told to remove it.
func TestPlacementAndFailover(t *testing.T) {
	t.Parallel()
	reg, m, z, _, s := placed(t, 0)
	first, _ := edgesync.Choose(z, "red")
	if h, ok := s.Placement(z.ID, "red"); !ok || h != first.MeshName {
		t.Fatalf("placed on %q (%v), want %s", h, ok, first.MeshName)
	}
	for _, a := range m.agents {
		applied, removed := a.calls()
		if a.name == first.MeshName {
			if !slices.Equal(applied, []string{"red"}) || len(removed) != 0 {
				t.Errorf("%s: applied %v, removed %v; want red applied", a.name, applied, removed)
			}
		} else if len(applied)+len(removed) != 0 {
			t.Errorf("%s runs no gateway but got applies %v and removes %v", a.name, applied, removed)
		}
	}

	m.agent(first.MeshName).stop()
	lost := time.Now()
	poll.True(t, 30*time.Second, "the host offline", func() bool { return len(online(reg)) == 2 })
	sync1(t, s)
	second, _ := edgesync.Choose(zone(t, reg), "red")
	if h, _ := s.Placement(z.ID, "red"); h != second.MeshName || h == first.MeshName {
		t.Fatalf("after %s was lost the gateway is on %q, want %s", first.MeshName, h, second.MeshName)
	}
	if applied, _ := m.agent(second.MeshName).calls(); !slices.Equal(applied, []string{"red"}) {
		t.Errorf("%s applied %v after the failover", second.MeshName, applied)
	}
	t.Logf("moved %.1f s after the host was lost (the registry's refresh is 100 ms here)", time.Since(lost).Seconds())

	// The lost host comes back still running red as it was (cut off, not
	// rebooted): red moves back without being sent again, and the interim
	// host removes its copy.
	m.agent(first.MeshName).start(t)
	poll.True(t, 30*time.Second, "the host back", func() bool { return len(online(reg)) == 3 })
	sync1(t, s)
	if h, _ := s.Placement(z.ID, "red"); h != first.MeshName {
		t.Fatalf("with %s back the gateway is on %q", first.MeshName, h)
	}
	if applied, _ := m.agent(first.MeshName).calls(); len(applied) != 0 {
		t.Errorf("%s, back and running red as desired, was sent %v again", first.MeshName, applied)
	}
	if _, removed := m.agent(second.MeshName).calls(); !slices.Equal(removed, []string{"red"}) {
		t.Errorf("the interim host %s was not told to remove red: %v", second.MeshName, removed)
	}
	for _, a := range m.agents {
		if _, runs := a.running()["red"]; runs != (a.name == first.MeshName) {
			t.Errorf("%s runs red: %v", a.name, runs)
		}
	}

	// Lost again, and back rebooted (its kernel empty): red is sent to it again.
	m.agent(first.MeshName).stop()
	poll.True(t, 30*time.Second, "the host offline", func() bool { return len(online(reg)) == 2 })
	sync1(t, s)
	m.agent(first.MeshName).run("red", "", false)
	m.agent(first.MeshName).start(t)
	poll.True(t, 30*time.Second, "the host back", func() bool { return len(online(reg)) == 3 })
	sync1(t, s)
	if applied, _ := m.agent(first.MeshName).calls(); !slices.Equal(applied, []string{"red"}) {
		t.Errorf("%s, back rebooted, applied %v", first.MeshName, applied)
	}
}

// Passes with nothing changed send nothing until Resync; a changed state is sent on
// the next pass; a failed apply is reported and tried again on every pass until it
// works; a gateway no longer desired is removed from every online host and forgotten.
func TestReconcile(t *testing.T) {
	t.Parallel()
	_, m, z, d, s := placed(t, time.Hour)
	host, _ := s.Placement(z.ID, "red")
	a := m.agent(host)
	for _, o := range m.agents {
		o.calls()
	}
	for range 5 {
		sync1(t, s)
	}
	for _, o := range m.agents {
		if applied, removed := o.calls(); len(applied)+len(removed) != 0 {
			t.Errorf("%s got applies %v and removes %v over passes with nothing changed", o.name, applied, removed)
		}
	}

	d.set(gateway(z.ID, "red", 2))
	sync1(t, s)
	if applied, _ := a.calls(); !slices.Equal(applied, []string{"red"}) {
		t.Errorf("a changed state: %s applied %v", host, applied)
	}

	a.mu.Lock()
	a.failing = true
	a.mu.Unlock()
	d.set(gateway(z.ID, "red", 3))
	if err := s.Sync(context.Background()); err == nil {
		t.Fatal("a failing apply: the pass reported no error")
	}
	if err := s.LastError(z.ID, "red"); err == nil {
		t.Error("a failing apply: no LastError")
	}
	a.mu.Lock()
	a.failing = false
	a.mu.Unlock()
	sync1(t, s)
	if err := s.LastError(z.ID, "red"); err != nil {
		t.Errorf("after a working pass LastError is %v", err)
	}
	if applied, _ := a.calls(); !slices.Equal(applied, []string{"red"}) {
		t.Errorf("the pass after a failure: %s applied %v", host, applied)
	}

	// Gone from its host behind the Syncer's back (a node rebooted without going
	// offline): sent again on the next pass, Resync or not.
	a.run("red", "", false)
	sync1(t, s)
	if applied, _ := a.calls(); !slices.Equal(applied, []string{"red"}) {
		t.Errorf("red gone from %s: applied %v", host, applied)
	}

	d.set()
	sync1(t, s)
	for _, o := range m.agents {
		want := []string(nil)
		if o == a {
			want = []string{"red"}
		}
		if _, removed := o.calls(); !slices.Equal(removed, want) {
			t.Errorf("a deleted gateway: %s got removes %v, want %v", o.name, removed, want)
		}
	}
	if h, ok := s.Placement(z.ID, "red"); ok {
		t.Errorf("a deleted gateway is still placed on %s", h)
	}
	sync1(t, s)
	for _, o := range m.agents {
		if applied, removed := o.calls(); len(applied)+len(removed) != 0 {
			t.Errorf("a forgotten gateway: %s got applies %v and removes %v", o.name, applied, removed)
		}
	}
}

// An unchanged gateway is sent again once Resync has passed, not before (what
// happened unseen is repaired).
func TestResync(t *testing.T) {
	t.Parallel()
	const resync = 200 * time.Millisecond
	reg, m := lab(t)
	z := zone(t, reg)
	d := &desired{}
	d.set(gateway(z.ID, "red", 1))
	s := edgesync.New(edgesync.Config{Zones: reg, Desired: d.get, Resync: resync})
	// The first pass starts after before, so the syncer stamps its send after it; a pass
	// that sends again must end at least Resync after that stamp.
	before := time.Now()
	sync1(t, s)
	host, _ := s.Placement(z.ID, "red")
	a := m.agent(host)
	if applied, _ := a.calls(); !slices.Equal(applied, []string{"red"}) {
		t.Fatalf("first pass applied %v, want [red]", applied)
	}
	var applied []string
	var took time.Duration
	poll.True(t, 30*time.Second, "the state sent again", func() bool {
		sync1(t, s)
		took = time.Since(before)
		applied, _ = a.calls()
		return len(applied) > 0
	})
	if took < resync || !slices.Equal(applied, []string{"red"}) {
		t.Errorf("sent again %s after the first pass began (Resync %s): %v", took, resync, applied)
	}
}

// A fresh Syncer (every orchestrator replica restarted) derives what to change from
// what the agents report running: a gateway deleted meanwhile, and a copy left on a
// host it no longer belongs on, are removed; a gateway running as desired on its
// host is not sent again; one at another revision is; one whose state cannot be
// derived this pass is left where it runs; a namespace naming no VDC is left alone.
func TestFreshSyncerRemovesWhatIsNotDesired(t *testing.T) {
	t.Parallel()
	reg, m := lab(t)
	z := zone(t, reg)
	red, blue, gone, kept := gateway(z.ID, "red", 1), gateway(z.ID, "blue", 1), gateway(z.ID, "gone", 1), gateway(z.ID, "kept", 1)
	d := &desired{}
	d.set(red, blue, gone, kept)
	sync1(t, edgesync.New(edgesync.Config{Zones: reg, Desired: d.get}))
	hostOf := func(vdc string) *agent { h, _ := edgesync.Choose(z, vdc); return m.agent(h.MeshName) }
	// A copy of red on another host, as a failover back with every replica down
	// would leave it; kept's state is not derivable this pass.
	var other *agent
	for _, a := range m.agents {
		if a != hostOf("red") {
			other = a
		}
	}
	other.run("red", hostOf("red").running()["red"], true)
	d.set(red, gateway(z.ID, "blue", 2), edgesync.Desired{ZoneID: z.ID, VDC: "kept"})
	for _, a := range m.agents {
		a.calls()
	}

	s := edgesync.New(edgesync.Config{Zones: reg, Desired: d.get})
	sync1(t, s)
	for _, a := range m.agents {
		applied, removed := a.calls()
		var wantApplied, wantRemoved []string
		if a == hostOf("blue") {
			wantApplied = []string{"blue"}
		}
		if a == hostOf("gone") {
			wantRemoved = append(wantRemoved, "gone")
		}
		if a == other {
			wantRemoved = append(wantRemoved, "red")
		}
		slices.Sort(removed)
		slices.Sort(wantRemoved)
		if !slices.Equal(applied, wantApplied) || !slices.Equal(removed, wantRemoved) {
			t.Errorf("%s: applied %v and removed %v, want %v and %v", a.name, applied, removed, wantApplied, wantRemoved)
		}
	}
	for vdc, want := range map[string]*agent{"red": hostOf("red"), "blue": hostOf("blue"), "kept": hostOf("kept")} {
		for _, a := range m.agents {
			if _, runs := a.running()[vdc]; runs != (a == want) {
				t.Errorf("%s runs %s: %v", a.name, vdc, runs)
			}
		}
		if h, _ := s.Placement(z.ID, vdc); h != want.name {
			t.Errorf("%s placed on %q, want %s", vdc, h, want.name)
		}
	}
	if _, ok := s.Placement(z.ID, "gone"); ok {
		t.Error("a deleted gateway is placed")
	}
	sync1(t, s)
	for _, a := range m.agents {
		if applied, removed := a.calls(); len(applied)+len(removed) != 0 {
			t.Errorf("a second pass with nothing changed: %s got applies %v and removes %v", a.name, applied, removed)
		}
	}
}

// Between sweeps a pass asks only the hosts of the zones that have a gateway
// (desired or running): a fleet without gateways is asked once per Sweep, not
// on every pass. A gateway created is applied on the next pass all the same,
// and one left on a host of a zone that has none is removed within Sweep.
func TestPassesAskOnlyZonesWithGateways(t *testing.T) {
	t.Parallel()
	reg, m := lab(t)
	z := zone(t, reg)
	d := &desired{}
	const sweep = 300 * time.Millisecond
	s := edgesync.New(edgesync.Config{Zones: reg, Desired: d.get, Sweep: sweep})
	listed := func() (n int) {
		for _, h := range z.Hosts {
			n += m.agent(h.MeshName).listed()
		}
		return n
	}
	began := time.Now()
	sync1(t, s)
	if n := listed(); n != 3 {
		t.Fatalf("the first pass asked %d hosts, want every one (3)", n)
	}
	passes := 0
	for time.Since(began) < sweep/2 { // poll:own-loop: passes within one sweep, as fast as they go
		sync1(t, s)
		passes++
	}
	if n := listed(); n != 0 {
		t.Fatalf("%d passes before the next sweep, with no gateway anywhere, asked %d hosts; want none", passes, n)
	}

	// A gateway created is placed by the next pass.
	d.set(gateway(z.ID, "red", 1))
	sync1(t, s)
	h, ok := edgesync.Choose(z, "red")
	if !ok {
		t.Fatal("no host for red")
	}
	if got := m.agent(h.MeshName).running(); got["red"] == "" {
		t.Fatalf("the pass after red was created left it unapplied; %s runs %v", h.MeshName, got)
	}
	listed()
	sync1(t, s)
	if n := listed(); n != 3 {
		t.Fatalf("a pass with a gateway in the zone asked %d hosts, want 3", n)
	}

	// Deleted: removed, then the zone is left alone again.
	d.set()
	sync1(t, s)
	if got := m.agent(h.MeshName).running(); got["red"] != "" {
		t.Fatalf("red deleted still runs on %s", h.MeshName)
	}
	sync1(t, s) // the last pass saw it running
	listed()
	sync1(t, s)
	if n := listed(); n != 0 && time.Since(began) < sweep {
		t.Fatalf("a pass after the zone's last gateway went asked %d hosts, want none", n)
	}

	// A copy left on a host of a zone with none is found by the next sweep.
	stray := m.agent("host2")
	stray.run("blue", "x", true)
	poll.Until(t, 10*time.Second, "the stray gateway removed", func() error {
		sync1(t, s)
		if got := stray.running(); got["blue"] != "" {
			return fmt.Errorf("host2 runs %v", got)
		}
		return nil
	})
}

// A host put in maintenance loses its gateways as a lost host does: the
// next pass moves them to the next host of the order; out of maintenance,
// they come back.
func TestMaintenanceMovesGateways(t *testing.T) {
	t.Parallel()
	reg, _ := lab(t)
	z := zone(t, reg)
	d := &desired{}
	d.set(gateway(z.ID, "red", 1))
	var mu sync.Mutex
	maint := map[string]bool{} // protected by mu
	s := edgesync.New(edgesync.Config{Zones: reg, Desired: d.get, Maintenance: func(context.Context, string) (map[string]bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(maint), nil
	}})
	sync1(t, s)
	first, _ := edgesync.Choose(z, "red")
	if h, _ := s.Placement(z.ID, "red"); h != first.MeshName {
		t.Fatalf("placed on %q, want %s", h, first.MeshName)
	}
	mu.Lock()
	maint[first.Node] = true
	mu.Unlock()
	sync1(t, s)
	second, _ := edgesync.ChooseExcept(z, "red", map[string]bool{first.Node: true})
	if h, _ := s.Placement(z.ID, "red"); h != second.MeshName || h == first.MeshName {
		t.Fatalf("with %s in maintenance the gateway is on %q, want %s", first.Node, h, second.MeshName)
	}
	mu.Lock()
	clear(maint)
	mu.Unlock()
	sync1(t, s)
	if h, _ := s.Placement(z.ID, "red"); h != first.MeshName {
		t.Fatalf("out of maintenance the gateway is on %q, want %s", h, first.MeshName)
	}
}
