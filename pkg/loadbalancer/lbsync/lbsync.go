// Package lbsync pushes the load balancers to the zones' flexgateway
// replicas: every pass (1 s, or at once when kicked after a change) it
// renders each configured zone's lbconfig.Config from the catalog
// (loadbalancer.Render) and sends it to every replica of the zone whose
// status shows another revision. It keeps nothing but the last failure per
// replica: any number of orchestrator replicas may run it at once, since a
// replica given the same config twice does nothing.
package lbsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// Replicas are the replicas' admin URLs (e.g. "http://10.0.0.5:9443").
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
	// Discover, when set, returns a zone's replicas' admin URLs each pass
	// (in Kubernetes, from the flexgateway Service's endpoints) in place
	// of Zones[zone].Replicas.
	Discover func(ctx context.Context, zone string) ([]string, error)
	// Token is the replicas' admin bearer token.
	Token string
	// Interval is the time between passes; zero is 1 s.
	Interval time.Duration
	// HTTP is the client of the admin API; nil has a 5 s timeout.
	HTTP *http.Client
	// Logger receives the syncer's logs; nil discards them.
	Logger *slog.Logger
}

// Syncer runs the passes.
type Syncer struct {
	cfg  Config
	kick chan struct{}

	mu     sync.Mutex
	failed map[string]error // last failure by replica URL, protected by mu
}

// New returns a Syncer; Run runs it.
func New(cfg Config) *Syncer {
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 5 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Syncer{cfg: cfg, kick: make(chan struct{}, 1), failed: map[string]error{}}
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
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("lbsync: pass", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-s.kick:
		}
	}
}

func (s *Syncer) client(url string) *lbconfig.Client {
	return &lbconfig.Client{BaseURL: url, Token: s.cfg.Token, HTTP: s.cfg.HTTP}
}

// replicas returns the zone's admin URLs.
func (s *Syncer) replicas(ctx context.Context, zone string) ([]string, error) {
	if s.cfg.Discover != nil {
		return s.cfg.Discover(ctx, zone)
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
// that do not run it yet.
func (s *Syncer) Pass(ctx context.Context) error {
	var errs []error
	for zone := range s.cfg.Zones {
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
		var wg sync.WaitGroup
		for _, u := range urls {
			wg.Go(func() { s.record(u, s.push(ctx, u, cfg)) })
		}
		wg.Wait()
	}
	return errors.Join(errs...)
}

// push sends cfg to the replica at url unless it runs it already.
func (s *Syncer) push(ctx context.Context, url string, cfg lbconfig.Config) error {
	c := s.client(url)
	if st, err := c.Status(ctx); err == nil && st.Revision == cfg.Revision {
		return nil
	}
	if err := c.Apply(ctx, cfg); err != nil {
		return err
	}
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

// Statuses reads the status of every replica of zone that answers.
func (s *Syncer) Statuses(ctx context.Context, zone string) []lbconfig.Status {
	urls, err := s.replicas(ctx, zone)
	if err != nil {
		return nil
	}
	out := make([]lbconfig.Status, len(urls))
	ok := make([]bool, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() {
			st, err := s.client(u).Status(ctx)
			out[i], ok[i] = st, err == nil
		})
	}
	wg.Wait()
	var res []lbconfig.Status
	for i := range out {
		if ok[i] {
			res = append(res, out[i])
		}
	}
	return res
}
