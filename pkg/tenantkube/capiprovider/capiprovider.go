// Package capiprovider makes flexplane a Cluster API provider: the
// reconcilers of infrastructure.flexplane.io/v1alpha1 (package v1alpha1)
// that Cluster API's own controllers drive through the v1beta2 contract.
//
//   - FlexCluster (InfraCluster) is provisioned at once: its VDC, zone and
//     network are flexplane's own; it reports the zone as the one failure
//     domain.
//   - FlexMachine (InfraMachine) gets a worker VM through flexplane's
//     createVM path (pkg/compute: the VDC's tags, pool, quota and IPAM)
//     with the Machine's bootstrap data as its cloud-init user-data, and
//     reports providerID flexplane://<VM id> and the VM's addresses. A
//     finalizer holds it until the VM is deleted. No Proxmox credential is
//     ever in the management cluster: the VMs are made by the orchestrator
//     through its agents.
//   - FlexControlPlane is the control-plane provider object of a hosted
//     control plane (pods in the management cluster, see ControlPlane):
//     it reports it initialized once its API server serves, with its
//     endpoint, as Cluster API's control-plane contract asks.
//
// Run starts them in a controller-runtime manager per cluster's namespace
// (the orchestrator runs them on the replica holding the leader Lease);
// with Config.Core it also runs Cluster API's core controllers (Cluster,
// MachineDeployment, MachineSet, Machine) in the same process, from the
// module, so a management cluster needs Cluster API's CRDs but no Cluster
// API deployment. Each manager's caches watch only its namespace (labelled
// controlplane.LabelManaged=controlplane.ManagedBy), never the whole
// management cluster: the orchestrator needs no right to read Secrets or
// workloads of any other namespace.
package capiprovider

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/reconcilers/kubeadmconfig"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	"sigs.k8s.io/cluster-api/core/reconcilers/machine"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment"
	"sigs.k8s.io/cluster-api/core/reconcilers/machineset"
	"sigs.k8s.io/cluster-api/core/setup"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flexplane/flexplane/pkg/catalog/kubestore"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider/v1alpha1"
	"github.com/flexplane/flexplane/pkg/tenantkube/controlplane"
)

//go:embed crds/*.yaml
var crdFiles embed.FS

// CRDs returns the providers' CustomResourceDefinitions.
func CRDs() ([]*apiextv1.CustomResourceDefinition, error) {
	crds, err := kubestore.ReadCRDs(crdFiles, "crds")
	if err != nil {
		return nil, fmt.Errorf("capiprovider: %w", err)
	}
	return crds, nil
}

// InstallCRDs creates (or updates) the providers' CRDs and waits until the
// server serves them (a chart installs them in a cluster).
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	if err := kubestore.ApplyCRDs(ctx, cfg, crds); err != nil {
		return fmt.Errorf("capiprovider: %w", err)
	}
	return nil
}

// Scheme returns a scheme with Kubernetes' built-in types (Cluster API's
// cluster cache reads the tenant cluster's Nodes and DaemonSets), Cluster API's
// v1beta2 types (core and the kubeadm bootstrap provider's) and the
// providers' types.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("capiprovider: scheme: %w", err)
		}
	}
	return s, nil
}

// ControlPlane runs hosted control planes: *controlplane.Manager (with
// charts/flexkube), whose types it speaks. Ensure is idempotent; it also
// writes Cluster API's Secrets <cluster>-ca and <cluster>-kubeconfig in the
// namespace.
type ControlPlane interface {
	Ensure(ctx context.Context, spec controlplane.Spec) error
	Delete(ctx context.Context, namespace string) error
	Status(ctx context.Context, namespace string) (controlplane.Status, error)
	Kubeconfig(ctx context.Context, namespace string, cred controlplane.Credential) ([]byte, error)
	ApproveKubeletServing(ctx context.Context, namespace string, networks []string) error
}

var _ ControlPlane = (*controlplane.Manager)(nil)

