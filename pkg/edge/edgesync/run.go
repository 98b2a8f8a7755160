package edgesync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// Backoffs of Run: a failed pass, a broken catalog watch, a broken stream.
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// owns: this Syncer works on zoneID now.
func (s *Syncer) owns(zoneID string) bool { return s.cfg.Owns == nil || s.cfg.Owns(zoneID) }

// Kick makes Run start a pass now, or right after the one running.
func (s *Syncer) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// streamedRuns is the last report of host's open stream.
func (s *Syncer) streamedRuns(host string) (map[string]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	runs, ok := s.streamed[host]
	return maps.Clone(runs), ok
}

// Run makes passes until ctx ends: at once, then on each change (see the
// package comment) and every Interval, with the agents' streams open to the
// online hosts of the zones this Syncer owns.
func (s *Syncer) Run(ctx context.Context) {
	defer s.closeStreams(nil)
	var (
		changes  <-chan struct{}
		resub    <-chan time.Time // a new catalog watch is due
		retry    <-chan time.Time // a failed pass is tried again
		watchOff = retryMin
		backoff  = retryMin
		since    = time.Now() // the first trigger the next pass follows; zero: none
		full     = true       // the next pass asks every host
	)
	if s.cfg.Changes != nil {
		changes = s.cfg.Changes(ctx)
	}
	resync := time.NewTimer(s.cfg.Interval)
	defer resync.Stop()
	rederive := time.NewTicker(s.cfg.Rederive)
	defer rederive.Stop()
	topo := s.cfg.Zones.Changed()
	shape := topology(s.cfg.Zones.Zones())
	for {
		if !since.IsZero() {
			s.followHosts(ctx)
			err := s.pass(ctx, full)
			if ctx.Err() != nil {
				return
			}
			if s.cfg.Passed != nil {
				s.cfg.Passed(time.Since(since), err)
			}
			since, full, retry = time.Time{}, false, nil
			if err != nil {
				s.log.Warn("edgesync: pass", "err", err, "retry_in", backoff)
				retry = time.After(backoff)
				backoff = min(2*backoff, retryMax)
			} else {
				backoff = retryMin
			}
		}
		trigger := func() {
			if since.IsZero() {
				since = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changes:
			trigger()
			if !ok {
				// Changes may have been missed: everything is read again,
				// and a new watch taken a while later.
				changes, full = nil, true
				resub = time.After(watchOff)
				watchOff = min(2*watchOff, retryMax)
				s.log.Info("edgesync: the catalog's watch ended; a full pass follows")
			} else {
				watchOff = retryMin
			}
		case <-resub:
			resub, full = nil, true
			changes = s.cfg.Changes(ctx)
			trigger()
		case <-topo:
			topo = s.cfg.Zones.Changed()
			if now := topology(s.cfg.Zones.Zones()); now != shape {
				shape = now
				trigger()
			}
		case <-s.kick:
			trigger()
		case <-retry:
			trigger()
		case <-rederive.C:
			trigger()
		case <-resync.C:
			resync.Reset(s.cfg.Interval)
			full = true
			trigger()
		}
	}
}

// topology is what of the zones a pass depends on: their hosts, the nodes
// they run on and their status.
func topology(zs []fleet.Zone) string {
	var b strings.Builder
	for _, z := range zs {
		fmt.Fprintf(&b, "%s{", z.ID)
		for _, h := range z.Hosts {
			fmt.Fprintf(&b, "%s/%s/%s,", h.MeshName, h.Node, h.Status)
		}
		b.WriteString("}")
	}
	return b.String()
}

// followHosts opens a stream to every online host of the owned zones that
// has none, and closes those of the hosts that are gone, offline or not
// owned.
func (s *Syncer) followHosts(ctx context.Context) {
	keep := map[string]bool{}
	for _, z := range s.cfg.Zones.Zones() {
		if !s.owns(z.ID) {
			continue
		}
		for _, h := range z.Hosts {
			if h.Status != fleet.StatusOnline {
				continue
			}
			keep[h.MeshName] = true
			if s.streams[h.MeshName] == nil {
				sctx, cancel := context.WithCancel(ctx)
				s.streams[h.MeshName] = cancel
				go s.follow(sctx, h.MeshName)
			}
		}
	}
	s.closeStreams(keep)
}

// closeStreams closes the streams of the hosts not in keep.
func (s *Syncer) closeStreams(keep map[string]bool) {
	for h, cancel := range s.streams {
		if !keep[h] {
			cancel()
			delete(s.streams, h)
		}
	}
}

// follow keeps host's WatchGateways stream open until ctx ends, recording
// each report; a report that differs from what this Syncer applied there
// kicks a pass. An agent without the stream (an older one) is asked by the
// passes instead.
func (s *Syncer) follow(ctx context.Context, host string) {
	defer func() {
		s.mu.Lock()
		delete(s.streamed, host)
		s.mu.Unlock()
	}()
	backoff := retryMin
	for ctx.Err() == nil {
		err := s.stream(ctx, host)
		s.mu.Lock()
		_, had := s.streamed[host]
		delete(s.streamed, host)
		s.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			s.log.Info("edgesync: the agent has no WatchGateways; passes ask it", "host", host)
			return
		}
		if had {
			// What it runs is unknown until the stream is back: a pass
			// asks it meanwhile.
			s.Kick()
			backoff = retryMin
		}
		s.log.Debug("edgesync: gateway stream", "host", host, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, retryMax)
	}
}

// stream reads one WatchGateways stream of host until it ends.
func (s *Syncer) stream(ctx context.Context, host string) error {
	c, err := s.cfg.Zones.EdgeClient(host)
	if err != nil {
		return err
	}
	st, err := c.WatchGateways(ctx, &edgev1.WatchGatewaysRequest{})
	if err != nil {
		return err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return ctx.Err()
			}
			return err
		}
		runs := map[string]string{}
		for _, g := range resp.GetGateways() {
			if g.GetVdc() != "" {
				runs[g.GetVdc()] = g.GetRevision()
			}
		}
		s.mu.Lock()
		s.streamed[host] = runs
		expected := s.expectedLocked(host)
		s.mu.Unlock()
		if !maps.Equal(runs, expected) {
			s.Kick()
		}
	}
}

// expectedLocked is what this Syncer last applied (or saw) on host: each
// VDC's revision. s.mu must be held.
func (s *Syncer) expectedLocked(host string) map[string]string {
	out := map[string]string{}
	for k, v := range s.sent {
		if v.host == host {
			out[k.vdc] = v.revision
		}
	}
	return out
}
