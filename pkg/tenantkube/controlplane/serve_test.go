package controlplane

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/podrun"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// processes are the loopback ports of one control plane run as processes.
type processes struct {
	api, etcd, peer, metrics, kcm, scheduler int
}

func freePorts(t testing.TB) processes {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range 6 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return processes{api: ports[0], etcd: ports[1], peer: ports[2], metrics: ports[3], kcm: ports[4], scheduler: ports[5]}
}

// endpoint is where the API server of p serves.
func (p processes) endpoint() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.api)) }

// values are the chart values that let podrun run the control plane on
// loopback: every component on its own port, one API server, addresses
// on 127.0.0.1, and no endpoint reconciler (loopback cannot be an endpoint).
func (p processes) values() map[string]any {
	return map[string]any{
		"addresses": map[string]any{"apiServer": p.endpoint(), "etcd": net.JoinHostPort("127.0.0.1", strconv.Itoa(p.etcd))},
		"apiServer": map[string]any{"replicas": 1, "port": p.api, "endpointReconciler": "none"},
		"etcd": map[string]any{"clientPort": p.etcd, "peerPort": p.peer, "metricsPort": p.metrics,
			"extraArgs": []any{"--unsafe-no-fsync"}},
		"controllerManager": map[string]any{"port": p.kcm},
		"scheduler":         map[string]any{"port": p.scheduler},
	}
}

// processManager is a Manager whose control planes podrun can run: ports
// per namespace, the tenant API server reached at its endpoint.
func processManager(t testing.TB, ports map[string]processes) (*Manager, kubernetes.Interface) {
	return newManager(t, Config{
		Values:        func(s Spec) map[string]any { return ports[s.Namespace].values() },
		TenantAddress: func(ns, _ string) string { return ports[ns].endpoint() },
	})
}

