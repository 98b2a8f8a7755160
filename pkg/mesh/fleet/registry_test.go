package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// fakeMesh is a mesh whose agents never answer: its node list and the
// orchestrator's view of the peers are what the test sets.
type fakeMesh struct {
	mu        sync.Mutex
	nodes     []fleet.MeshNode    // protected by mu
	reachable map[netip.Addr]bool // protected by mu
	dialTo    string              // where Dial connects ("": it fails); protected by mu
	// dialByIP is where Dial connects for each mesh address, when set;
	// protected by mu.
	dialByIP map[string]string
}

func (m *fakeMesh) Nodes(context.Context) ([]fleet.MeshNode, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]fleet.MeshNode(nil), m.nodes...), nil
}

func (m *fakeMesh) OnlinePeers(context.Context) (map[netip.Addr]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[netip.Addr]bool{}
	for a, ok := range m.reachable {
		out[a] = ok
	}
	return out, nil
}

func (m *fakeMesh) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	m.mu.Lock()
	to := m.dialTo
	if m.dialByIP != nil {
		host, _, _ := net.SplitHostPort(addr)
		to = m.dialByIP[host]
	}
	m.mu.Unlock()
	if to == "" {
		return nil, errors.New("fake mesh: no dial")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, to)
}

// agentServer answers Health, Info and Prove as agent pve1 of cluster
// "alpha".
type agentServer struct {
	agentv1.UnimplementedAgentServiceServer
	certs *pvetest.Certs
}

func (agentServer) Health(context.Context, *agentv1.HealthRequest) (*agentv1.HealthResponse, error) {
	return &agentv1.HealthResponse{Status: agentv1.HealthStatus_HEALTH_STATUS_SERVING}, nil
}

func (a agentServer) Info(context.Context, *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	return &agentv1.InfoResponse{NodeName: "pve1", ClusterId: a.certs.ID, ClusterName: "alpha"}, nil
}

func (a agentServer) Prove(_ context.Context, req *agentv1.ProveRequest) (*agentv1.ProveResponse, error) {
	return a.certs.Prove("pve1", req, "")
}

// TestAgentTheMeshShowsOffline: right after an orchestrator restart the
// control server can list an agent offline (and the orchestrator's node
// not see it) for long although its tunnel works. The registry probes an
// agent it never heard from anyway: it reads its Info and the host is
// online in its zone, while the mesh still says offline.
func TestAgentTheMeshShowsOffline(t *testing.T) {
	t.Parallel()
	certs := pvetest.NewCerts(t, "pve1")
	m := &fakeMesh{dialTo: serveAgent(t, agentServer{certs: certs}), nodes: []fleet.MeshNode{
		{ID: 1, Name: "alpha-pve1", Addr: netip.MustParseAddr("100.64.0.1"), Tags: []string{meshnode.TagAgent}}}}
	if h := hostAfterRefresh(t, fleet.Config{Mesh: m, RejoinGrace: time.Millisecond}, certs.ID); h.Status != fleet.StatusOnline {
		t.Fatalf("the host of an agent that answers: %+v", h)
	}
}

