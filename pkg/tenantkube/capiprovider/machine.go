package capiprovider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider/v1alpha1"
)

// ProviderIDPrefix starts the providerID of every flexplane machine.
const ProviderIDPrefix = "flexplane://"

// machineReconciler gives each FlexMachine its worker VM.
type machineReconciler struct {
	client.Client
	// api reads around the cache: a FlexMachine is read as last written,
	// so a create recorded in its status is never made twice.
	api client.Reader
	// tenants reaches the tenant clusters' API servers.
	tenants clustercache.ClusterCache
	cfg     Config
}

func (r *machineReconciler) setup(mgr ctrl.Manager, opts controller.Options) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("flexmachine").
		For(&v1alpha1.FlexMachine{}).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(machineToFlexMachine)).
		WithOptions(opts).
		Complete(r)
	if err != nil {
		return fmt.Errorf("capiprovider: flexmachine controller: %w", err)
	}
	return nil
}

// machineToFlexMachine maps a Machine to its FlexMachine (a Machine gets
// its bootstrap data after its FlexMachine was made).
func machineToFlexMachine(_ context.Context, o client.Object) []ctrl.Request {
	m, ok := o.(*clusterv1.Machine)
	if !ok || m.Spec.InfrastructureRef.Kind != "FlexMachine" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}}}
}

// Reconcile moves one FlexMachine towards its VM: wait for the owner
// Machine, its Cluster and bootstrap data; create the VM (once: a VM of
// that name in the VDC is the machine's); report it when it runs; delete
// it when the machine goes.
func (r *machineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	fm := &v1alpha1.FlexMachine{}
	if err := r.api.Get(ctx, req.NamespacedName, fm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	fc, err := r.flexCluster(ctx, fm)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !fm.DeletionTimestamp.IsZero() {
		return r.delete(ctx, fm, fc)
	}
	m, err := util.GetOwnerMachine(ctx, r.Client, fm.ObjectMeta)
	if err != nil || m == nil || fc == nil {
		// The Machine controller sets the owner reference; the watch on
		// Machines brings the FlexMachine back.
		return ctrl.Result{RequeueAfter: r.cfg.Poll}, client.IgnoreNotFound(err)
	}
	if controllerutil.AddFinalizer(fm, v1alpha1.MachineFinalizer) {
		if err := r.Update(ctx, fm); err != nil {
			return ctrl.Result{}, err
		}
	}
	if m.Spec.Bootstrap.DataSecretName == nil {
		return ctrl.Result{}, r.setCondition(ctx, fm, false, "WaitingForBootstrapData", "the Machine has no bootstrap data yet")
	}
	before := fm.DeepCopy()
	vm, err := r.ensureVM(ctx, fm, fc, m)
	if err != nil {
		var ce *compute.Error
		if errors.As(err, &ce) && ce.Kind != compute.KindInternal {
			// Refused (quota, input, a zone down): said on the machine,
			// tried again later.
			_ = r.patchStatus(ctx, before, fm, false, "VMCreateRefused", ce.Error())
			return ctrl.Result{RequeueAfter: 10 * r.cfg.Poll}, nil
		}
		return ctrl.Result{}, err
	}
	if vm == nil || vm.Status != compute.StatusRunning {
		return ctrl.Result{RequeueAfter: r.cfg.Poll}, r.patchStatus(ctx, before, fm, false, "VMCreating", "the VM is being created")
	}
	if fm.Spec.ProviderID == "" {
		spec := fm.DeepCopy()
		fm.Spec.ProviderID = providerID(vm.ID, fm.Name)
		if err := r.Patch(ctx, fm, client.MergeFrom(spec)); err != nil {
			return ctrl.Result{}, err
		}
		before = fm.DeepCopy()
	}
	fm.Status.VM = vm.ID
	fm.Status.Operation = ""
	fm.Status.FailureDomain = vm.Zone
	fm.Status.Addresses = []v1alpha1.MachineAddress{{Type: string(clusterv1.MachineHostName), Address: vm.Name}}
	for _, a := range vm.Addresses {
		fm.Status.Addresses = append(fm.Status.Addresses, v1alpha1.MachineAddress{Type: string(clusterv1.MachineInternalIP), Address: a})
	}
	fm.Status.Initialization.Provisioned = ptr.To(true)
	fm.Status.Ready = true
	if err := r.patchStatus(ctx, before, fm, true, "VMRunning", ""); err != nil {
		return ctrl.Result{}, err
	}
	return r.nameNode(ctx, fm, m)
}

// nameNode gives the worker's Node in the tenant cluster fm's providerID,
// which Cluster API's machine controller finds it by. A worker's kubelet
// registers a Node named after its host name (the VM's name, fm's) and
// knows no provider id of its own: flexplane sets it, as a cloud
// controller manager would. It looks again every few polls until the
// Machine has its Node.
func (r *machineReconciler) nameNode(ctx context.Context, fm *v1alpha1.FlexMachine, m *clusterv1.Machine) (ctrl.Result, error) {
	if m.Status.NodeRef.Name != "" {
		return ctrl.Result{}, nil
	}
	again := ctrl.Result{RequeueAfter: 4 * r.cfg.Poll}
	c, err := r.tenants.GetClient(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.ClusterName})
	if err != nil {
		return again, nil // the tenant API server is not reachable yet
	}
	n := &corev1.Node{}
	switch err := c.Get(ctx, client.ObjectKey{Name: fm.Name}, n); {
	case apierrors.IsNotFound(err):
		return again, nil // the worker has not joined yet
	case err != nil:
		return again, nil
	}
	switch n.Spec.ProviderID {
	case fm.Spec.ProviderID:
		return again, nil // the machine controller finds it soon
	case "":
		before := n.DeepCopy()
		n.Spec.ProviderID = fm.Spec.ProviderID
		if err := c.Patch(ctx, n, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, fmt.Errorf("capiprovider: naming node %s: %w", n.Name, err)
		}
		r.cfg.Logger.Info("worker node named", "namespace", fm.Namespace, "node", n.Name, "providerID", fm.Spec.ProviderID)
		return again, nil
	default:
		// Not this machine's worker: a Node's provider id never changes.
		r.cfg.Logger.Warn("a node of the worker's name has another provider id", "namespace", fm.Namespace, "node", n.Name,
			"providerID", n.Spec.ProviderID, "want", fm.Spec.ProviderID)
		return ctrl.Result{RequeueAfter: 15 * r.cfg.Poll}, nil
	}
}