// runControlPlane ensures the control plane of s, its endpoint a loopback
// port of its own, runs its pods (podrun) and waits until it is ready.
func runControlPlane(t *testing.T, s Spec) (*Manager, kubernetes.Interface, *podrun.Runner, Status) {
	t.Helper()
	ctx := t.Context()
	ports := map[string]processes{s.Namespace: freePorts(t)}
	m, mgmt := processManager(t, ports)
	s.Endpoint = ports[s.Namespace].endpoint()
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	r, err := podrun.Start(ctx, podrun.Config{Client: mgmt, Namespace: s.Namespace, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return m, mgmt, r, waitReady(ctx, t, m, s.Namespace, r)
}

// waitReady polls Status until the control plane is ready.
func waitReady(ctx context.Context, t testing.TB, m *Manager, ns string, r *podrun.Runner) Status {
	t.Helper()
	var st Status
	poll.Until(t, 4*time.Minute, "the control plane ready", func() error {
		var err error
		if st, err = m.Status(ctx, ns); err != nil {
			t.Fatal(err)
		}
		if !st.Ready {
			return poll.Lazy(func() string { return fmt.Sprintf("%+v%s", st, r.Tail(15)) })
		}
		return nil
	})
	return st
}

func tenantClient(t *testing.T, kubeconfig []byte) (kubernetes.Interface, *x509.Certificate) {
	t.Helper()
	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.Timeout = 20 * time.Second
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return client, kubetest.ClientCertificate(t, rc.CertData)
}

// TestHostedControlPlaneServes: a control plane Ensure installed, its
// rendered containers run as processes (podrun: there is no kubelet here),
// becomes Ready; an admin's kubeconfig lists and creates the tenant's
// namespaces, its controller manager and scheduler work (a new namespace
// gets its default ServiceAccount, the scheduler holds its lease); a
// viewer's can list but not create; a credential expires with its TTL;
// Delete leaves nothing of it.
func TestHostedControlPlaneServes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const ns = "kc-serve"
	m, mgmt, r, st := runControlPlane(t, spec(ns, "serve"))
	if st.Version != "v1.37.2" || len(st.Components) != 4 {
		t.Errorf("status %+v, want 4 components at v1.37.2", st)
	}

	kc, err := m.Kubeconfig(ctx, ns, Credential{User: "ann", Groups: []string{"cluster-admin"}, TTL: time.Hour})
	if err != nil {
		t.Fatalf("%v%s", err, r.Tail(10))
	}
	admin, crt := tenantClient(t, kc)
	if crt.Subject.CommonName != "ann" || slices.Contains(crt.Subject.Organization, "system:masters") {
		t.Errorf("admin credential %v", crt.Subject)
	}
	names, err := kubetest.NamespaceNames(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"default", "kube-system", "kube-public"} {
		if !slices.Contains(names, want) {
			t.Errorf("tenant namespaces %v lack %s", names, want)
		}
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, "the controller manager creates team-a's default ServiceAccount", func() error {
		_, err := admin.CoreV1().ServiceAccounts("team-a").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	poll.Until(t, 2*time.Minute, "the scheduler holds its lease", func() error {
		_, err := admin.CoordinationV1().Leases("kube-system").Get(ctx, "kube-scheduler", metav1.GetOptions{})
		return err
	})
	// Nothing of the tenant is in the management cluster.
	if _, err := mgmt.CoreV1().Namespaces().Get(ctx, "team-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("team-a in the management cluster: %v", err)
	}

	kc, err = m.Kubeconfig(ctx, ns, Credential{User: "vic", Groups: []string{"view"}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	viewer, crt := tenantClient(t, kc)
	if d := time.Until(crt.NotAfter); d < 58*time.Minute || d > time.Hour {
		t.Errorf("viewer certificate expires in %s, want an hour", d)
	}
	// The tenant API server sees the viewers' binding when its RBAC cache
	// does: within moments, as on any cluster.
	poll.Until(t, 45*time.Second, "the viewer lists the namespaces", func() error {
		names, err := kubetest.NamespaceNames(ctx, viewer)
		if err == nil && !slices.Contains(names, "team-a") {
			err = fmt.Errorf("team-a missing from %v", names)
		}
		return err
	})
	_, err = viewer.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("viewer creates a namespace: %v, want Forbidden", err)
	}

	const ttl = 15 * time.Second
	kc, err = m.Kubeconfig(ctx, ns, Credential{User: "sam", Groups: []string{"view"}, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	short, crt := tenantClient(t, kc)
	if d := time.Until(crt.NotAfter); d > ttl {
		t.Errorf("%s credential valid for %s", ttl, d)
	}
	poll.Until(t, time.Until(crt.NotAfter), fmt.Sprintf("a %s credential accepted before it expires", ttl), func() error {
		_, err := kubetest.NamespaceNames(ctx, short)
		return err
	})
	poll.Until(t, time.Minute, "an expired credential is refused", func() error {
		_, err := kubetest.NamespaceNames(ctx, short)
		if apierrors.IsUnauthorized(err) {
			if now := time.Now(); now.Before(crt.NotAfter) {
				t.Fatalf("refused at %s, before it expires at %s: %v", now, crt.NotAfter, err)
			}
			return nil
		}
		if err == nil {
			err = errors.New("still accepted")
		}
		return err
	})

	if err := m.Delete(ctx, ns); err != nil {
		t.Fatal(err)
	}
	assertGone(t, mgmt, ns)
}

// assertGone checks that nothing of the control plane in ns is left: no
// workloads, Services, ConfigMaps, volume claims or Secrets (the PKI's and
// Helm's release records), and the namespace is deleted (the test API
// server has no namespace controller to finish it off, so it may still
// be terminating, empty).
func assertGone(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	ctx := t.Context()
	lo := metav1.ListOptions{}
	check := func(kind string, n int, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("list %s: %v", kind, err)
		}
		if n != 0 {
			t.Errorf("%d %s left in %s", n, kind, ns)
		}
	}
	secrets, err := c.CoreV1().Secrets(ns).List(ctx, lo)
	check("secrets", len(secrets.Items), err)
	services, err := c.CoreV1().Services(ns).List(ctx, lo)
	check("services", len(services.Items), err)
	cms, err := c.CoreV1().ConfigMaps(ns).List(ctx, lo)
	check("configmaps", len(cms.Items), err)
	pvcs, err := c.CoreV1().PersistentVolumeClaims(ns).List(ctx, lo)
	check("volume claims", len(pvcs.Items), err)
	ds, err := c.AppsV1().Deployments(ns).List(ctx, lo)
	check("deployments", len(ds.Items), err)
	stss, err := c.AppsV1().StatefulSets(ns).List(ctx, lo)
	check("statefulsets", len(stss.Items), err)
	n, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err == nil && n.DeletionTimestamp == nil {
		t.Errorf("namespace %s not deleted", ns)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
