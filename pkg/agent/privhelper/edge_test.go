//go:build linux

package privhelper_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/pvesim/simnet"
	"github.com/flexplane/flexplane/pkg/support/nsnet"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// TestEdgeGatewayThroughTheHelper (root): the agent's EdgeService, when a
// helper runs the gateways, forwards to the helper's over its socket: a
// gateway applied that way NATs a VM's egress to the public address and
// forwards a public port to it, reports its counters and is listed, from
// the helper's namespace work; an invalid one is INVALID_ARGUMENT and
// creates nothing; removing it removes its namespace.
func TestEdgeGatewayThroughTheHelper(t *testing.T) {
	t.Parallel()
	nettest.NeedRoot(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	upstream := netip.MustParsePrefix("203.0.113.254/24")
	plane, err := simnet.New(simnet.Config{Prefix: fmt.Sprintf("fph%d", time.Now().UnixNano()%1e9), Upstream: []netip.Prefix{upstream}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plane.Close() })
	_, pc := pvetest.Start(t, pvesim.Config{Cluster: "lab", Nodes: 1, DataPlane: plane}, "flexplane@pve!test=0123456789abcdef")
	n, err := network.Create(ctx, pc, network.Spec{VDC: "red", Name: "main", CIDR: "10.1.0.0/24", Gateway: "10.1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	vmtest.BareGuest(t, pc, "pve1", 101, n.VNet, "10.1.0.11", "10.1.0.1")
	nettest.WaitNS(t, plane.GuestNS(101), true, 20*time.Second)

	cfg := self()
	cfg.EdgeBridgeNamespace, cfg.EdgeNamespacePrefix = plane.NodeNS("pve1"), plane.NodeNS("pve1")+"-"
	edge := start(t, cfg).EdgeServer() // what the agent serves on the mesh
	ns := cfg.EdgeNamespacePrefix + "gw-"

	gw := &edgev1.Gateway{
		Vdc:    "red",
		Legs:   []*edgev1.Leg{{Bridge: n.VNet, Address: "10.1.0.1/24"}},
		Uplink: &edgev1.Uplink{Bridge: "vmbr0", Address: "203.0.113.10/24", Gateway: upstream.Addr().String()},
		PortForwards: []*edgev1.PortForward{{Id: "web", Protocol: "tcp", PublicAddress: "203.0.113.10", PublicPort: 8080,
			Target: "10.1.0.11", TargetPort: 80}},
	}
	bad := &edgev1.Gateway{Vdc: "blue", Legs: []*edgev1.Leg{{Bridge: n.VNet, Address: "10.1.0.1/33"}}}
	if _, err := edge.ApplyGateway(ctx, &edgev1.ApplyGatewayRequest{Gateway: bad}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an invalid gateway: %v, want INVALID_ARGUMENT", err)
	}
	if names, err := nsnet.List(ns); err != nil || len(names) != 0 {
		t.Fatalf("an invalid gateway left namespaces %v (%v)", names, err)
	}
	if _, err := edge.ApplyGateway(ctx, &edgev1.ApplyGatewayRequest{Gateway: gw, Revision: "r1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { edge.RemoveGateway(context.Background(), &edgev1.RemoveGatewayRequest{Vdc: "red"}) })

	inet := plane.InternetNS()
	nettest.Serve(t, inet, 9000, "internet")
	nettest.Serve(t, plane.GuestNS(101), 80, "vm101")
	if got := nettest.WaitReach(t, plane.GuestNS(101), upstream.Addr().String()+":9000", 20*time.Second); nettest.PeerIP(got) != "203.0.113.10" {
		t.Errorf("the VM's egress seen from %s (%q), want the public address", nettest.PeerIP(got), got)
	}
	if got := nettest.WaitReach(t, inet, "203.0.113.10:8080", 10*time.Second); !strings.HasPrefix(got, "vm101 from ") {
		t.Errorf("port forward answered %q", got)
	}
	st, err := edge.GatewayStatus(ctx, &edgev1.GatewayStatusRequest{Vdc: "red"})
	if err != nil || !strings.HasPrefix(st.GetState().GetNamespace(), ns) || len(st.GetState().GetCounters()) == 0 {
		t.Fatalf("status: %v %v", st, err)
	}
	list, err := edge.ListGateways(ctx, &edgev1.ListGatewaysRequest{})
	if err != nil || len(list.GetGateways()) != 1 || list.GetGateways()[0].GetRevision() != "r1" {
		t.Fatalf("list: %v %v", list, err)
	}
	if _, err := edge.RemoveGateway(ctx, &edgev1.RemoveGatewayRequest{Vdc: "red"}); err != nil {
		t.Fatal(err)
	}
	if nsnet.Exists(st.GetState().GetNamespace()) {
		t.Fatalf("namespace %s left after remove", st.GetState().GetNamespace())
	}
	if _, err := edge.GatewayStatus(ctx, &edgev1.GatewayStatusRequest{Vdc: "red"}); status.Code(err) != codes.NotFound {
		t.Fatalf("status after remove: %v, want NOT_FOUND", err)
	}
}
