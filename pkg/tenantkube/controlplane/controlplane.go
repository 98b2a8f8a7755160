// Package controlplane runs the hosted Kubernetes control plane of a tenant
// cluster in the management cluster: one namespace per cluster holding its
// PKI (Secrets named as Cluster API's kubeadm bootstrap expects them) and a
// release of the flexkube chart (etcd as a StatefulSet on a PVC,
// kube-apiserver, kube-controller-manager and kube-scheduler as
// Deployments, a Service for the endpoint), installed and upgraded with the
// Helm Go SDK. It hands out short-lived client certificates signed by the
// cluster's CA as kubeconfigs, and reads a control plane's status at request
// time from its workloads.
//
// The PKI is generated here, in Go, not by a chart's template functions:
// the authorities and the service-account key once per cluster, never
// rotated; the leaf certificates and the admin kubeconfig are issued anew
// by the same authorities when a third of their lifetime is left or the
// endpoint changes, never by an upgrade (a new version). A digest of the
// leaf certificates in the pods' annotations rolls the workloads onto
// renewed ones.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Errors of the Manager, matched with errors.Is; the API edge maps them to
// its codes.
var (
	// ErrInvalid: a Spec or Credential that cannot be used (nothing changed).
	ErrInvalid = errors.New("invalid")
	// ErrNotFound: no control plane in that namespace.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the namespace belongs to another cluster or is not ours.
	ErrConflict = errors.New("conflict")
	// ErrNotReady: the tenant API server cannot be reached yet.
	ErrNotReady = errors.New("not ready")
	// ErrBusy: another install or upgrade of the control plane's release
	// is in progress (pending for less than Config.PendingGrace); nothing
	// changed, try again later.
	ErrBusy = errors.New("busy")
)

// Labels and annotations the Manager puts on what it creates.
const (
	// LabelCluster is Cluster API's cluster label: on the PKI Secrets and
	// the namespace, its value the Cluster's name.
	LabelCluster = "cluster.x-k8s.io/cluster-name"
	// LabelVDC names the VDC owning the cluster (namespace label).
	LabelVDC = "flexplane.io/vdc"
	// LabelManaged, with the value ManagedBy, marks namespaces and Secrets
	// made by the Manager (or made for it, as tenantkube's namespaces).
	LabelManaged = "app.kubernetes.io/managed-by"
	ManagedBy    = "flexplane"
	// annotationEndpoint keeps a cluster's endpoint on its namespace.
	annotationEndpoint = "flexplane.io/endpoint"
	// secretType is Cluster API's Secret type for cluster secrets.
	secretType = "cluster.x-k8s.io/secret"
)

// Spec is the desired control plane of one tenant cluster.
type Spec struct {
	// Namespace is the management-cluster namespace of the tenant cluster
	// (one per cluster), created by Ensure.
	Namespace string
	// Cluster is the Cluster API Cluster's name in that namespace; it
	// prefixes the Secrets and the workloads.
	Cluster string
	// VDC is the VDC owning the cluster.
	VDC string
	// Version is the Kubernetes version, e.g. "v1.37.2".
	Version string
	// ServiceCIDR and PodCIDR are the tenant cluster's Service and Pod
	// ranges.
	ServiceCIDR, PodCIDR string
	// Endpoint is the host:port the workers (and kubeconfigs) use to reach
	// the API server; it is in the serving certificate.
	Endpoint string
	// Networks are the VDC networks (CIDRs, in canonical form) the tenant
	// API server may reach: its egress proxy opens connections to them
	// only, its NetworkPolicy allows them, and kubelet serving
	// certificates are approved for addresses in them
	// (ApproveKubeletServing). None: the API server reaches no network
	// (no node proxy, logs or exec, no webhook).
	Networks []string
}

// Credential asks for a kubeconfig of a user.
type Credential struct {
	// User is the certificate's common name: the user name in the tenant
	// cluster.
	User string
	// Groups name ClusterRoles of the tenant cluster the user gets, each
	// one of Roles ("view" can read but not write, "cluster-admin" is
	// everything).
	Groups []string
	// TTL is how long the certificate is valid, at most MaxTTL.
	TTL time.Duration
}

// Roles are the groups a Credential may carry: each is bound (by the
// Manager, in the tenant cluster) to the ClusterRole of the same name.
var Roles = []string{"view", "edit", "admin", "cluster-admin"}

