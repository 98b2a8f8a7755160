// Package tenantkube is managed Kubernetes in a VDC: clusters whose
// control plane is hosted in the management cluster (a FlexControlPlane,
// run by the ControlPlane of package capiprovider) and whose workers are
// VMs of the VDC, in node pools of 0 to MaxPoolSize.
//
// Nothing is stored by flexplane beyond Cluster API's objects and the
// providers' (package capiprovider/v1alpha1): a cluster is a namespace of
// the management cluster (labelled with its VDC) holding a Cluster, its
// FlexCluster and FlexControlPlane; a node pool is a MachineDeployment
// with its FlexMachineTemplate. Status is read at request time: Cluster
// API's conditions, the machines, and the control plane's own Status.
// A cluster or pool of another VDC is NOT_FOUND, as one that does not
// exist.
package tenantkube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/semver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider/v1alpha1"
	"github.com/flexplane/flexplane/pkg/tenantkube/controlplane"
)

// MaxPoolSize is the most workers a node pool may have.
const MaxPoolSize = 10

// The autoscaler's annotations: node-group bounds on a MachineDeployment,
// a node's capacity on the infrastructure template (scale from zero).
const (
	annMinSize  = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
	annMaxSize  = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
	annCPU      = "capacity.cluster-autoscaler.kubernetes.io/cpu"
	annMemory   = "capacity.cluster-autoscaler.kubernetes.io/memory"
	annMaxPods  = "capacity.cluster-autoscaler.kubernetes.io/maxPods"
	annLabels   = "capacity.cluster-autoscaler.kubernetes.io/labels"
	annTaints   = "capacity.cluster-autoscaler.kubernetes.io/taints"
	defaultPods = 110
)

// Config configures a Service.
type Config struct {
	// Client reaches the management cluster (a scheme from
	// capiprovider.Scheme).
	Client client.Client
	// Compute validates workers as createVM would (profiles, networks)
	// and counts the VDC's quota.
	Compute *compute.Service
	// Catalog holds the profiles and the VDCs' quotas.
	Catalog catalog.Store
	// ControlPlane issues kubeconfigs and reports control planes.
	ControlPlane capiprovider.ControlPlane
	// Grant gives the Service's identity its rights in a cluster's
	// namespace just made, before anything is made in it
	// (controlplane.Manager.Grant). Nil: the identity's rights are
	// cluster-wide.
	Grant func(ctx context.Context, namespace string) error
	// Versions are the Kubernetes versions clusters may run. Default
	// DefaultVersions.
	Versions []string
	// WorkerImage is the catalog image of worker VMs. Default "debian-13".
	WorkerImage string
	// WorkerImages are the catalog images of worker VMs by Kubernetes
	// version (an image with that version's kubelet and kubeadm); a
	// version without one uses WorkerImage. Every key must be one of
	// Versions.
	WorkerImages map[string]string
	// WorkerDiskGiB is a worker's disk. Default 20.
	WorkerDiskGiB int
	// KubeconfigTTL is how long an issued kubeconfig is valid. Default 8h.
	KubeconfigTTL time.Duration
	// CreateGrace is how long FinishDeletes leaves alone a cluster's
	// namespace that has no Cluster, and an endpoint claimed for a
	// namespace that is not there: a create makes its namespace and
	// claims its endpoint before it makes its Cluster, so anything
	// younger may be a create in flight, whose namespace must not be
	// deleted under it. It must exceed the longest a create takes.
	// Default DefaultCreateGrace; tests set it short so that a deleted
	// cluster is gone sooner.
	CreateGrace time.Duration
	// Logger receives the service's logs. Default slog.Default().
	Logger *slog.Logger
}

// DefaultCreateGrace is Config.CreateGrace when it is 0.
const DefaultCreateGrace = time.Minute

// DefaultVersions are the versions offered when Config.Versions is empty.
var DefaultVersions = []string{"v1.37.2"}

// Service manages the Kubernetes clusters of VDCs. A nil *Service (no
// management cluster) answers ErrUnavailable.
type Service struct {
	cfg Config
	log *slog.Logger
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Client == nil || cfg.Compute == nil || cfg.Catalog == nil || cfg.ControlPlane == nil {
		return nil, errors.New("tenantkube: Client, Compute, Catalog and ControlPlane are required")
	}
	if len(cfg.Versions) == 0 {
		cfg.Versions = DefaultVersions
	}
	for _, v := range cfg.Versions {
		if !semver.IsValid(v) || semver.Canonical(v) != v || semver.Prerelease(v) != "" {
			return nil, fmt.Errorf("tenantkube: version %q is not of the form vX.Y.Z", v)
		}
	}
	if cfg.CreateGrace < 0 {
		return nil, fmt.Errorf("tenantkube: CreateGrace %s is negative", cfg.CreateGrace)
	}
	if cfg.CreateGrace == 0 {
		cfg.CreateGrace = DefaultCreateGrace
	}
	if cfg.WorkerImage == "" {
		cfg.WorkerImage = "debian-13"
	}
	for v, img := range cfg.WorkerImages {
		if !slices.Contains(cfg.Versions, v) {
			return nil, fmt.Errorf("tenantkube: a worker image for %s, which is not an offered version (%s)", v, strings.Join(cfg.Versions, ", "))
		}
		if img == "" {
			return nil, fmt.Errorf("tenantkube: an empty worker image for %s", v)
		}
	}
	cfg.WorkerImages = maps.Clone(cfg.WorkerImages)
	if cfg.WorkerDiskGiB == 0 {
		cfg.WorkerDiskGiB = 20
	}
	if cfg.KubeconfigTTL == 0 {
		cfg.KubeconfigTTL = 8 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Service{cfg: cfg, log: cfg.Logger}, nil
}

// WorkerImage returns the catalog image of workers of Kubernetes version
// v (capiprovider.Config.WorkerImage).
func (s *Service) WorkerImage(v string) string {
	if img, ok := s.cfg.WorkerImages[v]; ok {
		return img
	}
	return s.cfg.WorkerImage
}

// Versions returns the versions clusters may run.
func (s *Service) Versions() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.cfg.Versions)
}

