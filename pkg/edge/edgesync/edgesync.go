// Package edgesync runs the orchestrator's side of the edge gateways: for every
// desired gateway it picks the agent that runs it (of the zone's online hosts, the
// first in rendezvous order of the VDC, so placement is the same on every orchestrator
// replica and moves only when that host goes), sends it the whole state
// (flexplane.edge.v1 ApplyGateway) and removes the gateway from the zone's other
// online hosts, on every pass. Nothing is stored: a gateway's state is derived again
// on each pass, so after a failover it is rebuilt on the new host, not synchronised.
package edgesync

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/flexplane/flexplane/pkg/mesh/zones"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// Desired is one gateway that should run in a zone.
type Desired struct {
	// ZoneID is the zone's id (zones.Zone.ID).
	ZoneID  string
	Gateway *edgev1.Gateway
}

// Config configures a Syncer.
type Config struct {
	// Zones is the orchestrator's registry of zones and agents. Required.
	Zones *zones.Registry
	// Desired returns every gateway that should run. Required.
	Desired func(ctx context.Context) ([]Desired, error)
	// Interval is the time between passes (default 1s): a host lost is noticed by
	// the registry within a few seconds, and the next pass moves its gateways.
	Interval time.Duration
	// CallTimeout bounds each call to an agent (default 5s).
	CallTimeout time.Duration
	// Logger receives placements and failures; nil discards them.
	Logger *slog.Logger
}

// Syncer keeps the edge gateways running where they should.
type Syncer struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	placed map[gatewayKey]string // mesh name of the host running it; protected by mu
	failed map[gatewayKey]error  // why the last pass could not apply it; protected by mu
}

// gatewayKey names a VDC's gateway in a zone.
type gatewayKey struct{ zoneID, vdc string }

// New returns a Syncer; Run starts it.
func New(cfg Config) *Syncer {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 5 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Syncer{cfg: cfg, log: log, placed: map[gatewayKey]string{}, failed: map[gatewayKey]error{}}
}

// Run makes a pass every Interval until ctx ends.
func (s *Syncer) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if err := s.Sync(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("edgesync: pass", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Placement is the mesh name of the host the last pass gave zoneID's gateway of vdc.
func (s *Syncer) Placement(zoneID, vdc string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.placed[gatewayKey{zoneID, vdc}]
	return h, ok
}

// LastError is why the last pass could not apply zoneID's gateway of vdc
// (nil when it could, or when no pass has tried yet).
func (s *Syncer) LastError(zoneID, vdc string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed[gatewayKey{zoneID, vdc}]
}

// Choose orders the online hosts of z for vdc (rendezvous hashing) and returns the
// first; false when the zone has no online host.
func Choose(z zones.Zone, vdc string) (zones.Host, bool) {
	var best zones.Host
	var bestScore []byte
	for _, h := range z.Hosts {
		if h.Status != zones.StatusOnline {
			continue
		}
		sum := sha256.Sum256([]byte(vdc + "\x00" + h.MeshName))
		if bestScore == nil || slices.Compare(sum[:], bestScore) > 0 {
			best, bestScore = h, sum[:]
		}
	}
	return best, bestScore != nil
}

// Sync makes one pass: every desired gateway applied on its host and removed from the
// zone's other online hosts, and every gateway this Syncer placed that is no longer
// desired (deleted) removed from every online host of its zone.
func (s *Syncer) Sync(ctx context.Context) error {
	want, err := s.cfg.Desired(ctx)
	if err != nil {
		return fmt.Errorf("edgesync: desired state: %w", err)
	}
	wanted := map[gatewayKey]bool{}
	for _, d := range want {
		wanted[gatewayKey{d.ZoneID, d.Gateway.GetVdc()}] = true
	}
	s.mu.Lock()
	var gone []gatewayKey
	for k := range s.placed {
		if !wanted[k] {
			gone = append(gone, k)
		}
	}
	s.mu.Unlock()
	var (
		errs []error
		emu  sync.Mutex
		wg   sync.WaitGroup
	)
	run := func(f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		})
	}
	for _, d := range want {
		run(func() error { return s.one(ctx, d) })
	}
	for _, k := range gone {
		run(func() error { return s.teardown(ctx, k) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// teardown removes a gateway no longer desired from every online host of its zone
// and, once that worked, forgets it.
func (s *Syncer) teardown(ctx context.Context, k gatewayKey) error {
	var errs []error
	if z, ok := s.cfg.Zones.Zone(k.zoneID); ok {
		errs = s.removeFrom(ctx, z, k.vdc, "")
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	s.log.Info("edgesync: gateway removed", "vdc", k.vdc, "zone", k.zoneID)
	s.mu.Lock()
	delete(s.placed, k)
	delete(s.failed, k)
	s.mu.Unlock()
	return nil
}

// removeFrom removes vdc's gateway from the online hosts of z but keep.
func (s *Syncer) removeFrom(ctx context.Context, z zones.Zone, vdc, keep string) []error {
	var errs []error
	for _, o := range z.Hosts {
		if o.MeshName == keep || o.Status != zones.StatusOnline {
			continue
		}
		c, err := s.cfg.Zones.EdgeClient(o.MeshName)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
			_, err = c.RemoveGateway(cctx, &edgev1.RemoveGatewayRequest{Vdc: vdc})
			cancel()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("edgesync: remove %s from %s: %w", vdc, o.MeshName, err))
		}
	}
	return errs
}

func (s *Syncer) one(ctx context.Context, d Desired) error {
	vdc := d.Gateway.GetVdc()
	z, ok := s.cfg.Zones.Zone(d.ZoneID)
	if !ok {
		return fmt.Errorf("edgesync: %s: unknown zone %s", vdc, d.ZoneID)
	}
	key := gatewayKey{d.ZoneID, vdc}
	err := s.apply(ctx, z, key, d.Gateway)
	s.mu.Lock()
	if err != nil {
		s.failed[key] = err
	} else {
		delete(s.failed, key)
	}
	s.mu.Unlock()
	return err
}

// apply places gw in z and removes it from the zone's other hosts.
func (s *Syncer) apply(ctx context.Context, z zones.Zone, key gatewayKey, gw *edgev1.Gateway) error {
	vdc := gw.GetVdc()
	h, ok := Choose(z, vdc)
	if !ok {
		return fmt.Errorf("edgesync: %s: zone %s has no online host", vdc, z.Name)
	}
	s.mu.Lock()
	prev := s.placed[key]
	s.mu.Unlock()
	if prev != h.MeshName {
		s.log.Info("edgesync: gateway placed", "vdc", vdc, "zone", z.Name, "host", h.MeshName, "was", prev)
	}
	// The others first: two gateways of one VDC would answer for one address.
	errs := s.removeFrom(ctx, z, vdc, h.MeshName)
	c, err := s.cfg.Zones.EdgeClient(h.MeshName)
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		_, err = c.ApplyGateway(cctx, &edgev1.ApplyGatewayRequest{Gateway: gw})
		cancel()
	}
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("edgesync: apply %s on %s: %w", vdc, h.MeshName, err))...)
	}
	s.mu.Lock()
	s.placed[key] = h.MeshName
	s.mu.Unlock()
	return errors.Join(errs...)
}
