package capiprovider

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider/v1alpha1"
	"github.com/flexplane/flexplane/pkg/tenantkube/controlplane"
)

// clusterReconciler provisions FlexClusters: their zone and network are
// flexplane's own, so there is nothing to build.
type clusterReconciler struct {
	client.Client
}

func (r *clusterReconciler) setup(mgr ctrl.Manager, opts controller.Options) error {
	err := ctrl.NewControllerManagedBy(mgr).Named("flexcluster").For(&v1alpha1.FlexCluster{}).WithOptions(opts).Complete(r)
	if err != nil {
		return fmt.Errorf("capiprovider: flexcluster controller: %w", err)
	}
	return nil
}

func (r *clusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	fc := &v1alpha1.FlexCluster{}
	if err := r.Get(ctx, req.NamespacedName, fc); err != nil || !fc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := fc.DeepCopy()
	fc.Status.Initialization.Provisioned = ptr.To(true)
	fc.Status.Ready = true
	fc.Status.FailureDomains = []v1alpha1.FailureDomain{{Name: fc.Spec.Zone, ControlPlane: ptr.To(false)}}
	setReady(&fc.Status.Conditions, fc.Generation, true, "Provisioned", "")
	if err := r.Status().Patch(ctx, fc, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, fmt.Errorf("capiprovider: status of %s: %w", fc.Name, err)
	}
	return ctrl.Result{}, nil
}

// controlPlaneReconciler runs a FlexControlPlane's hosted control plane
// and reports it in the control-plane contract's terms.
type controlPlaneReconciler struct {
	client.Client
	cfg Config
}

// workerNetworks are the networks cp's API server may reach: its cluster's
// workers' network (the FlexCluster's), as createKubernetesCluster records
// them.
func (r *controlPlaneReconciler) workerNetworks(ctx context.Context, cp *v1alpha1.FlexControlPlane) ([]string, error) {
	fc := &v1alpha1.FlexCluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: cp.Namespace, Name: cp.Labels[clusterv1.ClusterNameLabel]}, fc); err != nil {
		return nil, fmt.Errorf("capiprovider: the cluster of %s: %w", cp.Namespace, err)
	}
	sub, err := r.cfg.Compute.Network(ctx, fc.Spec.VDC, fc.Spec.Zone, fc.Spec.Network)
	if err != nil {
		return nil, fmt.Errorf("capiprovider: the workers' network of %s: %w", cp.Namespace, err)
	}
	return []string{sub.Prefix.Masked().String()}, nil
}

func (r *controlPlaneReconciler) setup(mgr ctrl.Manager, opts controller.Options) error {
	err := ctrl.NewControllerManagedBy(mgr).Named("flexcontrolplane").For(&v1alpha1.FlexControlPlane{}).WithOptions(opts).Complete(r)
	if err != nil {
		return fmt.Errorf("capiprovider: flexcontrolplane controller: %w", err)
	}
	return nil
}

func (r *controlPlaneReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cp := &v1alpha1.FlexControlPlane{}
	if err := r.Get(ctx, req.NamespacedName, cp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cp.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(cp, v1alpha1.ControlPlaneFinalizer) {
			return ctrl.Result{}, nil
		}
		if err := r.cfg.ControlPlane.Delete(ctx, cp.Namespace); err != nil {
			return ctrl.Result{}, fmt.Errorf("capiprovider: deleting the control plane of %s: %w", cp.Namespace, err)
		}
		controllerutil.RemoveFinalizer(cp, v1alpha1.ControlPlaneFinalizer)
		return ctrl.Result{}, client.IgnoreNotFound(r.Update(ctx, cp))
	}
	if controllerutil.AddFinalizer(cp, v1alpha1.ControlPlaneFinalizer) {
		if err := r.Update(ctx, cp); err != nil {
			return ctrl.Result{}, err
		}
	}
	if len(cp.Spec.Networks) == 0 {
		// A control plane made before its networks were recorded: its
		// egress proxy would refuse everything (no node proxy, logs or
		// exec). They are its cluster's workers' network, read again.
		nets, err := r.workerNetworks(ctx, cp)
		if err != nil {
			return ctrl.Result{}, err
		}
		cp.Spec.Networks = nets
		if err := r.Update(ctx, cp); err != nil {
			return ctrl.Result{}, fmt.Errorf("capiprovider: recording the networks of %s: %w", cp.Namespace, err)
		}
		r.cfg.Logger.Info("recorded a control plane's networks", "namespace", cp.Namespace, "networks", nets)
	}
	ep := cp.Spec.ControlPlaneEndpoint
	err := r.cfg.ControlPlane.Ensure(ctx, controlplane.Spec{
		Namespace: cp.Namespace, Cluster: cp.Labels[clusterv1.ClusterNameLabel], VDC: cp.Spec.VDC, Version: cp.Spec.Version,
		ServiceCIDR: cp.Spec.ServiceCIDR, PodCIDR: cp.Spec.PodCIDR,
		Endpoint: ep.String(), Networks: cp.Spec.Networks,
	})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("capiprovider: control plane of %s: %w", cp.Namespace, err)
	}
	st, err := r.cfg.ControlPlane.Status(ctx, cp.Namespace)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("capiprovider: control plane status of %s: %w", cp.Namespace, err)
	}
	before := cp.DeepCopy()
	if st.Ready {
		// Initialized stays true once the API server served.
		cp.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
		cp.Status.Initialized = true
	}
	cp.Status.Ready = st.Ready
	cp.Status.Version = st.Version
	for _, c := range st.Components {
		s, reason := metav1.ConditionFalse, "NotReady"
		if c.Ready {
			s, reason = metav1.ConditionTrue, "Ready"
		}
		meta.SetStatusCondition(&cp.Status.Conditions, metav1.Condition{Type: componentCondition(c.Name), Status: s, Reason: reason,
			Message: c.Message, ObservedGeneration: cp.Generation})
	}
	avail, reason := metav1.ConditionFalse, "NotReady"
	if st.Ready {
		avail, reason = metav1.ConditionTrue, "Ready"
	}
	meta.SetStatusCondition(&cp.Status.Conditions, metav1.Condition{Type: clusterv1.AvailableCondition, Status: avail, Reason: reason, ObservedGeneration: cp.Generation})
	if err := r.Status().Patch(ctx, cp, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, fmt.Errorf("capiprovider: status of %s: %w", cp.Name, err)
	}
	if !st.Ready {
		return ctrl.Result{RequeueAfter: r.cfg.Poll}, nil
	}
	if st.Version != cp.Spec.Version {
		// An upgrade is under way: the new API server is not the one serving yet.
		return ctrl.Result{RequeueAfter: r.cfg.Poll}, nil
	}
	if err := r.rollWorkers(ctx, cp); err != nil {
		return ctrl.Result{}, err
	}
	// The workers' kubelets ask for serving certificates: approve those
	// of the cluster's networks. A tenant API server that does not
	// answer is looked at again later, as its components are.
	if err := r.cfg.ControlPlane.ApproveKubeletServing(ctx, cp.Namespace, cp.Spec.Networks); err != nil {
		r.cfg.Logger.Warn("kubelet serving certificates not decided", "namespace", cp.Namespace, "err", err)
	}
	// Components can fail later: look again now and then.
	return ctrl.Result{RequeueAfter: 15 * r.cfg.Poll}, nil
}

