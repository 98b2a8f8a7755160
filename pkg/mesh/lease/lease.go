// Package lease holds what the replicas' elections share: the timings of
// a Kubernetes Lease election with their defaults, and an elector of one
// named Lease. The mesh control leader (pkg/mesh/meshleader) and the sync
// shards' owners (pkg/mesh/syncowner) each run theirs on it.
package lease

import (
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Default timings: a dead holder is replaced DefaultDuration after its
// last renewal, plus up to DefaultRetryPeriod.
const (
	DefaultDuration      = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Timings are client-go's election timings.
type Timings struct {
	// Duration is how long a Lease holds without renewal. Default
	// DefaultDuration.
	Duration time.Duration
	// RenewDeadline is how long the holder keeps trying to renew before
	// it gives the Lease up. Default DefaultRenewDeadline.
	RenewDeadline time.Duration
	// RetryPeriod is how often a candidate tries to take the Lease, and
	// the holder to renew it. Default DefaultRetryPeriod.
	RetryPeriod time.Duration
}

// WithDefaults is t with the defaults where a field is zero.
func (t Timings) WithDefaults() Timings {
	if t.Duration == 0 {
		t.Duration = DefaultDuration
	}
	if t.RenewDeadline == 0 {
		t.RenewDeadline = DefaultRenewDeadline
	}
	if t.RetryPeriod == 0 {
		t.RetryPeriod = DefaultRetryPeriod
	}
	return t
}

// Election is one Lease's election as a replica takes part in it.
type Election struct {
	// Client reaches the Kubernetes API holding the Lease.
	Client kubernetes.Interface
	// Namespace and Name name the Lease.
	Namespace, Name string
	// Identity is this replica's name in the Lease; it must differ
	// between replicas.
	Identity string
	// Timings are the election's (defaults for zero fields).
	Timings Timings
	// Callbacks are client-go's: OnStartedLeading and OnStoppedLeading
	// are required.
	Callbacks leaderelection.LeaderCallbacks
	// WrapLock, if set, wraps the Lease lock (a test's failing writes).
	WrapLock func(resourcelock.Interface) resourcelock.Interface
}

// NewElector is the elector of e, which releases the Lease when its Run's
// context ends.
func NewElector(e Election) (*leaderelection.LeaderElector, error) {
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, e.Namespace, e.Name, e.Client.CoreV1(), e.Client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: e.Identity})
	if err != nil {
		return nil, fmt.Errorf("lease %s/%s: lock: %w", e.Namespace, e.Name, err)
	}
	if e.WrapLock != nil {
		lock = e.WrapLock(lock)
	}
	t := e.Timings.WithDefaults()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   t.Duration,
		RenewDeadline:   t.RenewDeadline,
		RetryPeriod:     t.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.Name,
		Callbacks:       e.Callbacks,
	})
	if err != nil {
		return nil, fmt.Errorf("lease %s/%s: %w", e.Namespace, e.Name, err)
	}
	return le, nil
}
