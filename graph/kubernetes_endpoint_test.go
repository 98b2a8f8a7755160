package graph_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/support/nsnet"
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

// TestHostedAPIServerThroughEdgeGateway: a worker's view of a real hosted
// control plane. The orchestrator's Manager installs the cluster's flexkube
// release and podrun runs its pods; the management cluster's load
// balancer (played by the test) gives the API server's Service an address
// on the zone's external network, which relays to where podrun's API
// server serves. A VM of the VDC on the cluster's network then lists the
// tenant cluster's namespaces with client-go and a kubeconfig issued
// through GraphQL, dialling from the VM's network namespace the cluster's
// endpoint (its network's gateway address), TLS verified for it with the
// cluster's CA: through the VDC's edge gateway, and nothing else.
func TestHostedAPIServerThroughEdgeGateway(t *testing.T) {
	t.Parallel()
	nettest.NeedRoot(t)
	s := startKubeStack(t, true, meshtest.WithDataPlane(netip.MustParsePrefix("203.0.113.254/24")))
	h := s.h
	var c gqlKubeCluster
	h.GraphQL(t, "alice", "red", `mutation($n: ID!) { createKubernetesCluster(input: {name: "live", zone: "alpha", version: "v1.37.2", network: $n}) { id endpoint } }`,
		map[string]any{"n": s.red}).OK(t).Into(t, "createKubernetesCluster", &c)
	c = s.waitHostedReady(t, "alice", "red", c.ID, 4*time.Minute)
	if c.Endpoint == nil || *c.Endpoint != "10.1.0.1:6443" {
		t.Fatalf("the cluster's endpoint %v", c.Endpoint)
	}
	cl := h.Clusters[0]
	ref, err := tenancy.ParseNetworkID(s.red)
	if err != nil {
		t.Fatal(err)
	}
	vmtest.BareGuest(t, cl.Proxmox(t), "pve1", 150, ref.VNet, "10.1.0.50", "10.1.0.1")
	vm := cl.Plane.GuestNS(150)
	nettest.WaitNS(t, vm, true, 20*time.Second)

	// The load balancer's address, on the external network, relays to the
	// API server podrun runs (on this host's loopback).
	api := s.hosted.TenantAddress(c.ID, "live")
	if api == "" {
		t.Fatal("the API server has no address")
	}
	ln, err := nsnet.Listen(t.Context(), cl.Plane.InternetNS(), "tcp4", "203.0.113.254:6443")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go relay(ln, api)
	svc := &corev1.Service{}
	if err := s.kc.Get(t.Context(), client.ObjectKey{Namespace: c.ID, Name: "live-apiserver"}, svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.Ports[0].Port != 6443 {
		t.Fatalf("the API server's Service %s %+v", svc.Spec.Type, svc.Spec.Ports)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.254"}}
	if err := s.kc.Status().Update(t.Context(), svc); err != nil {
		t.Fatal(err)
	}

	var kc struct{ Kubeconfig string }
	h.GraphQL(t, "alice", "red", `mutation($c: ID!) { issueKubeconfig(cluster: $c) { kubeconfig } }`, map[string]any{"c": c.ID}).
		OK(t).Into(t, "issueKubeconfig", &kc)
	rc, err := clientcmd.RESTConfigFromKubeConfig([]byte(kc.Kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://10.1.0.1:6443" {
		t.Errorf("the kubeconfig's server %s, want the endpoint", rc.Host)
	}
	rc.Timeout = 10 * time.Second
	rc.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nsnet.Dial(ctx, vm, network, addr)
	}
	tenant, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	poll.True(t, 45*time.Second, "the VM lists the tenant's namespaces through the edge gateway", func() bool {
		names, err = kubetest.NamespaceNames(t.Context(), tenant)
		return err == nil
	})
	if !slices.Contains(names, "kube-system") {
		t.Errorf("the tenant's namespaces %v", names)
	}
}

// relay copies each connection ln accepts to and from a new one to addr.
func relay(ln net.Listener, addr string) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			out, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer out.Close()
			go func() { _, _ = io.Copy(out, in) }()
			_, _ = io.Copy(in, out)
		}()
	}
}
