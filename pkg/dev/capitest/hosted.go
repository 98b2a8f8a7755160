package capitest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flexplane/flexplane/pkg/dev/podrun"
	"github.com/flexplane/flexplane/pkg/tenantkube/controlplane"
)

// Hosted runs the real hosted control planes of a Management's clusters,
// where its stand-in ControlPlane does not: the orchestrator's own
// controlplane.Manager installs each cluster's flexkube release, given
// Values and TenantAddress as its ManagedKubernetesConfig's
// ControlPlaneValues and TenantAddress, and a podrun Follower runs the
// release's pods as processes (etcd, kube-apiserver, controller manager,
// scheduler) once it is installed.
//
// Every pod is on 127.0.0.1, so each cluster's components need ports of
// their own: Values picks them when the Manager first renders a cluster's
// release (nothing is reserved before a cluster exists), and keeps them
// for the cluster's later renderings. The tenant API server then serves
// on a loopback port, not at the cluster's endpoint (its Service, which
// has no DNS here): RESTConfig makes a client of a kubeconfig the API
// issued dial that port for the endpoint, verifying the certificate for
// the endpoint's name, as a resolver would.
type Hosted struct {
	// Pods runs the releases' pods.
	Pods *podrun.Follower
	t    testing.TB

	mu       sync.Mutex
	ports    map[string]loopback // by namespace; protected by mu
	byTarget map[string]string   // the endpoint's host:port → the API server's loopback one; protected by mu
}

// loopback are the ports of one control plane's processes.
type loopback struct {
	api, etcd, peer, metrics, kcm, scheduler int
}

func (l loopback) apiAddr() string { return net.JoinHostPort(podrun.PodIP, strconv.Itoa(l.api)) }

// Hosted starts running the hosted control planes of m's clusters (the
// namespaces labelled as controlplane.Manager's); they stop with t.
func (m *Management) Hosted(t testing.TB) *Hosted {
	t.Helper()
	client, err := kubernetes.NewForConfig(m.Kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	pods, err := podrun.Follow(podrun.FollowConfig{Client: client, Dir: t.TempDir(),
		Selector: controlplane.LabelManaged + "=" + controlplane.ManagedBy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pods.Close() })
	return &Hosted{Pods: pods, t: t, ports: map[string]loopback{}, byTarget: map[string]string{}}
}

// portsOf returns the loopback ports of s's namespace, picking them the
// first time.
func (h *Hosted) portsOf(s controlplane.Spec) (loopback, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l, ok := h.ports[s.Namespace]; ok {
		return l, nil
	}
	var ps []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range 6 {
		l, err := net.Listen("tcp", net.JoinHostPort(podrun.PodIP, "0"))
		if err != nil {
			return loopback{}, fmt.Errorf("capitest: ports of %s: %w", s.Namespace, err)
		}
		ls = append(ls, l)
		ps = append(ps, l.Addr().(*net.TCPAddr).Port)
	}
	l := loopback{api: ps[0], etcd: ps[1], peer: ps[2], metrics: ps[3], kcm: ps[4], scheduler: ps[5]}
	h.ports[s.Namespace] = l
	h.byTarget[s.Endpoint] = l.apiAddr()
	return l, nil
}

// Values are the chart values that let podrun run the control plane of
// s on loopback: each component on its own port, one API server, the
// components reaching each other on 127.0.0.1, and no endpoint
// reconciler (a loopback address cannot be a Service's endpoint).
func (h *Hosted) Values(s controlplane.Spec) map[string]any {
	l, err := h.portsOf(s)
	if err != nil {
		h.t.Error(err)
		return nil
	}
	return map[string]any{
		"addresses": map[string]any{"apiServer": l.apiAddr(), "etcd": net.JoinHostPort(podrun.PodIP, strconv.Itoa(l.etcd))},
		"apiServer": map[string]any{"replicas": 1, "port": l.api, "endpointReconciler": "none"},
		"etcd": map[string]any{"clientPort": l.etcd, "peerPort": l.peer, "metricsPort": l.metrics,
			"extraArgs": []any{"--unsafe-no-fsync"}},
		"controllerManager": map[string]any{"port": l.kcm},
		"scheduler":         map[string]any{"port": l.scheduler},
	}
}

// TenantAddress is where the API server of namespace ns's control plane
// serves ("" before Values picked its ports).
func (h *Hosted) TenantAddress(ns, _ string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	l, ok := h.ports[ns]
	if !ok {
		return ""
	}
	return l.apiAddr()
}

// RESTConfig is the client configuration of kubeconfig, a kubeconfig of
// a hosted cluster: its server (the cluster's endpoint) is dialled at the
// loopback port its API server serves on; TLS is verified for the
// endpoint's name, with the kubeconfig's CA.
func (h *Hosted) RESTConfig(kubeconfig []byte) (*rest.Config, error) {
	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("capitest: %w", err)
	}
	var d net.Dialer
	rc.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.mu.Lock()
		to, ok := h.byTarget[addr]
		h.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("capitest: %s is not the endpoint of a hosted control plane", addr)
		}
		return d.DialContext(ctx, network, to)
	}
	return rc, nil
}
