//go:build linux

package edge_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/edge"
)

// A load balancer's address on the gateway: its listener reaches the
// flexgateway replica (here a service in the internet namespace) with the
// balancer's address as the source, so replies come back through the gateway;
// its relay ports reach the VDC's VMs from the replicas' addresses only, even
// with a firewall rule denying all inbound traffic.
func TestGatewayBalancer(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	m := l.manager("pve1")
	inet := l.plane.InternetNS()
	replica := upstream.Addr()
	lbAddr := netip.MustParseAddr("203.0.113.12")
	g := l.gateway()
	g.Rules = []edge.Rule{{ID: "deny-all", Direction: edge.Inbound, Protocol: "any", Allow: false}}
	g.Balancers = []edge.Balancer{{ID: "red.shop", Public: lbAddr,
		Frontends: []edge.Forward{{Port: 80, Target: replica, TargetPort: 28000}},
		Relays: []edge.Forward{{Port: 65535, Target: netip.MustParseAddr("10.1.0.11"), TargetPort: 80},
			{Port: 65534, Target: netip.MustParseAddr("10.1.0.12"), TargetPort: 80}},
		Sources: []netip.Prefix{netip.PrefixFrom(replica, 32)}}}
	apply(t, m, g)
	nettest.Serve(t, inet, 28000, "flexgateway")
	nettest.Serve(t, l.plane.GuestNS(101), 80, "vm101")
	nettest.Serve(t, l.plane.GuestNS(102), 80, "vm102")

	got := nettest.WaitReach(t, inet, lbAddr.String()+":80", 20*time.Second)
	if !strings.HasPrefix(got, "flexgateway from "+lbAddr.String()+":") {
		t.Errorf("the listener answered %q, want the replica seeing the balancer's address", got)
	}
	for port, want := range map[string]string{"65535": "vm101 from ", "65534": "vm102 from "} {
		if got := nettest.WaitReach(t, inet, lbAddr.String()+":"+port, 10*time.Second); !strings.HasPrefix(got, want) {
			t.Errorf("relay %s answered %q", port, got)
		}
	}
	// Not a port the balancer forwards; and relays refuse other sources.
	if got := nettest.Reach(inet, lbAddr.String()+":8080", 2*time.Second); got != "" {
		t.Errorf("port 8080 of the balancer answered %q", got)
	}
	g.Balancers[0].Sources = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	apply(t, m, g)
	if got := nettest.Reach(inet, lbAddr.String()+":65535", 2*time.Second); got != "" {
		t.Errorf("a relay answered a source that is no replica: %q", got)
	}
	if got := nettest.Reach(inet, lbAddr.String()+":80", 5*time.Second); !strings.HasPrefix(got, "flexgateway from ") {
		t.Errorf("the listener after the change answered %q", got)
	}
}