// Config configures Run.
type Config struct {
	// REST reaches the management cluster.
	REST *rest.Config
	// Compute creates and deletes the worker VMs.
	Compute *compute.Service
	// ControlPlane runs the hosted control planes.
	ControlPlane ControlPlane
	// Core also runs Cluster API's Cluster, MachineDeployment, MachineSet
	// and Machine controllers in this process, and the kubeadm bootstrap
	// provider's KubeadmConfig controller (CABPK: a worker's kubeadm join
	// data, with a bootstrap token it creates in the tenant cluster
	// through the <cluster>-kubeconfig Secret).
	Core bool
	// BootstrapTokenTTL is how long a worker's bootstrap token is valid
	// (CABPK renews it while the machine has not joined). Default 15m.
	BootstrapTokenTTL time.Duration
	// WorkerImage returns the catalog image of workers of a Kubernetes
	// version: a pool moved to a new version gets a template of that image
	// (tenantkube.Service.WorkerImage). Nil keeps each pool's image.
	WorkerImage func(version string) string
	// WorkerUser is the cloud-init user of worker VMs. Default "kube".
	WorkerUser string
	// Poll is how often an unfinished VM or control plane is looked at
	// again. Default 2s.
	Poll time.Duration
	// Logger receives the controllers' logs. Default slog.Default().
	Logger *slog.Logger
	// Started, when set, is called once, when the caches of the
	// controllers of every cluster's namespace there is when Run starts
	// are synced (Secrets and Cluster API's objects included); with no
	// such namespace, once the namespaces have been read.
	Started func()
}

