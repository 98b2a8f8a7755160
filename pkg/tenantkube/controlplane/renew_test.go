package controlplane

import (
	"context"
	"crypto/x509"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// pkiState is what the test compares of a cluster's PKI between Ensures.
type pkiState struct {
	certs, admin, ca, sa *corev1.Secret
	// leaves are the certificates of <cluster>-flexkube-certs by file, and
	// the admin kubeconfig's as "admin".
	leaves map[string]*x509.Certificate
	server string // the admin kubeconfig's
}

func readPKI(ctx context.Context, t *testing.T, client kubernetes.Interface, s Spec) pkiState {
	t.Helper()
	get := func(name string) *corev1.Secret {
		sec, err := client.CoreV1().Secrets(s.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sec
	}
	st := pkiState{certs: get(certsSecret(s.Cluster)), admin: get(kubeconfigSecret(s.Cluster)),
		ca: get(caSecret(s.Cluster)), sa: get(saSecret(s.Cluster)), leaves: map[string]*x509.Certificate{}}
	for k, v := range st.certs.Data {
		if strings.HasSuffix(k, ".crt") {
			st.leaves[k] = parseCert(t, v)
		}
	}
	kc, err := clientcmd.Load(st.admin.Data["value"])
	if err != nil {
		t.Fatal(err)
	}
	cur := kc.Contexts[kc.CurrentContext]
	st.leaves["admin"] = parseCert(t, kc.AuthInfos[cur.AuthInfo].ClientCertificateData)
	st.server = kc.Clusters[cur.Cluster].Server
	return st
}

// podRevisions are the flexplane.io/pki-revision annotations of the
// workloads' pod templates, by workload.
func podRevisions(ctx context.Context, t *testing.T, client kubernetes.Interface, s Spec) map[string]string {
	t.Helper()
	out := map[string]string{}
	sts, err := client.AppsV1().StatefulSets(s.Namespace).Get(ctx, s.Cluster+"-etcd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out["etcd"] = sts.Spec.Template.Annotations["flexplane.io/pki-revision"]
	for _, name := range []string{"apiserver", "controller-manager", "scheduler"} {
		d, err := client.AppsV1().Deployments(s.Namespace).Get(ctx, s.Cluster+"-"+name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out[name] = d.Spec.Template.Annotations["flexplane.io/pki-revision"]
	}
	return out
}

// releaseRevision is the pki.revision value of the release's last revision.
func releaseRevision(t *testing.T, m *Manager, s Spec) string {
	t.Helper()
	h := history(t, m, s)
	pki, _ := h[len(h)-1].Config["pki"].(map[string]any)
	rev, _ := pki["revision"].(string)
	return rev
}

// TestEnsureRenewsCertificates: the leaf certificates and the admin
// kubeconfig are issued anew, by the same authorities, once less than a
// third of their lifetime is left, and not before; the release then
// carries their new digest, which every workload's pods carry; an Ensure
// right after renews nothing. An endpoint of a new host gets a serving
// certificate and an admin kubeconfig for it.
func TestEnsureRenewsCertificates(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	start := time.Now()
	now.Store(start.UnixNano())
	m, client := newManager(t, Config{Now: func() time.Time { return time.Unix(0, now.Load()) }})
	ctx := t.Context()
	s := spec("kc-renew", "renew")
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Delete(ctx, s.Namespace) })
	first := readPKI(ctx, t, client, s)
	if len(first.leaves) != 8 {
		t.Fatalf("%d certificates, want the 7 leaves and the admin's", len(first.leaves))
	}
	rev := releaseRevision(t, m, s)
	if rev == "" || rev != pkiRevision(first.certs.Data) {
		t.Fatalf("release pki.revision %q, want the digest of the certificates %q", rev, pkiRevision(first.certs.Data))
	}
	for w, got := range podRevisions(ctx, t, client, s) {
		if got != rev {
			t.Errorf("%s pods: pki-revision %q, want %q", w, got, rev)
		}
	}

	// Just before two thirds of the lifetime: nothing is due.
	now.Store(start.Add(2*leafLifetime/3 - time.Hour).UnixNano())
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := readPKI(ctx, t, client, s); got.certs.ResourceVersion != first.certs.ResourceVersion ||
		got.admin.ResourceVersion != first.admin.ResourceVersion {
		t.Fatal("certificates renewed with more than a third of their lifetime left")
	}
	if h := history(t, m, s); len(h) != 1 {
		t.Fatalf("%d revisions with nothing renewed, want 1", len(h))
	}

	// Past two thirds: every leaf is due.
	renewedAt := start.Add(2*leafLifetime/3 + time.Hour)
	now.Store(renewedAt.UnixNano())
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	second := readPKI(ctx, t, client, s)
	if second.ca.ResourceVersion != first.ca.ResourceVersion || second.sa.ResourceVersion != first.sa.ResourceVersion {
		t.Error("the CA or the service-account key changed")
	}
	ca := parseCert(t, second.ca.Data[corev1.TLSCertKey])
	for name, old := range first.leaves {
		got := second.leaves[name]
		if got == nil {
			t.Errorf("%s: gone after the renewal", name)
			continue
		}
		if got.SerialNumber.Cmp(old.SerialNumber) == 0 {
			t.Errorf("%s: not renewed (serial %s)", name, got.SerialNumber)
		}
		if !got.NotAfter.After(old.NotAfter) || got.NotBefore.After(renewedAt) || got.NotBefore.Before(renewedAt.Add(-2*clockSkew)) {
			t.Errorf("%s: renewed valid %s to %s, want from about %s and later than %s", name, got.NotBefore, got.NotAfter, renewedAt, old.NotAfter)
		}
		if got.Issuer.String() != old.Issuer.String() {
			t.Errorf("%s: issued by %s, was %s", name, got.Issuer, old.Issuer)
		}
	}
	for _, name := range []string{"apiserver.crt", "controller-manager.crt", "admin"} {
		if err := second.leaves[name].CheckSignatureFrom(ca); err != nil {
			t.Errorf("%s: renewed, not signed by the cluster CA: %v", name, err)
		}
	}
	newRev := releaseRevision(t, m, s)
	if newRev == rev || newRev != pkiRevision(second.certs.Data) {
		t.Errorf("release pki.revision %q after the renewal, want the new digest %q (was %q)", newRev, pkiRevision(second.certs.Data), rev)
	}
	for w, got := range podRevisions(ctx, t, client, s) {
		if got != newRev {
			t.Errorf("%s pods after the renewal: pki-revision %q, want %q", w, got, newRev)
		}
	}

	// At the same time again: nothing more.
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	third := readPKI(ctx, t, client, s)
	for name, c := range second.leaves {
		if third.leaves[name].SerialNumber.Cmp(c.SerialNumber) != 0 {
			t.Errorf("%s: renewed twice", name)
		}
	}
	if h := history(t, m, s); len(h) != 2 {
		t.Errorf("%d revisions, want 2: one for the renewal", len(h))
	}

	// A new endpoint: another host and port.
	s.Endpoint = "198.51.100.7:6444"
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	moved := readPKI(ctx, t, client, s)
	api := moved.leaves["apiserver.crt"]
	if api.SerialNumber.Cmp(third.leaves["apiserver.crt"].SerialNumber) == 0 {
		t.Fatal("apiserver certificate not issued anew for the new endpoint")
	}
	if err := api.VerifyHostname("198.51.100.7"); err != nil {
		t.Errorf("apiserver certificate for the new endpoint: %v", err)
	}
	if err := api.CheckSignatureFrom(ca); err != nil {
		t.Errorf("apiserver certificate for the new endpoint: %v", err)
	}
	// Cluster API's kubeconfig is the Service's, which serves at the
	// endpoint's port.
	if moved.server != "https://renew-apiserver.kc-renew.svc:6444" {
		t.Errorf("admin kubeconfig server %q after the endpoint moved", moved.server)
	}
	if got := releaseRevision(t, m, s); got != pkiRevision(moved.certs.Data) {
		t.Errorf("release pki.revision %q, want %q", got, pkiRevision(moved.certs.Data))
	}
}

// TestRenewalLosesRaceToOther: a renewal that another Manager's beat,
// between the read and the write, does not overwrite it: the write is
// conditional, and the loser returns the winner's data.
func TestRenewalLosesRaceToOther(t *testing.T) {
	t.Parallel()
	m, client := newManager(t, Config{})
	ctx := t.Context()
	s := spec("kc-renew-race", "race")
	if err := m.ensureNamespace(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(ctx, s.Namespace, metav1.DeleteOptions{}) })
	gen := func(v string) func() (map[string][]byte, error) {
		return func() (map[string][]byte, error) { return map[string][]byte{"v": []byte(v)}, nil }
	}
	if _, err := m.secret(ctx, s, "race-leaves", gen("old")); err != nil {
		t.Fatal(err)
	}
	stale := func(data map[string][]byte) string {
		if string(data["v"]) != "old" {
			return ""
		}
		// The other Manager renews now, after this one read "old".
		sec, err := client.CoreV1().Secrets(s.Namespace).Get(ctx, "race-leaves", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sec.Data = map[string][]byte{"v": []byte("winner")}
		if _, err := client.CoreV1().Secrets(s.Namespace).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return "due"
	}
	got, err := m.renewedSecret(ctx, s, "race-leaves", gen("loser"), stale)
	if err != nil {
		t.Fatal(err)
	}
	if string(got["v"]) != "winner" {
		t.Errorf("renewal returned %q, want the winner's", got["v"])
	}
	sec, err := client.CoreV1().Secrets(s.Namespace).Get(ctx, "race-leaves", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["v"]) != "winner" {
		t.Errorf("secret holds %q, want the winner's", sec.Data["v"])
	}
}
