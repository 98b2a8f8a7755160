package controlplane

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/netns"
)

// kube is the management cluster of this package's tests.
var kube *kubetest.Server

// TestMain runs the package's tests in a network namespace of their own
// (netns), whose lo also has vdcAddress: the egress tests' stand-ins for a
// VDC network's and the management network's addresses are there, and
// nowhere else.
func TestMain(m *testing.M) {
	if !netns.Inside() {
		os.Exit(netns.Reexec(nil))
	}
	for _, up := range []func() error{netns.LoopbackUp, func() error { return netns.AddLoopbackAddress(vdcAddress) }} {
		if err := up(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(kubetest.Main(m, &kube))
}

func newManager(t testing.TB, cfg Config) (*Manager, kubernetes.Interface) {
	t.Helper()
	cfg.REST = kube.RESTConfig()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return m, client
}

func spec(ns, cluster string) Spec {
	return Spec{Namespace: ns, Cluster: cluster, VDC: "vdc-a", Version: "v1.37.2",
		ServiceCIDR: "10.96.0.0/16", PodCIDR: "10.244.0.0/16", Endpoint: "203.0.113.10:6443"}
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("no PEM certificate in %q", data)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEnsureKeepsPKIAcrossUpgrades: Ensure creates the Secrets Cluster
// API's kubeadm bootstrap reads, under its names, keys, type and label;
// an upgrade to a new version rolls the workloads but leaves every Secret
// as it was.
func TestEnsureKeepsPKIAcrossUpgrades(t *testing.T) {
	t.Parallel()
	m, client := newManager(t, Config{})
	ctx := t.Context()
	s := spec("kc-upgrade", "alpha")
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Delete(ctx, s.Namespace) })

	keys := map[string][]string{
		"alpha-ca": {"tls.crt", "tls.key"}, "alpha-etcd": {"tls.crt", "tls.key"}, "alpha-sa": {"tls.crt", "tls.key"},
		"alpha-proxy": {"tls.crt", "tls.key"}, "alpha-kubeconfig": {"value"},
		"alpha-flexkube-certs": {"apiserver.crt", "apiserver.key", "etcd-server.crt", "controller-manager.crt", "scheduler.key"},
	}
	before := map[string]*corev1.Secret{}
	for name, want := range keys {
		sec, err := client.CoreV1().Secrets(s.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("secret %s: %v", name, err)
		}
		if sec.Type != "cluster.x-k8s.io/secret" || sec.Labels[LabelCluster] != "alpha" {
			t.Errorf("secret %s: type %q labels %v, want Cluster API's", name, sec.Type, sec.Labels)
		}
		for _, k := range want {
			if len(sec.Data[k]) == 0 {
				t.Errorf("secret %s has no %s", name, k)
			}
		}
		before[name] = sec
	}
	ca := parseCert(t, before["alpha-ca"].Data["tls.crt"])
	if !ca.IsCA {
		t.Error("alpha-ca is not a CA")
	}
	api := parseCert(t, before["alpha-flexkube-certs"].Data["apiserver.crt"])
	if err := api.CheckSignatureFrom(ca); err != nil {
		t.Errorf("apiserver certificate not signed by the cluster CA: %v", err)
	}
	if err := api.VerifyHostname("203.0.113.10"); err != nil {
		t.Errorf("apiserver certificate: %v", err)
	}
	if err := api.VerifyHostname("alpha-apiserver.kc-upgrade.svc"); err != nil {
		t.Errorf("apiserver certificate: %v", err)
	}
	admin, err := clientcmd.Load(before["alpha-kubeconfig"].Data["value"])
	if err != nil {
		t.Fatal(err)
	}
	if got := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster].Server; got != "https://alpha-apiserver.kc-upgrade.svc:6443" {
		t.Errorf("admin kubeconfig server %q, want the API server's Service", got)
	}
	if crt := parseCert(t, admin.AuthInfos[admin.Contexts[admin.CurrentContext].AuthInfo].ClientCertificateData); len(crt.Subject.Organization) != 1 || crt.Subject.Organization[0] != "system:masters" {
		t.Errorf("admin certificate organizations %v", crt.Subject.Organization)
	}

	d, err := client.AppsV1().Deployments(s.Namespace).Get(ctx, "alpha-apiserver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "registry.k8s.io/kube-apiserver:v1.37.2" {
		t.Errorf("image %q", img)
	}
	if _, err := client.AppsV1().StatefulSets(s.Namespace).Get(ctx, "alpha-etcd", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}

	s.Version = "v1.37.3"
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	for name, old := range before {
		sec, err := client.CoreV1().Secrets(s.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sec.UID != old.UID || sec.ResourceVersion != old.ResourceVersion {
			t.Errorf("secret %s changed by the upgrade", name)
		}
	}
	d, err = client.AppsV1().Deployments(s.Namespace).Get(ctx, "alpha-apiserver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "registry.k8s.io/kube-apiserver:v1.37.3" {
		t.Errorf("image after the upgrade %q", img)
	}
	st, err := m.Status(ctx, s.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready || len(st.Components) != 4 {
		t.Errorf("status with nothing running: %+v", st)
	}
	if err := m.Delete(ctx, s.Namespace); err != nil {
		t.Fatal(err)
	}
	assertGone(t, client, s.Namespace)
	if err := m.Delete(ctx, s.Namespace); err != nil {
		t.Errorf("a second Delete: %v", err)
	}
}

// TestEnsureRefusesBadInput: a bad Spec is refused with ErrInvalid and
// creates nothing; a namespace of another cluster is ErrConflict.
func TestEnsureRefusesBadInput(t *testing.T) {
	t.Parallel()
	m, client := newManager(t, Config{})
	ctx := t.Context()
	for name, mutate := range map[string]func(*Spec){
		"namespace": func(s *Spec) { s.Namespace = "Not_A_Label" },
		"cluster":   func(s *Spec) { s.Cluster = "" },
		"long":      func(s *Spec) { s.Cluster = "a-cluster-name-much-longer-than-forty-characters" },
		"version":   func(s *Spec) { s.Version = "1.37" },
		"cidr":      func(s *Spec) { s.ServiceCIDR = "10.96.0.1/16" },
		"pods":      func(s *Spec) { s.PodCIDR = "10.244.0.0/24" },
		"overlap":   func(s *Spec) { s.PodCIDR = "10.96.0.0/20" },
		"endpoint":  func(s *Spec) { s.Endpoint = "203.0.113.10" },
		"vdc":       func(s *Spec) { s.VDC = "" },
	} {
		s := spec("kc-bad-"+name, "bad")
		mutate(&s)
		if err := m.Ensure(ctx, s); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
		if _, err := client.CoreV1().Namespaces().Get(ctx, "kc-bad-"+name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: namespace created (%v)", name, err)
		}
	}

	s := spec("kc-taken", "one")
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Delete(ctx, s.Namespace) })
	s.Cluster = "two"
	if err := m.Ensure(ctx, s); !errors.Is(err, ErrConflict) {
		t.Errorf("second cluster in a namespace: %v, want ErrConflict", err)
	}
	if _, err := client.CoreV1().Secrets(s.Namespace).Get(ctx, "two-ca", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("second cluster got a CA (%v)", err)
	}
	if _, err := m.Status(ctx, "kc-none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("status of no cluster: %v, want ErrNotFound", err)
	}
	if _, err := m.Kubeconfig(ctx, "kc-taken", Credential{User: "ann", Groups: []string{"system:masters"}, TTL: time.Hour}); !errors.Is(err, ErrInvalid) {
		t.Errorf("kubeconfig for system:masters: %v, want ErrInvalid", err)
	}
	if _, err := m.Kubeconfig(ctx, "kc-taken", Credential{User: "ann", Groups: []string{"view"}, TTL: 48 * time.Hour}); !errors.Is(err, ErrInvalid) {
		t.Errorf("kubeconfig for 48h: %v, want ErrInvalid", err)
	}
	if err := m.Delete(ctx, "default"); err != nil {
		t.Errorf("delete of a namespace not ours: %v", err)
	}
	if _, err := client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("default namespace after Delete: %v", err)
	}
}