// providerID is the provider id of machine name with VM vmID. The machine's
// name is in it because Proxmox hands a deleted VM's number to the next VM:
// a worker replaced by one on the same number must not share its Node's id.
func providerID(vmID, name string) string {
	return ProviderIDPrefix + vmID + "/" + name
}

// flexCluster returns the FlexCluster of fm's Cluster (nil while there is
// none).
func (r *machineReconciler) flexCluster(ctx context.Context, fm *v1alpha1.FlexMachine) (*v1alpha1.FlexCluster, error) {
	name := fm.Labels[clusterv1.ClusterNameLabel]
	if name == "" {
		return nil, nil
	}
	c := &clusterv1.Cluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: fm.Namespace, Name: name}, c); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	fc := &v1alpha1.FlexCluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: fm.Namespace, Name: c.Spec.InfrastructureRef.Name}, fc); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return fc, nil
}

// ensureVM returns fm's VM, creating it when it does not exist (nil while
// its create stages the image).
func (r *machineReconciler) ensureVM(ctx context.Context, fm *v1alpha1.FlexMachine, fc *v1alpha1.FlexCluster, m *clusterv1.Machine) (*compute.VM, error) {
	if id := vmID(fm); id != "" {
		vm, err := r.cfg.Compute.VM(ctx, fc.Spec.VDC, id)
		if isNotFound(err) {
			return nil, fmt.Errorf("capiprovider: the VM %s of machine %s is gone", id, fm.Name)
		}
		return vm, err
	}
	if fm.Status.Operation != "" {
		op, err := r.cfg.Compute.Operation(ctx, fc.Spec.VDC, fm.Status.Operation)
		if err == nil && op.VMID != "" {
			fm.Status.VM = op.VMID
			return r.cfg.Compute.VM(ctx, fc.Spec.VDC, op.VMID)
		}
		if err == nil && !op.Done() {
			return nil, nil
		}
		if err == nil && op.State == compute.OpFailed {
			fm.Status.Operation = ""
			return nil, fmt.Errorf("capiprovider: creating the VM of machine %s: %s", fm.Name, op.Error)
		}
		// An operation this replica does not know: look for the VM by name.
	}
	if vm, err := r.cfg.Compute.VMByName(ctx, fc.Spec.VDC, fc.Spec.Zone, fm.Name); err != nil || vm != nil {
		return vm, err
	}
	data, err := r.bootstrapData(ctx, m)
	if err != nil {
		return nil, err
	}
	group, err := r.ensurePoolGroup(ctx, fc, m)
	if err != nil {
		return nil, err
	}
	vm, op, err := r.cfg.Compute.CreateVM(ctx, compute.CreateInput{
		VDC: fc.Spec.VDC, Name: fm.Name, Zone: fc.Spec.Zone, Image: fm.Spec.Image,
		ComputeProfile: fm.Spec.ComputeProfile, StorageProfile: fm.Spec.StorageProfile, DiskGiB: fm.Spec.DiskGiB,
		NICs: []compute.NICInput{{Network: fc.Spec.Network}}, User: r.cfg.WorkerUser, UserData: data, UserDataVerbatim: true,
		PlacementGroup: group,
	})
	if err != nil {
		return nil, err
	}
	fm.Status.Operation = op.ID
	if vm != nil {
		fm.Status.VM = vm.ID
	}
	return vm, nil
}