// Cluster is a Kubernetes cluster as read from the management cluster.
type Cluster struct {
	// ID is the cluster's opaque id (its namespace).
	ID                   string
	Name, VDC, Zone      string
	Network, Version     string
	ServiceCIDR, PodCIDR string
	Created              time.Time
	Deleting             bool
	// Phase is Cluster API's phase of the Cluster (Pending, Provisioning,
	// Provisioned, Deleting, Failed).
	Phase string
	// ControlPlaneReady says the hosted control plane serves; Components
	// are its parts.
	ControlPlaneReady bool
	Components        []controlplane.Component
	// RunningVersion is the version the API server's workload runs ("" while
	// none does).
	RunningVersion string
	// Endpoint is host:port of the API server ("" until known).
	Endpoint string
	// Conditions are Cluster API's conditions of the Cluster.
	Conditions []Condition
	Pools      []NodePool
}

// Condition is one condition of a Cluster API object.
type Condition struct {
	Type, Status, Reason, Message string
}

// Taint is a node taint of a pool's workers.
type Taint struct {
	Key, Value string
	// Effect is NoSchedule, PreferNoSchedule or NoExecute.
	Effect TaintEffect
}

// NodePool is one MachineDeployment of workers.
type NodePool struct {
	// ID is the pool's opaque id.
	ID, Cluster, Name              string
	ComputeProfile, StorageProfile string
	// Size is the desired number of workers; Workers how many machines
	// exist, Ready how many of them run.
	Size, Workers, Ready int
	// Version is the Kubernetes version the pool's workers run or are
	// being moved to; UpToDate how many of its workers run it.
	Version  string
	UpToDate int
	Labels   map[string]string
	Taints   []Taint
	Deleting bool
}

// CreateClusterInput is what createKubernetesCluster asks for.
type CreateClusterInput struct {
	VDC, Name, Zone string
	// Network is the id of the VDC's network in Zone the workers use.
	Network string
	Version string
	// ServiceCIDR and PodCIDR default to 10.96.0.0/12 and 10.244.0.0/16.
	ServiceCIDR, PodCIDR string
}

// NodePoolInput is what createNodePool asks for.
type NodePoolInput struct {
	VDC, Cluster, Name             string
	ComputeProfile, StorageProfile string
	Size                           int
	Labels                         map[string]string
	Taints                         []Taint
}

