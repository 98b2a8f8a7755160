// Package syncowner elects, for each shard of the zones, the one
// orchestrator replica that runs the background work following the zone
// (the edge gateways' and load balancers' syncs, the agents' gateway
// streams): one Kubernetes Lease per shard (client-go's leader election, as
// the mesh control leader's), a zone's shard a hash of its key. N replicas
// then do the work once, not N times; a replica that dies hands each shard
// it held over when its Lease expires (LeaseDuration after its last renewal,
// plus up to RetryPeriod), one that stops gives them up at once.
//
// A shard's owner also publishes, for the other replicas, what they take
// from it instead of doing the work again (Publish, Published: a ConfigMap
// per shard, written on change and watched by every replica), such as the
// hosts it found not online in the zones whose liveness it samples.
//
// Every replica campaigns for every shard, so a lone replica owns them all.
// The default is one shard: the work per zone follows its changes only, so
// one replica carries it; more shards spread it over the replicas as they
// win the Leases.
package syncowner

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/flexplane/flexplane/pkg/mesh/lease"
	"github.com/flexplane/flexplane/pkg/support/metrics"
)

// DefaultLeasePrefix is the default prefix of the shards' Lease names
// (<prefix>-<shard>).
const DefaultLeasePrefix = "flexplane-sync"

// Config configures a replica's part in the shards' elections.
type Config struct {
	// Kube reaches the Kubernetes API holding the Leases. Required.
	Kube *rest.Config
	// Namespace is the Leases' namespace. Required.
	Namespace string
	// LeasePrefix names the Leases <LeasePrefix>-<shard>. Default
	// DefaultLeasePrefix.
	LeasePrefix string
	// Shards is the number of shards, hence of Leases (default 1). Every
	// replica must be given the same.
	Shards int
	// Identity is this replica's name in the Leases; it must differ
	// between replicas (its peer URL, its pod's name). Required.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's election
	// timings, as the mesh control leader's. Defaults 15s, 10s and 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Changed, if set, is called (from the elections' goroutines) each
	// time this replica gains or loses a shard.
	Changed func()
	// Logger receives the elections' logs. Default slog.Default().
	Logger *slog.Logger
}

// Owner is a replica's part in the shards' elections.
type Owner struct {
	cfg    Config
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
	dead   atomic.Bool // KillForTest: writes to the Leases fail

	mu      sync.Mutex
	held    []bool   // by shard: this replica holds its Lease; protected by mu
	holders []string // by shard: the Lease's holder as last seen; protected by mu
	// changed is closed (and replaced) when a shard is gained or lost
	// and when a published document changes; protected by mu.
	changed chan struct{}

	pub   *published // the shards' published documents (publish.go)
	pubMu sync.Mutex // held while Publish writes
}

// Start joins the election of every shard and returns.
func Start(ctx context.Context, cfg Config) (*Owner, error) {
	switch {
	case cfg.Kube == nil:
		return nil, errors.New("syncowner: Kube is required")
	case cfg.Namespace == "":
		return nil, errors.New("syncowner: Namespace is required")
	case cfg.Identity == "":
		return nil, errors.New("syncowner: Identity is required")
	}
	if cfg.LeasePrefix == "" {
		cfg.LeasePrefix = DefaultLeasePrefix
	}
	if cfg.Shards <= 0 {
		cfg.Shards = 1
	}
	t := lease.Timings{Duration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod}.WithDefaults()
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = t.Duration, t.RenewDeadline, t.RetryPeriod
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cs, err := kubernetes.NewForConfig(cfg.Kube)
	if err != nil {
		return nil, fmt.Errorf("syncowner: kubernetes client: %w", err)
	}
	o := &Owner{cfg: cfg, log: cfg.Logger.With("component", "syncowner"), held: make([]bool, cfg.Shards), holders: make([]string, cfg.Shards),
		changed: make(chan struct{})}
	if o.pub, err = newPublished(cs, cfg.Namespace, cfg.LeasePrefix, o.signal); err != nil {
		return nil, err
	}
	electors := make([]*leaderelection.LeaderElector, cfg.Shards)
	for i := range cfg.Shards {
		name := fmt.Sprintf("%s-%d", cfg.LeasePrefix, i)
		electors[i], err = lease.NewElector(lease.Election{Client: cs, Namespace: cfg.Namespace, Name: name, Identity: cfg.Identity, Timings: t,
			WrapLock: func(l resourcelock.Interface) resourcelock.Interface { return &mortalLock{Interface: l, dead: &o.dead} },
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { o.set(i, true) },
				OnStoppedLeading: func() { o.set(i, false) },
				OnNewLeader:      func(id string) { o.seen(i, id) },
			},
		})
		if err != nil {
			return nil, fmt.Errorf("syncowner: %w", err)
		}
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	o.cancel = cancel
	o.pub.factory.Start(rctx.Done())
	for _, e := range electors {
		o.wg.Go(func() {
			// A round ends when the shard is lost; campaign again.
			for rctx.Err() == nil {
				e.Run(rctx)
				select {
				case <-rctx.Done():
				case <-time.After(cfg.RetryPeriod):
				}
			}
		})
	}
	o.log.Info("joined the sync shards' elections", "shards", cfg.Shards, "leases", cfg.Namespace+"/"+cfg.LeasePrefix+"-*", "identity", cfg.Identity)
	return o, nil
}

