// Package lbsync pushes the load balancers to the zones' flexgateway
// replicas. It watches every replica's status (lbconfig's long-polled
// GET /v1/status?after=), so it knows at once what each replica runs and
// how its backends are, at no cost while nothing changes. A pass renders
// each configured zone's lbconfig.Config from the catalog
// (loadbalancer.Render) and sends it to every replica of the zone whose
// status shows another revision; passes run when the API kicks, when the
// replicas change (Discoverer, EndpointSlices in Kubernetes), when the
// catalog changes (Config.Changes, its watch), when a replica's revision
// changes behind the syncer's back, and every Resync (minutes). Any number
// of orchestrator replicas may run it at once, since a replica given the
// same config twice does nothing; with Config.Owns, only the replica that
// owns a zone pushes to its replicas (all keep watching their status, which
// the API reads).
//
// The syncer never reads a config back: whether a replica runs the
// catalog's config is told by the revision its status reports, a hash of
// the whole config, keys included (loadbalancer.Render), so the replicas
// can keep private keys write-only. Each zone's replicas are sent that
// zone's token only (Config.Tokens), over mutual TLS (Config.HTTP).
package lbsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// Zone is one zone's flexgateway replicas.
type Zone struct {
	loadbalancer.Zone
	// Replicas are the replicas' admin URLs (e.g. "https://10.0.0.5:9443"),
	// when Config.Discover is not set.
	Replicas []string `json:"replicas"`
}

// Config configures a Syncer.
type Config struct {
	// Store holds the load balancers and the zones' external networks.
	Store catalog.Store
	// Secrets holds the balancers' certificates.
	Secrets catalog.SecretStore
	// Zones are the zones with flexgateway replicas, by zone name; the
	// balancers of other zones are not served.
	Zones map[string]Zone
	// Discover, when set, finds the zones' replicas (in Kubernetes, from
	// the flexgateway Services' EndpointSlices: EndpointSlices) in place
	// of Zones[zone].Replicas; a change it signals starts a pass.
	Discover Discoverer
	// Tokens are the admin bearer tokens by zone name: a zone's replicas
	// are sent its token only, and a zone without one is sent nothing.
	Tokens map[string]string
	// Resync is the time between passes while nothing happens; zero is
	// 5 min. A pass also runs at once when kicked (the API changed a
	// balancer), when the catalog or the replicas change, and when a
	// replica reports another revision (it restarted, or another
	// orchestrator pushed).
	Resync time.Duration
	// Changes, if set, is the catalog's watch (catalog.Watcher's Watch):
	// a value starts a pass; the channel closing starts a pass and a new
	// watch a second later.
	Changes func(ctx context.Context) <-chan struct{}
	// Owns, if set, says whether this replica pushes to a zone (by name)
	// now; a change of its answer must be followed by Kick. Nil: every
	// zone.
	Owns func(zone string) bool
	// StatusWait is how long one status watch request waits for a change
	// before it is renewed; zero is 30 s.
	StatusWait time.Duration
	// HTTP is the client of the admin API: its Transport presents the
	// orchestrator's client certificate and checks the replicas'
	// (lbconfig.ClientTLS). Nil has a 5 s timeout and the default
	// transport, which no replica answers. Status watches use its
	// Transport without the timeout.
	HTTP *http.Client
	// Logger receives the syncer's logs; nil discards them.
	Logger *slog.Logger
}

// Syncer runs the passes, and watches the status of every replica.
type Syncer struct {
	cfg   Config
	kick  chan struct{}
	watch *http.Client

	mu       sync.Mutex
	failed   map[string]error    // last failure by replica URL, protected by mu
	watchers map[string]*watcher // by replica URL, protected by mu
}

// watcher holds one replica's status, kept current by a status watch.
type watcher struct {
	zone   string
	stop   context.CancelFunc
	status *lbconfig.Status // nil while the replica does not answer, protected by Syncer.mu
	// pushed is the revision this syncer last applied to the replica and
	// pushGen the status generation it knew then: a status of that
	// generation or older, which the watch may still bring, predates the
	// apply and does not make the revision due again. Protected by
	// Syncer.mu.
	pushed  string
	pushGen uint64
}

