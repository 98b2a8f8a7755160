package meshtest_test

import (
	"bytes"
	"context"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// dialAgent opens a gRPC client to addr over a mesh node's dialer.
func dialAgent(t *testing.T, dial func(context.Context, string, string) (net.Conn, error), addr string) agentv1.AgentServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return dial(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return agentv1.NewAgentServiceClient(conn)
}

// TestMesh runs the whole mesh once (an orchestrator, clusters alpha with 3
// nodes and beta with 2, five real agents) and walks through its life in
// order: the steps share the harness because each starts from the state the
// previous one left.
func TestMesh(t *testing.T) {
	start := time.Now()
	logs := meshtest.NewLogRecorder()
	h := meshtest.New(t, meshtest.WithLogHandler(logs))
	alpha, beta := h.Clusters[0], h.Clusters[1]
	h.WaitOnline(t, 30*time.Second)
	t.Logf("harness up, all hosts online after %v", time.Since(start).Round(time.Millisecond))

	// RPC answers seen by the orchestrator side; scanned for the token at the end.
	var answers [][]byte
	record := func(m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, b)
	}

	step := func(name string, f func(t *testing.T)) {
		s := time.Now()
		if !t.Run(name, f) {
			t.FailNow()
		}
		t.Logf("%s took %v", name, time.Since(s).Round(time.Millisecond))
	}

	step("discovery", func(t *testing.T) {
		zs := h.Orchestrator.Zones().Zones()
		if len(zs) != 2 {
			t.Fatalf("zones = %+v, want 2", zs)
		}
		for _, c := range []*meshtest.Cluster{alpha, beta} {
			z := h.Zone(t, c)
			if z.Name != c.Spec.Name || z.Standalone {
				t.Errorf("zone of %s: name %q standalone %t", c.Spec.Name, z.Name, z.Standalone)
			}
			var nodes []string
			for _, host := range z.Hosts {
				nodes = append(nodes, host.Node)
				if host.Status != fleet.StatusOnline || host.AgentVersion != "meshtest" || host.ProxmoxVersion == "" {
					t.Errorf("zone %s host %+v", z.Name, host)
				}
			}
			if got, want := strings.Join(nodes, ","), strings.Join(c.Sim.NodeNames(), ","); got != want {
				t.Errorf("zone %s hosts %s, want %s", z.Name, got, want)
			}
		}
		if h.Zone(t, alpha).ID == h.Zone(t, beta).ID {
			t.Error("two clusters share one zone identity")
		}
		// Node names repeat across zones (both have pve1) without mixing up.
		if _, ok := h.Zone(t, beta).Host("pve1"); !ok {
			t.Error("beta has no pve1")
		}
	})

	step("proxmox through the agent proxy", func(t *testing.T) {
		ctx := t.Context()
		for _, c := range []*meshtest.Cluster{alpha, beta} {
			client := h.Orchestrator.Zones().Client(h.Zone(t, c).ID)
			nodes, err := client.Nodes(ctx)
			if err != nil {
				t.Fatalf("%s: nodes: %v", c.Spec.Name, err)
			}
			if len(nodes) != len(c.Sim.NodeNames()) {
				t.Fatalf("%s: %d nodes, want %d", c.Spec.Name, len(nodes), len(c.Sim.NodeNames()))
			}
			cl, err := client.Cluster(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if cl.Name != c.Spec.Name {
				t.Errorf("cluster name %q through %s's agents, want %q", cl.Name, c.Spec.Name, c.Spec.Name)
			}
		}
		// A write: create a VM on alpha's pve2 (routed to pve2's agent) and
		// wait for its task.
		client := h.Orchestrator.Zones().Client(h.Zone(t, alpha).ID)
		node, err := client.Node(ctx, "pve2")
		if err != nil {
			t.Fatal(err)
		}
		task, err := node.NewVirtualMachine(ctx, 4242,
			proxmox.VirtualMachineOption{Name: "name", Value: "mesh-test"},
			proxmox.VirtualMachineOption{Name: "memory", Value: 1024})
		if err != nil {
			t.Fatalf("create vm: %v", err)
		}
		if err := task.Wait(ctx, 50*time.Millisecond, 20*time.Second); err != nil {
			t.Fatalf("create vm task: %v", err)
		}
		vm, err := node.VirtualMachine(ctx, 4242)
		if err != nil {
			t.Fatalf("read vm: %v", err)
		}
		if vm.Name != "mesh-test" {
			t.Fatalf("vm name %q", vm.Name)
		}
		// Paths outside the allowlist are refused by the agent.
		err = client.Get(ctx, "/access/users", nil)
		if err == nil || !strings.Contains(err.Error(), "code = PermissionDenied") {
			t.Fatalf("GET /access/users through the zone client: %v, want PermissionDenied", err)
		}
	})

	step("security", func(t *testing.T) {
		ctx := t.Context()
		orch := h.Orchestrator.MeshNode()
		target := alpha.Agents[0].Running()
		client := dialAgent(t, orch.Dial, target.Addr())

		info, err := client.Info(ctx, &agentv1.InfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		record(info)
		if info.GetNodeName() != "pve1" || info.GetClusterName() != "alpha" || info.GetClusterId() == "" {
			t.Fatalf("info = %v", info)
		}

		// Proxy refuses what the allowlist does not contain.
		for _, r := range []struct {
			method, path string
			code         codes.Code
		}{
			{"GET", "/access/users", codes.PermissionDenied},
			{"POST", "/access/users", codes.PermissionDenied},
			{"POST", "/nodes/pve1/execute", codes.PermissionDenied},
			{"POST", "/nodes/pve1/termproxy", codes.PermissionDenied},
			{"POST", "/nodes/pve1/qemu/4242/vncproxy", codes.PermissionDenied},
			{"GET", "/nodes/pve1/../../access/users", codes.PermissionDenied},
			{"DELETE", "/nodes/pve1/status", codes.PermissionDenied},
			{"PATCH", "/nodes", codes.InvalidArgument},
			{"GET", "nodes", codes.InvalidArgument},
		} {
			_, err := client.Proxy(ctx, &agentv1.ProxyRequest{Method: r.method, Path: r.path})
			if status.Code(err) != r.code {
				t.Errorf("Proxy %s %s: %v, want %v", r.method, r.path, err, r.code)
			}
		}
		ok, err := client.Proxy(ctx, &agentv1.ProxyRequest{Method: "GET", Path: "/nodes/pve1/status"})
		if err != nil || ok.GetStatusCode() != http.StatusOK {
			t.Fatalf("allowed Proxy: %v %v", ok, err)
		}
		record(ok)
		// Proxmox's own errors come back as its status, not as RPC errors.
		missing, err := client.Proxy(ctx, &agentv1.ProxyRequest{Method: "GET", Path: "/nodes/pve9/status"})
		if err != nil || missing.GetStatusCode() < 400 {
			t.Fatalf("Proxy of an unknown node: %v %v, want a Proxmox error status", missing, err)
		}
		// with Proxmox's message, which it writes in the status line only.
		if !strings.Contains(missing.GetStatusText(), "pve9") {
			t.Errorf("Proxy of an unknown node: status text %q, want Proxmox's message", missing.GetStatusText())
		}
		record(missing)

		// A mesh node without tag:orchestrator cannot reach an agent at all
		// (the mesh policy drops it), and neither can another agent.
		intruder := h.JoinNode(t, "intruder", meshcontrol.TagAgent)
		other := alpha.Agents[1].Running()
		dialers := map[string]func(context.Context, string, string) (net.Conn, error){
			"a node tagged tag:agent": intruder.Dial,
			"another agent":           other.Dial,
		}
		errs := make(chan string, len(dialers))
		for who, dial := range dialers {
			go func() {
				dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				conn, err := dial(dctx, "tcp", target.Addr())
				if err == nil {
					conn.Close()
					errs <- who + " dialled an agent's gRPC port"
					return
				}
				errs <- ""
			}()
		}
		for range dialers {
			if msg := <-errs; msg != "" {
				t.Error(msg)
			}
		}

		// Agents with a revoked or an expired enrollment key cannot join.
		ctl := h.Orchestrator.Control()
		revoked, err := ctl.CreateKey(ctx, meshcontrol.KeyOptions{Reusable: true, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := ctl.RevokeKey(ctx, revoked.ID); err != nil {
			t.Fatal(err)
		}
		expired, err := ctl.CreateKey(ctx, meshcontrol.KeyOptions{Reusable: true, TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		poll.True(t, 5*time.Second, "key expiry", func() bool { return time.Now().After(expired.Expiration) })
		for name, key := range map[string]string{"revoked": revoked.Secret, "expired": expired.Secret} {
			a := h.NewAgent(t, alpha, "pve3", key)
			jctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			err := a.Start(jctx)
			cancel()
			if err == nil || !strings.Contains(err.Error(), "authkey expired") {
				t.Errorf("agent with a %s key: %v, want a refused key", name, err)
			}
		}
		nodes, err := ctl.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) != 1+5+1 { // orchestrator, five agents, the intruder
			t.Errorf("%d mesh nodes after refused joins, want 7", len(nodes))
		}

		// With a mesh policy that lets agents reach each other, the agent's
		// own identity check still refuses them.
		open := `{"tagOwners":{"tag:orchestrator":[],"tag:agent":[]},"acls":[{"action":"accept","src":["tag:orchestrator","tag:agent"],"dst":["tag:agent:50051"]}]}`
		if err := ctl.SetPolicy(ctx, open); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := ctl.SetPolicy(context.Background(), meshcontrol.Policy(50051)); err != nil {
				t.Fatal(err)
			}
		}()
		peerClient := dialAgent(t, other.Dial, target.Addr())
		poll.True(t, 20*time.Second, "agent-to-agent call refused by identity", func() bool {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := peerClient.Info(cctx, &agentv1.InfoRequest{})
			if err != nil && status.Code(err) != codes.PermissionDenied {
				return false // the policy change has not reached the nodes yet
			}
			if err == nil {
				t.Fatal("an agent called another agent's Info")
			}
			return true
		})
	})

	step("failover inside a zone", func(t *testing.T) {
		ctx := t.Context()
		z := h.Zone(t, alpha)
		client := h.Orchestrator.Zones().Client(z.ID)
		// Stop the agent zone-wide reads go to first (sorted: pve1).
		first := alpha.Agents[0]
		if err := first.Stop(); err != nil {
			t.Fatal(err)
		}
		s := time.Now()
		res, err := func() (proxmox.ClusterResources, error) {
			cl, err := client.Cluster(ctx)
			if err != nil {
				return nil, err
			}
			return cl.Resources(ctx, "vm")
		}()
		if err != nil {
			t.Fatalf("zone read with pve1's agent down: %v", err)
		}
		t.Logf("first zone read after the agent stopped took %v", time.Since(s).Round(time.Millisecond))
		found := false
		for _, r := range res {
			found = found || r.VMID == 4242
		}
		if !found {
			t.Fatalf("cluster resources lack vm 4242: %+v", res)
		}
	})

	step("offline and online again", func(t *testing.T) {
		// An agent killed while nobody talks to it: only the mesh and the
		// health checks can notice.
		victim := beta.Agents[1]
		reg := h.Orchestrator.Zones()
		betaID := h.Zone(t, beta).ID
		victimHost, ok := victim.Host()
		if !ok {
			t.Fatalf("%s has no host", victim.MeshName)
		}
		// Look the zone up while the victim is online, so that a lookup
		// that kept what it built then would now answer stale data.
		if z, ok := reg.Zone(betaID); !ok {
			t.Fatal("zone beta not found by ID")
		} else if host, _ := z.Host(victimHost.Node); host.Status != fleet.StatusOnline {
			t.Fatalf("victim before the stop: %+v", host)
		}
		if err := victim.Stop(); err != nil {
			t.Fatal(err)
		}
		s := time.Now()
		for _, a := range []*meshtest.Agent{alpha.Agents[0], victim} {
			poll.True(t, 30*time.Second, a.MeshName+" offline", func() bool {
				host, ok := a.Host()
				return ok && host.Status == fleet.StatusOffline
			})
		}
		t.Logf("offline detected after %v", time.Since(s).Round(time.Millisecond))
		// The lookup by ID sees the refreshed state too.
		if err := reg.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		z, ok := reg.Zone(betaID)
		if !ok {
			t.Fatal("zone beta not found by ID after the stop")
		}
		if host, _ := z.Host(victimHost.Node); host.Status != fleet.StatusOffline {
			t.Fatalf("Zone(id) after a refresh answers stale data for the stopped agent: %+v", host)
		}
		if z := h.Zone(t, beta); len(z.Hosts) != 2 {
			t.Fatalf("offline host left its zone: %+v", z.Hosts)
		}
		s = time.Now()
		h.StartAgents(t, alpha.Agents[0], victim)
		h.WaitOnline(t, 30*time.Second)
		t.Logf("restarted agents online after %v", time.Since(s).Round(time.Millisecond))
	})

	step("orchestrator restart", func(t *testing.T) {
		s := time.Now()
		h.RestartOrchestrator(t)
		t.Logf("orchestrator restarted in %v", time.Since(s).Round(time.Millisecond))
		poll.True(t, 60*time.Second, "both zones rediscovered", func() bool {
			return len(h.Orchestrator.Zones().Zones()) == 2
		})
		h.WaitOnline(t, 60*time.Second)
		t.Logf("all hosts online again %v after the restart began", time.Since(s).Round(time.Millisecond))
		// The agents are connected to the new control server (not only
		// reachable over tunnels that outlived the old one).
		poll.True(t, 60*time.Second, "agents connected to the new control server", func() bool {
			nodes, err := h.Orchestrator.Control().Nodes(t.Context())
			if err != nil {
				return false
			}
			online := 0
			for _, n := range nodes {
				if n.Online && n.HasTag(meshcontrol.TagAgent) {
					online++
				}
			}
			running := 0
			for _, a := range h.Agents() {
				if a.Running() != nil {
					running++
				}
			}
			return online == running
		})
		t.Logf("all agents reconnected %v after the restart began", time.Since(s).Round(time.Millisecond))
		nodes, err := h.Orchestrator.Zones().Client(h.Zone(t, beta).ID).Nodes(t.Context())
		if err != nil || len(nodes) != 2 {
			t.Fatalf("beta nodes after restart: %v %v", nodes, err)
		}
	})

	step("idle agents are not health-checked at every refresh", func(t *testing.T) {
		// The mesh's own state says the agents are there: over a window of
		// several refreshes the orchestrator sends them (almost) no Health
		// call, right after its restart too.
		reg := h.Orchestrator.Zones()
		checks := func() (called, skipped float64) {
			t.Helper()
			pr := prometheus.NewPedanticRegistry()
			pr.MustRegister(reg)
			mfs, err := pr.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() != "flexplane_zone_agent_health_checks_total" {
					continue
				}
				for _, m := range mf.GetMetric() {
					switch m.GetLabel()[0].GetValue() {
					case "called":
						called = m.GetCounter().GetValue()
					case "skipped":
						skipped = m.GetCounter().GetValue()
					}
				}
			}
			return called, skipped
		}
		agents := len(alpha.Agents) + len(beta.Agents)
		called0, skipped0 := checks()
		s := time.Now()
		// Three refreshes of every agent: what the window is made of.
		poll.True(t, 30*time.Second, "three refreshes skipped per agent", func() bool {
			_, skipped := checks()
			return skipped-skipped0 >= float64(3*agents)
		})
		called, _ := checks()
		window := time.Since(s)
		perAgent := (called - called0) / float64(agents) / window.Seconds()
		t.Logf("idle Health calls per agent per second over %v: %.3f", window.Round(time.Millisecond), perAgent)
		if limit := 0.05*window.Seconds()*float64(agents) + 1; called-called0 > limit {
			t.Fatalf("%v Health calls to %d idle agents in %v, want at most %.0f", called-called0, agents, window, limit)
		}
	})

	step("token stays in the agent", func(t *testing.T) {
		for _, c := range []*meshtest.Cluster{alpha, beta} {
			if bytes.Contains(logs.Bytes(), []byte(c.Secret)) {
				t.Errorf("the token of %s appears in the logs", c.Spec.Name)
			}
			for i, a := range answers {
				if bytes.Contains(a, []byte(c.Secret)) {
					t.Errorf("the token of %s appears in RPC answer %d", c.Spec.Name, i)
				}
			}
			for _, z := range h.Orchestrator.Zones().Zones() {
				for _, host := range z.Hosts {
					if strings.Contains(host.Detail, c.Secret) {
						t.Errorf("the token of %s appears in host status", c.Spec.Name)
					}
				}
			}
			// No file outside the agents holds it: the orchestrator's data
			// directory and the agents' state directories (which hold the
			// mesh identity only; the token lives in the agent's memory).
			dirs := []string{h.DataDir()}
			for _, a := range h.Agents() {
				dirs = append(dirs, a.StateDir)
			}
			for _, dir := range dirs {
				filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
					if err != nil || d.IsDir() || d.Type()&fs.ModeSocket != 0 {
						return nil
					}
					b, err := os.ReadFile(path)
					if err == nil && bytes.Contains(b, []byte(c.Secret)) {
						t.Errorf("the token of %s appears in %s", c.Spec.Name, path)
					}
					return nil
				})
			}
		}
		if !bytes.Contains(logs.Bytes(), []byte("refused request outside the allowlist")) {
			t.Error("the recorder saw no agent log line; the scan proves nothing")
		}
	})
	t.Logf("TestMesh took %v", time.Since(start).Round(time.Millisecond))
}

// TestStandaloneNode checks that a node in no cluster is a zone of its own.
func TestStandaloneNode(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Nodes: 1}, meshtest.ClusterSpec{Nodes: 1}))
	h.WaitOnline(t, 30*time.Second)
	zs := h.Orchestrator.Zones().Zones()
	if len(zs) != 2 {
		t.Fatalf("zones = %+v, want two standalone zones", zs)
	}
	for _, z := range zs {
		if !z.Standalone || z.Name != "pve1" || len(z.Hosts) != 1 {
			t.Errorf("zone %+v, want standalone pve1 with one host", z)
		}
	}
	if zs[0].ID == zs[1].ID {
		t.Fatal("two standalone nodes share a zone identity")
	}

	// When Proxmox itself is down, the agent is still in the mesh:
	// degraded, at its next sampled Health call (fleet's HealthInterval,
	// 20s, plus up to a quarter of it, plus a refresh).
	down := h.Clusters[1]
	down.Sim.Close()
	poll.True(t, 35*time.Second, "host degraded", func() bool {
		host, ok := down.Agents[0].Host()
		return ok && host.Status == fleet.StatusDegraded && strings.Contains(host.Detail, "proxmox unreachable")
	})
	if _, err := h.Orchestrator.Zones().Client(h.Zone(t, down).ID).Nodes(t.Context()); err == nil {
		t.Fatal("a zone whose Proxmox is down answered")
	}
	if host, _ := h.Clusters[0].Agents[0].Host(); host.Status != fleet.StatusOnline {
		t.Fatalf("the other zone's host is %s", host.Status)
	}
}
