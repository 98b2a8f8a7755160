package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	k8s "k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/tenantkube"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider"
	"github.com/flexplane/flexplane/pkg/tenantkube/controlplane"
)

// ManagedKubernetesConfig configures managed Kubernetes (package
// tenantkube): the cluster reached through Config.Kube is the management
// cluster, which must serve Cluster API's CRDs (v1beta2, from
// sigs.k8s.io/cluster-api v1.14) and the providers' (package
// capiprovider, pkg/tenantkube/capiprovider/crds). Every replica serves
// the GraphQL fields; the replica leading the mesh control server (the
// only one when not replicated) also runs Cluster API's core controllers
// and flexplane's providers in-process. The zero value offers none: the
// Kubernetes fields answer UNAVAILABLE.
type ManagedKubernetesConfig struct {
	// Enabled turns managed Kubernetes on.
	Enabled bool
	// Versions are the Kubernetes versions clusters may run. Default
	// tenantkube.DefaultVersions.
	Versions []string
	// WorkerImage is the catalog image worker VMs are made from. Default
	// "debian-13".
	WorkerImage string
	// WorkerImages are the catalog images of worker VMs by Kubernetes
	// version; a version without one uses WorkerImage
	// (tenantkube.Config.WorkerImages).
	WorkerImages map[string]string
	// WorkerDiskGiB is a worker's disk. Default 20.
	WorkerDiskGiB int
	// KubeconfigTTL is how long an issued kubeconfig is valid (at most
	// controlplane.MaxTTL). Default 8h.
	KubeconfigTTL time.Duration
	// Poll is how often the providers look again at an unfinished VM or
	// control plane. Default 2s.
	Poll time.Duration
	// CreateGrace is how old a cluster's namespace without its Cluster
	// must be before the leader deletes it as a cluster whose delete is
	// done: younger, it may be a create in flight
	// (tenantkube.Config.CreateGrace). Default 1m; tests set it short.
	CreateGrace time.Duration
	// ControlPlane runs the hosted control planes; nil is a
	// controlplane.Manager over the management cluster (charts/flexkube).
	// For tests only.
	ControlPlane capiprovider.ControlPlane
	// ControlPlaneValues returns chart values of a cluster's flexkube
	// release, merged over the ones the Manager derives from the cluster
	// (controlplane.Config.Values): a site's images, storage class,
	// resources or ports. Optional; unused with ControlPlane.
	ControlPlaneValues func(controlplane.Spec) map[string]any
	// TenantAddress returns the host:port where the Manager reaches a
	// tenant's API server (controlplane.Config.TenantAddress). Default the
	// API server's Service. Optional; unused with ControlPlane.
	TenantAddress func(namespace, cluster string) string
	// APIServerServiceType is the type of the hosted API servers'
	// Services (controlplane.Config.ServiceType). The workers reach their
	// API server through their VDC's edge gateway, which forwards their
	// cluster's endpoint (a port of their network's gateway address) to
	// the address a load balancer of the management cluster gives the
	// Service, so the default, LoadBalancer, needs one (such as MetalLB)
	// whose addresses the zones' external networks reach.
	APIServerServiceType string
	// NamespaceRole is the ClusterRole giving the orchestrator its rights
	// in a cluster's namespace (controlplane.Config.NamespaceRole; the
	// chart's <fullname>-controlplane): bound there (a RoleBinding) when
	// the namespace is made, and in every cluster's namespace when the
	// leader starts the controllers. Empty: the orchestrator's rights are
	// cluster-wide. Unused with ControlPlane.
	NamespaceRole string
}

// finishDeletesEvery is how often the leader deletes the namespaces of
// clusters Cluster API is done deleting.
const finishDeletesEvery = 5 * time.Second

// kubernetes is managed Kubernetes as one orchestrator runs it.
type kubernetes struct {
	svc *tenantkube.Service
	log *slog.Logger
	// controllers runs Cluster API's controllers and the providers until
	// ctx ends (capiprovider.Run).
	controllers func(ctx context.Context) error
	// finishDeletes deletes the namespaces of the clusters Cluster API is
	// done deleting (svc.FinishDeletes).
	finishDeletes func(ctx context.Context) (int, error)
	// targets are where the management cluster serves the hosted API
	// servers, for the edge gateways (controlplane.ListTargets).
	targets func(ctx context.Context) (map[string]netip.AddrPort, error)
}