// New returns a Syncer; Run runs it.
func New(cfg Config) *Syncer {
	if cfg.Resync == 0 {
		cfg.Resync = 5 * time.Minute
	}
	if cfg.StatusWait == 0 {
		cfg.StatusWait = 30 * time.Second
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 5 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Syncer{cfg: cfg, kick: make(chan struct{}, 1), watch: &http.Client{Transport: cfg.HTTP.Transport},
		failed: map[string]error{}, watchers: map[string]*watcher{}}
}

// Kick starts a pass now (or right after the one running).
func (s *Syncer) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run runs passes until ctx ends.
func (s *Syncer) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Resync)
	defer t.Stop()
	defer s.stopWatchers(nil)
	var discovered <-chan struct{}
	if s.cfg.Discover != nil {
		if err := s.cfg.Discover.Start(ctx); err != nil {
			return err
		}
		discovered = s.cfg.Discover.Changed()
	}
	var changes <-chan struct{}
	var resub <-chan time.Time
	if s.cfg.Changes != nil {
		changes = s.cfg.Changes(ctx)
	}
	for {
		if err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("lbsync: pass", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-s.kick:
		case <-discovered:
		case _, ok := <-changes:
			if !ok {
				// Changes may have been missed: this pass reads
				// everything; a new watch follows.
				changes, resub = nil, time.After(time.Second)
			}
		case <-resub:
			resub, changes = nil, s.cfg.Changes(ctx)
		}
	}
}

func (s *Syncer) client(zone, url string, hc *http.Client) *lbconfig.Client {
	return &lbconfig.Client{BaseURL: url, Token: s.cfg.Tokens[zone], HTTP: hc}
}

// replicas returns the zone's admin URLs.
func (s *Syncer) replicas(ctx context.Context, zone string) ([]string, error) {
	if s.cfg.Discover != nil {
		return s.cfg.Discover.Replicas(ctx, zone)
	}
	return s.cfg.Zones[zone].Replicas, nil
}

// Render returns the config of zone's replicas as the catalog has it now.
func (s *Syncer) Render(ctx context.Context, zone string) (lbconfig.Config, error) {
	all, err := catalog.List[*catalog.LoadBalancer](ctx, s.cfg.Store)
	if err != nil {
		return lbconfig.Config{}, fmt.Errorf("lbsync: %w", err)
	}
	lbs := slices.DeleteFunc(all, func(lb *catalog.LoadBalancer) bool { return lb.Zone != zone })
	en, err := catalog.Get[*catalog.ExternalNetwork](ctx, s.cfg.Store, zone)
	if errors.Is(err, catalog.ErrNotFound) {
		lbs, en = nil, &catalog.ExternalNetwork{}
	} else if err != nil {
		return lbconfig.Config{}, fmt.Errorf("lbsync: %w", err)
	}
	cfg, skipped := loadbalancer.Render(ctx, s.cfg.Zones[zone].Zone, en, lbs, s.cfg.Secrets)
	for name, err := range skipped {
		s.cfg.Logger.Warn("lbsync: a load balancer is left out", "balancer", name, "err", err)
	}
	return cfg, nil
}

// Pass renders every zone's config and sends it to the zone's replicas
// whose watched status shows another revision (or none yet). The
// replicas' watches live as long as ctx and as the replicas are found.
func (s *Syncer) Pass(ctx context.Context) error {
	var errs []error
	seen := map[string]bool{}
	for zone := range s.cfg.Zones {
		if s.cfg.Tokens[zone] == "" {
			errs = append(errs, fmt.Errorf("lbsync: zone %s: no admin token", zone))
			continue
		}
		cfg, err := s.Render(ctx, zone)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		urls, err := s.replicas(ctx, zone)
		if err != nil {
			errs = append(errs, fmt.Errorf("lbsync: zone %s: replicas: %w", zone, err))
			continue
		}
		owned := s.cfg.Owns == nil || s.cfg.Owns(zone)
		var wg sync.WaitGroup
		for _, u := range urls {
			seen[u] = true
			if running, pushed := s.watched(ctx, zone, u); running == cfg.Revision || pushed == cfg.Revision || !owned {
				s.record(u, nil)
				continue
			}
			wg.Go(func() { s.record(u, s.push(ctx, zone, u, cfg)) })
		}
		wg.Wait()
	}
	if len(errs) == 0 {
		// Only a complete pass knows which replicas are gone.
		s.stopWatchers(seen)
	}
	return errors.Join(errs...)
}

