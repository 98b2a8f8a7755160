// Command chartfiles writes the files of the flexplane chart that come
// from Cluster API (`make generate-crds`): the CRDs of Cluster API core
// and of its kubeadm bootstrap provider from the pinned module, with
// their contract label, flexplane's own provider CRDs, and the module's
// RBAC roles of the controllers the orchestrator runs in-process. The
// chart installs them when managed Kubernetes is enabled.
//
// The CRDs' descriptions are left out: with them, Cluster API's CRDs
// alone make Helm's release record (the chart and its manifest, gzipped,
// in one Secret) brush Kubernetes' 1 MiB bound on a Secret.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/flexplane/flexplane/pkg/dev/capitest"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider"
)

func main() {
	out := flag.String("out", "charts/flexplane/files/clusterapi", "directory to write (its crds/ and rbac/ are replaced)")
	flag.Parse()
	if err := run(context.Background(), *out); err != nil {
		fmt.Fprintln(os.Stderr, "chartfiles:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out string) error {
	crds, err := capitest.ClusterAPICRDs(ctx)
	if err != nil {
		return err
	}
	own, err := capiprovider.CRDs()
	if err != nil {
		return err
	}
	crdDir, rbacDir := filepath.Join(out, "crds"), filepath.Join(out, "rbac")
	for _, d := range []string{crdDir, rbacDir} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, crd := range append(crds, own...) {
		for i := range crd.Spec.Versions {
			if v := crd.Spec.Versions[i].Schema; v != nil && v.OpenAPIV3Schema != nil {
				dropDescriptions(v.OpenAPIV3Schema)
			}
		}
		data, err := manifest(crd)
		if err != nil {
			return fmt.Errorf("%s: %w", crd.Name, err)
		}
		name := crd.Spec.Group + "_" + crd.Spec.Names.Plural + ".yaml"
		if err := os.WriteFile(filepath.Join(crdDir, name), data, 0o644); err != nil {
			return err
		}
	}
	dir, err := capitest.ModuleDir(ctx)
	if err != nil {
		return err
	}
	for name, src := range map[string]string{"core.yaml": "core/config/rbac/role.yaml", "kubeadm.yaml": "bootstrap/kubeadm/config/rbac/role.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, src))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(rbacDir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// manifest is crd as YAML without its status (the API server's).
func manifest(crd *apiextv1.CustomResourceDefinition) ([]byte, error) {
	data, err := yaml.Marshal(crd)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	return yaml.Marshal(m)
}

// dropDescriptions removes the descriptions of s and of every schema in it.
func dropDescriptions(s *apiextv1.JSONSchemaProps) {
	if s == nil {
		return
	}
	s.Description = ""
	each := func(m map[string]apiextv1.JSONSchemaProps) {
		for k, v := range m {
			dropDescriptions(&v)
			m[k] = v
		}
	}
	list := func(l []apiextv1.JSONSchemaProps) {
		for i := range l {
			dropDescriptions(&l[i])
		}
	}
	each(s.Properties)
	each(s.PatternProperties)
	each(s.Definitions)
	list(s.AllOf)
	list(s.AnyOf)
	list(s.OneOf)
	dropDescriptions(s.Not)
	if s.Items != nil {
		dropDescriptions(s.Items.Schema)
		list(s.Items.JSONSchemas)
	}
	if s.AdditionalProperties != nil {
		dropDescriptions(s.AdditionalProperties.Schema)
	}
	if s.AdditionalItems != nil {
		dropDescriptions(s.AdditionalItems.Schema)
	}
	for k, d := range s.Dependencies {
		dropDescriptions(d.Schema)
		s.Dependencies[k] = d
	}
}
