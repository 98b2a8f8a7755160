package fleet_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// claimAgent is a fake agent that claims info and answers Prove with prove
// (nil: it does not know Prove, as an agent from before proofs).
type claimAgent struct {
	agentv1.UnimplementedAgentServiceServer
	info  *agentv1.InfoResponse
	prove func(*agentv1.ProveRequest) (*agentv1.ProveResponse, error)
}

func (a claimAgent) Health(context.Context, *agentv1.HealthRequest) (*agentv1.HealthResponse, error) {
	return &agentv1.HealthResponse{Status: agentv1.HealthStatus_HEALTH_STATUS_SERVING, AgentVersion: a.info.GetAgentVersion()}, nil
}

func (a claimAgent) Info(context.Context, *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	return a.info, nil
}

func (a claimAgent) Prove(_ context.Context, req *agentv1.ProveRequest) (*agentv1.ProveResponse, error) {
	if a.prove == nil {
		return a.UnimplementedAgentServiceServer.Prove(context.Background(), req)
	}
	return a.prove(req)
}

// serve starts a gRPC server for an agent and returns its address.
func serve(t *testing.T, a agentv1.AgentServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	agentv1.RegisterAgentServiceServer(srv, a)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestMembershipIsProven: of agents that all claim nodes of cluster alpha,
// only the one that proves its node with alpha's node key, for its own mesh
// identity, is a host of alpha and a target of its calls. One that presents
// alpha's CA with another cluster's node key, one without a proof, one
// relaying the genuine agent's proof, one whose certificate names another
// node than it claims, and a second identity of the genuine node are in no
// zone, each listed as refused with why and logged. Once the first identity
// of the node is removed from the mesh, the second holds the node.
func TestMembershipIsProven(t *testing.T) {
	t.Parallel()
	alpha, other := pvetest.NewCerts(t, "pve1", "pve2", "pve3"), pvetest.NewCerts(t, "pve2")
	claim := func(node string) *agentv1.InfoResponse {
		return &agentv1.InfoResponse{AgentVersion: "v1", NodeName: node, ClusterName: "alpha", ClusterId: alpha.ID}
	}
	type fake struct {
		name, key string
		agent     claimAgent
	}
	fakes := []fake{
		{"alpha-pve1", "nodekey:01", claimAgent{info: claim("pve1"), prove: func(r *agentv1.ProveRequest) (*agentv1.ProveResponse, error) {
			return alpha.Prove("pve1", r, "nodekey:01")
		}}},
		{"intruder", "nodekey:02", claimAgent{info: claim("pve2"), prove: func(r *agentv1.ProveRequest) (*agentv1.ProveResponse, error) {
			p, err := other.Prove("pve2", r, "nodekey:02")
			if p != nil {
				p.ClusterCa = alpha.CAForTest() // alpha's public CA, with its own node certificate and key
			}
			return p, err
		}}},
		{"no-proof", "nodekey:03", claimAgent{info: claim("pve2")}},
		{"relay", "nodekey:04", claimAgent{info: claim("pve1"), prove: func(r *agentv1.ProveRequest) (*agentv1.ProveResponse, error) {
			return alpha.Prove("pve1", r, "nodekey:01") // a proof made for the genuine agent's identity
		}}},
		{"liar", "nodekey:05", claimAgent{info: claim("pve3"), prove: func(r *agentv1.ProveRequest) (*agentv1.ProveResponse, error) {
			return alpha.Prove("pve2", r, "nodekey:05") // a real node of alpha, but not the one it claims
		}}},
		{"alpha-pve1-again", "nodekey:06", claimAgent{info: claim("pve1"), prove: func(r *agentv1.ProveRequest) (*agentv1.ProveResponse, error) {
			return alpha.Prove("pve1", r, "nodekey:06")
		}}},
	}
	m := &fakeMesh{dialByIP: map[string]string{}}
	for i, f := range fakes {
		addr := netip.AddrFrom4([4]byte{100, 64, 0, byte(i + 1)})
		m.nodes = append(m.nodes, fleet.MeshNode{ID: uint64(i + 1), Name: f.name, NodeKey: f.key, Addr: addr, Tags: []string{meshnode.TagAgent}, Online: true})
		m.dialByIP[addr.String()] = serve(t, f.agent)
	}
	m.reachable = map[netip.Addr]bool{}
	for _, n := range m.nodes {
		m.reachable[n.Addr] = true
	}
	var (
		logMu sync.Mutex
		buf   bytes.Buffer
	)
	w := writerFunc(func(b []byte) (int, error) { logMu.Lock(); defer logMu.Unlock(); return buf.Write(b) })
	r, err := fleet.New(fleet.Config{Mesh: m, RejoinGrace: time.Millisecond, Logger: slog.New(slog.NewJSONHandler(w, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	z, ok := r.Zone(alpha.ID)
	if !ok || len(z.Hosts) != 1 || z.Hosts[0].MeshName != "alpha-pve1" || z.Hosts[0].Node != "pve1" {
		t.Fatalf("zone alpha: %+v (found %v); want only the genuine agent as pve1", z, ok)
	}
	if zs := r.Zones(); len(zs) != 1 {
		t.Fatalf("zones %+v; want alpha only", zs)
	}
	for _, node := range []string{"pve2", "pve3"} {
		if _, h, ok := r.AgentOfNode(alpha.ID, node); ok {
			t.Errorf("the agent of %s: %+v; want none", node, h)
		}
	}
	if _, h, ok := r.AgentOfNode(alpha.ID, "pve1"); !ok || h.MeshName != "alpha-pve1" {
		t.Errorf("the agent of pve1: %+v, %v", h, ok)
	}
	for id := uint64(2); id <= 6; id++ {
		if _, ok := r.Agent(id); ok {
			t.Errorf("the client of refused agent %d is handed out", id)
		}
	}
	if _, err := r.EdgeClient("intruder"); err == nil {
		t.Error("the edge client of a refused agent is handed out")
	}
	want := map[string]string{
		"intruder":         "node certificate",
		"no-proof":         "cannot prove its membership",
		"relay":            "signature",
		"liar":             `certificate is node "pve2"`,
		"alpha-pve1-again": "held by mesh node alpha-pve1",
	}
	refused := r.RefusedAgents()
	if len(refused) != len(want) {
		t.Errorf("refused agents %+v; want %d", refused, len(want))
	}
	for _, ra := range refused {
		if !strings.Contains(ra.Reason, want[ra.MeshName]) || want[ra.MeshName] == "" || ra.Since.IsZero() || ra.ClaimedZoneID != alpha.ID {
			t.Errorf("refused %+v; want a reason with %q, since and the claimed zone", ra, want[ra.MeshName])
		}
	}
	logMu.Lock()
	lines := logLines(t, buf.Bytes())
	logMu.Unlock()
	warned := map[string]bool{}
	for _, l := range lines {
		if l["level"] == "WARN" && strings.HasPrefix(fmt.Sprint(l["msg"]), "zones: agent refused") {
			warned[fmt.Sprint(l["mesh_name"])] = true
		}
	}
	for name := range want {
		if !warned[name] {
			t.Errorf("no warning of refused agent %s in the log", name)
		}
	}

	// The rebuilt node's admin removes the first identity from the mesh:
	// the second holds the node from then on.
	m.mu.Lock()
	m.nodes = m.nodes[1:]
	m.mu.Unlock()
	if err := r.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, h, ok := r.AgentOfNode(alpha.ID, "pve1"); !ok || h.MeshName != "alpha-pve1-again" {
		t.Errorf("the agent of pve1 once the first is gone: %+v, %v", h, ok)
	}
}

// countingAgent is agent pve1 of certs whose version and the mesh key it
// signs for the test changes, counting its proofs.
type countingAgent struct {
	agentv1.UnimplementedAgentServiceServer
	certs   *pvetest.Certs
	mu      sync.Mutex
	version string // protected by mu
	signFor string // the mesh key it proves for; protected by mu
	proofs  int    // protected by mu
}

func (a *countingAgent) Health(context.Context, *agentv1.HealthRequest) (*agentv1.HealthResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return &agentv1.HealthResponse{Status: agentv1.HealthStatus_HEALTH_STATUS_SERVING, AgentVersion: a.version}, nil
}

func (a *countingAgent) Info(context.Context, *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return &agentv1.InfoResponse{AgentVersion: a.version, NodeName: "pve1", ClusterName: "alpha", ClusterId: a.certs.ID}, nil
}

func (a *countingAgent) Prove(_ context.Context, req *agentv1.ProveRequest) (*agentv1.ProveResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.proofs++
	return a.certs.Prove("pve1", req, a.signFor)
}

func (a *countingAgent) set(version, signFor string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.version, a.signFor = version, signFor
}

func (a *countingAgent) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.proofs
}

// TestProofRenewed: the registry asks an agent for a proof when it first
// hears from it and again when the agent runs another version or has
// another mesh identity, not on every health check; a proof for the old
// identity does not hold for the new one.
func TestProofRenewed(t *testing.T) {
	t.Parallel()
	a := &countingAgent{certs: pvetest.NewCerts(t, "pve1"), version: "v1", signFor: "nodekey:01"}
	addr := netip.MustParseAddr("100.64.0.1")
	m := &fakeMesh{dialTo: serve(t, a), reachable: map[netip.Addr]bool{addr: true}, nodes: []fleet.MeshNode{
		{ID: 1, Name: "alpha-pve1", NodeKey: "nodekey:01", Addr: addr, Tags: []string{meshnode.TagAgent}, Online: true}}}
	// Health at every refresh: the version changes here on a connection
	// that stays up, where a real agent's restart closes it.
	r, err := fleet.New(fleet.Config{Mesh: m, RejoinGrace: time.Millisecond, HealthInterval: time.Nanosecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	refresh := func(n int) {
		t.Helper()
		for range n {
			if err := r.Refresh(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	member := func() bool { _, _, ok := r.AgentOfNode(a.certs.ID, "pve1"); return ok }
	refresh(5)
	if !member() || a.count() != 1 {
		t.Fatalf("after 5 refreshes: member %v, %d proofs; want a member with 1 proof", member(), a.count())
	}
	a.set("v2", "nodekey:01")
	refresh(3)
	if !member() || a.count() != 2 {
		t.Fatalf("after a new version: member %v, %d proofs; want a member with 2 proofs", member(), a.count())
	}
	// The node key changes (a new mesh identity on the same address); the
	// agent still proves for the old one.
	m.mu.Lock()
	m.nodes[0].NodeKey = "nodekey:02"
	m.mu.Unlock()
	refresh(2)
	if member() || a.count() != 3 {
		t.Fatalf("a proof for the old mesh identity: member %v, %d proofs; want refused after 3 proofs", member(), a.count())
	}
	if rs := r.RefusedAgents(); len(rs) != 1 || !strings.Contains(rs[0].Reason, "signature") {
		t.Fatalf("refused %+v", rs)
	}
	a.set("v3", "nodekey:02") // it restarts and proves for its new identity
	refresh(2)
	if !member() || len(r.RefusedAgents()) != 0 {
		t.Fatalf("after proving for its new identity: member %v, refused %+v", member(), r.RefusedAgents())
	}
}
