// Package capitest is a harness for tests of managed Kubernetes: it
// installs Cluster API's CRDs (from the pinned module) and flexplane's
// providers' on a kube-apiserver, and stands in for the hosted control
// plane (pkg/tenantkube/controlplane runs the real one, whose pods need
// pkg/dev/podrun) with one that is ready at once.
package capitest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flexplane/flexplane/pkg/catalog/kubestore"
	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider"
	"github.com/flexplane/flexplane/pkg/tenantkube/controlplane"
)

// ContractLabel is the label Cluster API's kustomization adds to its
// CRDs, naming the contract version they serve (Cluster API looks its
// providers' and its own types' versions up by it).
const ContractLabel = "cluster.x-k8s.io/v1beta2"

// ClusterAPICRDs reads Cluster API's CRDs from the pinned module (the
// files it ships in core/config/crd/bases, and the kubeadm bootstrap
// provider's in bootstrap/kubeadm/config/crd/bases), each with
// ContractLabel, as Cluster API's kustomization adds it. ModuleDir
// finds the module.
func ClusterAPICRDs(ctx context.Context) ([]*apiextv1.CustomResourceDefinition, error) {
	dir, err := ModuleDir(ctx)
	if err != nil {
		return nil, err
	}
	var out []*apiextv1.CustomResourceDefinition
	for _, sub := range []string{"core", "bootstrap/kubeadm"} {
		crds, err := kubestore.ReadCRDs(os.DirFS(filepath.Join(dir, sub, "config", "crd", "bases")), ".")
		if err != nil {
			return nil, fmt.Errorf("capitest: %w", err)
		}
		for _, crd := range crds {
			if crd.Labels == nil {
				crd.Labels = map[string]string{}
			}
			crd.Labels[ContractLabel] = "v1beta2"
		}
		out = append(out, crds...)
	}
	return out, nil
}

// ModuleDir is the directory of the pinned sigs.k8s.io/cluster-api module
// (go list -m: in the module cache that go test fills).
func ModuleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-api").Output()
	if err != nil {
		return "", fmt.Errorf("capitest: finding the cluster-api module: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// InstallCRDs installs Cluster API's CRDs (ClusterAPICRDs) and the
// providers'.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	crds, err := ClusterAPICRDs(ctx)
	if err != nil {
		return err
	}
	if err := kubestore.ApplyCRDs(ctx, cfg, crds); err != nil {
		return fmt.Errorf("capitest: %w", err)
	}
	return capiprovider.InstallCRDs(ctx, cfg)
}

// ControlPlane stands for the hosted control plane: ready as soon as it is
// ensured, it records what it was asked. Its kubeconfigs are not usable:
// they name the cluster, user, groups and lifetime asked for.
type ControlPlane struct {
	// Client and Kube: with both, Ensure writes Cluster API's
	// <cluster>-ca and <cluster>-kubeconfig Secrets of Kube, whose API
	// server stands for the cluster's (as the real control plane writes
	// its own), so that Cluster API's kubeadm bootstrap provider makes the
	// workers' bootstrap tokens there. Kube must serve with bootstrap
	// token authentication (kubetest does).
	Client client.Client
	Kube   *kubetest.Server

	mu      sync.Mutex
	ensured map[string]controlplane.Spec // protected by mu
	deleted map[string]bool              // protected by mu
}

var _ capiprovider.ControlPlane = (*ControlPlane)(nil)

// Ensure records spec (and writes Cluster API's Secrets of it).
func (c *ControlPlane) Ensure(ctx context.Context, spec controlplane.Spec) error {
	if c.Client != nil && c.Kube != nil {
		kubeconfig, err := c.Kube.Kubeconfig()
		if err != nil {
			return fmt.Errorf("capitest: %w", err)
		}
		for name, data := range map[string]map[string][]byte{
			spec.Cluster + "-ca":         {"tls.crt": c.Kube.CAData(), "tls.key": c.Kube.CAKey()},
			spec.Cluster + "-kubeconfig": {"value": kubeconfig},
		} {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: spec.Namespace, Name: name,
				Labels: map[string]string{clusterv1.ClusterNameLabel: spec.Cluster}}, Type: "cluster.x-k8s.io/secret", Data: data}
			if err := c.Client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("capitest: secret %s: %w", name, err)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ensured == nil {
		c.ensured, c.deleted = map[string]controlplane.Spec{}, map[string]bool{}
	}
	c.ensured[spec.Namespace] = spec
	return nil
}

// ApproveKubeletServing does nothing: the stand-in has no workers.
func (c *ControlPlane) ApproveKubeletServing(context.Context, string, []string) error { return nil }

// Delete forgets the control plane of ns.
func (c *ControlPlane) Delete(_ context.Context, ns string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted == nil {
		c.ensured, c.deleted = map[string]controlplane.Spec{}, map[string]bool{}
	}
	delete(c.ensured, ns)
	c.deleted[ns] = true
	return nil
}

// Deleted says whether the control plane of ns was deleted.
func (c *ControlPlane) Deleted(ns string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deleted[ns]
}

// Status is ready for an ensured control plane, else not.
func (c *ControlPlane) Status(_ context.Context, ns string) (controlplane.Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	spec, ok := c.ensured[ns]
	if !ok {
		return controlplane.Status{}, nil
	}
	return controlplane.Status{Ready: true, Version: spec.Version,
		Components: []controlplane.Component{{Name: "etcd", Ready: true}, {Name: "kube-apiserver", Ready: true}}}, nil
}

// Kubeconfig returns a text naming ns and cred.
func (c *ControlPlane) Kubeconfig(_ context.Context, ns string, cred controlplane.Credential) ([]byte, error) {
	return fmt.Appendf(nil, "cluster: %s\nuser: %s\ngroups: %s\nttl: %s\n", ns, cred.User, strings.Join(cred.Groups, ","), cred.TTL), nil
}

// Management is a management cluster for a test: a real kube-apiserver
// with Cluster API's and the providers' CRDs, a client of it with
// capiprovider's scheme, and the stand-in ControlPlane writing its
// Secrets there.
type Management struct {
	Kube *kubetest.Server
	// Kubeconfig is the path of the server's admin kubeconfig.
	Kubeconfig   string
	Client       client.Client
	ControlPlane *ControlPlane
}

// Start starts a Management that lives as long as t.
func Start(t testing.TB) *Management {
	t.Helper()
	kube := kubetest.ForTest(t)
	if err := InstallCRDs(t.Context(), kube.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	path, err := kube.WriteKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := capiprovider.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := client.New(kube.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &Management{Kube: kube, Kubeconfig: path, Client: kc, ControlPlane: &ControlPlane{Client: kc, Kube: kube}}
}
