package charts

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/flexplane/flexplane/pkg/dev/kubetest"
)

// cluster is a real API server with Helm's and client-go's clients.
type cluster struct {
	t       *testing.T
	kube    *kubetest.Server
	config  string // the administrator's kubeconfig
	client  kubernetes.Interface
	dynamic dynamic.Interface
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	return clusterOn(t, kubetest.ForTest(t))
}

// clusterOn is the clients of a running API server.
func clusterOn(t *testing.T, kube *kubetest.Server) *cluster {
	t.Helper()
	path, err := kube.WriteKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, kube: kube, config: path, client: client, dynamic: dyn}
}

// helm is a Helm action configuration for namespace ns.
func (c *cluster) helm(ns string) *action.Configuration {
	c.t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &c.config, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, ns, "secret", func(format string, v ...any) { c.t.Logf("helm: "+format, v...) }); err != nil {
		c.t.Fatal(err)
	}
	return cfg
}

func (c *cluster) install(name, ns, chartName string, vals map[string]any) {
	c.t.Helper()
	inst := action.NewInstall(c.helm(ns))
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = name, ns, true
	if _, err := inst.RunWithContext(c.t.Context(), loadChart(c.t, chartName), vals); err != nil {
		c.t.Fatalf("install %s: %v", chartName, err)
	}
}

func (c *cluster) upgrade(name, ns, chartName string, vals map[string]any) {
	c.t.Helper()
	up := action.NewUpgrade(c.helm(ns))
	up.Namespace = ns
	if _, err := up.RunWithContext(c.t.Context(), name, loadChart(c.t, chartName), vals); err != nil {
		c.t.Fatalf("upgrade %s: %v", chartName, err)
	}
}

func (c *cluster) uninstall(name, ns string) {
	c.t.Helper()
	un := action.NewUninstall(c.helm(ns))
	if _, err := un.Run(name); err != nil {
		c.t.Fatalf("uninstall %s: %v", name, err)
	}
}

// object is what the tests compare of an object across upgrades.
type object struct {
	UID        string
	Generation int64
	Data       map[string]string
}

// kinds are the kinds the charts make, as the API server serves them.
var kinds = []schema.GroupVersionResource{
	{Version: "v1", Resource: "secrets"},
	{Version: "v1", Resource: "configmaps"},
	{Version: "v1", Resource: "services"},
	{Version: "v1", Resource: "serviceaccounts"},
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "batch", Version: "v1", Resource: "jobs"},
	{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
	{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
}

// objects lists the objects of release name (by its instance label, in ns
// and cluster-wide), keyed "resource/name", Helm's own release Secrets
// left out.
func (c *cluster) objects(ns, name string) map[string]object {
	c.t.Helper()
	out := map[string]object{}
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name}
	for _, gvr := range kinds {
		var ri dynamic.ResourceInterface = c.dynamic.Resource(gvr)
		if !strings.HasPrefix(gvr.Resource, "cluster") {
			ri = c.dynamic.Resource(gvr).Namespace(ns)
		}
		list, err := ri.List(c.t.Context(), sel)
		if err != nil {
			c.t.Fatalf("list %s: %v", gvr.Resource, err)
		}
		for _, o := range list.Items {
			obj := object{UID: string(o.GetUID()), Generation: o.GetGeneration()}
			if data, ok := o.Object["data"].(map[string]any); ok {
				obj.Data = map[string]string{}
				for k, v := range data {
					obj.Data[k], _ = v.(string)
				}
			}
			out[gvr.Resource+"/"+o.GetName()] = obj
		}
	}
	return out
}