// Run runs the controllers until ctx ends.
//
// They run for each of the clusters' namespaces (labelled
// controlplane.LabelManaged=controlplane.ManagedBy: tenantkube's and the
// control planes' Manager's) on its own, in a manager whose caches list
// and watch only that namespace, so the orchestrator's service account
// needs its rights to read Secrets, ConfigMaps and Cluster API's objects
// only there. (A controller-runtime cache over several namespaces cannot
// take in a new one once started, and its informers are not the
// SharedIndexInformers Cluster API's controllers read the stores of.) A
// namespace's controllers start when it appears and stop when it is being
// deleted: tenantkube deletes a cluster's namespace once Cluster API is
// done with the cluster, and its RoleBinding may be gone already. Those
// that stop with an error (a namespace the orchestrator cannot read)
// start again a few seconds later, apart from the others.
func Run(ctx context.Context, cfg Config) error {
	if cfg.REST == nil || cfg.Compute == nil || cfg.ControlPlane == nil {
		return errors.New("capiprovider: REST, Compute and ControlPlane are required")
	}
	if cfg.WorkerUser == "" {
		cfg.WorkerUser = "kube"
	}
	if cfg.Poll == 0 {
		cfg.Poll = 2 * time.Second
	}
	if cfg.BootstrapTokenTTL == 0 {
		cfg.BootstrapTokenTTL = kubeadmconfig.DefaultTokenTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Cluster API's code logs through controller-runtime's root logger where
	// a context carries none: that logger is the process's, set here.
	ctrl.SetLogger(logr.FromSlogHandler(cfg.Logger.Handler()))
	return runScoped(ctx, cfg)
}

// runManager runs the controllers of namespace ns, whose caches' informers
// newInformer makes, until ctx ends; synced is called once their caches
// are synced.
func runManager(ctx context.Context, cfg Config, scheme *runtime.Scheme, ns string, newInformer newInformerFunc, synced func()) error {
	log := logr.FromSlogHandler(cfg.Logger.With("namespace", ns).Handler())
	ctx = logr.NewContext(ctx, log)
	mgr, err := ctrl.NewManager(cfg.REST, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// One process may run several managers (tests, replicas in one
		// binary): controller names need not be unique.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		// Namespaced objects listed and watched in ns alone.
		Cache: cache.Options{NewInformer: newInformer},
	})
	if err != nil {
		return fmt.Errorf("capiprovider: manager: %w", err)
	}
	opts := controller.Options{MaxConcurrentReconciles: 4}
	// The tenant clusters' API servers, reached with their -kubeconfig
	// Secrets: Cluster API's controllers watch their Nodes, the machine
	// controller names them.
	secrets, err := setup.CreateSecretCachingClient(mgr)
	if err != nil {
		return fmt.Errorf("capiprovider: cluster api: %w", err)
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secrets,
		Cache:        setup.ClusterCacheCacheOptions(),
		Client:       setup.ClusterCacheClientOptions("flexplane", 20, 30),
	}, opts)
	if err != nil {
		return fmt.Errorf("capiprovider: cluster cache: %w", err)
	}
	if err := (&machineReconciler{Client: mgr.GetClient(), api: mgr.GetAPIReader(), tenants: cc, cfg: cfg}).setup(mgr, opts); err != nil {
		return err
	}
	if err := (&clusterReconciler{Client: mgr.GetClient()}).setup(mgr, opts); err != nil {
		return err
	}
	if err := (&controlPlaneReconciler{Client: mgr.GetClient(), cfg: cfg}).setup(mgr, opts); err != nil {
		return err
	}
	if cfg.Core {
		if err := setupCore(ctx, mgr, opts, cc, secrets, cfg.BootstrapTokenTTL); err != nil {
			return err
		}
	}
	go func() {
		// Only once the manager has started its caches and runnables:
		// controller-runtime's start waits for the caches of the informers
		// that exist then, and once its context ends before they sync (a
		// namespace the orchestrator may not read, stopped) that wait
		// spins without end.
		select {
		case <-mgr.Elected():
		case <-ctx.Done():
			return
		}
		c := mgr.GetCache()
		// The informers of what the controllers read, made now where no
		// controller has yet: without the right to read one in ns it never
		// syncs, and synced is not called.
		for _, o := range []client.Object{&corev1.Secret{}, &clusterv1.Cluster{}, &clusterv1.MachineDeployment{}, &clusterv1.MachineSet{},
			&clusterv1.Machine{}, &bootstrapv1.KubeadmConfig{}, &v1alpha1.FlexCluster{}, &v1alpha1.FlexControlPlane{}, &v1alpha1.FlexMachine{}} {
			if _, err := c.GetInformer(ctx, o, cache.BlockUntilSynced(true)); err != nil {
				return
			}
		}
		synced()
	}()
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("capiprovider: %w", err)
	}
	return nil
}

// setupCore adds Cluster API's core controllers and CABPK's to mgr.
func setupCore(ctx context.Context, mgr ctrl.Manager, opts controller.Options, cc clustercache.ClusterCache, secrets client.Client, tokenTTL time.Duration) error {
	steps := []struct {
		name  string
		setup func() error
	}{
		{"cluster", func() error {
			return (&cluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc,
				RemoteConnectionGracePeriod: 50 * time.Second}).SetupWithManager(ctx, mgr, opts)
		}},
		{"machinedeployment", func() error {
			return (&machinedeployment.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(ctx, mgr, opts)
		}},
		{"machineset", func() error {
			return (&machineset.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc}).SetupWithManager(ctx, mgr, opts)
		}},
		{"machine", func() error {
			return (&machine.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc,
				RemoteConditionsGracePeriod: 5 * time.Minute}).SetupWithManager(ctx, mgr, opts)
		}},
		{"kubeadmconfig", func() error {
			return (&kubeadmconfig.Reconciler{Client: mgr.GetClient(), SecretCachingClient: secrets, APIReader: mgr.GetAPIReader(),
				ClusterCache: cc, TokenTTL: tokenTTL}).SetupWithManager(ctx, mgr, opts)
		}},
	}
	for _, s := range steps {
		if err := s.setup(); err != nil {
			return fmt.Errorf("capiprovider: cluster api %s controller: %w", s.name, err)
		}
	}
	return nil
}
