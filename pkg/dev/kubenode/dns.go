package kubenode

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// dnsService is the name of the cluster DNS's Service in kube-system, as
// on kubeadm's and most other clusters.
const dnsService = "kube-dns"

// dnsManager is the EndpointSlices' managed-by label of the slice naming
// the node's CoreDNS: the controller manager's EndpointSlice controller
// leaves slices of other managers alone.
const dnsManager = "kubenode.flexplane.dev"

// corefile is CoreDNS's configuration: on the node's address, port 53, the
// names of Services and pods of ClusterDomain (and their reverse names)
// from the API server as its administrator; health and readiness on
// loopback ports; other names forwarded (%[6]s) or answered with SERVFAIL.
const corefile = `.:53 {
    bind %[1]s
    errors
    health 127.0.0.1:%[2]d
    ready 127.0.0.1:%[3]d
    kubernetes %[4]s in-addr.arpa ip6.arpa {
        kubeconfig %[5]s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
%[6]s    cache 30
}
`

// startClusterDNS starts CoreDNS on the node's address, makes the kube-dns
// Service (ClusterDNSIP) if the cluster has none and an EndpointSlice of
// it naming the node's CoreDNS, and waits until a query to ClusterDNSIP
// (through kube-proxy's rules) is answered.
func (n *Node) startClusterDNS(ctx context.Context) error {
	dir := n.path("coredns")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	forward := ""
	if len(n.cfg.DNSForward) > 0 {
		forward = "    forward . " + strings.Join(n.cfg.DNSForward, " ") + "\n"
	}
	conf := fmt.Sprintf(corefile, netns.Address, ports[0], ports[1], ClusterDomain,
		filepath.Join(n.path("kubelet"), "kubeconfig"), forward)
	confPath := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	cmd := n.inMountNS(filepath.Join(n.cfg.BinDir, "coredns"), "-conf", confPath)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.run("coredns", cmd); err != nil {
		return err
	}
	i := len(n.procs) - 1
	ready := "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/ready"
	if err := n.wait(ctx, i, "CoreDNS's "+ready, func() error { return kubetest.GetOK(http.DefaultClient, ready) }); err != nil {
		return err
	}
	if err := n.publishClusterDNS(ctx); err != nil {
		return err
	}
	// The kubernetes Service's name resolves once kube-proxy sends
	// ClusterDNSIP to the node's CoreDNS.
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(ClusterDNSIP, "53"))
	}}
	name := "kubernetes.default.svc." + ClusterDomain + "."
	return n.wait(ctx, i, name+" at "+ClusterDNSIP, func() error {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		addrs, err := r.LookupHost(qctx, name)
		if err != nil {
			return err
		}
		if len(addrs) != 1 || addrs[0] != kubetest.KubernetesServiceIP {
			return fmt.Errorf("%s is %v, want %s", name, addrs, kubetest.KubernetesServiceIP)
		}
		return nil
	})
}

// publishClusterDNS makes the kube-dns Service in kube-system if there is
// none (no selector: its endpoints are the nodes' CoreDNS processes, not
// pods) and an EndpointSlice of it naming the node's CoreDNS.
func (n *Node) publishClusterDNS(ctx context.Context) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: dnsService, Namespace: metav1.NamespaceSystem, Labels: map[string]string{"k8s-app": dnsService}},
		Spec: corev1.ServiceSpec{
			ClusterIP: ClusterDNSIP,
			Ports: []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	// kube-system appears a moment after the API server is ready.
	err := poll.Context(ctx, func() error {
		_, err := n.client.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("service %s/%s: %w", metav1.NamespaceSystem, dnsService, err)
	}
	ready := true
	node := n.cfg.Name
	proto := func(p corev1.Protocol) *corev1.Protocol { return &p }
	port := func(name string, p corev1.Protocol) discoveryv1.EndpointPort {
		num := int32(53)
		return discoveryv1.EndpointPort{Name: &name, Protocol: proto(p), Port: &num}
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      dnsService + "-" + n.cfg.Name,
			Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: dnsService,
				discoveryv1.LabelManagedBy:   dnsManager,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{netns.Address},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &node,
		}},
		Ports: []discoveryv1.EndpointPort{port("dns", corev1.ProtocolUDP), port("dns-tcp", corev1.ProtocolTCP)},
	}
	if _, err := n.client.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("endpointslice %s/%s: %w", metav1.NamespaceSystem, slice.Name, err)
	}
	n.dnsSlice = slice.Name
	return nil
}

// unpublishClusterDNS deletes the EndpointSlice naming the node's CoreDNS:
// the kube-dns Service no longer sends queries to a node that is gone.
func (n *Node) unpublishClusterDNS(ctx context.Context) error {
	if n.dnsSlice == "" {
		return nil
	}
	err := n.client.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Delete(ctx, n.dnsSlice, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete endpointslice %s/%s: %w", metav1.NamespaceSystem, n.dnsSlice, err)
	}
	return nil
}

// checkDNSForward says which of Config.DNSForward is not a nameserver's
// address.
func checkDNSForward(servers []string) error {
	for _, s := range servers {
		host, port := s, "53"
		if h, p, err := net.SplitHostPort(s); err == nil {
			host, port = h, p
		}
		if p, err := strconv.Atoi(port); net.ParseIP(host) == nil || err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("DNSForward %q is not an IP address or IP:port", s)
		}
	}
	return nil
}
