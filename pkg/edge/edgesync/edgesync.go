// Package edgesync runs the orchestrator's side of the edge gateways: for every
// desired gateway it picks the agent that runs it (of the zone's online hosts, the
// first in rendezvous order of the VDC, leaving out hosts in maintenance, so
// placement is the same on every orchestrator replica and moves only when that host
// goes or is put in maintenance), sends it the whole state
// (flexplane.edge.v1 ApplyGateway) and removes the gateway from every other host.
//
// Nothing is stored but what the last passes saw: each pass first reads from the
// online agents which gateways they run (read from their kernels) and then the
// desired state, and removes from each host every gateway it runs that is not
// desired there: one deleted while every orchestrator replica was down, one left
// on a host that went away and came back after a failover, one of a half-done
// move. A gateway's state is derived again on each pass, so after a failover it
// is rebuilt on the new host, not synchronised.
//
// Passes follow change (Run): a pass runs when the catalog changes
// (Config.Changes, the catalog's watch), when a zone's hosts change in the
// registry (one goes offline, comes back, joins), when an agent reports that
// what it runs is not what this Syncer applied there, when Kick is called (the
// API kicks it after each mutation that succeeded, for the networks and VM
// addresses that live in Proxmox), every Config.Rederive (30 s: a light pass
// that reads the zones' Proxmox again but asks no agent) and every
// Config.Interval (minutes: a full pass that asks every agent and sends
// every gateway again) to repair drift. A burst of triggers while a
// pass runs makes one more pass, which reads the whole state, so none is lost.
// What the agents run comes from a stream each agent keeps open
// (flexplane.edge.v1 WatchGateways): its list when the stream opens (an agent
// that restarted reports what it found on its node) and after each change, so
// nothing is asked while nothing changes; a host without a stream is asked
// (ListGateways) by the passes. A pass that failed is tried again with a
// backoff of 1 s doubling to 30 s.
//
// One Syncer among the orchestrator's replicas works on a zone at a time
// (Config.Owns, the zone's shard Lease): the others keep no stream to its
// agents and send them nothing, and read a gateway's state by computing its
// placement, which is the same everywhere.
//
// A pass asks only the hosts of the zones where the last pass had a gateway
// desired or saw one running (or could not ask a host), and every host of every
// zone once per Config.Sweep: the calls grow with the zones that have gateways,
// not with the whole fleet.
//
// A pass sends nothing for a gateway its host reports at the revision (the digest of
// the state) it should run, for up to Config.Resync since this Syncer last sent or
// saw it there: a fresh Syncer re-applies nothing that runs as desired, and a
// gateway gone from its host (a node rebooted) is applied again on the next pass.
package edgesync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// Desired is one gateway that should run in a zone.
type Desired struct {
	// ZoneID is the zone's id (zones.Zone.ID).
	ZoneID string
	// Gateway is the gateway's whole state; nil when it could not be derived
	// this pass (its zone's Proxmox unreachable, say): the pass then leaves the
	// gateway wherever it runs, as it is.
	Gateway *edgev1.Gateway
	// VDC names the gateway's VDC when Gateway is nil (else Gateway.Vdc).
	VDC string
}

func (d Desired) vdc() string {
	if d.Gateway != nil {
		return d.Gateway.GetVdc()
	}
	return d.VDC
}

// Config configures a Syncer.
type Config struct {
	// Zones is the orchestrator's registry of zones and agents. Required.
	Zones *fleet.Registry
	// Desired returns every gateway that should run; a gateway it leaves out
	// is removed from every host. Required.
	Desired func(ctx context.Context) ([]Desired, error)
	// Interval is the time between passes while nothing changes (default
	// 5m): the slow resync that repairs drift (a gateway changed on its node
	// behind the agent's back). Passes run at once on a change (see Run).
	Interval time.Duration
	// Rederive is the time between light passes (default 30s): they derive
	// the desired state again, reading the zones' Proxmox (networks and
	// addresses, which live there and not in the catalog; a change made
	// through another replica reaches the owner's passes so), and take
	// what the agents run from their streams, asking none of them. Only
	// the zones with gateways cost a read.
	Rederive time.Duration
	// Changes, if set, is the catalog's watch (catalog.Watcher's Watch): a
	// value starts a pass; the channel closing (changes may have been
	// missed) starts a full pass and a new watch. Nil: the catalog's
	// changes wait for Interval or Kick.
	Changes func(ctx context.Context) <-chan struct{}
	// Owns, if set, says whether this Syncer works on a zone (by id) now:
	// the zones of the shards whose Lease this replica holds. A change of
	// its answer must be followed by Kick. Nil: every zone.
	Owns func(zoneID string) bool
	// Passed, if set, is told of every pass Run makes: how long after the
	// first change it follows (the sync lag) and its error.
	Passed func(lag time.Duration, err error)
	// CallTimeout bounds each apply or remove sent to an agent (default 5s).
	CallTimeout time.Duration
	// ReportTimeout bounds each agent's report of the gateways it runs
	// (default 1s): a pass waits for every report, so a host that died
	// unnoticed yet holds the pass back this long. A host that did not
	// report is left as it runs, and told to remove only the gateways that
	// are sent elsewhere.
	ReportTimeout time.Duration
	// Sweep is how often a pass asks every online host which gateways it runs
	// (default 10s); the passes in between ask only the hosts of the zones
	// where the last pass had a gateway desired or running, or a host that
	// did not answer. A gateway left on a host of a zone that has none is
	// removed within Sweep; a fresh Syncer's first pass asks every host.
	Sweep time.Duration
	// Resync is how long a gateway its host reports at the desired revision
	// goes without being sent again (default Interval): the agent would find
	// nothing to do, so a pass spares the call; past it, the state is sent
	// again whatever changed unseen inside the gateway.
	Resync time.Duration
	// Maintenance, if set, returns the hosts (node names) of a zone (by
	// name) in maintenance: their gateways move as when a host is lost
	// (ChooseExcept), unless every online host of the zone is in
	// maintenance. Nil: none is.
	Maintenance func(ctx context.Context, zone string) (map[string]bool, error)
	// Logger receives placements and failures; nil discards them.
	Logger *slog.Logger
}