// rollWorkers moves the node pools of cp's cluster to the version its
// control plane runs: Cluster API replaces each pool's workers by new ones
// of that version (the pools roll one worker at a time). Workers follow the
// control plane, never lead it, as Kubernetes' skew policy asks.
func (r *controlPlaneReconciler) rollWorkers(ctx context.Context, cp *v1alpha1.FlexControlPlane) error {
	var mds clusterv1.MachineDeploymentList
	cluster := cp.Labels[clusterv1.ClusterNameLabel]
	if err := r.List(ctx, &mds, client.InNamespace(cp.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
		return fmt.Errorf("capiprovider: node pools of %s: %w", cp.Namespace, err)
	}
	for i := range mds.Items {
		md := &mds.Items[i]
		if md.Spec.Template.Spec.Version == cp.Spec.Version || !md.DeletionTimestamp.IsZero() {
			continue
		}
		before := md.DeepCopy()
		tpl, err := r.versionTemplate(ctx, md, cp.Spec.Version)
		if err != nil {
			return err
		}
		md.Spec.Template.Spec.InfrastructureRef.Name = tpl
		md.Spec.Template.Spec.Version = cp.Spec.Version
		if err := r.Patch(ctx, md, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("capiprovider: moving node pool %s/%s to %s: %w", md.Namespace, md.Name, cp.Spec.Version, err)
		}
		r.cfg.Logger.Info("node pool rolling to a new version", "namespace", md.Namespace, "pool", md.Name, "version", cp.Spec.Version)
	}
	return nil
}

// versionTemplate returns the name of the FlexMachineTemplate md's workers
// of version are made from: the one md has when its image is that
// version's worker image, else a copy of it with that image, named after
// the pool and the version (templates are not changed in place: the
// pool's machines of the old version keep theirs).
func (r *controlPlaneReconciler) versionTemplate(ctx context.Context, md *clusterv1.MachineDeployment, version string) (string, error) {
	name := md.Spec.Template.Spec.InfrastructureRef.Name
	if r.cfg.WorkerImage == nil {
		return name, nil
	}
	img := r.cfg.WorkerImage(version)
	cur := &v1alpha1.FlexMachineTemplate{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: md.Namespace, Name: name}, cur); err != nil {
		return "", fmt.Errorf("capiprovider: template of node pool %s/%s: %w", md.Namespace, md.Name, err)
	}
	if cur.Spec.Template.Spec.Image == img {
		return name, nil
	}
	next := &v1alpha1.FlexMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: md.Namespace, Name: md.Name + "-" + versionSuffix(version),
		Labels: cur.Labels, Annotations: cur.Annotations}, Spec: *cur.Spec.DeepCopy()}
	next.Spec.Template.Spec.Image = img
	if err := r.Create(ctx, next); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("capiprovider: template of node pool %s/%s for %s: %w", md.Namespace, md.Name, version, err)
	}
	r.cfg.Logger.Info("node pool gets a worker image", "namespace", md.Namespace, "pool", md.Name, "version", version, "image", img)
	return next.Name, nil
}

// versionSuffix is a version as a name's part: "v1.37.2" -> "v1-37-2".
func versionSuffix(v string) string { return strings.ReplaceAll(v, ".", "-") }

// componentCondition is the condition type of a control-plane component
// ("kube-apiserver" -> "KubeApiserverReady").
func componentCondition(name string) string {
	out := make([]byte, 0, len(name)+5)
	up := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '-' || c == '_' || c == '.':
			up = true
			continue
		case up && c >= 'a' && c <= 'z':
			c -= 'a' - 'A'
		}
		up = false
		if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
			out = append(out, c)
		}
	}
	return string(out) + "Ready"
}