var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,18}[a-z0-9])?$`)

// namespaceOf is the namespace of cluster name of vdc: a hash keeps
// clusters of two VDCs with one name apart.
func namespaceOf(vdc, name string) string {
	h := sha256.Sum256([]byte(vdc + "/" + name))
	return "kc-" + name + "-" + hex.EncodeToString(h[:4])
}

func (s *Service) c() client.Client { return s.cfg.Client }

// namespace returns the namespace of cluster id if it is vdc's.
func (s *Service) namespace(ctx context.Context, vdc, id string) (*corev1.Namespace, error) {
	if !strings.HasPrefix(id, "kc-") {
		return nil, notFound("Kubernetes cluster")
	}
	ns := &corev1.Namespace{}
	if err := s.c().Get(ctx, client.ObjectKey{Name: id}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, notFound("Kubernetes cluster")
		}
		return nil, internal("reading the cluster", err)
	}
	if ns.Labels[v1alpha1.VDCLabel] != vdc || ns.Labels[v1alpha1.ClusterNameLabel] == "" || !ns.DeletionTimestamp.IsZero() {
		return nil, notFound("Kubernetes cluster")
	}
	return ns, nil
}

// Clusters lists vdc's clusters by name.
func (s *Service) Clusters(ctx context.Context, vdc string) ([]*Cluster, error) {
	if s == nil {
		return nil, ErrUnavailable
	}
	var nss corev1.NamespaceList
	if err := s.c().List(ctx, &nss, client.MatchingLabels{v1alpha1.VDCLabel: vdc}); err != nil {
		return nil, internal("listing clusters", err)
	}
	var out []*Cluster
	for i := range nss.Items {
		if nss.Items[i].Labels[v1alpha1.ClusterNameLabel] == "" || !nss.Items[i].DeletionTimestamp.IsZero() {
			continue
		}
		c, err := s.read(ctx, &nss.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *Cluster) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Cluster returns cluster id of vdc.
func (s *Service) Cluster(ctx context.Context, vdc, id string) (*Cluster, error) {
	if s == nil {
		return nil, ErrUnavailable
	}
	ns, err := s.namespace(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	return s.read(ctx, ns)
}

// read builds a Cluster from its namespace's objects.
func (s *Service) read(ctx context.Context, ns *corev1.Namespace) (*Cluster, error) {
	name := ns.Labels[v1alpha1.ClusterNameLabel]
	c := &Cluster{ID: ns.Name, Name: name, VDC: ns.Labels[v1alpha1.VDCLabel], Created: ns.CreationTimestamp.Time,
		Deleting: !ns.DeletionTimestamp.IsZero()}
	key := client.ObjectKey{Namespace: ns.Name, Name: name}
	cl := &clusterv1.Cluster{}
	switch err := s.c().Get(ctx, key, cl); {
	case apierrors.IsNotFound(err):
		c.Phase = "Deleting"
		c.Deleting = true
		return c, nil
	case err != nil:
		return nil, internal("reading the cluster", err)
	}
	c.Phase = cl.Status.Phase
	if !cl.DeletionTimestamp.IsZero() {
		c.Deleting = true
	}
	for _, cd := range cl.Status.Conditions {
		c.Conditions = append(c.Conditions, Condition{Type: cd.Type, Status: string(cd.Status), Reason: cd.Reason, Message: cd.Message})
	}
	if ep := cl.Spec.ControlPlaneEndpoint; ep.Host != "" {
		c.Endpoint = ep.String()
	}
	fc := &v1alpha1.FlexCluster{}
	if err := s.c().Get(ctx, key, fc); err == nil {
		c.Zone, c.Network = fc.Spec.Zone, fc.Spec.Network
	}
	cp := &v1alpha1.FlexControlPlane{}
	if err := s.c().Get(ctx, key, cp); err == nil {
		c.Version, c.ServiceCIDR, c.PodCIDR = cp.Spec.Version, cp.Spec.ServiceCIDR, cp.Spec.PodCIDR
		// The endpoint is the control plane's from the start (Cluster API
		// copies it to the Cluster).
		if ep := cp.Spec.ControlPlaneEndpoint; c.Endpoint == "" && ep.Host != "" {
			c.Endpoint = ep.String()
		}
	}
	if st, err := s.cfg.ControlPlane.Status(ctx, ns.Name); err == nil {
		c.ControlPlaneReady, c.Components, c.RunningVersion = st.Ready, st.Components, st.Version
	} else {
		s.log.Warn("control plane status", "cluster", ns.Name, "err", err)
	}
	pools, err := s.pools(ctx, ns.Name, name)
	if err != nil {
		return nil, err
	}
	c.Pools = pools
	return c, nil
}

// pools reads the node pools of the cluster in namespace ns.
func (s *Service) pools(ctx context.Context, ns, cluster string) ([]NodePool, error) {
	var mds clusterv1.MachineDeploymentList
	if err := s.c().List(ctx, &mds, client.InNamespace(ns), client.HasLabels{v1alpha1.NodePoolLabel}); err != nil {
		return nil, internal("listing node pools", err)
	}
	var out []NodePool
	for i := range mds.Items {
		p, err := s.pool(ctx, &mds.Items[i], cluster)
		if err != nil {
			return nil, err
		}
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b NodePool) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (s *Service) pool(ctx context.Context, md *clusterv1.MachineDeployment, cluster string) (*NodePool, error) {
	p := &NodePool{ID: md.Namespace + "/" + md.Labels[v1alpha1.NodePoolLabel], Cluster: md.Namespace, Name: md.Labels[v1alpha1.NodePoolLabel],
		Size: int(ptr.Deref(md.Spec.Replicas, 0)), Labels: map[string]string{}, Deleting: !md.DeletionTimestamp.IsZero(),
		Version: md.Spec.Template.Spec.Version}
	tpl := &v1alpha1.FlexMachineTemplate{}
	if err := s.c().Get(ctx, client.ObjectKey{Namespace: md.Namespace, Name: md.Spec.Template.Spec.InfrastructureRef.Name}, tpl); err == nil {
		p.ComputeProfile, p.StorageProfile = tpl.Spec.Template.Spec.ComputeProfile, tpl.Spec.Template.Spec.StorageProfile
		p.Labels = parseLabels(tpl.Annotations[annLabels])
		p.Taints = parseTaints(tpl.Annotations[annTaints])
	}
	var ms clusterv1.MachineList
	if err := s.c().List(ctx, &ms, client.InNamespace(md.Namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name}); err != nil {
		return nil, internal("listing workers", err)
	}
	p.Workers = len(ms.Items)
	for _, m := range ms.Items {
		if ptr.Deref(m.Status.Initialization.InfrastructureProvisioned, false) && m.DeletionTimestamp.IsZero() {
			p.Ready++
		}
		if m.Spec.Version == p.Version && m.DeletionTimestamp.IsZero() {
			p.UpToDate++
		}
	}
	return p, nil
}

// validVersion checks v against the versions offered.
func (s *Service) validVersion(v string) error {
	if !slices.Contains(s.cfg.Versions, v) {
		return badInput("version", "version %q is not offered (offered: %s)", v, strings.Join(s.cfg.Versions, ", "))
	}
	return nil
}

// fromCompute turns compute's refusal of a worker into the service's; a
// refused zone is bad input on zoneField, the input that named the zone
// ("zone" for a cluster, "cluster" for a pool, whose workers go to the
// cluster's zone).
func fromCompute(err error, zoneField string) error {
	var ce *compute.Error
	if !errors.As(err, &ce) {
		return internal("checking the workers", err)
	}
	switch ce.Kind {
	case compute.KindBadInput:
		switch {
		case strings.HasSuffix(ce.Field, ".network"):
			return &Error{Kind: KindNotFound, Field: "network", Message: "no such network in the VDC's zone"}
		case ce.Field == "zone":
			return badInput(zoneField, "%s", ce.Message)
		case ce.Field == "computeProfile", ce.Field == "storageProfile":
			return badInput(ce.Field, "%s", ce.Message)
		}
		return badInput("", "%s", ce.Message)
	case compute.KindNotFound:
		return &Error{Kind: KindNotFound, Message: ce.Message}
	case compute.KindQuotaExceeded:
		return &Error{Kind: KindQuotaExceeded, Message: ce.Message}
	}
	return &Error{Kind: KindInternal, Message: ce.Message, Cause: err}
}

// workersPlaceable refuses new workers of vdc's cluster (in namespace ns)
// when vdc may not place anything in the cluster's zone any more: the zone
// was dedicated to other VDCs since the cluster was made
// (catalog.ZoneAllows, the one rule of dedicated zones). The refusal is
// bad input on field, worded as for a zone that does not exist, as
// createKubernetesCluster refuses such a zone. The workers the cluster has
// there stay: only making more is refused.
func (s *Service) workersPlaceable(ctx context.Context, vdc, ns, cluster, field string) error {
	fc := &v1alpha1.FlexCluster{}
	if err := s.c().Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster}, fc); err != nil {
		return internal("reading the cluster", err)
	}
	open, err := catalog.ZoneAllows(ctx, s.cfg.Catalog, fc.Spec.Zone, vdc)
	if err != nil {
		return internal("reading the zone's policy", err)
	}
	if !open {
		return badInput(field, "no zone %q", fc.Spec.Zone)
	}
	return nil
}

// CreateKubernetesCluster creates a cluster with no node pools: its namespace,
// Cluster, FlexCluster and FlexControlPlane. Bad input changes nothing.
func (s *Service) CreateKubernetesCluster(ctx context.Context, in CreateClusterInput) (*Cluster, error) {
	if s == nil {
		return nil, ErrUnavailable
	}
	if !nameRE.MatchString(in.Name) {
		return nil, badInput("name", "name must be 1 to 20 of a-z, 0-9 and '-', starting with a letter")
	}
	if err := s.validVersion(in.Version); err != nil {
		return nil, err
	}
	if in.ServiceCIDR == "" {
		in.ServiceCIDR = "10.96.0.0/12"
	}
	if in.PodCIDR == "" {
		in.PodCIDR = "10.244.0.0/16"
	}
	// The network and zone are checked as a worker's createVM checks them.
	sub, err := s.cfg.Compute.Network(ctx, in.VDC, in.Zone, in.Network)
	if err != nil {
		return nil, fromCompute(err, "zone")
	}
	if !sub.Gateway.IsValid() || !sub.Gateway.Is4() {
		return nil, badInput("network", "the network has no IPv4 gateway address, where its workers would reach the cluster's API server")
	}
	// The ranges as the control plane will check them, and apart from the
	// workers' network.
	if _, _, err := controlplane.ValidateCIDRs(in.ServiceCIDR, in.PodCIDR, sub.Prefix); err != nil {
		return nil, cidrInput(err)
	}
	if err := s.clustersQuota(ctx, in.VDC, 1); err != nil {
		return nil, err
	}
	// The workers reach the hosted API server through the VDC's edge
	// gateway in the zone, at a port of their network's gateway address.
	if err := s.ensureGateway(ctx, in.VDC, in.Zone); err != nil {
		return nil, err
	}
	nsName := namespaceOf(in.VDC, in.Name)
	// The control plane's Manager runs in this namespace: it is labelled
	// as the Manager labels its own.
	labels := map[string]string{v1alpha1.VDCLabel: in.VDC, v1alpha1.ClusterNameLabel: in.Name,
		controlplane.LabelCluster: in.Name, controlplane.LabelManaged: controlplane.ManagedBy}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName, Labels: labels}}
	if err := s.c().Create(ctx, ns); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("a Kubernetes cluster %q exists", in.Name)}
		}
		return nil, internal("creating the cluster", err)
	}
	undo := func() {
		uctx := context.WithoutCancel(ctx)
		if err := catalog.ReleaseKubeEndpoint(uctx, s.cfg.Catalog, in.VDC, in.Zone, nsName); err != nil {
			s.log.Warn("kubernetes cluster create: giving its endpoint back", "namespace", nsName, "err", err)
		}
		_ = s.c().Delete(uctx, ns)
	}
	// Racers for the quota's last clusters may all have passed the check
	// above: counted again with this one made, each over it gives up.
	if err := s.clustersQuota(ctx, in.VDC, 0); err != nil {
		_ = s.c().Delete(context.WithoutCancel(ctx), ns)
		return nil, err
	}
	if s.cfg.Grant != nil {
		if err := s.cfg.Grant(ctx, nsName); err != nil {
			_ = s.c().Delete(context.WithoutCancel(ctx), ns)
			return nil, internal("creating the cluster", err)
		}
	}
	port, err := catalog.ClaimKubeEndpoint(ctx, s.cfg.Catalog, in.VDC, in.Zone, nsName, sub.Gateway)
	if err != nil {
		undo()
		var ve *catalog.ValidationError
		if errors.As(err, &ve) {
			return nil, badInput(ve.Field, "%s", ve.Message)
		}
		return nil, internal("claiming the cluster's endpoint", err)
	}
	objLabels := map[string]string{v1alpha1.VDCLabel: in.VDC, clusterv1.ClusterNameLabel: in.Name}
	om := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: nsName, Name: in.Name, Labels: maps.Clone(objLabels)}
	}
	endpoint := v1alpha1.APIEndpoint{Host: sub.Gateway.String(), Port: int32(port)}
	objs := []client.Object{
		&v1alpha1.FlexCluster{ObjectMeta: om(), Spec: v1alpha1.FlexClusterSpec{VDC: in.VDC, Zone: in.Zone, Network: in.Network}},
		&v1alpha1.FlexControlPlane{ObjectMeta: om(), Spec: v1alpha1.FlexControlPlaneSpec{VDC: in.VDC, Version: in.Version,
			ServiceCIDR: in.ServiceCIDR, PodCIDR: in.PodCIDR, ControlPlaneEndpoint: endpoint,
			// The workers' network: what the API server may reach.
			Networks: []string{sub.Prefix.Masked().String()}}},
		&clusterv1.Cluster{ObjectMeta: om(), Spec: clusterv1.ClusterSpec{
			ClusterNetwork: clusterv1.ClusterNetwork{
				Services: clusterv1.NetworkRanges{CIDRBlocks: []string{in.ServiceCIDR}},
				Pods:     clusterv1.NetworkRanges{CIDRBlocks: []string{in.PodCIDR}},
			},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: "FlexCluster", Name: in.Name},
			ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: "FlexControlPlane", Name: in.Name},
		}},
	}
	for _, o := range objs {
		if err := s.c().Create(ctx, o); err != nil {
			undo()
			return nil, internal("creating the cluster", err)
		}
	}
	s.log.Info("kubernetes cluster created", "vdc", in.VDC, "cluster", in.Name, "namespace", nsName)
	return s.read(ctx, ns)
}

// CountClusters counts vdc's clusters as its kubernetesClusters quota
// counts them: every cluster namespace of the VDC, those being deleted
// included (a control plane runs until its namespace is gone). A nil
// Service (no management cluster) counts none.
func (s *Service) CountClusters(ctx context.Context, vdc string) (int, error) {
	if s == nil {
		return 0, nil
	}
	var nss corev1.NamespaceList
	if err := s.c().List(ctx, &nss, client.MatchingLabels{v1alpha1.VDCLabel: vdc}, client.HasLabels{v1alpha1.ClusterNameLabel}); err != nil {
		return 0, fmt.Errorf("tenantkube: count the clusters of %s: %w", vdc, err)
	}
	return len(nss.Items), nil
}

// clustersQuota refuses vdc having more clusters than its
// kubernetesClusters quota allows once it has more more.
func (s *Service) clustersQuota(ctx context.Context, vdc string, more int) error {
	count := func(ctx context.Context) (int, error) { return s.CountClusters(ctx, vdc) }
	err := quota.CheckKubernetesClusters(ctx, s.cfg.Catalog, vdc, count, more)
	var qe *quota.ExceededError
	switch {
	case errors.As(err, &qe):
		return &Error{Kind: KindQuotaExceeded, Message: qe.Error(), Cause: err}
	case err != nil:
		return internal("counting the VDC's Kubernetes clusters", err)
	}
	return nil
}

// cidrInput is the bad input of a range controlplane.ValidateCIDRs
// refused.
func cidrInput(err error) error {
	var ce *controlplane.CIDRError
	if !errors.As(err, &ce) {
		return internal("checking the cluster's ranges", err)
	}
	if ce.Pod {
		return badInput("podCidr", "%s", ce.Message)
	}
	return badInput("serviceCidr", "%s", ce.Message)
}

// ensureGateway makes sure vdc has its edge gateway in zone: made when it
// has none, with an address of the zone's pool that counts against the
// VDC's publicAddresses quota (as for 1:1 addresses and load balancers).
func (s *Service) ensureGateway(ctx context.Context, vdc, zone string) error {
	_, err := quota.EnsureEdgeGateway(ctx, s.cfg.Catalog, vdc, zone)
	var qe *quota.ExceededError
	var ve *catalog.ValidationError
	switch {
	case errors.As(err, &qe):
		return &Error{Kind: KindQuotaExceeded, Message: "the cluster needs the VDC's edge gateway in the zone, whose public address exceeds the VDC's quota: " + qe.Error(), Cause: err}
	case errors.As(err, &ve):
		return badInput(ve.Field, "the cluster needs the VDC's edge gateway in the zone: %s", ve.Message)
	case err != nil:
		return internal("making the VDC's edge gateway", err)
	}
	return nil
}

// DeleteKubernetesCluster deletes cluster id: Cluster API deletes its machines (and
// so their VMs) and control plane, then the namespace goes.
func (s *Service) DeleteKubernetesCluster(ctx context.Context, vdc, id string) error {
	if s == nil {
		return ErrUnavailable
	}
	ns, err := s.namespace(ctx, vdc, id)
	if err != nil {
		return err
	}
	cl := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: ns.Labels[v1alpha1.ClusterNameLabel]}}
	if err := s.c().Delete(ctx, cl); err != nil && !apierrors.IsNotFound(err) {
		return internal("deleting the cluster", err)
	}
	s.log.Info("kubernetes cluster deleting", "vdc", vdc, "cluster", id)
	return nil
}

// FinishDeletes deletes the namespace of every cluster whose Cluster is
// gone (Cluster API is done with it) and that is older than
// Config.CreateGrace (a cluster being created has its namespace before its
// Cluster). The orchestrator's leader calls it now and then; it returns
// how many it deleted.
func (s *Service) FinishDeletes(ctx context.Context) (int, error) {
	if s == nil {
		return 0, nil
	}
	return s.FinishDeletesOlderThan(ctx, s.cfg.CreateGrace)
}

// FinishDeletesOlderThan is FinishDeletes for namespaces older than age.
func (s *Service) FinishDeletesOlderThan(ctx context.Context, age time.Duration) (int, error) {
	if s == nil {
		return 0, nil
	}
	var nss corev1.NamespaceList
	if err := s.c().List(ctx, &nss, client.HasLabels{v1alpha1.ClusterNameLabel}); err != nil {
		return 0, internal("listing clusters", err)
	}
	n := 0
	// A namespace being deleted is a cluster that is gone: FinishDeletes
	// deletes it once Cluster API is done.
	exists := map[string]bool{}
	for _, ns := range nss.Items {
		exists[ns.Name] = ns.DeletionTimestamp.IsZero()
	}
	for _, ns := range nss.Items {
		if !ns.DeletionTimestamp.IsZero() {
			continue
		}
		err := s.c().Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: ns.Labels[v1alpha1.ClusterNameLabel]}, &clusterv1.Cluster{})
		if !apierrors.IsNotFound(err) {
			continue
		}
		if time.Since(ns.CreationTimestamp.Time) < age {
			continue
		}
		// The Secrets first (the control plane's PKI and kubeconfigs, the
		// bootstrap data): gone even before the namespace controller is.
		if err := s.c().DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(ns.Name)); err != nil {
			return n, internal("deleting a cluster's secrets", err)
		}
		if err := s.c().Delete(ctx, &ns); err != nil && !apierrors.IsNotFound(err) {
			return n, internal("deleting a cluster's namespace", err)
		}
		exists[ns.Name] = false
		n++
	}
	return n, s.releaseEndpoints(ctx, exists, age)
}

// releaseEndpoints gives back the endpoints of clusters whose namespace is
// gone or going (deleted, or never made by a create that died), claimed longer than
// age ago (a create in flight claims before its namespace is listed).
func (s *Service) releaseEndpoints(ctx context.Context, exists map[string]bool, age time.Duration) error {
	gws, err := catalog.List[*catalog.EdgeGateway](ctx, s.cfg.Catalog)
	if err != nil {
		return internal("listing the edge gateways", err)
	}
	for _, g := range gws {
		for _, e := range g.KubeEndpoints {
			if exists[e.Cluster] || time.Since(e.Claimed) < age {
				continue
			}
			if err := catalog.ReleaseKubeEndpoint(ctx, s.cfg.Catalog, g.VDC, g.Zone, e.Cluster); err != nil {
				return internal("giving a cluster's endpoint back", err)
			}
			s.log.Info("kubernetes cluster endpoint released", "vdc", g.VDC, "zone", g.Zone, "cluster", e.Cluster, "endpoint", net.JoinHostPort(e.Address, strconv.Itoa(e.Port)))
		}
	}
	return nil
}

// joinTemplate is the KubeadmConfigTemplate of a pool: the kubeadm join
// of its workers (Cluster API's kubeadm bootstrap provider fills in the
// discovery: the cluster's endpoint, a bootstrap token and the CA's hash),
// registering them with the pool's labels and taints.
func joinTemplate(ns, name string, labels map[string]string, in NodePoolInput) *bootstrapv1.KubeadmConfigTemplate {
	reg := bootstrapv1.NodeRegistrationOptions{Taints: ptr.To([]corev1.Taint{})}
	if len(in.Labels) > 0 {
		reg.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "node-labels", Value: ptr.To(formatLabels(in.Labels))}}
	}
	for _, t := range in.Taints {
		*reg.Taints = append(*reg.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return &bootstrapv1.KubeadmConfigTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: maps.Clone(labels)},
		Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{Spec: bootstrapv1.KubeadmConfigSpec{
			Format: bootstrapv1.CloudConfig,
			// The kubelet asks the cluster for its serving certificate
			// (a kubernetes.io/kubelet-serving CSR, approved by
			// controlplane.Manager.ApproveKubeletServing), which the API
			// server verifies (--kubelet-certificate-authority).
			Files: []bootstrapv1.File{{Path: kubeadmPatches + "/kubeletconfiguration0+merge.yaml", Permissions: "0644", Owner: "root:root",
				Content: KubeletServingPatch}},
			JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: reg,
				Patches: bootstrapv1.Patches{Directory: kubeadmPatches}},
		}}},
	}
}

// kubeadmPatches is the directory of kubeadm's patches on a worker.
const kubeadmPatches = "/etc/kubeadm/patches"

// KubeletServingPatch is the kubeadm patch of a worker's kubelet
// configuration that the node pools' cloud-init writes: the kubelet gets
// its serving certificate from the cluster (serverTLSBootstrap) instead of
// signing one itself.
const KubeletServingPatch = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
serverTLSBootstrap: true
`

