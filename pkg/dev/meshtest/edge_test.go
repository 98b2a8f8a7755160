//go:build linux

package meshtest_test

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/edge/edgesync"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/support/nsnet"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// The orchestrator sends a VDC's edge gateway to an agent over the mesh
// (flexplane.edge.v1): its VMs reach the internet as the public address, a port
// forward reaches one; bad state is refused and changes nothing; an agent restart
// keeps an established connection; when the gateway's node goes offline another
// node's agent takes the state over and traffic resumes within 10 s.
func TestEdgeGatewayOverTheMesh(t *testing.T) {
	t.Parallel()
	nettest.NeedRoot(t)
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 3}),
		meshtest.WithDataPlane(netip.MustParsePrefix("203.0.113.254/24")))
	h.WaitOnline(t, 30*time.Second)
	cl := h.Clusters[0]
	c := cl.Proxmox(t)
	n, err := network.Create(vmtest.Ctx(t), c, network.Spec{VDC: "red", Name: "main", CIDR: "10.1.0.0/24", Gateway: "10.1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	// The gateway's first host (as the syncer places it) is not the VM's node, so
	// that the VM survives that node's loss.
	first, ok := edgesync.Choose(h.Zone(t, cl), "red")
	if !ok {
		t.Fatal("no online host")
	}
	vmNode := map[string]string{"pve1": "pve2", "pve2": "pve3", "pve3": "pve1"}[first.Node]
	vmtest.BareGuest(t, c, vmNode, 101, n.VNet, "10.1.0.11", "10.1.0.1")
	p := cl.Plane
	inet, vm := p.InternetNS(), p.GuestNS(101)
	nettest.Serve(t, inet, 9000, "internet")
	nettest.Echo(t, inet, 7)
	nettest.Serve(t, vm, 80, "vm101")

	gw := &edgev1.Gateway{
		Vdc:          "red",
		Legs:         []*edgev1.Leg{{Bridge: n.VNet, Address: "10.1.0.1/24"}},
		Uplink:       &edgev1.Uplink{Bridge: "vmbr0", Address: "203.0.113.10/24", Gateway: "203.0.113.254"},
		PortForwards: []*edgev1.PortForward{{Id: "web", Protocol: "tcp", PublicAddress: "203.0.113.10", PublicPort: 8080, Target: "10.1.0.11", TargetPort: 80}},
		// A platform service at the network's gateway address.
		Endpoints: []*edgev1.Endpoint{{Id: "kube", Address: "10.1.0.1", Port: 6443, Target: "203.0.113.254", TargetPort: 9000}},
	}
	client := func(node string) edgev1.EdgeServiceClient {
		t.Helper()
		ec, err := h.Orchestrator.Zones().EdgeClient("alpha-" + node)
		if err != nil {
			t.Fatal(err)
		}
		return ec
	}
	ctx := vmtest.Ctx(t)

	// Bad state: INVALID_ARGUMENT, and no gateway.
	bad := []*edgev1.Gateway{
		{Vdc: "red", Legs: gw.Legs, Uplink: &edgev1.Uplink{Bridge: "vmbr0", Address: "203.0.113.10"}},
		{Vdc: "red", Legs: gw.Legs, Uplink: gw.Uplink, PortForwards: []*edgev1.PortForward{{Id: "x", Protocol: "tcp", PublicAddress: "203.0.113.10", PublicPort: 70000, Target: "10.1.0.11", TargetPort: 80}}},
		{Vdc: "red", Legs: gw.Legs, Uplink: gw.Uplink, Rules: []*edgev1.Rule{{Id: "x", Direction: edgev1.Direction_DIRECTION_INBOUND, Protocol: "tcp", Source: "10.0.0.0/33"}}},
		{Vdc: "red", Legs: gw.Legs, Uplink: gw.Uplink, Endpoints: []*edgev1.Endpoint{{Id: "x", Address: "10.1.0.9", Port: 6443, Target: "203.0.113.254", TargetPort: 6443}}},
		{Vdc: "red", Legs: gw.Legs, Uplink: gw.Uplink, Endpoints: []*edgev1.Endpoint{{Id: "x", Address: "10.1.0.1", Port: 6443, Target: "not-an-address", TargetPort: 6443}}},
	}
	for i, g := range bad {
		if _, err := client(first.Node).ApplyGateway(ctx, &edgev1.ApplyGatewayRequest{Gateway: g}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("bad state %d: %v", i, err)
		}
	}
	if _, err := client(first.Node).GatewayStatus(ctx, &edgev1.GatewayStatusRequest{Vdc: "red"}); status.Code(err) != codes.NotFound {
		t.Fatalf("after refused states: %v", err)
	}

	if _, err := client(first.Node).ApplyGateway(ctx, &edgev1.ApplyGatewayRequest{Gateway: gw}); err != nil {
		t.Fatal(err)
	}
	got := nettest.WaitReach(t, vm, "203.0.113.254:9000", 20*time.Second)
	if ip := nettest.PeerIP(got); ip != "203.0.113.10" {
		t.Errorf("egress seen from %s (%q), want the public address", ip, got)
	}
	if got := nettest.WaitReach(t, inet, "203.0.113.10:8080", 10*time.Second); !strings.HasPrefix(got, "vm101 ") {
		t.Errorf("port forward answered %q", got)
	}
	if got := nettest.WaitReach(t, vm, "10.1.0.1:6443", 10*time.Second); !strings.HasPrefix(got, "internet from 203.0.113.10:") {
		t.Errorf("the endpoint answered %q, want the service seeing the public address", got)
	}

	// The agent restarts; the connection stays, and the same state applies again.
	conn, err := nsnet.Dial(ctx, vm, "tcp4", "203.0.113.254:7")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	echo := func(i int) {
		t.Helper()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "%d\n", i)
		if line, err := r.ReadString('\n'); err != nil || line != fmt.Sprintf("%d\n", i) {
			t.Fatalf("echo %d over the established connection: %q %v", i, line, err)
		}
	}
	echo(1)
	a1 := cl.Agents[slices.IndexFunc(cl.Agents, func(a *meshtest.Agent) bool { return a.Node == first.Node })]
	if err := a1.Kill(); err != nil {
		t.Fatal(err)
	}
	echo(2) // the data plane runs without its agent
	if err := a1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 30*time.Second, "the restarted agent online", func() bool {
		host, ok := a1.Host()
		return ok && host.Status == fleet.StatusOnline
	})
	// The restarted agent reports the gateway its predecessor left running.
	var listed *edgev1.ListGatewaysResponse
	poll.True(t, 30*time.Second, "the restarted agent's gateways", func() bool {
		listed, err = client(first.Node).ListGateways(ctx, &edgev1.ListGatewaysRequest{})
		return err == nil
	})
	if gs := listed.GetGateways(); len(gs) != 1 || gs[0].GetVdc() != "red" || gs[0].GetNamespace() == "" {
		t.Errorf("the restarted agent lists %v, want red's gateway", gs)
	}
	// Its stream reports the same at once, and again after a change through it.
	wctx, endWatch := context.WithCancel(ctx)
	watch, err := client(first.Node).WatchGateways(wctx, &edgev1.WatchGatewaysRequest{})
	if err != nil {
		t.Fatal(err)
	}
	report, err := watch.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if gs := report.GetGateways(); len(gs) != 1 || gs[0].GetVdc() != "red" || gs[0].GetRevision() != listed.GetGateways()[0].GetRevision() {
		t.Errorf("the restarted agent's stream reports %v, want red's gateway as listed", gs)
	}
	var st *edgev1.ApplyGatewayResponse
	poll.True(t, 30*time.Second, "the state applied again after the restart", func() bool {
		st, err = client(first.Node).ApplyGateway(ctx, &edgev1.ApplyGatewayRequest{Gateway: gw})
		return err == nil
	})
	echo(3)
	if st.GetState().GetNamespace() == "" {
		t.Errorf("status without a namespace: %v", st)
	}
	if _, err := client(first.Node).ApplyGateway(ctx, &edgev1.ApplyGatewayRequest{Gateway: gw, Revision: "r2"}); err != nil {
		t.Fatal(err)
	}
	if report, err = watch.Recv(); err != nil {
		t.Fatal(err)
	}
	if gs := report.GetGateways(); len(gs) != 1 || gs[0].GetRevision() != "r2" {
		t.Errorf("after an apply at r2 the stream reports %v", gs)
	}
	endWatch()

	// Node loss: the syncer (every orchestrator runs one) keeps the gateway on its
	// host; the host's node goes offline, and the next host in the VDC's order gets
	// the whole state.
	sy := edgesync.New(edgesync.Config{Zones: h.Orchestrator.Zones(), Interval: 300 * time.Millisecond,
		Desired: func(context.Context) ([]edgesync.Desired, error) {
			return []edgesync.Desired{{ZoneID: h.Zone(t, cl).ID, Gateway: gw}}, nil
		}})
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sy.Run(sctx) }()
	t.Cleanup(func() { stop(); <-done })
	poll.True(t, 10*time.Second, "the syncer placing the gateway", func() bool {
		host, ok := sy.Placement(h.Zone(t, cl).ID, "red")
		return ok && host == first.MeshName
	})
	// The node loses power: its namespace (bridges, the gateway's NICs) goes, and
	// its agent with it.
	cl.Sim.SetNodeOnline(first.Node, false)
	if err := a1.Kill(); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	// poll:own-loop: it measures how soon the gateway moves, at a fixed
	// 50 ms resolution.
	for {
		host, _ := sy.Placement(h.Zone(t, cl).ID, "red")
		if host != first.MeshName {
			t.Logf("moved to %s after %s", host, time.Since(lost).Round(time.Millisecond))
			break
		}
		if time.Since(lost) > 10*time.Second {
			t.Fatalf("the gateway is still on %s 10s after its node went offline; hosts: %s", host, h.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	nettest.WaitReach(t, vm, "203.0.113.254:9000", 15*time.Second)
	nettest.WaitReach(t, inet, "203.0.113.10:8080", 10*time.Second)
	if took := time.Since(lost); took > 10*time.Second {
		t.Errorf("traffic resumed %s after the node loss, want within 10s", took)
	} else {
		t.Logf("traffic resumed %s after the node loss", took.Round(time.Millisecond))
	}
	if host, _ := sy.Placement(h.Zone(t, cl).ID, "red"); host == first.MeshName {
		t.Errorf("the gateway is still placed on the lost host %s", host)
	}
}
