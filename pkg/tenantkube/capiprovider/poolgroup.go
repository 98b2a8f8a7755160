package capiprovider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider/v1alpha1"
)

// A node pool's workers are one placement group of the VDC in the
// cluster's zone: SPREAD, best effort (the workers go to the hosts with
// the fewest of them, and share hosts when the pool has more workers than
// the zone has hosts, rather than being refused). The group is created
// with the pool's first worker and deleted with its last (a pool scaled
// to zero has none until it grows again): the last worker's delete waits
// until the other workers' VMs are gone, then deletes it.

// poolGroupName is the placement group of node pool pool of cluster: a
// DNS label ("k8s-<cluster>-<pool>", shortened with a hash when longer
// than 63 characters); "" when the machine is of no pool.
func poolGroupName(m *clusterv1.Machine) string {
	if m == nil {
		return ""
	}
	pool := m.Labels[v1alpha1.NodePoolLabel]
	if pool == "" {
		return ""
	}
	n := "k8s-" + m.Spec.ClusterName + "-" + pool
	if len(n) <= 63 {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	return n[:50] + "-" + hex.EncodeToString(sum[:])[:12]
}

// ensurePoolGroup creates the placement group of m's node pool in fc's
// zone when it does not exist, and returns its name ("" for none).
func (r *machineReconciler) ensurePoolGroup(ctx context.Context, fc *v1alpha1.FlexCluster, m *clusterv1.Machine) (string, error) {
	name := poolGroupName(m)
	if name == "" {
		return "", nil
	}
	_, err := r.cfg.Compute.PlacementGroups().Create(ctx, compute.PlacementGroupInput{
		VDC: fc.Spec.VDC, Name: name, Zone: fc.Spec.Zone, Policy: compute.PolicySpread, BestEffort: true})
	var ce *compute.Error
	if err != nil && !(errors.As(err, &ce) && ce.Kind == compute.KindConflict && ce.Field == "name") {
		return "", err
	}
	return name, nil
}

// dropPoolGroup deletes the placement group of m's node pool once it has
// no VM left. While other workers of the pool have VMs the delete is
// CONFLICT: when every Machine of the pool is being deleted (the pool
// scaled to zero, or deleted with its cluster), requeue is true, so that
// the pool's last worker to go deletes the group; otherwise the pool
// lives on and keeps it.
func (r *machineReconciler) dropPoolGroup(ctx context.Context, fc *v1alpha1.FlexCluster, m *clusterv1.Machine) (requeue bool) {
	name := poolGroupName(m)
	if name == "" {
		return false
	}
	_, err := r.cfg.Compute.PlacementGroups().Delete(ctx, fc.Spec.VDC, fc.Spec.VDC+"."+name)
	var ce *compute.Error
	switch {
	case err == nil:
		r.cfg.Logger.Info("node pool's placement group deleted", "vdc", fc.Spec.VDC, "group", name)
		return false
	case errors.As(err, &ce) && ce.Kind == compute.KindNotFound:
		return false
	case errors.As(err, &ce) && ce.Kind == compute.KindConflict:
		var ms clusterv1.MachineList
		if err := r.List(ctx, &ms, client.InNamespace(m.Namespace), client.MatchingLabels{
			clusterv1.ClusterNameLabel: m.Spec.ClusterName, v1alpha1.NodePoolLabel: m.Labels[v1alpha1.NodePoolLabel]}); err != nil {
			return true
		}
		for _, o := range ms.Items {
			if o.DeletionTimestamp.IsZero() {
				return false
			}
		}
		return true
	default:
		r.cfg.Logger.Warn("deleting a node pool's placement group", "vdc", fc.Spec.VDC, "group", name, "err", err)
		return true
	}
}