// CreateNodePool adds a node pool of in.Size workers. Bad input (a size
// outside 0..MaxPoolSize, an unknown profile) and a size the VDC's quota
// cannot hold change nothing.
func (s *Service) CreateNodePool(ctx context.Context, in NodePoolInput) (*NodePool, error) {
	if s == nil {
		return nil, ErrUnavailable
	}
	ns, err := s.namespace(ctx, in.VDC, in.Cluster)
	if err != nil {
		return nil, &Error{Kind: KindNotFound, Field: "cluster", Message: "no such Kubernetes cluster"}
	}
	if !nameRE.MatchString(in.Name) {
		return nil, badInput("name", "name must be 1 to 20 of a-z, 0-9 and '-', starting with a letter")
	}
	if err := validSize(in.Size); err != nil {
		return nil, err
	}
	if err := validLabels(in.Labels); err != nil {
		return nil, err
	}
	if err := validTaints(in.Taints); err != nil {
		return nil, err
	}
	cluster := ns.Labels[v1alpha1.ClusterNameLabel]
	key := client.ObjectKey{Namespace: ns.Name, Name: cluster}
	fc := &v1alpha1.FlexCluster{}
	if err := s.c().Get(ctx, key, fc); err != nil {
		return nil, internal("reading the cluster", err)
	}
	// A new pool's workers run the version the control plane runs: during an
	// upgrade that is the old one, and the provider rolls the pool after it.
	version := ""
	fcp := &v1alpha1.FlexControlPlane{}
	if err := s.c().Get(ctx, key, fcp); err == nil {
		version = fcp.Spec.Version
		if fcp.Status.Version != "" {
			version = fcp.Status.Version
		}
	}
	image := s.WorkerImage(version)
	probe := compute.CreateInput{VDC: in.VDC, Name: cluster + "-" + in.Name, Zone: fc.Spec.Zone, Image: image,
		ComputeProfile: in.ComputeProfile, StorageProfile: in.StorageProfile, DiskGiB: s.cfg.WorkerDiskGiB,
		NICs: []compute.NICInput{{Network: fc.Spec.Network}}, User: "kube"}
	if err := s.cfg.Compute.Validate(ctx, probe); err != nil {
		return nil, fromCompute(err, "cluster")
	}
	cp, err := catalog.Get[*catalog.ComputeProfile](ctx, s.cfg.Catalog, in.ComputeProfile)
	if err != nil {
		return nil, badInput("computeProfile", "no compute profile %q", in.ComputeProfile)
	}
	if err := s.fits(ctx, in.VDC, cp, in.Size); err != nil {
		return nil, err
	}
	mdName := cluster + "-" + in.Name
	poolLabels := map[string]string{v1alpha1.VDCLabel: in.VDC, clusterv1.ClusterNameLabel: cluster, v1alpha1.NodePoolLabel: in.Name}
	tpl := &v1alpha1.FlexMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: mdName, Labels: maps.Clone(poolLabels), Annotations: map[string]string{
			annCPU: strconv.Itoa(cp.VCPUs), annMemory: strconv.Itoa(cp.MemoryMiB) + "Mi", annMaxPods: strconv.Itoa(defaultPods),
			annLabels: formatLabels(in.Labels), annTaints: formatTaints(in.Taints),
		}},
		Spec: v1alpha1.FlexMachineTemplateSpec{Template: v1alpha1.FlexMachineTemplateResource{Spec: v1alpha1.FlexMachineSpec{
			Image: image, ComputeProfile: in.ComputeProfile, StorageProfile: in.StorageProfile, DiskGiB: s.cfg.WorkerDiskGiB,
		}}},
	}
	sel := map[string]string{clusterv1.ClusterNameLabel: cluster, v1alpha1.NodePoolLabel: in.Name}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: mdName, Labels: maps.Clone(poolLabels), Annotations: map[string]string{
			annMinSize: "0", annMaxSize: strconv.Itoa(MaxPoolSize),
		}},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: cluster,
			Replicas:    ptr.To(int32(in.Size)),
			Selector:    metav1.LabelSelector{MatchLabels: sel},
			// What Cluster API's defaulting webhook would set (it does not
			// run here: Cluster API's controllers run in the orchestrator).
			Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
				Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{
					MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
				},
			}},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: maps.Clone(sel)},
				Spec: clusterv1.MachineSpec{
					ClusterName: cluster,
					Version:     version,
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: mdName}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: v1alpha1.GroupVersion.Group,
						Kind: "FlexMachineTemplate", Name: mdName},
				},
			},
		},
	}
	join := joinTemplate(ns.Name, mdName, poolLabels, in)
	if err := s.c().Create(ctx, join); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("a node pool %q exists", in.Name)}
		}
		return nil, internal("creating the node pool", err)
	}
	if err := s.c().Create(ctx, tpl); err != nil {
		_ = s.c().Delete(context.WithoutCancel(ctx), join)
		if apierrors.IsAlreadyExists(err) {
			return nil, &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("a node pool %q exists", in.Name)}
		}
		return nil, internal("creating the node pool", err)
	}
	if err := s.c().Create(ctx, md); err != nil {
		_ = s.c().Delete(context.WithoutCancel(ctx), tpl)
		_ = s.c().Delete(context.WithoutCancel(ctx), join)
		if apierrors.IsAlreadyExists(err) {
			return nil, &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("a node pool %q exists", in.Name)}
		}
		return nil, internal("creating the node pool", err)
	}
	s.log.Info("node pool created", "vdc", in.VDC, "cluster", ns.Name, "pool", in.Name, "size", in.Size)
	return s.pool(ctx, md, cluster)
}