// MaxTTL is the longest a Kubeconfig's certificate lives.
const MaxTTL = 24 * time.Hour

// Component is one workload of a control plane.
type Component struct {
	// Name is etcd, kube-apiserver, kube-controller-manager or
	// kube-scheduler.
	Name string
	// Ready is true when the workload's replicas are ready and up to date.
	Ready bool
	// Message says what is missing when it is not ready.
	Message string
}

// Status is a control plane's state, read at request time.
type Status struct {
	// Ready is true when every component is.
	Ready bool
	// Components in the order etcd, kube-apiserver,
	// kube-controller-manager, kube-scheduler.
	Components []Component
	// Version is the Kubernetes version the API server's workload runs
	// (rolled out), empty while it has none.
	Version string
}

// Config configures a Manager.
type Config struct {
	// REST is the management cluster's client configuration. Required.
	REST *rest.Config
	// Chart is the flexkube chart. Default: the chart embedded in
	// flexplane (package charts).
	Chart *chart.Chart
	// Values returns chart values for a cluster, merged over the ones the
	// Manager derives from its Spec (images, resources, storage class,
	// ports, addresses). pki.revision is always the Manager's. Optional.
	Values func(Spec) map[string]any
	// TenantAddress returns the host:port where the Manager reaches a
	// tenant's API server (to bind the Roles there). Default the API
	// server's Service, <cluster>-apiserver.<namespace>.svc at the
	// endpoint's port.
	TenantAddress func(namespace, cluster string) string
	// ServiceType is the type of the API servers' Services. The edge
	// gateways forward the workers' connections (at their cluster's
	// endpoint) to the address a LoadBalancer Service is given (Targets),
	// so a management cluster needs a load-balancer implementation (such
	// as MetalLB) whose addresses the zones' external networks reach.
	// Default "LoadBalancer".
	ServiceType string
	// Log receives the Manager's events. Default slog.Default().
	Log *slog.Logger
	// PendingGrace is how long a release's last revision may stay pending
	// (pending-install, -upgrade or -rollback: an operation under way)
	// before Ensure takes its operation for dead (its orchestrator stopped
	// in the middle of it), marks the revision failed and installs or
	// upgrades again. Within the grace Ensure returns ErrBusy. It must be
	// longer than an operation of the Manager may take (each is cancelled
	// after helmTimeout, 2 minutes; New refuses a shorter grace). Default
	// 5 minutes.
	PendingGrace time.Duration
	// NamespaceRole is the ClusterRole that gives the Manager's identity
	// its rights in a cluster's namespace (charts/flexplane's
	// <fullname>-controlplane), when it has none cluster-wide: the Manager
	// binds it there (Grant) when it makes or finds the namespace, and
	// Delete leaves the namespace, where the binding is, to its owner
	// (tenantkube's FinishDeletes deletes it once Cluster API is done with
	// the objects in it). Empty: the identity's rights are cluster-wide;
	// Delete deletes the namespace.
	NamespaceRole string
	// Now is the Manager's clock: the time it issues certificates at,
	// judges whether they are due for renewal at, and measures the age of a
	// pending release by. Default time.Now.
	Now func() time.Time
}

// Manager installs, upgrades and removes hosted control planes. It keeps no
// state of its own: everything is read from the management cluster.
type Manager struct {
	cfg    Config
	client kubernetes.Interface
	log    *slog.Logger
	// chartDigest is the digest of cfg.Chart (see chartDigest): a release
	// whose chart has another is upgraded even at the same version.
	chartDigest string
	who         whoami
}

