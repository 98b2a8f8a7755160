package charts

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flexplane/flexplane/pkg/dev/poll"
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
func kubernetesRights(ns string) []right {
	const tenant = "c-0123456789" // a cluster's namespace
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
	add("", []string{"secrets"}, "", "get", "list", "watch")
	add("", []string{"secrets", "configmaps", "services"}, tenant, all...)
	add("", []string{"secrets", "persistentvolumeclaims"}, tenant, "list", "deletecollection")
	add("", []string{"events"}, tenant, "create", "patch")
	add("apps", []string{"deployments", "statefulsets"}, tenant, all...)
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
	add("flexplane.io", []string{"vdcs", "images", "computeprofiles"}, ns, all...)
	return rs
}

// TestKubernetesRights installs the flexplane chart with managed
// Kubernetes enabled (ci/kubernetes-values.yaml) into a real API server:
// Cluster API's CRDs (core and the kubeadm bootstrap provider's) and
// flexplane's provider CRDs are established, carry their contract label
// and are kept by an uninstall; the orchestrator's ServiceAccount is
// granted every right managed Kubernetes uses (SubjectAccessReview), and
// without managed Kubernetes none of the cluster-wide ones.
func TestKubernetesRights(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const ns, rel = "fp", "flexplane"
	c.install(rel, ns, "flexplane", readValues(t, "flexplane/ci/kubernetes-values.yaml"))

	files, err := filepath.Glob("flexplane/files/clusterapi/crds/*.yaml")
	if err != nil || len(files) < 15 {
		t.Fatalf("generated CRDs: %v %v", files, err)
	}
	ext, err := apiextclient.NewForConfig(c.kube.RESTConfig())
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
	allowed := func(r right) (bool, error) {
		rev, err := c.client.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:   sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
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
	rights := kubernetesRights(ns)
	check(true, rights)

	// Without managed Kubernetes, nothing outside the release's namespace.
	c.upgrade(rel, ns, "flexplane", readValues(t, "flexplane/ci/single-values.yaml"))
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
