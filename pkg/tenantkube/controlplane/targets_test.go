package controlplane

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// TestEndpointInANetwork: a cluster whose endpoint is a port of its
// network's gateway address (where the edge gateway forwards it) gets API
// servers serving at that port and advertising that address, in a
// LoadBalancer Service of that port, a serving certificate for the address
// and Cluster API's admin kubeconfig pointed at the Service, which the
// management cluster reaches. Targets reports the Service once a load
// balancer gave it an address, and not before.
func TestEndpointInANetwork(t *testing.T) {
	t.Parallel()
	m, client := newManager(t, Config{})
	ctx := t.Context()
	s := spec("kc-endpoint", "edge")
	s.Endpoint = "10.1.0.1:6444"
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Delete(ctx, s.Namespace) })

	svc, err := client.CoreV1().Services(s.Namespace).Get(ctx, "edge-apiserver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 6444 {
		t.Errorf("the API server's Service %s %+v", svc.Spec.Type, svc.Spec.Ports)
	}
	dep, err := client.AppsV1().Deployments(s.Namespace).Get(ctx, "edge-apiserver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	args := dep.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--secure-port=6444", "--advertise-address=10.1.0.1"} {
		if !slices.Contains(args, want) {
			t.Errorf("the API server's args lack %s: %v", want, args)
		}
	}
	certs, err := client.CoreV1().Secrets(s.Namespace).Get(ctx, "edge-flexkube-certs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crt := parseCert(t, certs.Data["apiserver.crt"])
	if err := crt.VerifyHostname("10.1.0.1"); err != nil {
		t.Errorf("the serving certificate: %v", err)
	}
	if err := crt.VerifyHostname("edge-apiserver.kc-endpoint.svc"); err != nil {
		t.Errorf("the serving certificate: %v", err)
	}
	admin, err := client.CoreV1().Secrets(s.Namespace).Get(ctx, "edge-kubeconfig", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(admin.Data["value"])
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://edge-apiserver.kc-endpoint.svc:6444" {
		t.Errorf("Cluster API's kubeconfig points at %s, want the Service", rc.Host)
	}

	targets, err := m.Targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tg, ok := targets[s.Namespace]; ok {
		t.Errorf("a Service with no load-balancer address has target %s", tg)
	}
	// The management cluster's load balancer gives the Service an address.
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.example"}, {IP: "2001:db8::7"}, {IP: "198.51.100.7"}}
	if _, err := client.CoreV1().Services(s.Namespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Targets reads the watch cache, which sees the update a moment later.
	want := netip.MustParseAddrPort("198.51.100.7:6444")
	poll.Until(t, 10*time.Second, "the Service's address in Targets", func() error {
		targets, err := m.Targets(ctx)
		if err != nil {
			return err
		}
		if targets[s.Namespace] != want {
			return fmt.Errorf("targets %v, want %s at %s", targets, s.Namespace, want)
		}
		return nil
	})
}
