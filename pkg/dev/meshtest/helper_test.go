//go:build linux

package meshtest_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/network"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// TestEdgeGatewayThroughTheHelper (root): an agent started as the shipped
// units run it, with a privileged helper (agent Config.HelperSocket),
// runs the gateway the orchestrator sends over the mesh in the helper:
// NAT and a port forward work, bad state is INVALID_ARGUMENT, and the
// gateway, which the helper holds, runs on while the agent is killed and
// is listed by the agent started again.
func TestEdgeGatewayThroughTheHelper(t *testing.T) {
	t.Parallel()
	nettest.NeedRoot(t)
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1, Helpers: true}),
		meshtest.WithDataPlane(netip.MustParsePrefix("203.0.113.254/24")))
	h.WaitOnline(t, 30*time.Second)
	cl := h.Clusters[0]
	c := cl.Proxmox(t)
	ctx := vmtest.Ctx(t)
	n, err := network.Create(ctx, c, network.Spec{VDC: "red", Name: "main", CIDR: "10.1.0.0/24", Gateway: "10.1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	vmtest.BareGuest(t, c, "pve1", 101, n.VNet, "10.1.0.11", "10.1.0.1")
	p := cl.Plane
	inet, vm := p.InternetNS(), p.GuestNS(101)
	nettest.Serve(t, inet, 9000, "internet")
	nettest.Serve(t, vm, 80, "vm101")
	ec, err := h.Orchestrator.Zones().EdgeClient("alpha-pve1")
	if err != nil {
		t.Fatal(err)
	}
	gw := &edgev1.Gateway{
		Vdc:          "red",
		Legs:         []*edgev1.Leg{{Bridge: n.VNet, Address: "10.1.0.1/24"}},
		Uplink:       &edgev1.Uplink{Bridge: "vmbr0", Address: "203.0.113.10/24", Gateway: "203.0.113.254"},
		PortForwards: []*edgev1.PortForward{{Id: "web", Protocol: "tcp", PublicAddress: "203.0.113.10", PublicPort: 8080, Target: "10.1.0.11", TargetPort: 80}},
	}
	bad := &edgev1.Gateway{Vdc: "red", Legs: gw.Legs, Uplink: &edgev1.Uplink{Bridge: "vmbr0", Address: "203.0.113.10"}}
	if _, err := ec.ApplyGateway(ctx, &edgev1.ApplyGatewayRequest{Gateway: bad}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad state: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := ec.ApplyGateway(ctx, &edgev1.ApplyGatewayRequest{Gateway: gw, Revision: "r1"}); err != nil {
		t.Fatal(err)
	}
	if ip := nettest.PeerIP(nettest.WaitReach(t, vm, "203.0.113.254:9000", 20*time.Second)); ip != "203.0.113.10" {
		t.Errorf("egress seen from %s, want the public address", ip)
	}
	if got := nettest.WaitReach(t, inet, "203.0.113.10:8080", 10*time.Second); !strings.HasPrefix(got, "vm101 ") {
		t.Errorf("port forward answered %q", got)
	}

	a := cl.Agents[0]
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	nettest.WaitReach(t, inet, "203.0.113.10:8080", 10*time.Second) // the helper's gateway runs on
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 30*time.Second, "the restarted agent online", func() bool {
		host, ok := a.Host()
		return ok && host.Status == fleet.StatusOnline
	})
	var listed *edgev1.ListGatewaysResponse
	poll.True(t, 30*time.Second, "the restarted agent's gateways", func() bool {
		listed, err = ec.ListGateways(ctx, &edgev1.ListGatewaysRequest{})
		return err == nil
	})
	if gs := listed.GetGateways(); len(gs) != 1 || gs[0].GetVdc() != "red" || gs[0].GetRevision() != "r1" {
		t.Errorf("the restarted agent lists %v, want red's gateway at r1", gs)
	}
}
