package charts_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flexplane/flexplane/charts"
	"github.com/flexplane/flexplane/pkg/catalog/kubestore"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider/v1alpha1"
	"github.com/flexplane/flexplane/pkg/tenantkube/controlplane"
)

// right is one thing the orchestrator does in the management cluster.
type right struct {
	verb, group, resource, subresource string
	namespace                          string // "" for cluster scope or all namespaces
}

// kubernetesRights are the rights managed Kubernetes uses: Cluster API's
// controllers and the kubeadm bootstrap provider (run in-process),
// flexplane's provider, pkg/tenantkube (a namespace per cluster, its
// Cluster API objects) and pkg/tenantkube/controlplane (the flexkube
// chart installed with Helm: its release Secrets and workloads; the PKI
// Secrets; the etcd volumes deleted with the cluster), and the
// orchestrator's own Lease and catalog in its namespace (ns).
func kubernetesRights(ns, tenant string) []right {
	var rs []right
	add := func(group string, resources []string, namespace string, verbs ...string) {
		for _, r := range resources {
			res, sub, _ := strings.Cut(r, "/")
			for _, v := range verbs {
				rs = append(rs, right{verb: v, group: group, resource: res, subresource: sub, namespace: namespace})
			}
		}
	}
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	add("", []string{"namespaces"}, "", "get", "list", "watch", "create", "update", "delete")
	add("", []string{"secrets", "configmaps", "services"}, tenant, all...)
	add("", []string{"secrets", "persistentvolumeclaims"}, tenant, "list", "deletecollection")
	add("", []string{"events"}, tenant, "create", "patch")
	add("apps", []string{"deployments", "statefulsets"}, tenant, all...)
	add("networking.k8s.io", []string{"networkpolicies"}, tenant, all...)
	add("cluster.x-k8s.io", []string{"clusters", "machinedeployments", "machinesets", "machines"}, tenant, all...)
	add("cluster.x-k8s.io", []string{"clusters/status", "machinedeployments/status", "machinesets/status", "machines/status",
		"clusters/finalizers", "machinedeployments/finalizers", "machinesets/finalizers", "machines/finalizers"}, tenant, "get", "update", "patch")
	add("cluster.x-k8s.io", []string{"clusters", "machinedeployments", "machinesets", "machines"}, "", "list", "watch")
	add("bootstrap.cluster.x-k8s.io", []string{"kubeadmconfigs", "kubeadmconfigtemplates"}, tenant, all...)
	add("bootstrap.cluster.x-k8s.io", []string{"kubeadmconfigs/status"}, tenant, "update", "patch")
	add("infrastructure.flexplane.io", []string{"flexclusters", "flexcontrolplanes", "flexmachines", "flexmachinetemplates"}, tenant, all...)
	add("infrastructure.flexplane.io", []string{"flexclusters/status", "flexcontrolplanes/status", "flexmachines/status"}, tenant, "update", "patch")
	add("infrastructure.flexplane.io", []string{"flexclusters", "flexcontrolplanes", "flexmachines", "flexmachinetemplates"}, "", "list", "watch")
	add("apiextensions.k8s.io", []string{"customresourcedefinitions"}, "", "get", "list", "watch")
	add("coordination.k8s.io", []string{"leases"}, ns, "get", "create", "update")
	add("", []string{"configmaps"}, ns, "get", "list", "watch", "create", "update")
	add("flexplane.io", []string{"vdcs", "images", "computeprofiles"}, ns, all...)
	return rs
}

