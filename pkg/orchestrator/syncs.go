package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flexplane/flexplane/pkg/audit"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/mesh/meshleader"
	"github.com/flexplane/flexplane/pkg/mesh/syncowner"
	"github.com/flexplane/flexplane/pkg/support/metrics"
)

// syncs is what the edge gateways' and load balancers' syncs share: the
// catalog's watch, the shards this replica owns, and their lag metric.
type syncs struct {
	store    catalog.Store
	registry *fleet.Registry
	owner    *syncowner.Owner // nil: this replica owns every zone (alone)
	lag      prometheus.Observer

	mu   sync.Mutex
	kick []func() // the syncs to kick when a shard is gained or lost; protected by mu
}

// newSyncOwner joins the sync shards' elections when replicated (leader
// set), and registers the syncs' metrics.
func (s *Server) newSyncOwner(ctx context.Context, store catalog.Store, registry *fleet.Registry, leader *meshleader.Leader, reg prometheus.Registerer) (*syncs, error) {
	lag := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    metrics.Namespace + "_sync_lag_seconds",
		Help:    "Time from a change (of the catalog, a zone's hosts or an agent's gateways) to the end of the sync pass that follows it, by syncer.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"syncer"})
	y := &syncs{store: store, registry: registry, lag: lag.WithLabelValues("edge")}
	if reg != nil {
		if err := reg.Register(lag); err != nil {
			return nil, fmt.Errorf("sync metrics: %w", err)
		}
	}
	if leader == nil {
		return y, nil
	}
	rc, ns, err := s.cfg.Kube.REST()
	if err != nil {
		return nil, fmt.Errorf("sync shards: %w", err)
	}
	r := s.cfg.Replication
	y.owner, err = syncowner.Start(ctx, syncowner.Config{Kube: rc, Namespace: ns, LeasePrefix: r.SyncLeasePrefix, Shards: r.SyncShards,
		Identity: r.PeerURL, LeaseDuration: r.LeaseDuration, RenewDeadline: r.RenewDeadline, RetryPeriod: r.RetryPeriod,
		Changed: y.changed, Logger: s.log})
	if err != nil {
		return nil, err
	}
	if reg != nil {
		if err := reg.Register(y.owner); err != nil {
			y.owner.Close()
			return nil, fmt.Errorf("sync metrics: %w", err)
		}
	}
	// The owner of a zone's shard samples its agents' liveness too; the
	// other replicas take it from the mesh and from what the owner
	// publishes.
	registry.Share(&sampling{owner: y.owner, decoded: map[string]decodedDown{}})
	return y, nil
}

// sampling is fleet.Sharing over the sync shards: the replica owning a
// zone's shard checks its agents' liveness and publishes the hosts not
// online in the shard's ConfigMap.
type sampling struct {
	owner *syncowner.Owner

	mu      sync.Mutex
	decoded map[string]decodedDown // by zone: the last document read; protected by mu
}

// decodedDown is a zone's published document and what it decodes to.
type decodedDown struct {
	doc  string
	down map[uint64]fleet.Down
}

// Samples implements fleet.Sharing.
func (s *sampling) Samples(zone string) bool { return s.owner.Owns(zone) }

// Publish implements fleet.Sharing.
func (s *sampling) Publish(ctx context.Context, zone string, down map[uint64]fleet.Down) error {
	b, err := json.Marshal(down)
	if err != nil {
		return fmt.Errorf("publish hosts of %s: %w", zone, err)
	}
	return s.owner.Publish(ctx, zone, b)
}

// Published implements fleet.Sharing; a document that does not decode is
// none. Each agent's check asks, so a document is decoded once, not once
// per agent.
func (s *sampling) Published(zone string) (map[uint64]fleet.Down, bool) {
	b, ok := s.owner.Published(zone)
	if !ok {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.decoded[zone]; ok && d.doc == string(b) {
		return d.down, true
	}
	var down map[uint64]fleet.Down
	if err := json.Unmarshal(b, &down); err != nil {
		return nil, false
	}
	s.decoded[zone] = decodedDown{doc: string(b), down: down}
	return down, true
}

// Changed implements fleet.Sharing.
func (s *sampling) Changed() <-chan struct{} { return s.owner.Changed() }

// changes is the catalog's watch, when its backend has one.
func (y *syncs) changes(ctx context.Context) <-chan struct{} {
	if w, ok := y.store.(catalog.Watcher); ok {
		return w.Watch(ctx)
	}
	return nil
}

// ownsName: this replica syncs the zone called name.
func (y *syncs) ownsName(name string) bool { return y.owner == nil || y.owner.Owns(name) }

// ownsID: this replica syncs the zone of id (shards are by zone name).
func (y *syncs) ownsID(id string) bool {
	if y.owner == nil {
		return true
	}
	z, ok := y.registry.Zone(id)
	return ok && y.owner.Owns(z.Name)
}

// onChange adds a sync to kick when a shard is gained or lost.
func (y *syncs) onChange(kick func()) {
	y.mu.Lock()
	defer y.mu.Unlock()
	y.kick = append(y.kick, kick)
}

// changed kicks the syncs: a shard was gained or lost.
func (y *syncs) changed() {
	y.mu.Lock()
	kick := append([]func(){}, y.kick...)
	y.mu.Unlock()
	for _, k := range kick {
		k()
	}
}

// passed records an edge gateways' pass.
func (y *syncs) passed(lag time.Duration, _ error) { y.lag.Observe(lag.Seconds()) }

// mutationKicks is the API's audit sink (before next, if any): each
// mutation that succeeded kicks the edge gateways' sync, since some of what a
// gateway is made of lives in Proxmox and not in the catalog (a VDC's
// networks, its VMs' addresses), so the catalog's watch does not see it.
type mutationKicks struct {
	next audit.Sink // nil: no audit
	kick func()
}

// Emit implements audit.Sink.
func (m mutationKicks) Emit(ev audit.Event) {
	if ev.ResponseStatus.Code == "OK" {
		m.kick()
	}
	if m.next != nil {
		m.next.Emit(ev)
	}
}