// watched returns the revision the replica at url runs as its watch last
// saw it ("" when unknown) and the one this syncer last applied to it
// since, and starts the watch if there is none.
func (s *Syncer) watched(ctx context.Context, zone, url string) (running, pushed string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.watchers[url]
	if w == nil {
		wctx, stop := context.WithCancel(ctx)
		w = &watcher{zone: zone, stop: stop}
		s.watchers[url] = w
		go s.watchStatus(wctx, zone, url, w)
	}
	if w.status == nil {
		return "", w.pushed
	}
	return w.status.Revision, w.pushed
}

// stopWatchers stops the watches of the replicas not in keep.
func (s *Syncer) stopWatchers(keep map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for u, w := range s.watchers {
		if !keep[u] {
			w.stop()
			delete(s.watchers, u)
			delete(s.failed, u)
		}
	}
}

// watchStatus keeps w.status current until ctx ends: one request waits
// for the replica's next change, so an idle replica costs one request per
// StatusWait. A replica that changes its revision other than through this
// syncer's push (it restarted, or another orchestrator pushed) kicks a pass.
func (s *Syncer) watchStatus(ctx context.Context, zone, url string, w *watcher) {
	c := s.client(zone, url, s.watch)
	var gen uint64
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.StatusWait+10*time.Second)
		st, err := c.WatchStatus(rctx, gen, s.cfg.StatusWait)
		cancel()
		s.mu.Lock()
		prev := w.status
		if err != nil {
			w.status, w.pushed = nil, "" // it may have restarted: what it runs is unknown
		} else {
			w.status = &st
			if st.Revision != w.pushed && st.Generation > w.pushGen {
				w.pushed = "" // it changed after the apply
			}
		}
		s.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil && prev != nil {
				s.cfg.Logger.Warn("lbsync: status watch", "replica", url, "err", err)
			}
			gen = 0
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 250 * time.Millisecond
		if prev == nil || prev.Revision != st.Revision {
			s.Kick()
		}
		gen = st.Generation
	}
}

// push sends cfg to zone's replica at url.
func (s *Syncer) push(ctx context.Context, zone, url string, cfg lbconfig.Config) error {
	if err := s.client(zone, url, s.cfg.HTTP).Apply(ctx, cfg); err != nil {
		return err
	}
	// The replica runs it now: no further pass sends it again before
	// the watch says otherwise.
	s.mu.Lock()
	if w := s.watchers[url]; w != nil {
		w.pushed, w.pushGen = cfg.Revision, 0
		if w.status != nil {
			w.pushGen = w.status.Generation
			st := *w.status
			st.Revision = cfg.Revision
			w.status = &st
		}
	}
	s.mu.Unlock()
	s.cfg.Logger.Info("lbsync: applied", "replica", url, "revision", cfg.Revision, "balancers", len(cfg.Balancers))
	return nil
}

func (s *Syncer) record(url string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.failed, url)
		return
	}
	if prev, ok := s.failed[url]; !ok || prev.Error() != err.Error() {
		s.cfg.Logger.Warn("lbsync: push", "replica", url, "err", err)
	}
	s.failed[url] = err
}

// LastError is the last failure of the replica at url (nil once it runs
// the current config).
func (s *Syncer) LastError(url string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed[url]
}

// Statuses returns the status of every replica of zone that answers its
// watch, as the watch last saw it: it sends no request, and a health
// change reaches it as soon as the replica sees it.
func (s *Syncer) Statuses(_ context.Context, zone string) []lbconfig.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	var res []lbconfig.Status
	for _, u := range slices.Sorted(maps.Keys(s.watchers)) {
		if w := s.watchers[u]; w.zone == zone && w.status != nil {
			res = append(res, *w.status)
		}
	}
	return res
}