// TestKubernetesRights installs the flexplane chart with managed
// Kubernetes enabled (ci/kubernetes-values.yaml) into a real API server:
// Cluster API's CRDs (core and the kubeadm bootstrap provider's) and
// flexplane's provider CRDs are established, carry their contract label
// and are kept by an uninstall; the orchestrator's ServiceAccount is
// granted every right managed Kubernetes uses (SubjectAccessReview) in a
// cluster's namespace it made (controlplane.Manager.Ensure as that
// ServiceAccount: the namespace, its RoleBinding, the PKI and the flexkube
// release; the hosted API servers' addresses read; Cluster API's
// controllers and the providers run until their caches are synced and they
// reconcile, unhindered by a namespace labelled as a cluster's by someone
// else), and
// none to read or write a Secret or a workload in a
// namespace it did not make (kube-system, default, another, its own but
// its Secrets by name; tried as that ServiceAccount too), nor can it bind
// its role there or change or delete such a namespace (the admission
// policy); and without managed Kubernetes none of the cluster-wide ones.
func TestKubernetesRights(t *testing.T) {
	t.Parallel()
	c := charts.NewCluster(t)
	const ns, rel = "fp", "flexplane"
	c.Install(rel, ns, "flexplane", charts.ReadValues(t, "flexplane/ci/kubernetes-values.yaml"))

	files, err := filepath.Glob("flexplane/files/clusterapi/crds/*.yaml")
	if err != nil || len(files) < 15 {
		t.Fatalf("generated CRDs: %v %v", files, err)
	}
	ext, err := apiextclient.NewForConfig(c.Kube().RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	crdNames := func() []string {
		var names []string
		for _, f := range files {
			group, plural, _ := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".yaml"), "_")
			names = append(names, plural+"."+group)
		}
		return names
	}()
	for _, want := range []string{"clusters.cluster.x-k8s.io", "machinedeployments.cluster.x-k8s.io", "machinesets.cluster.x-k8s.io",
		"machines.cluster.x-k8s.io", "kubeadmconfigs.bootstrap.cluster.x-k8s.io", "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
		"flexclusters.infrastructure.flexplane.io", "flexmachines.infrastructure.flexplane.io", "flexmachinetemplates.infrastructure.flexplane.io",
		"flexcontrolplanes.infrastructure.flexplane.io"} {
		if !slices.Contains(crdNames, want) {
			t.Errorf("the chart installs no CRD %s", want)
		}
	}
	established := func(crd *apiextv1.CustomResourceDefinition) bool {
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
				return true
			}
		}
		return false
	}
	start := time.Now()
	for _, name := range crdNames {
		poll.Until(t, time.Minute-time.Since(start), "CRD "+name+" established", func() error {
			crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !established(crd) {
				return fmt.Errorf("conditions %+v", crd.Status.Conditions)
			}
			contract := "v1beta2"
			if strings.HasSuffix(name, ".infrastructure.flexplane.io") {
				contract = "v1alpha1"
			}
			if got := crd.Labels["cluster.x-k8s.io/v1beta2"]; got != contract {
				t.Errorf("CRD %s: contract label %q, want %q", name, got, contract)
			}
			return nil
		})
	}

	sa := "system:serviceaccount:" + ns + ":flexplane"
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	allowed := func(r right) (bool, error) {
		rev, err := c.Client().AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:   sa,
			Groups: groups,
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: r.verb, Group: r.group, Resource: r.resource,
				Subresource: r.subresource, Namespace: r.namespace},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return rev.Status.Allowed, nil
	}
	check := func(want bool, rs []right) {
		t.Helper()
		var wrong []string
		for _, r := range rs {
			ok, err := allowed(r)
			if err != nil {
				t.Fatal(err)
			}
			if ok != want {
				wrong = append(wrong, fmt.Sprintf("%s %s/%s/%s in %q", r.verb, r.group, r.resource, r.subresource, r.namespace))
			}
		}
		if len(wrong) > 0 {
			t.Errorf("%s allowed %t, want %t: %s", sa, !want, want, strings.Join(wrong, "; "))
		}
	}

	// The orchestrator as its ServiceAccount (the administrator
	// impersonating it).
	orch := rest.CopyConfig(c.Kube().RESTConfig())
	orch.Impersonate = rest.ImpersonationConfig{UserName: sa, Groups: groups}

	// Nowhere it did not make a namespace can it write.
	if _, err := c.Client().CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var elsewhere []right
	for _, other := range []string{"kube-system", "default", "other", ""} {
		for _, r := range []right{{verb: "create", group: "apps", resource: "deployments"}, {verb: "create", resource: "secrets"},
			{verb: "update", resource: "secrets"}, {verb: "create", resource: "pods"}, {verb: "create", resource: "configmaps"},
			{verb: "create", group: "cluster.x-k8s.io", resource: "machines"}} {
			r.namespace = other
			elsewhere = append(elsewhere, r)
		}
	}
	// Nor read a Secret or a workload there: Cluster API's controllers
	// watch only the clusters' namespaces. In its own namespace it reads
	// its Secrets by name only (and the ConfigMaps the sync shards' owners
	// publish).
	for _, other := range []string{"kube-system", "default", "other", "", ns} {
		for _, r := range []right{{verb: "get", resource: "secrets"}, {verb: "list", resource: "secrets"}, {verb: "watch", resource: "secrets"},
			{verb: "list", resource: "configmaps"}, {verb: "list", resource: "services"}, {verb: "list", resource: "persistentvolumeclaims"},
			{verb: "get", group: "apps", resource: "deployments"}, {verb: "list", group: "apps", resource: "deployments"},
			{verb: "list", group: "apps", resource: "statefulsets"}} {
			if other == ns && r.resource == "configmaps" {
				continue // the sync shards' published hosts, not secret
			}
			r.namespace = other
			elsewhere = append(elsewhere, r)
		}
	}
	elsewhere = append(elsewhere, right{verb: "bind", group: "rbac.authorization.k8s.io", resource: "clusterroles"})
	check(false, elsewhere)
	kc, err := kubernetes.NewForConfig(orch)
	if err != nil {
		t.Fatal(err)
	}
	denied := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("%s as the orchestrator: %v, want denied", what, err)
		}
	}
	// The API server applies an admission policy shortly after it is made.
	poll.Until(t, time.Minute, "the admission policy in effect", func() error {
		_, err := kc.CoreV1().Namespaces().Patch(t.Context(), "other", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"flexplane"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return errors.New("a namespace it did not make labelled as flexplane's (dry run)")
		}
		return nil
	})
	for _, other := range []string{"kube-system", "other"} {
		_, err := kc.RbacV1().RoleBindings(other).Create(t.Context(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "mine"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: rel + "-controlplane"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "flexplane"}}}, metav1.CreateOptions{})
		denied("binding its role in "+other, err)
		_, err = kc.CoreV1().Namespaces().Patch(t.Context(), other, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"flexplane"}}}`), metav1.PatchOptions{})
		denied("labelling namespace "+other+" as flexplane's", err)
	}
	denied("deleting namespace other", kc.CoreV1().Namespaces().Delete(t.Context(), "other", metav1.DeleteOptions{}))
	// Nor make itself a namespace of a name another installation expects,
	// or one that is not labelled as its own.
	for _, n := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "monitoring", Labels: map[string]string{"app.kubernetes.io/managed-by": "flexplane"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kc-unlabelled-0123abcd"}},
	} {
		_, err := kc.CoreV1().Namespaces().Create(t.Context(), n, metav1.CreateOptions{})
		denied("creating namespace "+n.Name, err)
	}
	// As the orchestrator: no Secret or workload of a namespace it did not
	// make, read or written.
	for _, other := range []string{"kube-system", "other", ns} {
		if _, err := c.Client().CoreV1().Secrets(other).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "admins"},
			StringData: map[string]string{"token": "hunter2"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := kc.CoreV1().Secrets(other).Get(t.Context(), "admins", metav1.GetOptions{})
		denied("reading a Secret of "+other, err)
		_, err = kc.CoreV1().Secrets(other).List(t.Context(), metav1.ListOptions{})
		denied("listing the Secrets of "+other, err)
		_, err = kc.AppsV1().Deployments(other).List(t.Context(), metav1.ListOptions{})
		denied("listing the Deployments of "+other, err)
		_, err = kc.CoreV1().Secrets(other).Create(t.Context(), workloadSecret(), metav1.CreateOptions{})
		denied("creating a Secret in "+other, err)
		_, err = kc.AppsV1().Deployments(other).Create(t.Context(), workload(), metav1.CreateOptions{})
		denied("creating a Deployment in "+other, err)
	}
	_, err = kc.CoreV1().Secrets(metav1.NamespaceAll).List(t.Context(), metav1.ListOptions{})
	denied("listing every namespace's Secrets", err)

	// The orchestrator makes a cluster's namespace and its control plane,
	// as the capiprovider's reconciler does.
	m, err := controlplane.New(controlplane.Config{REST: orch, NamespaceRole: rel + "-controlplane", ServiceType: "ClusterIP"})
	if err != nil {
		t.Fatal(err)
	}
	const tenant = "kc-web-0123abcd"
	spec := controlplane.Spec{Namespace: tenant, Cluster: "web", VDC: "vdc-a", Version: "v1.37.2",
		ServiceCIDR: "10.96.0.0/16", PodCIDR: "10.244.0.0/16", Endpoint: "203.0.113.10:6443"}
	if err := m.Ensure(t.Context(), spec); err != nil {
		t.Fatalf("the orchestrator's ServiceAccount makes a control plane: %v", err)
	}
	rights := kubernetesRights(ns, tenant)
	check(true, rights)
	// What it cannot do elsewhere it does in the namespace it made.
	if _, err := kc.CoreV1().Secrets(tenant).Create(t.Context(), workloadSecret(), metav1.CreateOptions{}); err != nil {
		t.Errorf("creating a Secret in %s as the orchestrator: %v", tenant, err)
	}
	if _, err := kc.CoreV1().Secrets(tenant).Get(t.Context(), workloadSecret().Name, metav1.GetOptions{}); err != nil {
		t.Errorf("reading a Secret of %s as the orchestrator: %v", tenant, err)
	}
	if _, err := kc.AppsV1().Deployments(tenant).Create(t.Context(), workload(), metav1.CreateOptions{}); err != nil {
		t.Errorf("creating a Deployment in %s as the orchestrator: %v", tenant, err)
	}

	// The hosted API servers' addresses, for the edge gateways, read as
	// every replica reads them.
	if _, err := controlplane.ListTargets(t.Context(), kc); err != nil {
		t.Errorf("the hosted API servers' addresses as the orchestrator: %v", err)
	}

	// Cluster API's controllers and flexplane's providers, run with the
	// ServiceAccount's rights only: their caches sync (they watch only the
	// clusters' namespaces, where it may read), and they reconcile.
	controllersRun(t, orch, c.Client(), ns, tenant, m)

	// The control plane deleted, the namespace is its owner's to delete
	// (tenantkube's FinishDeletes), which the orchestrator may.
	if err := m.Delete(t.Context(), tenant); err != nil {
		t.Fatalf("the orchestrator's ServiceAccount deletes the control plane: %v", err)
	}
	if err := kc.CoreV1().Namespaces().Delete(t.Context(), tenant, metav1.DeleteOptions{}); err != nil {
		t.Errorf("the orchestrator deletes its cluster's namespace: %v", err)
	}

	// Without managed Kubernetes, nothing outside the release's namespace.
	c.Upgrade(rel, ns, "flexplane", charts.ReadValues(t, "flexplane/ci/single-values.yaml"))
	var outside []right
	for _, r := range rights {
		if r.namespace != ns {
			outside = append(outside, r)
		}
	}
	check(false, outside)
	for _, name := range crdNames {
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("CRD %s after disabling managed Kubernetes: %v (want kept)", name, err)
		}
	}
}

// workloadSecret is a Secret the orchestrator tries to write.
func workloadSecret() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted"}, StringData: map[string]string{"token": "x"}}
}

// workload is a Deployment the orchestrator tries to create.
func workload() *appsv1.Deployment {
	labels := map[string]string{"app": "planted"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "planted"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/planted"}}},
			},
		},
	}
}

// controllersRun runs Cluster API's controllers and the providers
// (capiprovider.Run, core included) as the orchestrator runs them, over
// orch (the orchestrator's ServiceAccount), twice: until their caches are
// synced; then, with a namespace labelled as a cluster's by someone else
// (admin), where the ServiceAccount may read nothing, until they have
// reconciled a FlexCluster of the cluster's namespace tenant: that other
// namespace's controllers, which cannot start, hold up no one's.
func controllersRun(t *testing.T, orch *rest.Config, admin kubernetes.Interface, ns, tenant string, cp capiprovider.ControlPlane) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	store, err := kubestore.Open(t.Context(), kubestore.Config{REST: orch, Namespace: ns, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	vms, err := compute.New(compute.Config{Catalog: store, Zones: compute.StaticZones{}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	run := func(started func()) (stop func()) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- capiprovider.Run(ctx, capiprovider.Config{REST: orch, Compute: vms, ControlPlane: cp, Core: true, Logger: log, Started: started})
		}()
		return func() {
			t.Helper()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("the controllers as the orchestrator's ServiceAccount: %v", err)
			}
		}
	}

	started := make(chan struct{})
	stop := run(func() { close(started) })
	select {
	case <-started:
	case <-time.After(2 * time.Minute):
		t.Fatal("the controllers' caches as the orchestrator's ServiceAccount are not synced after 2 minutes")
	}
	stop()

	if _, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "squatter",
		Labels: map[string]string{controlplane.LabelManaged: controlplane.ManagedBy}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = admin.CoreV1().Namespaces().Delete(context.WithoutCancel(t.Context()), "squatter", metav1.DeleteOptions{})
	}()
	scheme, err := capiprovider.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(orch, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	fc := &v1alpha1.FlexCluster{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "web"},
		Spec: v1alpha1.FlexClusterSpec{VDC: "vdc-a", Zone: "alpha", Network: "net-1"}}
	if err := c.Create(t.Context(), fc); err != nil {
		t.Fatal(err)
	}
	defer run(nil)()
	poll.Until(t, 2*time.Minute, "the FlexCluster provisioned by the controllers as the orchestrator's ServiceAccount", func() error {
		got := &v1alpha1.FlexCluster{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(fc), got); err != nil {
			return err
		}
		if !got.Status.Ready {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
}