func (o *Owner) set(shard int, held bool) {
	o.mu.Lock()
	changed := o.held[shard] != held
	o.held[shard] = held
	if held {
		o.holders[shard] = o.cfg.Identity
	}
	o.mu.Unlock()
	if changed {
		o.signal()
		o.log.Info("sync shard", "shard", shard, "owned", held)
		if o.cfg.Changed != nil {
			o.cfg.Changed()
		}
	}
}

func (o *Owner) seen(shard int, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.holders[shard] = id
}

// Shard is the shard of key (a zone's id or name).
func (o *Owner) Shard(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(o.cfg.Shards))
}

// Owns reports whether this replica holds the Lease of key's shard now.
func (o *Owner) Owns(key string) bool {
	s := o.Shard(key)
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.held[s]
}

// Holders returns each shard's holder as last seen ("" when none seen).
func (o *Owner) Holders() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.holders...)
}

// Close leaves the elections, giving up the shards held (the next replica
// takes them at once), and waits for the elections to end.
func (o *Owner) Close() {
	o.cancel()
	o.wg.Wait()
	o.pub.factory.Shutdown()
}

// KillForTest stops this replica as a dead one stops: its Leases are no
// longer renewed nor released, so the others wait for them to expire.
func (o *Owner) KillForTest() {
	o.dead.Store(true)
	o.Close()
}

// mortalLock is a Lease lock whose writes fail once dead is set.
type mortalLock struct {
	resourcelock.Interface
	dead *atomic.Bool
}

var errDead = errors.New("syncowner: replica killed")

func (l *mortalLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if l.dead.Load() {
		return errDead
	}
	return l.Interface.Create(ctx, ler)
}

func (l *mortalLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if l.dead.Load() {
		return errDead
	}
	return l.Interface.Update(ctx, ler)
}

// Metrics of the shards, for the orchestrator's registry.
var (
	ownerDesc = prometheus.NewDesc(metrics.Namespace+"_sync_shard_owner",
		"1 for each sync shard's Lease holder as this replica last saw it (label owner: the holder's identity).", []string{"shard", "owner"}, nil)
	ownedDesc = prometheus.NewDesc(metrics.Namespace+"_sync_shard_owned",
		"1 when this replica owns the sync shard (runs its zones' edge gateway and load balancer syncs), else 0.", []string{"shard"}, nil)
)

// Describe implements prometheus.Collector.
func (o *Owner) Describe(ch chan<- *prometheus.Desc) {
	ch <- ownerDesc
	ch <- ownedDesc
}

// Collect implements prometheus.Collector.
func (o *Owner) Collect(ch chan<- prometheus.Metric) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, h := range o.holders {
		shard := fmt.Sprint(i)
		if h != "" {
			ch <- prometheus.MustNewConstMetric(ownerDesc, prometheus.GaugeValue, 1, shard, h)
		}
		v := 0.0
		if o.held[i] {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(ownedDesc, prometheus.GaugeValue, v, shard)
	}
}
