package graph_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestKubernetesEndpointThroughEdgeGateway: a cluster created through
// GraphQL has its endpoint at a port of its network's gateway address;
// once the management cluster's load balancer gives the cluster's API
// server Service an address (here the external network's router, where
// the "API server" listens), a VM of the VDC on that network reaches the
// API server at the endpoint, through the VDC's edge gateway (made with the
// cluster), even with the tenant's rules denying all outbound traffic; the
// API server sees the VDC's public address. Another VDC, with the same
// addresses, does not reach it.
func TestKubernetesEndpointThroughEdgeGateway(t *testing.T) {
	t.Parallel()
	nettest.NeedRoot(t)
	s := startKubeStack(t, false, meshtest.WithDataPlane(netip.MustParsePrefix("203.0.113.254/24")))
	h := s.h
	var c gqlKubeCluster
	h.GraphQL(t, "alice", "red", `mutation($n: ID!) { createKubernetesCluster(input: {name: "edge", zone: "alpha", version: "v1.37.2", network: $n}) { `+kubeClusterFields+` } }`,
		map[string]any{"n": s.red}).OK(t).Into(t, "createKubernetesCluster", &c)
	if c.Endpoint == nil || *c.Endpoint != "10.1.0.1:6443" {
		t.Fatalf("the cluster's endpoint %v, want red's network's gateway address at 6443", c.Endpoint)
	}
	var gws struct {
		Nodes []struct{ PublicAddress string }
	}
	h.GraphQL(t, "alice", "red", `{ edgeGateways(zone: "alpha") { nodes { publicAddress } } }`, nil).OK(t).Into(t, "edgeGateways", &gws)
	if len(gws.Nodes) != 1 {
		t.Fatalf("red's edge gateways after creating a cluster: %+v", gws)
	}
	gw := gws.Nodes[0]
	h.GraphQL(t, "alice", "red", `mutation { createFirewallRule(input: {zone: "alpha", direction: OUTBOUND, protocol: ANY, action: DENY}) { id } }`, nil).OK(t)

	// A VM on red's network, and one on blue's (the same addresses).
	cl := h.Clusters[0]
	pc := cl.Proxmox(t)
	for vmid, netID := range map[int]string{150: s.red, 151: s.blue} {
		ref, err := tenancy.ParseNetworkID(netID)
		if err != nil {
			t.Fatal(err)
		}
		vmtest.BareGuest(t, pc, "pve1", vmid, ref.VNet, "10.1.0.50", "10.1.0.1")
		nettest.WaitNS(t, cl.Plane.GuestNS(vmid), true, 20*time.Second)
	}
	inet := cl.Plane.InternetNS()
	nettest.Serve(t, inet, 16443, "apiserver")

	// What the management cluster's load balancer (MetalLB, say) does: the
	// API server's Service gets an address the zone's external network
	// reaches.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ID, Name: "edge-apiserver",
			Labels: map[string]string{"app.kubernetes.io/name": "flexkube", "app.kubernetes.io/component": "kube-apiserver"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "https", Port: 16443, TargetPort: intstr.FromString("https")}}},
	}
	if err := s.kc.Create(t.Context(), svc); err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.254"}}
	if err := s.kc.Status().Update(t.Context(), svc); err != nil {
		t.Fatal(err)
	}

	got := nettest.WaitReach(t, cl.Plane.GuestNS(150), *c.Endpoint, 45*time.Second)
	if !strings.HasPrefix(got, "apiserver from "+gw.PublicAddress+":") {
		t.Errorf("red's VM reached the endpoint's %q, want the API server seeing red's public address %s", got, gw.PublicAddress)
	}
	if got := nettest.Reach(cl.Plane.GuestNS(150), "203.0.113.254:16443", 2*time.Second); got != "" {
		t.Errorf("red's outbound deny rule let %q through", got)
	}
	if got := nettest.Reach(cl.Plane.GuestNS(151), *c.Endpoint, 3*time.Second); got != "" {
		t.Errorf("blue's VM reached red's cluster: %q", got)
	}
}