// Syncer keeps the edge gateways running where they should, and nowhere else.
type Syncer struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	placed map[gatewayKey]string // mesh name of the host running it; protected by mu
	failed map[gatewayKey]error  // why the last pass could not apply it; protected by mu
	sent   map[gatewayKey]sent   // what was last sent or seen applied; protected by mu

	// streamed is what each host's WatchGateways stream reported last (by
	// mesh name), while its stream is open; protected by mu.
	streamed map[string]map[string]string

	kick chan struct{} // a pass is wanted (Kick)

	// Only Sync touches these (passes do not overlap).
	watch map[string]bool // ids of the zones the next pass asks between sweeps
	swept time.Time       // when the last pass that asked every host began
	// Only Run touches streams: the open streams' cancel by host.
	streams map[string]context.CancelFunc
}

// sent is the host and revision a pass last applied, or saw applied, for a
// gateway, and when.
type sent struct {
	host, revision string
	at             time.Time
}

// gatewayKey names a VDC's gateway in a zone.
type gatewayKey struct{ zoneID, vdc string }

// report is what an agent said it runs: the revision of each VDC's gateway,
// or why it could not say.
type report struct {
	runs map[string]string
	err  error
}

// errNotAsked is the report of a host the pass did not ask (its zone had no
// gateway last pass): what it runs is not known, as for a host that did not
// answer, but it is no failure.
var errNotAsked = errors.New("edgesync: not asked this pass")

// lists: the agent reported vdc's gateway.
func (r report) lists(vdc string) bool {
	_, ok := r.runs[vdc]
	return ok
}

// New returns a Syncer; Run starts it.
func New(cfg Config) *Syncer {
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Minute
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 5 * time.Second
	}
	if cfg.ReportTimeout <= 0 {
		cfg.ReportTimeout = time.Second
	}
	if cfg.Resync <= 0 {
		cfg.Resync = cfg.Interval
	}
	if cfg.Rederive <= 0 {
		cfg.Rederive = 30 * time.Second
	}
	if cfg.Sweep <= 0 {
		cfg.Sweep = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Syncer{cfg: cfg, log: log, placed: map[gatewayKey]string{}, failed: map[gatewayKey]error{}, sent: map[gatewayKey]sent{},
		streamed: map[string]map[string]string{}, kick: make(chan struct{}, 1), streams: map[string]context.CancelFunc{}}
}

// Placement is the mesh name of the host the last pass gave zoneID's gateway of vdc
// (or, for one it could not derive, saw running it).
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
func Choose(z fleet.Zone, vdc string) (fleet.Host, bool) { return ChooseExcept(z, vdc, nil) }

// ChooseExcept is Choose leaving out the hosts whose node names are in skip
// (hosts in maintenance); when that leaves none, it is Choose.
func ChooseExcept(z fleet.Zone, vdc string, skip map[string]bool) (fleet.Host, bool) {
	var best fleet.Host
	var bestScore []byte
	for _, h := range z.Hosts {
		if h.Status != fleet.StatusOnline || skip[h.Node] {
			continue
		}
		sum := sha256.Sum256([]byte(vdc + "\x00" + h.MeshName))
		if bestScore == nil || slices.Compare(sum[:], bestScore) > 0 {
			best, bestScore = h, sum[:]
		}
	}
	if bestScore == nil && len(skip) > 0 {
		return ChooseExcept(z, vdc, nil)
	}
	return best, bestScore != nil
}

