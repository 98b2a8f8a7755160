package charts_test

import (
	"fmt"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flexplane/flexplane/charts"
	"github.com/flexplane/flexplane/pkg/catalog/kubestore"
)

// TestOrchestratorSecrets installs the flexplane chart: the orchestrator's
// ServiceAccount reads no Secret of the release's namespace but its own
// (by name), nor creates one there (which it could make another service
// account's token), and keeps the catalog's Secrets (the load balancers'
// certificates) in the chart's secrets namespace, where kubestore, as that
// ServiceAccount, stores, reads and deletes them.
func TestOrchestratorSecrets(t *testing.T) {
	t.Parallel()
	c := charts.NewCluster(t)
	const ns, rel, secrets = "fp", "flexplane", "fp-secrets"
	c.Install(rel, ns, "flexplane", charts.ReadValues(t, "flexplane/ci/single-values.yaml"))
	if _, err := c.Client().CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "database"},
		StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	sa := "system:serviceaccount:" + ns + ":flexplane"
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	for _, r := range []struct {
		verb, namespace, name string
		want                  bool
	}{
		{"get", ns, "database", false},
		{"update", ns, "database", false},
		{"delete", ns, "database", false},
		{"list", ns, "", false},
		{"create", ns, "", false},
		{"create", ns, rel + "-state", false},
		{"get", ns, rel + "-state", true},
		{"update", ns, rel + "-state", true},
		{"get", secrets, "lb.vdc-a.web", true},
		{"create", secrets, "", true},
		{"update", secrets, "lb.vdc-a.web", true},
		{"delete", secrets, "lb.vdc-a.web", true},
		{"get", "default", "lb.vdc-a.web", false},
	} {
		rev, err := c.Client().AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: sa, Groups: groups,
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: r.verb, Resource: "secrets", Namespace: r.namespace, Name: r.name},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rev.Status.Allowed != r.want {
			t.Errorf("%s may %s Secret %q in %s: %t, want %t", sa, r.verb, r.name, r.namespace, rev.Status.Allowed, r.want)
		}
	}

	// The catalog's secret store as the orchestrator runs it
	// (-namespace, -secret-namespace), as its ServiceAccount.
	orch := rest.CopyConfig(c.Kube().RESTConfig())
	orch.Impersonate = rest.ImpersonationConfig{UserName: sa, Groups: groups}
	kc, err := kubernetes.NewForConfig(orch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Secrets(ns).Get(t.Context(), "database", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("reading Secret database of %s as the orchestrator: %v, want forbidden", ns, err)
	}
	if _, err := kc.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: rel + "-state",
		Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Type: corev1.SecretTypeServiceAccountToken},
		metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("creating a token Secret in %s as the orchestrator: %v, want forbidden", ns, err)
	}
	store, err := kubestore.Open(t.Context(), kubestore.Config{REST: orch, Namespace: ns, SecretNamespace: secrets})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	for i := range 2 { // created, then replaced
		want := fmt.Sprintf("key %d", i)
		if err := store.PutSecret(t.Context(), "lb.vdc-a.web", map[string][]byte{"shop.key": []byte(want)}); err != nil {
			t.Fatalf("put the certificates: %v", err)
		}
		got, err := store.GetSecret(t.Context(), "lb.vdc-a.web")
		if err != nil || string(got["shop.key"]) != want {
			t.Fatalf("get the certificates: %q %v, want %q", got, err, want)
		}
	}
	if _, err := c.Client().CoreV1().Secrets(secrets).Get(t.Context(), "lb.vdc-a.web", metav1.GetOptions{}); err != nil {
		t.Errorf("the certificates are not in %s: %v", secrets, err)
	}
	if err := store.DeleteSecret(t.Context(), "lb.vdc-a.web"); err != nil {
		t.Errorf("delete the certificates: %v", err)
	}
}
