//go:build linux

package edge_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/edge"
)

// A platform endpoint on the gateway: the VDC's VMs, on either node, reach
// a service on the external network (a hosted Kubernetes API server, here
// a listener in the internet namespace) at their network's gateway address
// and a port, with the VDC's public address as the source, even when the
// tenant's rules deny all outbound traffic. Only that port of the gateway
// address is forwarded, and a change of target moves it.
func TestGatewayEndpoint(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	m := l.manager("pve1")
	inet := l.plane.InternetNS()
	nettest.Serve(t, inet, 16443, "apiserver-a")
	nettest.Serve(t, inet, 16444, "apiserver-b")
	leg := netip.MustParseAddr("10.1.0.1")
	g := l.gateway()
	g.Rules = []edge.Rule{{ID: "deny-out", Direction: edge.Outbound, Protocol: "any", Allow: false}}
	g.Endpoints = []edge.Endpoint{{ID: "kube-a", Address: leg, Port: 6443, Target: upstream.Addr(), TargetPort: 16443}}
	apply(t, m, g)

	for _, vmid := range []int{101, 102} {
		got := nettest.WaitReach(t, l.plane.GuestNS(vmid), "10.1.0.1:6443", 20*time.Second)
		if !strings.HasPrefix(got, "apiserver-a from ") {
			t.Errorf("vm%d reached the endpoint's %q", vmid, got)
		}
		// (vm102 has a 1:1 address, and leaves by it.)
		if ip := nettest.PeerIP(got); vmid == 101 && ip != public.Addr().String() {
			t.Errorf("vm%d's connection seen from %s, want the VDC's public address %s", vmid, ip, public.Addr())
		}
	}
	// The tenant's rule still denies everything else outbound, also the
	// same service at its own address.
	if got := nettest.Reach(l.plane.GuestNS(101), upstream.Addr().String()+":16443", 2*time.Second); got != "" {
		t.Errorf("the outbound deny rule let %q through", got)
	}
	if got := nettest.Reach(l.plane.GuestNS(101), "10.1.0.1:6444", 2*time.Second); got != "" {
		t.Errorf("a port of the gateway address that is no endpoint answered %q", got)
	}

	g.Endpoints = []edge.Endpoint{{ID: "kube-a", Address: leg, Port: 6443, Target: upstream.Addr(), TargetPort: 16444}}
	apply(t, m, g)
	got := nettest.WaitReach(t, l.plane.GuestNS(101), "10.1.0.1:6443", 10*time.Second)
	if !strings.HasPrefix(got, "apiserver-b from ") {
		t.Errorf("after the change the endpoint answered %q", got)
	}
}

// Endpoints are refused when they could not work or would clash, before
// anything is applied.
func TestGatewayEndpointValidate(t *testing.T) {
	t.Parallel()
	base := edge.Gateway{VDC: "red", Legs: []edge.Leg{{Bridge: "v1", Address: netip.MustParsePrefix("10.1.0.1/24")}},
		Uplink: edge.Uplink{Bridge: "vmbr0", Address: public, Gateway: upstream.Addr()}}
	ep := edge.Endpoint{ID: "kube", Address: netip.MustParseAddr("10.1.0.1"), Port: 6443, Target: netip.MustParseAddr("198.51.100.7"), TargetPort: 6443}
	ok := base
	ok.Endpoints = []edge.Endpoint{ep, {ID: "kube2", Address: ep.Address, Port: 6444, Target: ep.Target, TargetPort: 6443}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("two endpoints on one leg: %v", err)
	}
	for name, change := range map[string]func(*edge.Endpoint){
		"no id":                  func(e *edge.Endpoint) { e.ID = "" },
		"an address of no leg":   func(e *edge.Endpoint) { e.Address = netip.MustParseAddr("10.1.0.2") },
		"port 0":                 func(e *edge.Endpoint) { e.Port = 0 },
		"target port 0":          func(e *edge.Endpoint) { e.TargetPort = 0 },
		"an IPv6 target":         func(e *edge.Endpoint) { e.Target = netip.MustParseAddr("2001:db8::1") },
		"the uplink as target":   func(e *edge.Endpoint) { e.Target = public.Addr() },
		"a port forwarded twice": func(e *edge.Endpoint) { e.Port = 6444 },
	} {
		g := ok
		g.Endpoints = []edge.Endpoint{ep, ok.Endpoints[1]}
		change(&g.Endpoints[0])
		var ie *edge.InputError
		if err := g.Validate(); !errors.As(err, &ie) || !strings.HasPrefix(ie.Field, "endpoints[") {
			t.Errorf("%s: %v, want an input error of endpoints", name, err)
		}
	}
}
