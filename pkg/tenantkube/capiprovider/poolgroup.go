package capiprovider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider/v1alpha1"
)

// A node pool's workers are one placement group of the VDC in the
// cluster's zone: SPREAD, best effort (the workers go to the hosts with
// the fewest of them, and share hosts when the pool has more workers than
// the zone has hosts, rather than being refused). The group is created
// with the pool's first worker and deleted with its last (a pool scaled
// to zero has none until it grows again).

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
	_, err := r.cfg.Compute.CreatePlacementGroup(ctx, compute.PlacementGroupInput{
		VDC: fc.Spec.VDC, Name: name, Zone: fc.Spec.Zone, Policy: compute.PolicySpread, BestEffort: true})
	var ce *compute.Error
	if err != nil && !(errors.As(err, &ce) && ce.Kind == compute.KindConflict && ce.Field == "name") {
		return "", err
	}
	return name, nil
}

// dropPoolGroup deletes the placement group of m's node pool once it has
// no VM left (while it has, the delete is CONFLICT and the pool's last
// worker deletes it).
func (r *machineReconciler) dropPoolGroup(ctx context.Context, fc *v1alpha1.FlexCluster, m *clusterv1.Machine) {
	name := poolGroupName(m)
	if name == "" {
		return
	}
	_, err := r.cfg.Compute.DeletePlacementGroup(ctx, fc.Spec.VDC, fc.Spec.VDC+"."+name)
	var ce *compute.Error
	switch {
	case err == nil:
		r.cfg.Logger.Info("node pool's placement group deleted", "vdc", fc.Spec.VDC, "group", name)
	case errors.As(err, &ce) && (ce.Kind == compute.KindConflict || ce.Kind == compute.KindNotFound):
	default:
		r.cfg.Logger.Warn("deleting a node pool's placement group", "vdc", fc.Spec.VDC, "group", name, "err", err)
	}
}