// fits checks that size more workers of profile cp fit vdc's quota on top
// of what it uses and of the workers its pools still want.
func (s *Service) fits(ctx context.Context, vdc string, cp *catalog.ComputeProfile, more int) error {
	if more <= 0 {
		return nil
	}
	v, err := catalog.Get[*catalog.VDC](ctx, s.cfg.Catalog, vdc)
	if err != nil {
		return internal("reading the VDC", err)
	}
	used, err := s.cfg.Compute.Quota().Usage(ctx, v)
	if err != nil {
		return internal("reading the quota", err)
	}
	pending, err := s.pendingWorkers(ctx, vdc)
	if err != nil {
		return err
	}
	want := quota.Usage{VCPUs: used.VCPUs + pending.VCPUs + more*cp.VCPUs, MemoryMiB: used.MemoryMiB + pending.MemoryMiB + more*cp.MemoryMiB,
		StorageGiB: used.StorageGiB + pending.StorageGiB + more*s.cfg.WorkerDiskGiB, VMs: used.VMs + pending.VMs + more}
	q := v.Quotas
	for _, c := range []struct {
		what      string
		want, max int
	}{{"VMs", want.VMs, q.VMs}, {"vCPUs", want.VCPUs, q.VCPUs}, {"memory MiB", want.MemoryMiB, q.MemoryMiB}, {"storage GiB", want.StorageGiB, q.StorageGiB}} {
		if c.max > 0 && c.want > c.max {
			return &Error{Kind: KindQuotaExceeded, Field: "size", Message: fmt.Sprintf(
				"%d more workers would need %d %s in VDC %s, over its quota of %d", more, c.want, c.what, vdc, c.max)}
		}
	}
	return nil
}

