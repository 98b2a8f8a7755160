package graph_test

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// waitHostedReady waits until cluster id of vdc reads, through GraphQL,
// controlPlaneReady with its four components ready and PROVISIONED, as
// the real control plane's workloads and Cluster API's conditions say.
func (s *kubeStack) waitHostedReady(t testing.TB, user, vdc, id string, timeout time.Duration) gqlKubeCluster {
	t.Helper()
	var c gqlKubeCluster
	poll.Until(t, timeout, "cluster "+id+" ready", func() error {
		s.h.GraphQL(t, user, vdc, `query($id: ID!) { kubernetesCluster(id: $id) { `+kubeClusterFields+` } }`, map[string]any{"id": id}).
			OK(t).Into(t, "kubernetesCluster", &c)
		ready := 0
		for _, p := range c.ControlPlane {
			if p.Ready {
				ready++
			}
		}
		if c.ControlPlaneReady && ready == 4 && len(c.ControlPlane) == 4 && c.Phase == "PROVISIONED" {
			return nil
		}
		return poll.Lazy(func() string { return fmt.Sprintf("%+v%s", c, s.hosted.Pods.Tail(15)) })
	})
	return c
}

// tenantKubeconfig issues user's kubeconfig of cluster id through
// GraphQL and returns a client of the tenant cluster with it, and its
// client certificate.
func (s *kubeStack) tenantKubeconfig(t *testing.T, user, vdc, id string, wantReadOnly bool) (kubernetes.Interface, *x509.Certificate, []byte) {
	t.Helper()
	var kc struct {
		Kubeconfig string
		ReadOnly   bool
		ExpiresAt  time.Time
	}
	s.h.GraphQL(t, user, vdc, `mutation($c: ID!) { issueKubeconfig(cluster: $c) { kubeconfig readOnly expiresAt } }`, map[string]any{"c": id}).
		OK(t).Into(t, "issueKubeconfig", &kc)
	if kc.ReadOnly != wantReadOnly {
		t.Errorf("%s's kubeconfig readOnly %v", user, kc.ReadOnly)
	}
	rc, err := s.hosted.RESTConfig([]byte(kc.Kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	rc.Timeout = 20 * time.Second
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	crt := kubetest.ClientCertificate(t, rc.CertData)
	if d := crt.NotAfter.Sub(kc.ExpiresAt); d > time.Minute || d < -time.Minute {
		t.Errorf("%s's certificate expires at %s, the API says %s", user, crt.NotAfter, kc.ExpiresAt)
	}
	if crt.Subject.CommonName != "oidc:"+user {
		t.Errorf("%s's certificate is of %q, want its subject oidc:%s", user, crt.Subject.CommonName, user)
	}
	if life := crt.NotAfter.Sub(crt.NotBefore); life > 9*time.Hour {
		t.Errorf("%s's certificate lives %s: not short-lived", user, life)
	}
	return c, crt, rc.CertData
}

// TestHostedControlPlaneThroughAPI: createKubernetesCluster through
// GraphQL → the orchestrator's Manager installs the cluster's flexkube
// release → podrun runs its pods as processes (etcd, kube-apiserver,
// controller manager, scheduler) → the cluster reads ready through
// GraphQL from those workloads and Cluster API's conditions. A member's
// issueKubeconfig gives a short-lived certificate (not the cluster's
// admin one) with which client-go lists and creates the tenant cluster's
// namespaces; a viewer's lists but is refused writes, and is not the
// admin certificate either; another VDC gets NOT_FOUND. Deleting the
// cluster uninstalls its control plane.
func TestHostedControlPlaneThroughAPI(t *testing.T) {
	t.Parallel()
	s := newHostedKubeStack(t)
	h := s.h
	var c gqlKubeCluster
	h.GraphQL(t, "alice", "red", `mutation($n: ID!) { createKubernetesCluster(input: {name: "live", zone: "alpha", version: "v1.37.2", network: $n}) { id } }`,
		map[string]any{"n": s.red}).OK(t).Into(t, "createKubernetesCluster", &c)
	c = s.waitHostedReady(t, "alice", "red", c.ID, 4*time.Minute)
	if c.Version != "v1.37.2" || c.Endpoint == nil {
		t.Errorf("ready cluster %+v", c)
	}
	if s.hosted.Pods.Runner(c.ID) == nil {
		t.Fatalf("no pods run in %s", c.ID)
	}

	// The cluster's admin certificate, which the API never hands out.
	var adminSecret corev1.Secret
	if err := s.kc.Get(t.Context(), client.ObjectKey{Namespace: c.ID, Name: "live-kubeconfig"}, &adminSecret); err != nil {
		t.Fatal(err)
	}
	adminCfg, err := clientcmd.RESTConfigFromKubeConfig(adminSecret.Data["value"])
	if err != nil {
		t.Fatal(err)
	}

	member, crt, pemData := s.tenantKubeconfig(t, "alice", "red", c.ID, false)
	if slices.Contains(crt.Subject.Organization, "system:masters") || !slices.Equal(crt.Subject.Organization, []string{"cluster-admin"}) {
		t.Errorf("member's certificate %v", crt.Subject)
	}
	if bytes.Equal(pemData, adminCfg.CertData) {
		t.Error("the member got the cluster's admin certificate")
	}
	names, err := kubetest.NamespaceNames(t.Context(), member)
	if err != nil {
		t.Fatalf("member lists the tenant's namespaces: %v%s", err, s.hosted.Pods.Tail(10))
	}
	for _, want := range []string{"default", "kube-system", "kube-public"} {
		if !slices.Contains(names, want) {
			t.Errorf("tenant namespaces %v lack %s", names, want)
		}
	}
	if _, err := member.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("member creates a namespace: %v", err)
	}
	// The tenant's controller manager runs: team-a gets its ServiceAccount.
	poll.True(t, 2*time.Minute, "team-a's default ServiceAccount", func() bool {
		_, err := member.CoreV1().ServiceAccounts("team-a").Get(t.Context(), "default", metav1.GetOptions{})
		return err == nil
	})

	viewer, crt, pemData := s.tenantKubeconfig(t, "vera", "red", c.ID, true)
	if !slices.Equal(crt.Subject.Organization, []string{"view"}) || bytes.Equal(pemData, adminCfg.CertData) {
		t.Errorf("viewer's certificate %v (the admin's: %v)", crt.Subject, bytes.Equal(pemData, adminCfg.CertData))
	}
	// The tenant API server sees the viewers' binding when its RBAC cache
	// does: within moments.
	poll.True(t, 45*time.Second, "the viewer lists team-a", func() bool {
		names, err := kubetest.NamespaceNames(t.Context(), viewer)
		return err == nil && slices.Contains(names, "team-a")
	})
	_, err = viewer.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("viewer creates a namespace: %v, want Forbidden", err)
	}
	err = viewer.CoreV1().Namespaces().Delete(t.Context(), "team-a", metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("viewer deletes a namespace: %v, want Forbidden", err)
	}

	// Another VDC: NOT_FOUND, as a cluster that does not exist.
	for _, q := range []string{
		`mutation($c: ID!) { issueKubeconfig(cluster: $c) { kubeconfig } }`,
		`query($c: ID!) { kubernetesCluster(id: $c) { id } }`,
	} {
		if r := h.GraphQL(t, "bob", "blue", q, map[string]any{"c": c.ID}); r.Code(t) != "NOT_FOUND" {
			t.Errorf("blue: %s: %s", q, r.Raw)
		}
	}

	h.GraphQL(t, "alice", "red", `mutation($c: ID!) { deleteKubernetesCluster(id: $c) { id } }`, map[string]any{"c": c.ID}).OK(t)
	poll.True(t, 4*time.Minute, "the cluster and its control plane's processes gone", func() bool {
		var list struct{ TotalCount int }
		h.GraphQL(t, "alice", "red", `{ kubernetesClusters { totalCount } }`, nil).OK(t).Into(t, "kubernetesClusters", &list)
		return list.TotalCount == 0 && s.hosted.Pods.Runner(c.ID) == nil
	})
	if _, err := kubetest.NamespaceNames(t.Context(), member); err == nil {
		t.Error("the deleted cluster's API server still serves")
	}
}