// vmID is the VM id fm already knows.
func vmID(fm *v1alpha1.FlexMachine) string {
	if id, ok := strings.CutPrefix(fm.Spec.ProviderID, ProviderIDPrefix); ok {
		id, _, _ = strings.Cut(id, "/")
		return id
	}
	return fm.Status.VM
}

// bootstrapData reads the Machine's bootstrap data Secret (key "value").
func (r *machineReconciler) bootstrapData(ctx context.Context, m *clusterv1.Machine) ([]byte, error) {
	s := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: *m.Spec.Bootstrap.DataSecretName}, s); err != nil {
		return nil, fmt.Errorf("capiprovider: bootstrap data of machine %s: %w", m.Name, err)
	}
	data, ok := s.Data["value"]
	if !ok {
		return nil, fmt.Errorf("capiprovider: bootstrap data secret %s has no key \"value\"", s.Name)
	}
	return data, nil
}

// delete deletes fm's VM, then lets fm go.
func (r *machineReconciler) delete(ctx context.Context, fm *v1alpha1.FlexMachine, fc *v1alpha1.FlexCluster) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(fm, v1alpha1.MachineFinalizer) {
		return ctrl.Result{}, nil
	}
	if fc != nil {
		id := vmID(fm)
		if id == "" {
			vm, err := r.cfg.Compute.VMByName(ctx, fc.Spec.VDC, fc.Spec.Zone, fm.Name)
			if err != nil {
				return ctrl.Result{}, err
			}
			if vm != nil {
				id = vm.ID
			} else if fm.Status.Operation != "" {
				if op, err := r.cfg.Compute.Operation(ctx, fc.Spec.VDC, fm.Status.Operation); err == nil && !op.Done() {
					return ctrl.Result{RequeueAfter: r.cfg.Poll}, nil // its guest appears soon
				}
			}
		}
		if id != "" {
			op, err := r.cfg.Compute.DeleteVM(ctx, fc.Spec.VDC, id)
			switch {
			case isNotFound(err):
			case err != nil:
				return ctrl.Result{}, fmt.Errorf("capiprovider: deleting VM %s: %w", id, err)
			case op.State == compute.OpFailed:
				return ctrl.Result{}, fmt.Errorf("capiprovider: deleting VM %s: %s", id, op.Error)
			case !op.Done():
				return ctrl.Result{RequeueAfter: r.cfg.Poll}, nil
			}
		}
		if m, err := util.GetOwnerMachine(ctx, r.Client, fm.ObjectMeta); err == nil && r.dropPoolGroup(ctx, fc, m) {
			return ctrl.Result{RequeueAfter: r.cfg.Poll}, nil
		}
	}
	controllerutil.RemoveFinalizer(fm, v1alpha1.MachineFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Update(ctx, fm))
}

// setCondition records fm's Ready condition only.
func (r *machineReconciler) setCondition(ctx context.Context, fm *v1alpha1.FlexMachine, ready bool, reason, msg string) error {
	return r.patchStatus(ctx, fm.DeepCopy(), fm, ready, reason, msg)
}

// patchStatus writes fm's status with its Ready condition.
func (r *machineReconciler) patchStatus(ctx context.Context, before, fm *v1alpha1.FlexMachine, ready bool, reason, msg string) error {
	setReady(&fm.Status.Conditions, fm.Generation, ready, reason, msg)
	if err := r.Status().Patch(ctx, fm, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("capiprovider: status of %s: %w", fm.Name, err)
	}
	return nil
}

// setReady sets the Ready condition in conds.
func setReady(conds *[]metav1.Condition, gen int64, ready bool, reason, msg string) {
	st := metav1.ConditionFalse
	if ready {
		st = metav1.ConditionTrue
	}
	meta.SetStatusCondition(conds, metav1.Condition{Type: clusterv1.ReadyCondition, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// isNotFound reports whether err is compute's NOT_FOUND.
func isNotFound(err error) bool {
	var ce *compute.Error
	return errors.As(err, &ce) && ce.Kind == compute.KindNotFound
}