// logLines decodes a JSON slog output.
func logLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestWhyAnAgentStaysOffline: an agent that never answers is never
// "online", so no status change is ever logged for it; the registry still
// says why it is offline (each time the reason changes), and warns once,
// when the rejoin grace ends, of every agent still without Info, so an
// operator sees why a restarted orchestrator lists no hosts.
func TestWhyAnAgentStaysOffline(t *testing.T) {
	t.Parallel()
	var (
		logMu sync.Mutex // slog's handler serializes its writes; the test reads under it too
		buf   bytes.Buffer
	)
	w := writerFunc(func(b []byte) (int, error) { logMu.Lock(); defer logMu.Unlock(); return buf.Write(b) })
	read := func() []map[string]any {
		logMu.Lock()
		defer logMu.Unlock()
		return logLines(t, buf.Bytes())
	}
	gone := fleet.MeshNode{ID: 1, Name: "agent-gone", Addr: netip.MustParseAddr("100.64.0.1"), Tags: []string{meshnode.TagAgent}}
	unseen := fleet.MeshNode{ID: 2, Name: "agent-unseen", Addr: netip.MustParseAddr("100.64.0.2"), Tags: []string{meshnode.TagAgent}, Online: true}
	m := &fakeMesh{nodes: []fleet.MeshNode{gone, unseen}}
	const grace = 500 * time.Millisecond
	r, err := fleet.New(fleet.Config{Mesh: m, RejoinGrace: grace, Logger: slog.New(slog.NewJSONHandler(w, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	why := map[string]string{}
	for _, l := range read() {
		if l["msg"] == "zones: host still offline" {
			why[l["mesh_name"].(string)] = l["detail"].(string)
		}
	}
	if why["agent-gone"] != "not connected to the mesh" || why["agent-unseen"] != "not yet reachable from the orchestrator" {
		t.Fatalf("why the agents are offline: %v\nlog:\n%s", why, buf.String())
	}

	// The same reasons again log nothing more.
	n := len(read())
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got) != n {
		t.Fatalf("a second refresh with the same reasons logged %v", got[n:])
	}

	// Once the grace has ended, one warning per agent without Info, and
	// only one however many refreshes follow.
	warned := map[string]string{}
	warnings := 0
	poll.True(t, 10*time.Second, "a warning for each agent without Info", func() bool {
		if err := r.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		warnings = 0
		for _, l := range read() {
			if l["level"] == "WARN" {
				warnings++
				warned[l["mesh_name"].(string)] = l["detail"].(string)
			}
		}
		return len(warned) >= 2
	})
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got) != n+warnings {
		t.Fatalf("refreshes after the grace logged more than its warnings: %v", got[n:])
	}
	if warnings != 2 || warned["agent-gone"] != why["agent-gone"] || warned["agent-unseen"] != why["agent-unseen"] {
		t.Fatalf("warnings after the grace: %v\nlog:\n%s", warned, buf.String())
	}
	if len(r.Zones()) != 0 {
		t.Fatalf("zones of agents that never answered: %v", r.Zones())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// slowAgent is agentServer answering Health and Info after delay each.
type slowAgent struct {
	agentServer
	delay time.Duration
}

func (a slowAgent) Health(ctx context.Context, req *agentv1.HealthRequest) (*agentv1.HealthResponse, error) {
	time.Sleep(a.delay) // the agent's latency, not a wait of the test
	return a.agentServer.Health(ctx, req)
}

func (a slowAgent) Info(ctx context.Context, req *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	time.Sleep(a.delay) // the agent's latency, not a wait of the test
	return a.agentServer.Info(ctx, req)
}

// CallTimeout bounds each call to an agent, not Health and Info together:
// a loaded agent that answers each within it joins its zone.
func TestEachCallHasTheCallTimeout(t *testing.T) {
	t.Parallel()
	certs := pvetest.NewCerts(t, "pve1")
	at := serveAgent(t, slowAgent{agentServer: agentServer{certs: certs}, delay: 600 * time.Millisecond})
	addr := netip.MustParseAddr("100.64.0.1")
	m := &fakeMesh{dialTo: at, reachable: map[netip.Addr]bool{addr: true}, nodes: []fleet.MeshNode{
		{ID: 1, Name: "alpha-pve1", Addr: addr, Tags: []string{meshnode.TagAgent}, Online: true}}}
	if h := hostAfterRefresh(t, fleet.Config{Mesh: m, CallTimeout: time.Second}, certs.ID); h.Status != fleet.StatusOnline {
		t.Fatalf("an agent answering Health and Info in 0.6 s each, CallTimeout 1 s: its host %+v", h)
	}
}

// serveAgent serves impl's AgentService on loopback and returns its address.
func serveAgent(t *testing.T, impl agentv1.AgentServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	agentv1.RegisterAgentServiceServer(srv, impl)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// hostAfterRefresh is host pve1 of zone id after one refresh of a registry
// of cfg; the test fails when there is none.
func hostAfterRefresh(t *testing.T, cfg fleet.Config, id string) fleet.Host {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	r, err := fleet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	z, ok := r.Zone(id)
	if !ok {
		t.Fatalf("no zone after a refresh: %v", r.Zones())
	}
	h, ok := z.Host("pve1")
	if !ok {
		t.Fatalf("no host pve1 in %+v", z)
	}
	return h
}