// New returns a Manager for the management cluster of cfg.REST.
func New(cfg Config) (*Manager, error) {
	if cfg.REST == nil {
		return nil, fmt.Errorf("controlplane: new: Config.REST is required: %w", ErrInvalid)
	}
	if cfg.Chart == nil {
		c, err := embeddedChart()
		if err != nil {
			return nil, fmt.Errorf("controlplane: new: %w", err)
		}
		cfg.Chart = c
	}
	if cfg.ServiceType == "" {
		cfg.ServiceType = "LoadBalancer"
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.PendingGrace == 0 {
		cfg.PendingGrace = defaultPendingGrace
	}
	if cfg.PendingGrace <= helmTimeout {
		return nil, fmt.Errorf("controlplane: new: Config.PendingGrace %s is not longer than an operation's %s: %w",
			cfg.PendingGrace, helmTimeout, ErrInvalid)
	}
	digest, err := chartDigest(cfg.Chart)
	if err != nil {
		return nil, fmt.Errorf("controlplane: new: chart: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg.REST)
	if err != nil {
		return nil, fmt.Errorf("controlplane: new: %w", err)
	}
	return &Manager{cfg: cfg, client: client, log: cfg.Log, chartDigest: digest}, nil
}

var versionRE = regexp.MustCompile(`^v1\.[0-9]+\.[0-9]+$`)

// maxClusterName keeps <cluster>-controller-manager a valid name.
const maxClusterName = 40

func invalid(format string, a ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), ErrInvalid)
}

// validate checks a Spec and returns the endpoint's host and port.
func (s Spec) validate() (host string, port int, err error) {
	if errs := validation.IsDNS1123Label(s.Namespace); len(errs) > 0 {
		return "", 0, invalid("namespace %q: %s", s.Namespace, errs[0])
	}
	if errs := validation.IsDNS1123Label(s.Cluster); len(errs) > 0 || len(s.Cluster) > maxClusterName {
		return "", 0, invalid("cluster %q: a lower-case DNS label of at most %d characters", s.Cluster, maxClusterName)
	}
	if errs := validation.IsValidLabelValue(s.VDC); s.VDC == "" || len(errs) > 0 {
		return "", 0, invalid("vdc %q: a label value is required", s.VDC)
	}
	if !versionRE.MatchString(s.Version) {
		return "", 0, invalid("version %q: want v1.<minor>.<patch>", s.Version)
	}
	if _, _, err := ValidateCIDRs(s.ServiceCIDR, s.PodCIDR); err != nil {
		return "", 0, err
	}
	for _, n := range s.Networks {
		if p, err := netip.ParsePrefix(n); err != nil || p.Masked() != p {
			return "", 0, invalid("network %q: want a CIDR in canonical form, such as 10.0.0.0/24", n)
		}
	}
	h, ps, err := net.SplitHostPort(s.Endpoint)
	if err == nil {
		port, err = strconv.Atoi(ps)
	}
	if err != nil || h == "" || port < 1 || port > 65535 {
		return "", 0, invalid("endpoint %q: want host:port", s.Endpoint)
	}
	if net.ParseIP(h) == nil && len(validation.IsDNS1123Subdomain(h)) > 0 {
		return "", 0, invalid("endpoint host %q: neither an address nor a DNS name", h)
	}
	return h, port, nil
}

// Ensure installs the control plane of s, or upgrades it to s: it creates
// the namespace (with its ResourceQuota and LimitRange, see LimitsName)
// and the PKI Secrets that are missing, renews the leaf
// certificates and the admin kubeconfig when they have less than a third
// of their lifetime left or no longer fit s (its endpoint), never the
// authorities or the service-account key, and installs or upgrades the
// release of the flexkube chart, whose pods roll onto renewed
// certificates. A release whose last revision is deployed with the same
// chart and values is left alone, so Ensure can be called as often as a
// reconciler likes without writing a revision each time. A release left
// pending by an operation that died is recovered once Config.PendingGrace
// has passed; before that Ensure returns ErrBusy. It does not wait for the
// control plane to be ready (see Status).
func (m *Manager) Ensure(ctx context.Context, s Spec) error {
	host, _, err := s.validate()
	if err != nil {
		return fmt.Errorf("controlplane: ensure: %w", err)
	}
	if err := m.ensureNamespace(ctx, s); err != nil {
		return fmt.Errorf("controlplane: ensure %s/%s: %w", s.Namespace, s.Cluster, err)
	}
	if err := m.ensureLimits(ctx, s); err != nil {
		return fmt.Errorf("controlplane: ensure %s/%s: %w", s.Namespace, s.Cluster, err)
	}
	rev, err := m.ensurePKI(ctx, s, host)
	if err != nil {
		return fmt.Errorf("controlplane: ensure %s/%s: pki: %w", s.Namespace, s.Cluster, err)
	}
	if err := m.ensureRelease(ctx, s, rev); err != nil {
		return fmt.Errorf("controlplane: ensure %s/%s: release: %w", s.Namespace, s.Cluster, err)
	}
	m.log.Info("control plane ensured", "namespace", s.Namespace, "cluster", s.Cluster, "version", s.Version)
	return nil
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