// pendingWorkers is what vdc's pools want beyond the workers that exist.
func (s *Service) pendingWorkers(ctx context.Context, vdc string) (quota.Usage, error) {
	var mds clusterv1.MachineDeploymentList
	if err := s.c().List(ctx, &mds, client.MatchingLabels{v1alpha1.VDCLabel: vdc}); err != nil {
		return quota.Usage{}, internal("listing node pools", err)
	}
	var u quota.Usage
	for i := range mds.Items {
		md := &mds.Items[i]
		var ms clusterv1.MachineList
		if err := s.c().List(ctx, &ms, client.InNamespace(md.Namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name}); err != nil {
			return quota.Usage{}, internal("listing workers", err)
		}
		made := 0
		for _, m := range ms.Items {
			if m.Spec.ProviderID != "" {
				made++
			}
		}
		n := int(ptr.Deref(md.Spec.Replicas, 0)) - made
		if n <= 0 {
			continue
		}
		tpl := &v1alpha1.FlexMachineTemplate{}
		if err := s.c().Get(ctx, client.ObjectKey{Namespace: md.Namespace, Name: md.Spec.Template.Spec.InfrastructureRef.Name}, tpl); err != nil {
			continue
		}
		cp, err := catalog.Get[*catalog.ComputeProfile](ctx, s.cfg.Catalog, tpl.Spec.Template.Spec.ComputeProfile)
		if err != nil {
			continue
		}
		u.VMs += n
		u.VCPUs += n * cp.VCPUs
		u.MemoryMiB += n * cp.MemoryMiB
		u.StorageGiB += n * tpl.Spec.Template.Spec.DiskGiB
	}
	return u, nil
}

