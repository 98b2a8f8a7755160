package meshtest_test

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// BenchmarkEnrollment measures the time from starting a new agent (with a
// fresh enrollment key) until the orchestrator shows its host online.
func BenchmarkEnrollment(b *testing.B) {
	h := meshtest.New(b, meshtest.WithClusters(meshtest.ClusterSpec{Name: "bench", Nodes: 1}), meshtest.WithoutAgents())
	c := h.Clusters[0]
	var joins, onlines []time.Duration
	for b.Loop() {
		b.StopTimer()
		a := h.NewAgent(b, c, "pve1", "")
		b.StartTimer()
		start := time.Now()
		if err := a.Start(b.Context()); err != nil {
			b.Fatal(err)
		}
		joins = append(joins, time.Since(start))
		poll.True(b, 60*time.Second, "new agent online", func() bool {
			host, ok := a.Host()
			return ok && host.Status == fleet.StatusOnline
		})
		onlines = append(onlines, time.Since(start))
		b.StopTimer()
		// The next agent is another identity of the same node: the first
		// leaves the mesh, as an admin removes a rebuilt node's.
		host, _ := a.Host()
		a.Stop()
		if err := h.Orchestrator.Control().DeleteNode(b.Context(), host.MeshID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(median(onlines).Seconds(), "s/enroll-p50")
	b.ReportMetric(slices.Max(onlines).Seconds(), "s/enroll-max")
	b.ReportMetric(median(joins).Seconds(), "s/join-p50")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkGRPCLatency compares one unary gRPC call over the mesh (the
// orchestrator's node to an agent-tagged node) with the same call over
// loopback TCP, measured alternately in the same run. It also reports the
// latency of the real agent's Health (which includes the agent's call to
// its Proxmox API).
func BenchmarkGRPCLatency(b *testing.B) {
	h := meshtest.New(b, meshtest.WithClusters(meshtest.ClusterSpec{Name: "bench", Nodes: 1}))
	h.WaitOnline(b, 30*time.Second)

	// The same gRPC service on a mesh listener and on loopback TCP.
	node := h.JoinNode(b, "echo", meshcontrol.TagAgent)
	serve := func(l net.Listener) {
		srv := grpc.NewServer()
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go srv.Serve(l)
		b.Cleanup(srv.Stop)
	}
	meshLn, err := node.Listen("tcp", ":50051")
	if err != nil {
		b.Fatal(err)
	}
	serve(meshLn)
	tcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	serve(tcpLn)

	orch := h.Orchestrator.MeshNode()
	ctx := b.Context()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := orch.WaitPeer(wctx, node.Addr()); err != nil {
		b.Fatal(err)
	}
	cancel()
	dial := func(addr string, d func(context.Context, string, string) (net.Conn, error)) *grpc.ClientConn {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if d != nil {
			opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d(ctx, "tcp", a) }))
		}
		conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		return conn
	}
	meshClient := healthpb.NewHealthClient(dial(net.JoinHostPort(node.Addr().String(), "50051"), orch.Dial))
	tcpClient := healthpb.NewHealthClient(dial(tcpLn.Addr().String(), nil))
	agentClient := agentv1.NewAgentServiceClient(dial(h.Clusters[0].Agents[0].Running().Addr(), orch.Dial))

	call := func(f func() error) time.Duration {
		s := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		return time.Since(s)
	}
	meshCall := func() error { _, err := meshClient.Check(ctx, &healthpb.HealthCheckRequest{}); return err }
	tcpCall := func() error { _, err := tcpClient.Check(ctx, &healthpb.HealthCheckRequest{}); return err }
	agentCall := func() error { _, err := agentClient.Health(ctx, &agentv1.HealthRequest{}); return err }
	// Warm up connections and paths.
	for range 20 {
		call(meshCall)
		call(tcpCall)
		call(agentCall)
	}
	var meshD, tcpD, agentD []time.Duration
	b.ResetTimer()
	for b.Loop() {
		meshD = append(meshD, call(meshCall))
		tcpD = append(tcpD, call(tcpCall))
		agentD = append(agentD, call(agentCall))
	}
	b.StopTimer()
	p := func(ds []time.Duration, q float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))].Microseconds())
	}
	b.ReportMetric(p(meshD, 0.5), "mesh-p50-µs")
	b.ReportMetric(p(meshD, 0.99), "mesh-p99-µs")
	b.ReportMetric(p(tcpD, 0.5), "loopback-p50-µs")
	b.ReportMetric(p(tcpD, 0.99), "loopback-p99-µs")
	b.ReportMetric(p(meshD, 0.5)/max(p(tcpD, 0.5), 1), "mesh/loopback-p50")
	b.ReportMetric(p(agentD, 0.5), "agent-health-p50-µs")
}
