package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/catalog/kubestore"
)

// The catalog backends.
const (
	// CatalogDir keeps the catalog as manifests in a directory: one host
	// (or replicas sharing a volume); the default.
	CatalogDir = "dir"
	// CatalogKubernetes keeps the catalog as custom resources
	// (flexplane.io/v1alpha1) in a namespace: many replicas in a cluster.
	CatalogKubernetes = "kubernetes"
)

// KubeConfig says how the orchestrator reaches Kubernetes (the catalog's
// kubernetes backend).
type KubeConfig struct {
	// Kubeconfig is a kubeconfig file; "" uses the in-cluster
	// configuration of the pod's service account.
	Kubeconfig string
	// Namespace holds flexplane's objects; "" is the pod's own namespace
	// in a cluster, else "default".
	Namespace string
	// SecretNamespace holds the catalog's Secrets (the load balancers'
	// certificates; kubestore.Config.SecretNamespace); "" is Namespace.
	SecretNamespace string
}

// REST returns the client configuration and namespace kc describes.
func (kc KubeConfig) REST() (*rest.Config, string, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kc.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kc.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes: %w", err)
	}
	ns := kc.Namespace
	if ns == "" {
		ns = "default"
		if data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && kc.Kubeconfig == "" {
			ns = strings.TrimSpace(string(data))
		}
	}
	return cfg, ns, nil
}

// CatalogConfig chooses and configures the catalog's backend.
type CatalogConfig struct {
	// Backend is CatalogDir ("" too) or CatalogKubernetes.
	Backend string
	// Dir is the directory of the dir backend.
	Dir string
	// Kube reaches the kubernetes backend.
	Kube KubeConfig
	// Logger receives the kubernetes backend's logs.
	Logger *slog.Logger
}

// OpenCatalog opens the catalog backend cfg names. close releases it (the
// kubernetes backend's watches).
func OpenCatalog(ctx context.Context, cfg CatalogConfig) (store catalog.Store, close func(), err error) {
	switch cfg.Backend {
	case "", CatalogDir:
		if cfg.Dir == "" {
			return nil, nil, errors.New("catalog: the dir backend needs a directory")
		}
		s, err := catalog.OpenDir(cfg.Dir)
		if err != nil {
			return nil, nil, err
		}
		return s, func() {}, nil
	case CatalogKubernetes:
		rc, ns, err := cfg.Kube.REST()
		if err != nil {
			return nil, nil, fmt.Errorf("catalog: %w", err)
		}
		s, err := kubestore.Open(ctx, kubestore.Config{REST: rc, Namespace: ns, SecretNamespace: cfg.Kube.SecretNamespace, Logger: cfg.Logger})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { _ = s.Close() }, nil
	}
	return nil, nil, fmt.Errorf("catalog: unknown backend %q (want %s or %s)", cfg.Backend, CatalogDir, CatalogKubernetes)
}