func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	vals, err := chartutil.ReadValuesFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// TestInstallUpgradeUninstall installs both charts into a real API server
// (no kubelet: nothing runs, everything the server validates is real),
// upgrades them with the same values (nothing changes: no Secret's data,
// no generation, no Job), with changed values (what changed changes, no
// Secret is rotated) and uninstalls them (nothing is left but what is
// marked kept, which a new install adopts with its data).
func TestInstallUpgradeUninstall(t *testing.T) {
	t.Parallel()
	c := newCluster(t)

	t.Run("flexplane", func(t *testing.T) {
		c := *c
		c.t = t
		const ns, rel = "fp", "flexplane"
		vals := readValues(t, "flexplane/ci/full-values.yaml")
		c.install(rel, ns, "flexplane", vals)
		installed := c.objects(ns, rel)
		for _, want := range []string{"deployments/flexplane", "services/flexplane", "services/flexplane-metrics",
			"poddisruptionbudgets/flexplane", "ingresses/flexplane", "secrets/flexplane-mesh-postgres",
			"serviceaccounts/flexplane", "roles/flexplane", "rolebindings/flexplane",
		} {
			if _, ok := installed[want]; !ok {
				t.Errorf("installed: no %s (have %v)", want, slices.Sorted(maps.Keys(installed)))
			}
		}
		if got := installed["secrets/flexplane-mesh-postgres"].Data["password"]; got == "" {
			t.Error("the mesh database password Secret is empty")
		}

		c.upgrade(rel, ns, "flexplane", vals)
		if after := c.objects(ns, rel); !maps.EqualFunc(installed, after, equalObject) {
			t.Errorf("an upgrade with the same values changed objects:\n%s", objectDiff(installed, after))
		}

		changed := readValues(t, "flexplane/ci/full-values.yaml")
		changed["replicaCount"] = 2
		changed["resources"].(map[string]any)["limits"].(map[string]any)["memory"] = "1Gi"
		c.upgrade(rel, ns, "flexplane", changed)
		after := c.objects(ns, rel)
		if g := after["deployments/flexplane"].Generation; g != installed["deployments/flexplane"].Generation+1 {
			t.Errorf("deployment generation %d after a changed upgrade, want %d", g, installed["deployments/flexplane"].Generation+1)
		}
		if !maps.Equal(after["secrets/flexplane-mesh-postgres"].Data, installed["secrets/flexplane-mesh-postgres"].Data) {
			t.Error("a changed upgrade changed the password Secret")
		}
		d, err := c.client.AppsV1().Deployments(ns).Get(t.Context(), "flexplane", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *d.Spec.Replicas != 2 || !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "-memory-limit=768MiB") {
			t.Errorf("after the upgrade: %d replicas, args %v; want 2 and -memory-limit=768MiB", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Args)
		}

		c.uninstall(rel, ns)
		if left := c.objects(ns, rel); len(left) != 0 {
			t.Errorf("uninstall left %v", slices.Sorted(maps.Keys(left)))
		}
	})

	t.Run("flexgateway", func(t *testing.T) {
		c := *c
		c.t = t
		const ns, rel = "gw", "flexgateway"
		vals := readValues(t, "flexgateway/ci/zones-values.yaml")
		c.install(rel, ns, "flexgateway", vals)
		installed := c.objects(ns, rel)
		for _, want := range []string{"deployments/flexgateway-fra", "deployments/flexgateway-hel", "services/flexgateway-fra-admin",
			"services/flexgateway-hel-admin", "poddisruptionbudgets/flexgateway-fra", "poddisruptionbudgets/flexgateway-hel",
			"secrets/flexgateway-admin-tokens",
		} {
			if _, ok := installed[want]; !ok {
				t.Errorf("installed: no %s (have %v)", want, slices.Sorted(maps.Keys(installed)))
			}
		}
		// A token per zone, each its own.
		toks := installed["secrets/flexgateway-admin-tokens"].Data
		if len(toks["fra"]) < 40 || len(toks["hel"]) < 40 || toks["fra"] == toks["hel"] {
			t.Fatalf("admin tokens %q", toks)
		}
		d, err := c.client.AppsV1().Deployments(ns).Get(t.Context(), "flexgateway-hel", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spec := d.Spec.Template.Spec
		for _, v := range spec.Volumes {
			if v.Name == "token" && (len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "hel") {
				t.Errorf("hel's pods mount the tokens %+v, want hel's only", v.Secret.Items)
			}
		}
		if spec.NodeSelector["flexplane.io/proxmox-cluster"] != "hel" || !*spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem || !*spec.SecurityContext.RunAsNonRoot {
			t.Errorf("hel's pods: node selector %v, read-only root %v, non-root %v", spec.NodeSelector,
				*spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem, *spec.SecurityContext.RunAsNonRoot)
		}

		c.upgrade(rel, ns, "flexgateway", vals)
		if after := c.objects(ns, rel); !maps.EqualFunc(installed, after, equalObject) {
			t.Errorf("an upgrade with the same values changed objects:\n%s", objectDiff(installed, after))
		}

		changed := readValues(t, "flexgateway/ci/zones-values.yaml")
		changed["zones"].([]any)[0].(map[string]any)["replicas"] = 4
		c.upgrade(rel, ns, "flexgateway", changed)
		after := c.objects(ns, rel)
		if g := after["deployments/flexgateway-fra"].Generation; g != installed["deployments/flexgateway-fra"].Generation+1 {
			t.Errorf("fra's generation %d after a changed upgrade, want %d", g, installed["deployments/flexgateway-fra"].Generation+1)
		}
		if !equalObject(after["deployments/flexgateway-hel"], installed["deployments/flexgateway-hel"]) {
			t.Error("a change of fra's replicas changed hel's Deployment")
		}
		if !maps.Equal(after["secrets/flexgateway-admin-tokens"].Data, installed["secrets/flexgateway-admin-tokens"].Data) {
			t.Error("a changed upgrade rotated the admin tokens")
		}
		c.uninstall(rel, ns)
		left := slices.Sorted(maps.Keys(c.objects(ns, rel)))
		if want := []string{"secrets/flexgateway-admin-tokens"}; !slices.Equal(left, want) {
			t.Errorf("uninstall left %v, want only the kept %v", left, want)
		}
		c.install(rel, ns, "flexgateway", vals)
		if again := c.objects(ns, rel); !maps.Equal(again["secrets/flexgateway-admin-tokens"].Data, installed["secrets/flexgateway-admin-tokens"].Data) {
			t.Error("reinstalled: the admin tokens changed")
		}
	})

	t.Run("identity", func(t *testing.T) {
		c := *c
		c.t = t
		const ns, rel = "id", "identity"
		vals := readValues(t, "identity/ci/default-values.yaml")
		c.install(rel, ns, "identity", vals)
		installed := c.objects(ns, rel)
		key := installed["secrets/identity-masterkey"].Data["masterkey"]
		if len(key) < 40 { // base64 of 32 characters
			t.Fatalf("master key %q", key)
		}
		// What the setup jobs write when they run (no kubelet runs them here).
		ctx := t.Context()
		if _, err := c.client.CoreV1().Secrets(ns).Patch(ctx, "identity-setup-pat", "application/merge-patch+json",
			[]byte(`{"data":{"pat":"dG9rZW4="}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.client.CoreV1().ConfigMaps(ns).Patch(ctx, "identity-flexplane", "application/merge-patch+json",
			[]byte(`{"data":{"clientId":"3114@flexplane"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		filled := c.objects(ns, rel)
		var jobs []string
		for k := range filled {
			if strings.HasPrefix(k, "jobs/") {
				jobs = append(jobs, k)
			}
		}
		if len(jobs) != 2 {
			t.Fatalf("jobs %v, want the init and the flexplane setup job", jobs)
		}

		c.upgrade(rel, ns, "identity", vals)
		if after := c.objects(ns, rel); !maps.EqualFunc(filled, after, equalObject) {
			t.Errorf("an upgrade with the same values changed objects (a rotated Secret, a re-run Job):\n%s", objectDiff(filled, after))
		}

		changed := readValues(t, "identity/ci/default-values.yaml")
		changed["flexplane"].(map[string]any)["vdcs"] = []any{"prod", "dev", "staging"}
		c.upgrade(rel, ns, "identity", changed)
		after := c.objects(ns, rel)
		for _, k := range []string{"secrets/identity-masterkey", "secrets/identity-setup-pat", "configmaps/identity-flexplane"} {
			if !equalObject(filled[k], after[k]) {
				t.Errorf("a changed upgrade changed %s", k)
			}
		}
		var initKept, setupReplaced bool
		for k, o := range after {
			if strings.HasPrefix(k, "jobs/identity-init-") {
				initKept = filled[k].UID == o.UID
			}
			if strings.HasPrefix(k, "jobs/identity-flexplane-") {
				_, old := filled[k]
				setupReplaced = !old
			}
		}
		if !initKept || !setupReplaced {
			t.Errorf("after a new VDC: init job kept %t (want true), setup job replaced %t (want true); jobs %v", initKept, setupReplaced, slices.Sorted(maps.Keys(after)))
		}
		c.uninstall(rel, ns)
		left := slices.Sorted(maps.Keys(c.objects(ns, rel)))
		if want := []string{"secrets/identity-masterkey", "secrets/identity-setup-pat"}; !slices.Equal(left, want) {
			t.Errorf("uninstall left %v, want only the kept %v", left, want)
		}

		// A new install adopts the kept Secrets with their data.
		c.install(rel, ns, "identity", vals)
		again := c.objects(ns, rel)
		for _, k := range []string{"secrets/identity-masterkey", "secrets/identity-setup-pat"} {
			if !maps.Equal(again[k].Data, filled[k].Data) {
				t.Errorf("reinstalled: %s data changed", k)
			}
		}
	})
}

func equalObject(a, b object) bool {
	return a.UID == b.UID && a.Generation == b.Generation && maps.Equal(a.Data, b.Data)
}

func objectDiff(before, after map[string]object) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(before)) {
		o, ok := after[k]
		switch {
		case !ok:
			b.WriteString("- " + k + "\n")
		case !equalObject(before[k], o):
			b.WriteString("~ " + k + "\n")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if _, ok := before[k]; !ok {
			b.WriteString("+ " + k + "\n")
		}
	}
	return b.String()
}
