package charts

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/release"
)

// TestFeatureValues installs charts/flexplane with every optional feature
// turned on (ci/features-values.yaml) onto a real API server that serves
// prometheus-operator's ServiceMonitor, and checks each is wired as the
// orchestrator reads it: the release keys mounted as -release-key-file
// parse as the orchestrator's verifier parses them, the release store is
// a ReadWriteMany claim every replica mounts at -release-dir and that an
// uninstall keeps; audit events to stdout and the webhook; the OTLP
// endpoint; a ServiceMonitor whose selector finds the metrics Service
// (and its port) and not the public one. Values that cannot work are
// refused at render, naming the value.
func TestFeatureValues(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	serveServiceMonitors(t, c)
	const ns, rel = "feat", "flexplane"
	vals := readValues(t, "flexplane/ci/features-values.yaml")
	c.install(rel, ns, "flexplane", vals)

	d, err := c.client.AppsV1().Deployments(ns).Get(t.Context(), rel, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctr := d.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"-release-key-file=/etc/flexplane/release-keys/keys.pub", "-release-dir=/var/lib/flexplane-releases",
		"-audit-log=-", "-audit-webhook=https://siem.example.com/flexplane", "-otlp-endpoint=http://otel-collector.monitoring:4317"} {
		if !slices.Contains(ctr.Args, want) {
			t.Errorf("the orchestrator's arguments lack %s: %v", want, ctr.Args)
		}
	}
	mounts := map[string]string{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	vols := map[string]corev1.Volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}

	// The keys: a ConfigMap mounted where -release-key-file reads, which
	// the orchestrator's verifier accepts.
	if mounts["release-keys"] != "/etc/flexplane/release-keys" || vols["release-keys"].ConfigMap == nil {
		t.Fatalf("release keys: mounts %v, volume %+v", mounts, vols["release-keys"])
	}
	cm, err := c.client.CoreV1().ConfigMaps(ns).Get(t.Context(), vols["release-keys"].ConfigMap.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.NewVerifier(cm.Data["keys.pub"]); err != nil || cm.Data["keys.pub"] != vals["releases"].(map[string]any)["signingKeys"] {
		t.Errorf("the mounted keys %q: %v", cm.Data["keys.pub"], err)
	}

	// The store: one ReadWriteMany claim, mounted at -release-dir.
	if mounts["releases"] != "/var/lib/flexplane-releases" || vols["releases"].PersistentVolumeClaim == nil {
		t.Fatalf("release store: mounts %v, volume %+v", mounts, vols["releases"])
	}
	claim := vols["releases"].PersistentVolumeClaim.ClaimName
	pvc, err := c.client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) || pvc.Spec.StorageClassName == nil ||
		*pvc.Spec.StorageClassName != "nfs" || pvc.Spec.Resources.Requests.Storage().String() != "2Gi" {
		t.Errorf("release store claim: %+v", pvc.Spec)
	}

	// The ServiceMonitor finds the metrics Service by its selector, and
	// its port there.
	sm, err := c.dynamic.Resource(schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}).
		Namespace(ns).Get(t.Context(), rel, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no ServiceMonitor: %v", err)
	}
	if sm.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v, want release=prometheus", sm.GetLabels())
	}
	match, _, err := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(match)
	svcs, err := c.client.CoreV1().Services(ns).List(t.Context(), metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs.Items) != 1 || svcs.Items[0].Name != rel+"-metrics" || svcs.Items[0].Spec.Ports[0].Name != "metrics" {
		t.Errorf("the ServiceMonitor's selector %v finds %v, want the metrics Service only", match, svcs.Items)
	}

	// An uninstall keeps the release store (published releases and the
	// floor survive a reinstall) and nothing else.
	c.uninstall(rel, ns)
	if left := c.objects(ns, rel); len(left) != 0 {
		t.Errorf("uninstall left %v", slices.Sorted(maps.Keys(left)))
	}
	poll.True(t, pollTimeout, "the release store kept", func() bool {
		_, err := c.client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
		return err == nil
	})

	for _, bad := range []struct {
		set  func(map[string]any)
		want string
	}{
		{func(v map[string]any) { v["audit"].(map[string]any)["log"] = "/var/log/audit.json" }, "audit"},
		{func(v map[string]any) { v["audit"].(map[string]any)["webhook"] = "ftp://siem" }, "webhook"},
		{func(v map[string]any) { v["tracing"].(map[string]any)["otlpEndpoint"] = "collector:4317" }, "otlpEndpoint"},
		{func(v map[string]any) {
			v["releases"].(map[string]any)["persistence"].(map[string]any)["accessMode"] = "ReadWriteOnce"
		}, "releases.persistence.accessMode must be ReadWriteMany"},
		{func(v map[string]any) {
			v["metrics"].(map[string]any)["serviceMonitor"].(map[string]any)["interval"] = "often"
		}, "interval"},
	} {
		v := readValues(t, "flexplane/ci/features-values.yaml")
		bad.set(v)
		if _, err := render(t, "flexplane", v); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("render with a bad value: %v, want an error naming %q", err, bad.want)
		}
	}
}

// pollTimeout bounds the waits for the API server.
const pollTimeout = 30 * time.Second

// serveServiceMonitors makes the API server serve prometheus-operator's
// ServiceMonitor (a CRD of its group, version and names, its schema left
// open).
func serveServiceMonitors(t *testing.T, c *cluster) {
	t.Helper()
	ext, err := apiextensionsclient.NewForConfig(c.kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	open := true
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "servicemonitors.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "servicemonitors", Singular: "servicemonitor",
				Kind: "ServiceMonitor", ListKind: "ServiceMonitorList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &open}}}},
		},
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, pollTimeout, "ServiceMonitors served", func() bool {
		_, err := c.dynamic.Resource(schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}).
			List(t.Context(), metav1.ListOptions{})
		return err == nil
	})
}