// Sync makes one pass: what every online agent runs is read, then the desired
// state; every desired gateway is applied on its host (unless the host reports it
// at its revision) and every gateway a host runs that is not desired there is
// removed from it.
func (s *Syncer) Sync(ctx context.Context) error { return s.pass(ctx, false) }

// pass is Sync; full asks every online host (none of the streams' reports
// is used), as a fresh Syncer's first pass does.
func (s *Syncer) pass(ctx context.Context, full bool) error {
	all := s.cfg.Zones.Zones()
	zs := slices.DeleteFunc(slices.Clone(all), func(z fleet.Zone) bool { return !s.owns(z.ID) })
	// The agents first: a gateway applied after its report was read was desired
	// before the desired state is read, so a pass never removes one that another
	// replica just applied for a gateway just created.
	began := time.Now()
	if full {
		s.watch = nil
	}
	sweep := s.watch == nil || began.Sub(s.swept) >= s.cfg.Sweep
	reports := s.reports(ctx, zs, !full, func(z fleet.Zone) bool { return sweep || s.watch[z.ID] })
	if sweep {
		s.swept = began
	}
	want, err := s.cfg.Desired(ctx)
	if err != nil {
		return fmt.Errorf("edgesync: desired state: %w", err)
	}
	var errs []error
	for _, r := range reports {
		if r.err != nil && !errors.Is(r.err, errNotAsked) {
			errs = append(errs, r.err)
		}
	}
	byID := map[string]fleet.Zone{}
	for _, z := range all {
		byID[z.ID] = z
	}
	desired := map[gatewayKey]*Desired{}
	for i, d := range want {
		if _, ok := byID[d.ZoneID]; !ok {
			errs = append(errs, fmt.Errorf("edgesync: %s: unknown zone %s", d.vdc(), d.ZoneID))
			continue
		}
		if !s.owns(d.ZoneID) {
			continue // another replica's
		}
		desired[gatewayKey{d.ZoneID, d.vdc()}] = &want[i]
	}
	keys := map[gatewayKey]bool{}
	watch := map[string]bool{}
	for k := range desired {
		keys[k] = true
		watch[k.zoneID] = true
	}
	for _, z := range zs {
		for _, h := range z.Hosts {
			r := reports[h.MeshName]
			if r.err != nil && !errors.Is(r.err, errNotAsked) {
				watch[z.ID] = true
			}
			for vdc := range r.runs {
				if vdc != "" {
					keys[gatewayKey{z.ID, vdc}] = true
					watch[z.ID] = true
				}
			}
		}
	}
	s.watch = watch
	var (
		emu sync.Mutex
		wg  sync.WaitGroup
	)
	for k := range keys {
		wg.Go(func() {
			if err := s.reconcile(ctx, byID[k.zoneID], k, desired[k], reports); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		})
	}
	wg.Wait()
	// What is no longer desired is forgotten: the reports find it wherever it
	// still runs.
	s.mu.Lock()
	maps.DeleteFunc(s.placed, func(k gatewayKey, _ string) bool { return desired[k] == nil })
	maps.DeleteFunc(s.failed, func(k gatewayKey, _ error) bool { return desired[k] == nil })
	maps.DeleteFunc(s.sent, func(k gatewayKey, _ sent) bool { return desired[k] == nil })
	s.mu.Unlock()
	return errors.Join(errs...)
}