// newKubernetes builds managed Kubernetes over the management cluster of
// kc (nil, nil when cfg is not Enabled).
func newKubernetes(cfg ManagedKubernetesConfig, kc KubeConfig, store catalog.Store, vms *compute.Service, log *slog.Logger) (*kubernetes, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	rc, _, err := kc.REST()
	if err != nil {
		return nil, fmt.Errorf("managed kubernetes: %w", err)
	}
	scheme, err := capiprovider.Scheme()
	if err != nil {
		return nil, fmt.Errorf("managed kubernetes: %w", err)
	}
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("managed kubernetes: %w", err)
	}
	cp := cfg.ControlPlane
	var (
		grant    func(ctx context.Context, namespace string) error
		grantAll = func(context.Context) error { return nil }
	)
	if cp == nil {
		m, err := controlplane.New(controlplane.Config{REST: rc, Values: cfg.ControlPlaneValues, TenantAddress: cfg.TenantAddress,
			ServiceType: cfg.APIServerServiceType, NamespaceRole: cfg.NamespaceRole, Log: log.With("component", "controlplane")})
		if err != nil {
			return nil, fmt.Errorf("managed kubernetes: %w", err)
		}
		cp = m
		if cfg.NamespaceRole != "" {
			grant, grantAll = m.Grant, m.GrantAll
		}
	}
	svc, err := tenantkube.New(tenantkube.Config{Client: c, Compute: vms, Catalog: store, ControlPlane: cp, Grant: grant, Versions: cfg.Versions,
		WorkerImage: cfg.WorkerImage, WorkerImages: cfg.WorkerImages, WorkerDiskGiB: cfg.WorkerDiskGiB, KubeconfigTTL: cfg.KubeconfigTTL, CreateGrace: cfg.CreateGrace, Logger: log.With("component", "tenantkube")})
	if err != nil {
		return nil, fmt.Errorf("managed kubernetes: %w", err)
	}
	controllers := func(ctx context.Context) error {
		// The clusters' namespaces made before the orchestrator's rights
		// were scoped to them get their RoleBinding.
		if err := grantAll(ctx); err != nil {
			return err
		}
		return capiprovider.Run(ctx, capiprovider.Config{REST: rc, Compute: vms, ControlPlane: cp, Core: true, WorkerImage: svc.WorkerImage,
			Poll: cfg.Poll, Logger: log.With("component", "capiprovider")})
	}
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("managed kubernetes: %w", err)
	}
	targets := func(ctx context.Context) (map[string]netip.AddrPort, error) { return controlplane.ListTargets(ctx, cs) }
	return &kubernetes{svc: svc, log: log, controllers: controllers, finishDeletes: svc.FinishDeletes, targets: targets}, nil
}

// leadership is whether this replica leads, and a channel closed at the
// next change of it (meshleader.Leader's Leading and Changed).
type leadership interface {
	Leading() bool
	Changed() <-chan struct{}
}

// alone is the leadership of an orchestrator that is not replicated: it
// always leads.
type alone struct{}

func (alone) Leading() bool            { return true }
func (alone) Changed() <-chan struct{} { return nil } // never changes

// run runs Cluster API's controllers and the providers, and finishes
// deleted clusters, while this replica leads (told by l's changes, not
// polled); it stops them when the leadership is lost, and returns when ctx
// ends.
func (k *kubernetes) run(ctx context.Context, l leadership) {
	for ctx.Err() == nil {
		changed := l.Changed()
		if l.Leading() {
			k.lead(ctx, l)
			continue
		}
		select {
		case <-ctx.Done():
		case <-changed:
		}
	}
}

// lead is one leadership's run of the controllers.
func (k *kubernetes) lead(ctx context.Context, l leadership) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	k.log.Info("leading: starting Cluster API's controllers and flexplane's providers")
	go func() { done <- k.controllers(lctx) }()
	finish := time.NewTicker(finishDeletesEvery)
	defer finish.Stop()
	for {
		changed := l.Changed()
		if !l.Leading() {
			k.log.Info("leadership lost: stopping Cluster API's controllers")
			cancel()
			<-done
			return
		}
		select {
		case err := <-done:
			if err != nil && lctx.Err() == nil {
				k.log.Error("Cluster API's controllers stopped; starting them again", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
				}
			}
			return
		case <-ctx.Done():
			<-done
			return
		case <-changed:
		case <-finish.C:
			if n, err := k.finishDeletes(lctx); err != nil {
				k.log.Warn("finishing deleted Kubernetes clusters", "err", err)
			} else if n > 0 {
				k.log.Info("deleted Kubernetes clusters finished", "namespaces", n)
			}
		}
	}
}