// machineDeployment resolves pool id of vdc.
func (s *Service) machineDeployment(ctx context.Context, vdc, id string) (*clusterv1.MachineDeployment, string, error) {
	nsName, pool, ok := strings.Cut(id, "/")
	if !ok {
		return nil, "", notFound("node pool")
	}
	ns, err := s.namespace(ctx, vdc, nsName)
	if err != nil {
		return nil, "", notFound("node pool")
	}
	cluster := ns.Labels[v1alpha1.ClusterNameLabel]
	md := &clusterv1.MachineDeployment{}
	if err := s.c().Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: cluster + "-" + pool}, md); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", notFound("node pool")
		}
		return nil, "", internal("reading the node pool", err)
	}
	return md, cluster, nil
}

// NodePool returns pool id of vdc.
func (s *Service) NodePool(ctx context.Context, vdc, id string) (*NodePool, error) {
	if s == nil {
		return nil, ErrUnavailable
	}
	md, cluster, err := s.machineDeployment(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	return s.pool(ctx, md, cluster)
}

// ScaleNodePool sets the size of pool id (0 to MaxPoolSize); growing is
// refused when the VDC's quota cannot hold the workers, or when the
// cluster's zone was dedicated to other VDCs since (bad input on "id", as
// for a zone that does not exist). Shrinking is always allowed.
func (s *Service) ScaleNodePool(ctx context.Context, vdc, id string, size int) (*NodePool, error) {
	if s == nil {
		return nil, ErrUnavailable
	}
	md, cluster, err := s.machineDeployment(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	if err := validSize(size); err != nil {
		return nil, err
	}
	if !md.DeletionTimestamp.IsZero() {
		return nil, &Error{Kind: KindConflict, Message: "the node pool is being deleted"}
	}
	if more := size - int(ptr.Deref(md.Spec.Replicas, 0)); more > 0 {
		if err := s.workersPlaceable(ctx, vdc, md.Namespace, cluster, "id"); err != nil {
			return nil, err
		}
		tpl := &v1alpha1.FlexMachineTemplate{}
		if err := s.c().Get(ctx, client.ObjectKey{Namespace: md.Namespace, Name: md.Spec.Template.Spec.InfrastructureRef.Name}, tpl); err != nil {
			return nil, internal("reading the node pool", err)
		}
		cp, err := catalog.Get[*catalog.ComputeProfile](ctx, s.cfg.Catalog, tpl.Spec.Template.Spec.ComputeProfile)
		if err != nil {
			return nil, internal("reading the node pool's profile", err)
		}
		if err := s.fits(ctx, vdc, cp, more); err != nil {
			return nil, err
		}
	}
	// Cluster API's controllers write the MachineDeployment too: a
	// conflict is read again and retried (the quota was checked above).
	for attempt := 0; ; attempt++ {
		before := md.DeepCopy()
		md.Spec.Replicas = ptr.To(int32(size))
		err := s.c().Patch(ctx, md, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || attempt == 4 {
			return nil, internal("scaling the node pool", err)
		}
		if err := s.c().Get(ctx, client.ObjectKeyFromObject(md), md); err != nil {
			return nil, internal("scaling the node pool", err)
		}
	}
	s.log.Info("node pool scaled", "vdc", vdc, "pool", id, "size", size)
	return s.pool(ctx, md, cluster)
}

// DeleteNodePool deletes pool id: its workers' VMs go with their machines.
func (s *Service) DeleteNodePool(ctx context.Context, vdc, id string) error {
	if s == nil {
		return ErrUnavailable
	}
	md, cluster, err := s.machineDeployment(ctx, vdc, id)
	if err != nil {
		return err
	}
	if err := s.c().Delete(ctx, md); err != nil && !apierrors.IsNotFound(err) {
		return internal("deleting the node pool", err)
	}
	// The pool's templates (labelled as the pool): the one it has, and
	// those of versions it had.
	if err := s.c().DeleteAllOf(ctx, &v1alpha1.FlexMachineTemplate{}, client.InNamespace(md.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: cluster, v1alpha1.NodePoolLabel: md.Labels[v1alpha1.NodePoolLabel]}); err != nil {
		return internal("deleting the node pool", err)
	}
	if ref := md.Spec.Template.Spec.Bootstrap.ConfigRef; ref.Name != "" {
		join := &bootstrapv1.KubeadmConfigTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: md.Namespace, Name: ref.Name}}
		if err := s.c().Delete(ctx, join); err != nil && !apierrors.IsNotFound(err) {
			return internal("deleting the node pool", err)
		}
	}
	s.log.Info("node pool deleting", "vdc", vdc, "pool", id)
	return nil
}

// ReadOnlyGroup is the group of a viewer's kubeconfig: the control plane
// binds it to the tenant cluster's view ClusterRole.
const ReadOnlyGroup = "view"

// AdminGroup is the group of a member's kubeconfig: bound to the
// cluster-admin ClusterRole in the tenant cluster (never system:masters,
// so the binding can be revoked).
const AdminGroup = "cluster-admin"

// Kubeconfig issues a short-lived kubeconfig of cluster id for user: a
// read-only credential when readOnly (a viewer), else one of AdminGroup.
// It returns when the credential expires.
func (s *Service) Kubeconfig(ctx context.Context, vdc, id, user string, readOnly bool) ([]byte, time.Time, error) {
	if s == nil {
		return nil, time.Time{}, ErrUnavailable
	}
	ns, err := s.namespace(ctx, vdc, id)
	if err != nil {
		return nil, time.Time{}, err
	}
	group := AdminGroup
	if readOnly {
		group = ReadOnlyGroup
	}
	cred := controlplane.Credential{User: user, Groups: []string{group}, TTL: s.cfg.KubeconfigTTL}
	kc, err := s.cfg.ControlPlane.Kubeconfig(ctx, ns.Name, cred)
	if err != nil {
		return nil, time.Time{}, &Error{Kind: KindUnavailable, Message: "the cluster's control plane cannot issue a kubeconfig yet", Cause: err}
	}
	return kc, time.Now().Add(cred.TTL), nil
}

// ClusterStatusCondition returns the status of condition t of c ("" when
// c has none).
func ClusterStatusCondition(c *Cluster, t string) string {
	for _, cd := range c.Conditions {
		if cd.Type == t {
			return cd.Status
		}
	}
	return ""
}

// The phases Cluster API gives a Cluster, as State reports them.
var capiPhases = map[Phase]bool{PhasePending: true, PhaseProvisioning: true, PhaseProvisioned: true, PhaseDeleting: true, PhaseFailed: true}

// State is c's phase as the API shows it: Deleting once its delete began,
// Pending before Cluster API gives it a phase, Unknown for a phase Cluster
// API did not have, else Cluster API's phase.
func (c *Cluster) State() Phase {
	switch {
	case c.Deleting:
		return PhaseDeleting
	case c.Phase == "":
		return PhasePending
	case !capiPhases[Phase(c.Phase)]:
		return PhaseUnknown
	}
	return Phase(c.Phase)
}

// SortedLabels are the pool's labels sorted by key, as key and value.
func (p *NodePool) SortedLabels() [][2]string {
	out := make([][2]string, 0, len(p.Labels))
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		out = append(out, [2]string{k, p.Labels[k]})
	}
	return out
}