// reports reads from every online host of the zones of zs that ask names
// which gateways it runs (streamed: from its stream's last report when it has
// one open); the online hosts of the others report errNotAsked, or their
// stream's report.
func (s *Syncer) reports(ctx context.Context, zs []fleet.Zone, streamed bool, ask func(fleet.Zone) bool) map[string]report {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = map[string]report{}
	)
	for _, z := range zs {
		asked := ask(z)
		for _, h := range z.Hosts {
			if h.Status != fleet.StatusOnline {
				continue
			}
			if runs, ok := s.streamedRuns(h.MeshName); ok && streamed {
				mu.Lock()
				out[h.MeshName] = report{runs: runs}
				mu.Unlock()
				continue
			}
			if !asked {
				mu.Lock()
				out[h.MeshName] = report{err: errNotAsked}
				mu.Unlock()
				continue
			}
			wg.Go(func() {
				r := s.report(ctx, h.MeshName)
				mu.Lock()
				out[h.MeshName] = r
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return out
}

func (s *Syncer) report(ctx context.Context, host string) report {
	c, err := s.cfg.Zones.EdgeClient(host)
	var resp *edgev1.ListGatewaysResponse
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.ReportTimeout)
		resp, err = c.ListGateways(cctx, &edgev1.ListGatewaysRequest{})
		cancel()
	}
	if err != nil {
		return report{err: fmt.Errorf("edgesync: the gateways of %s: %w", host, err)}
	}
	r := report{runs: map[string]string{}}
	for _, g := range resp.GetGateways() {
		if g.GetVdc() == "" {
			s.log.Debug("edgesync: a gateway namespace that names no VDC", "host", host, "namespace", g.GetNamespace())
			continue
		}
		r.runs[g.GetVdc()] = g.GetRevision()
	}
	return r
}

// reconcile makes the hosts of z run k's gateway as d says: on its host only, or
// (d nil) nowhere; a gateway that could not be derived (d.Gateway nil) is left as
// it runs.
func (s *Syncer) reconcile(ctx context.Context, z fleet.Zone, k gatewayKey, d *Desired, reports map[string]report) error {
	switch {
	case d == nil:
		errs := s.removeFrom(ctx, z, k.vdc, func(h string) bool { return reports[h].lists(k.vdc) })
		if len(errs) == 0 {
			s.log.Info("edgesync: gateway removed", "vdc", k.vdc, "zone", z.Name)
		}
		return errors.Join(errs...)
	case d.Gateway == nil:
		for _, h := range z.Hosts {
			if reports[h.MeshName].lists(k.vdc) {
				s.mu.Lock()
				s.placed[k] = h.MeshName
				s.mu.Unlock()
				break
			}
		}
		return nil
	}
	err := s.apply(ctx, z, k, d.Gateway, reports)
	s.mu.Lock()
	if err != nil {
		s.failed[k] = err
	} else {
		delete(s.failed, k)
	}
	s.mu.Unlock()
	return err
}

// removeFrom removes vdc's gateway from the online hosts of z that from names.
func (s *Syncer) removeFrom(ctx context.Context, z fleet.Zone, vdc string, from func(host string) bool) []error {
	var errs []error
	for _, o := range z.Hosts {
		if o.Status != fleet.StatusOnline || !from(o.MeshName) {
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

// apply places gw in z and removes it from the zone's other hosts: those that
// report it, and, when it is sent, those that could not report.
func (s *Syncer) apply(ctx context.Context, z fleet.Zone, key gatewayKey, gw *edgev1.Gateway, reports map[string]report) error {
	vdc := gw.GetVdc()
	var skip map[string]bool
	if s.cfg.Maintenance != nil {
		var err error
		if skip, err = s.cfg.Maintenance(ctx, z.Name); err != nil {
			return fmt.Errorf("edgesync: %s: hosts in maintenance of zone %s: %w", vdc, z.Name, err)
		}
	}
	h, ok := ChooseExcept(z, vdc, skip)
	if !ok {
		return fmt.Errorf("edgesync: %s: zone %s has no online host", vdc, z.Name)
	}
	digest, err := digestOf(gw)
	if err != nil {
		return fmt.Errorf("edgesync: %s: %w", vdc, err)
	}
	now := sent{host: h.MeshName, revision: hex.EncodeToString(digest[:]), at: time.Now()}
	r := reports[h.MeshName]
	rev, listed := r.runs[vdc]
	confirmed := listed && rev == now.revision
	s.mu.Lock()
	prev, last := s.placed[key], s.sent[key]
	s.mu.Unlock()
	same := last.host == now.host && last.revision == now.revision
	send := true
	switch {
	case same && now.at.Sub(last.at) < s.cfg.Resync && (confirmed || r.err != nil):
		send = false // sent (or seen) lately, and not reported gone
	case confirmed && !same:
		send = false // running as desired, applied by another Syncer
		last = now
	}
	if prev != h.MeshName {
		s.log.Info("edgesync: gateway placed", "vdc", vdc, "zone", z.Name, "host", h.MeshName, "was", prev)
	}
	// The others first: two gateways of one VDC would answer for one address.
	errs := s.removeFrom(ctx, z, vdc, func(o string) bool {
		return o != h.MeshName && (reports[o].lists(vdc) || send && reports[o].err != nil)
	})
	if send {
		c, err := s.cfg.Zones.EdgeClient(h.MeshName)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
			_, err = c.ApplyGateway(cctx, &edgev1.ApplyGatewayRequest{Gateway: gw, Revision: now.revision})
			cancel()
		}
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("edgesync: apply %s on %s: %w", vdc, h.MeshName, err))...)
		}
		last = now
	}
	s.mu.Lock()
	s.placed[key] = h.MeshName
	if len(errs) == 0 {
		s.sent[key] = last
	} else {
		delete(s.sent, key)
	}
	s.mu.Unlock()
	return errors.Join(errs...)
}

// digestOf is the digest of a gateway's state.
func digestOf(gw *edgev1.Gateway) ([32]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(gw)
	if err != nil {
		return [32]byte{}, fmt.Errorf("digest: %w", err)
	}
	return sha256.Sum256(b), nil
}
