package tenantkube

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/mod/semver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider/v1alpha1"
)

// UpgradeKubernetesCluster moves cluster id of vdc to version: the hosted
// control plane is upgraded first (its chart release, by the provider), and
// once its API server runs version, the node pools' workers are replaced by
// workers of version, one at a time (Cluster API's rolling update).
//
// Kubernetes' version skew policy holds: no downgrade, and at most one
// minor version per upgrade; a cluster still upgrading, or being deleted,
// is refused with KindConflict. The new workers replace the old in the
// cluster's zone, so a cluster with workers wanted in a zone dedicated to
// other VDCs since is refused as a scale up is (bad input on "id"). Asking
// for the version the cluster has is not an error. A refused upgrade
// changes nothing.
func (s *Service) UpgradeKubernetesCluster(ctx context.Context, vdc, id, version string) (*Cluster, error) {
	if s == nil {
		return nil, ErrUnavailable
	}
	ns, err := s.namespace(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	if err := s.validVersion(version); err != nil {
		return nil, err
	}
	if !ns.DeletionTimestamp.IsZero() {
		return nil, &Error{Kind: KindConflict, Message: "the cluster is being deleted"}
	}
	key := client.ObjectKey{Namespace: ns.Name, Name: ns.Labels[v1alpha1.ClusterNameLabel]}
	for attempt := 0; ; attempt++ {
		cp := &v1alpha1.FlexControlPlane{}
		if err := s.c().Get(ctx, key, cp); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &Error{Kind: KindConflict, Message: "the cluster is being deleted"}
			}
			return nil, internal("reading the cluster", err)
		}
		if !cp.DeletionTimestamp.IsZero() {
			return nil, &Error{Kind: KindConflict, Message: "the cluster is being deleted"}
		}
		from := cp.Spec.Version
		if from == version {
			return s.read(ctx, ns)
		}
		if err := upgradeStep(from, version); err != nil {
			return nil, err
		}
		if cp.Status.Version != from {
			return nil, &Error{Kind: KindConflict, Message: fmt.Sprintf("the control plane does not run %s yet", from)}
		}
		pools, err := s.poolsAt(ctx, ns.Name, key.Name, from)
		if err != nil {
			return nil, err
		}
		// The workers of the new version are made from its image.
		if img := s.WorkerImage(version); !s.hasImage(ctx, img) {
			return nil, badInput("version", "the worker image %q of %s is not in the image catalog", img, version)
		}
		// The new workers replace the old in the cluster's zone.
		if slices.ContainsFunc(pools, func(p NodePool) bool { return p.Size > 0 }) {
			if err := s.workersPlaceable(ctx, vdc, ns.Name, key.Name, "id"); err != nil {
				return nil, err
			}
		}
		before := cp.DeepCopy()
		cp.Spec.Version = version
		err = s.c().Patch(ctx, cp, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if err == nil {
			break
		}
		// The provider writes the object's status and finalizers too.
		if !apierrors.IsConflict(err) || attempt == 4 {
			return nil, internal("upgrading the cluster", err)
		}
	}
	s.log.Info("kubernetes cluster upgrading", "vdc", vdc, "cluster", id, "version", version)
	return s.read(ctx, ns)
}

// poolsAt returns the node pools of cluster (in namespace ns), refusing an
// upgrade while one of them still moves its workers: the pool's version is
// not version, or not all its workers run it (as the pool reads in the
// API).
func (s *Service) poolsAt(ctx context.Context, ns, cluster, version string) ([]NodePool, error) {
	pools, err := s.pools(ctx, ns, cluster)
	if err != nil {
		return nil, err
	}
	for _, p := range pools {
		if p.Version != version || p.UpToDate != p.Workers {
			return nil, &Error{Kind: KindConflict, Message: fmt.Sprintf("node pool %s is still moving its workers to %s", p.Name, p.Version)}
		}
	}
	return pools, nil
}

// upgradeStep checks that a cluster of version from may move to version
// to under Kubernetes' skew policy: same major, no downgrade, at most one
// minor version further.
func upgradeStep(from, to string) error {
	if semver.Compare(to, from) < 0 {
		return badInput("version", "%s is older than the cluster's %s: Kubernetes cannot be downgraded", to, from)
	}
	fMaj, fMin, ok1 := majorMinor(from)
	tMaj, tMin, ok2 := majorMinor(to)
	if !ok1 || !ok2 || fMaj != tMaj || tMin > fMin+1 {
		return badInput("version", "the cluster runs %s: it upgrades one minor version at a time (to %s.%d.x at most)", from, semver.Major(from), fMin+1)
	}
	return nil
}

// majorMinor parses "vX.Y.Z" into X and Y.
func majorMinor(v string) (maj, minor int, ok bool) {
	mm := semver.MajorMinor(v)
	if mm == "" {
		return 0, 0, false
	}
	a, b, _ := strings.Cut(strings.TrimPrefix(mm, "v"), ".")
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	return x, y, err1 == nil && err2 == nil
}

// hasImage says whether the catalog holds image name.
func (s *Service) hasImage(ctx context.Context, name string) bool {
	_, err := catalog.Get[*catalog.Image](ctx, s.cfg.Catalog, name)
	return err == nil
}
