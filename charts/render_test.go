package charts

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"

	"github.com/flexplane/flexplane/pkg/dev/ociimage"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestRender")

// kubeVersion is the version of the API server of the tests (Helm
// defaults to v1.20 without a server).
const kubeVersion = "v1.37.2"

// chartNames are the charts of this directory.
var chartNames = []string{"flexplane", "identity", "flexkube", "flexgateway"}

// valueSets are a chart's ci/*.yaml files, the matrix it is linted,
// rendered and installed with.
func valueSets(t *testing.T, name string) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(name, "ci", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no ci/*.yaml values (%v)", name, err)
	}
	sets := map[string]map[string]any{}
	for _, f := range files {
		vals, err := chartutil.ReadValuesFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sets[strings.TrimSuffix(filepath.Base(f), ".yaml")] = vals
	}
	return sets
}

func loadChart(t *testing.T, name string) *chart.Chart {
	t.Helper()
	c, err := loader.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLint lints each chart with each of its value sets, strictly
// (warnings fail).
func TestLint(t *testing.T) {
	t.Parallel()
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range chartNames {
		for set, vals := range valueSets(t, name) {
			l := action.NewLint()
			l.Strict = true
			l.Namespace = "flexplane"
			l.KubeVersion = kv
			res := l.Run([]string{name}, vals)
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("%s with %s: %s", name, set, m)
				}
			}
			for _, err := range res.Errors {
				t.Errorf("%s with %s: %v", name, set, err)
			}
		}
	}
}

// render renders chart name with vals as `helm template` does.
func render(t *testing.T, name string, vals map[string]any) (string, error) {
	t.Helper()
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace, inst.IncludeCRDs = true, true, true, true
	inst.ReleaseName, inst.Namespace, inst.KubeVersion = "fp", "flexplane", kv
	rel, err := inst.Run(loadChart(t, name), vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// TestRender renders each chart with each value set and compares the
// manifests with testdata/<chart>-<set>.yaml (-update rewrites them).
// Values a chart generates at random are checked and then masked.
func TestRender(t *testing.T) {
	t.Parallel()
	for _, name := range chartNames {
		for set, vals := range valueSets(t, name) {
			got, err := render(t, name, vals)
			if err != nil {
				t.Errorf("%s with %s: %v", name, set, err)
				continue
			}
			got = elideCRDs(t, maskRandom(t, got))
			golden := filepath.Join("testdata", fmt.Sprintf("%s-%s.yaml", name, set))
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Errorf("%s with %s: %v (run go test ./charts -run TestRender -update)", name, set, err)
				continue
			}
			if got != string(want) {
				t.Errorf("%s with %s differs from %s (go test ./charts -run TestRender -update rewrites it):\n%s",
					name, set, golden, diff(string(want), got))
			}
		}
	}
}

// head is what the golden comparison reads of a manifest's object.
type head struct {
	Kind     string
	Metadata struct {
		Name        string
		Annotations map[string]string
	}
	Data map[string]string
}

// mapDocs replaces each document of manifest by what f makes of it.
func mapDocs(t *testing.T, manifest string, f func(doc string, obj head) string) string {
	t.Helper()
	docs := strings.Split(manifest, "\n---\n")
	for i, doc := range docs {
		var obj head
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("rendered manifest does not parse: %v\n%s", err, doc)
		}
		docs[i] = f(doc, obj)
	}
	return strings.Join(docs, "\n---\n")
}

// maskRandom replaces the data of Secrets a chart generates at random
// (annotated flexplane.io/generated) after checking its shape.
func maskRandom(t *testing.T, manifest string) string {
	t.Helper()
	return mapDocs(t, manifest, func(doc string, obj head) string {
		if obj.Kind != "Secret" || obj.Metadata.Annotations["flexplane.io/generated"] == "" {
			return doc
		}
		keys := make([]string, 0, len(obj.Data))
		for k := range obj.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := obj.Data[k]
			if len(v) < 32 {
				t.Errorf("generated Secret data %s is only %d characters", k, len(v))
			}
			doc = strings.ReplaceAll(doc, v, "<generated>")
		}
		return doc
	})
}

// elideCRDs replaces each CustomResourceDefinition of a manifest by a
// comment naming it: they are generated (make generate-crds, checked by
// check-generated) and TestKubernetesRights installs them.
func elideCRDs(t *testing.T, manifest string) string {
	t.Helper()
	return mapDocs(t, manifest, func(doc string, obj head) string {
		if obj.Kind == "CustomResourceDefinition" {
			return "# CustomResourceDefinition " + obj.Metadata.Name + " (generated)"
		}
		return doc
	})
}

// diff is a line diff good enough to find a change.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n- %s\n+ %s\n", i+1, wl, gl)
			if b.Len() > 4000 {
				break
			}
		}
	}
	return b.String()
}

// requiredValues are the flexplane chart's values without a default, for
// its two replicas.
func requiredValues() map[string]any {
	return map[string]any{
		"publicURL":    "https://fp.example.com",
		"oidc":         map[string]any{"issuer": "https://id.example.com", "audience": "portal"},
		"meshPostgres": map[string]any{"url": "postgres://hs@db/headscale", "existingSecret": "hs-db"},
	}
}

// TestRenderRefuses checks that values the orchestrator could not run with
// are refused with a message naming the value, before anything is
// installed.
func TestRenderRefuses(t *testing.T) {
	t.Parallel()
	base := requiredValues
	if _, err := render(t, "flexplane", base()); err != nil {
		t.Fatalf("the base values are refused: %v", err)
	}
	for name, c := range map[string]struct {
		set  func(v map[string]any)
		want string
	}{
		"replicas without postgres": {func(v map[string]any) { v["meshPostgres"] = map[string]any{} }, "meshPostgres.url is required"},
		"no password":               {func(v map[string]any) { v["meshPostgres"] = map[string]any{"url": "postgres://hs@db/headscale"} }, "existingSecret or password"},
		"password in the URL":       {func(v map[string]any) { v["meshPostgres"].(map[string]any)["url"] = "postgres://hs:pw@db/headscale" }, "/meshPostgres/url"},
		"no public URL":             {func(v map[string]any) { delete(v, "publicURL") }, "publicURL"},
		"public URL with a path":    {func(v map[string]any) { v["publicURL"] = "https://fp.example.com/x" }, "publicURL"},
		"no audience":               {func(v map[string]any) { v["oidc"] = map[string]any{"issuer": "https://id.example.com"} }, "audience"},
		"memory in bytes": {func(v map[string]any) {
			v["resources"] = map[string]any{"limits": map[string]any{"memory": "536870912"}}
		}, "memory"},
		"unknown value": {func(v map[string]any) { v["replicas"] = 3 }, "replicas"},
		"zero replicas": {func(v map[string]any) { v["replicaCount"] = 0 }, "replicaCount"},
		"load balancers without the token's Secret": {func(v map[string]any) {
			v["loadBalancers"] = map[string]any{"enabled": true, "gateway": map[string]any{"tlsSecret": "t"}}
		}, "loadBalancers.gateway.tokenSecret"},
		"load balancers without the TLS Secret": {func(v map[string]any) {
			v["loadBalancers"] = map[string]any{"enabled": true, "gateway": map[string]any{"tokenSecret": "t"}}
		}, "loadBalancers.gateway.tlsSecret"},
		"a worker image of no version": {func(v map[string]any) {
			v["kubernetes"] = map[string]any{"enabled": true, "workerImages": map[string]any{"latest": "debian-13"}}
		}, "workerImages"},
		"an API server Service of no type": {func(v map[string]any) {
			v["kubernetes"] = map[string]any{"enabled": true, "apiServerServiceType": "Ingress"}
		}, "apiServerServiceType"},
		"a zone without a frontend": {func(v map[string]any) {
			v["loadBalancers"] = map[string]any{"enabled": true, "gateway": map[string]any{"tokenSecret": "t", "tlsSecret": "t"}, "zones": map[string]any{"fra1": map[string]any{}}}
		}, "frontend"},
	} {
		v := base()
		c.set(v)
		_, err := render(t, "flexplane", v)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, c.want)
		}
	}
}

// TestFlexgatewayRenderRefuses checks that flexgateway values that could
// not run are refused with a message naming the value.
func TestFlexgatewayRenderRefuses(t *testing.T) {
	t.Parallel()
	zone := func(name string, replicas int) map[string]any {
		return map[string]any{"name": name, "replicas": replicas}
	}
	for name, c := range map[string]struct {
		vals map[string]any
		want string
	}{
		"no zone":         {map[string]any{"zones": []any{}}, "zones"},
		"zone twice":      {map[string]any{"zones": []any{zone("a", 1), zone("a", 2)}}, `zone "a" appears twice`},
		"zero replicas":   {map[string]any{"zones": []any{zone("a", 0)}}, "replicas"},
		"zone not a name": {map[string]any{"zones": []any{zone("A_b", 1)}}, "name"},
		"admin port low":  {map[string]any{"adminPort": 80}, "adminPort"},
		"no admin TLS":    {map[string]any{"adminTLS": map[string]any{"existingSecret": ""}}, "adminTLS.existingSecret is required"},
		"unknown value":   {map[string]any{"replicaCount": 3}, "replicaCount"},
	} {
		_, err := render(t, "flexgateway", c.vals)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, c.want)
		}
	}
}

// TestDefaultImageIsMakeImage checks that the flexplane chart's default
// image is the one `make image` builds.
func TestDefaultImageIsMakeImage(t *testing.T) {
	t.Parallel()
	vals := valueSets(t, "flexplane")["replicated-values"]
	manifest, err := render(t, "flexplane", vals)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("image: %q", ociimage.OrchestratorRef); !strings.Contains(manifest, want) {
		t.Errorf("the Deployment does not run %s", ociimage.OrchestratorRef)
	}
	manifest, err = render(t, "flexgateway", valueSets(t, "flexgateway")["default-values"])
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("image: %q", ociimage.FlexgatewayRef); !strings.Contains(manifest, want) {
		t.Errorf("the flexgateway Deployment does not run %s", ociimage.FlexgatewayRef)
	}
}

// TestRenderRefusesFlexKube checks that the flexkube chart refuses values
// a control plane could not run with, naming the value.
func TestRenderRefusesFlexKube(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		vals map[string]any
		want string
	}{
		"no cluster":          {map[string]any{"endpoint": "203.0.113.10:6443"}, "cluster"},
		"endpoint no port":    {map[string]any{"cluster": "c", "endpoint": "203.0.113.10"}, "endpoint"},
		"bad version":         {map[string]any{"cluster": "c", "endpoint": "k8s.example.com:443", "version": "1.37"}, "version"},
		"unknown value":       {map[string]any{"cluster": "c", "endpoint": "k8s.example.com:443", "replicas": 3}, "replicas"},
		"unknown reconciler":  {map[string]any{"cluster": "c", "endpoint": "k8s.example.com:443", "apiServer": map[string]any{"endpointReconciler": "master-count"}}, "endpointReconciler"},
		"upper-case cluster":  {map[string]any{"cluster": "Prod", "endpoint": "k8s.example.com:443"}, "cluster"},
		"zero API replicas":   {map[string]any{"cluster": "c", "endpoint": "k8s.example.com:443", "apiServer": map[string]any{"replicas": 0}}, "replicas"},
		"port out of range":   {map[string]any{"cluster": "c", "endpoint": "k8s.example.com:443", "etcd": map[string]any{"clientPort": 70000}}, "clientPort"},
		"unknown address key": {map[string]any{"cluster": "c", "endpoint": "k8s.example.com:443", "addresses": map[string]any{"dns": "x"}}, "dns"},
		"egress to a name":    {map[string]any{"cluster": "c", "endpoint": "k8s.example.com:443", "egressProxy": map[string]any{"allowedCIDRs": []any{"mgmt.example.com"}}}, "allowedCIDRs"},
		"egress unbounded":    {map[string]any{"cluster": "c", "endpoint": "k8s.example.com:443", "egressProxy": map[string]any{"maxConnections": 0}}, "maxConnections"},
	} {
		_, err := render(t, "flexkube", c.vals)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, c.want)
		}
	}
}
