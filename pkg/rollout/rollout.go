// Package rollout updates agents to a published release in batches: one
// host first, then a growing share, never more than one host of a zone at a
// time, halting at the first host that fails (refused the release, rolled
// back, or not done in time). A host is updated by streaming the release to
// its agent over the mesh (Update RPC) and watching what the agent reports
// until the new version is done with its probation. Each rollout is
// recorded as a JSON file next to the releases, so every orchestrator
// replica sharing that directory answers for it. The replica running a
// rollout rewrites its record at least every Heartbeat; a running record
// left unchanged for AbandonedAfter belongs to a replica that stopped
// without ending it (a crash): it is reported failed, and the next rollout
// takes its lock over and records it so.
package rollout

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/release"
	"github.com/flexplane/flexplane/pkg/support/atomicfile"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// checker is a registry that can be asked to check an agent's Health at
// its next refresh (fleet.Registry.CheckSoon): the phases of an update
// come with it, and a registry samples an idle agent's only now and then.
type checker interface{ CheckSoon(meshID uint64) }

// Registry is what a rollout needs of the zone registry.
type Registry interface {
	Zones() []fleet.Zone
	Agent(meshID uint64) (agentv1.AgentServiceClient, bool)
}

// Config configures a Service.
type Config struct {
	// Releases is the store of published releases; rollouts are recorded
	// in its directory's rollouts/. Required.
	Releases *release.Store
	// Registry finds hosts and their agents. Required.
	Registry Registry
	// HostTimeout bounds one host's update, from sending the release to
	// the end of its probation. Default 3m.
	HostTimeout time.Duration
	// Poll is how often a host's reported state is read. Default 500ms.
	Poll time.Duration
	// Heartbeat is how often a running rollout's record is rewritten
	// while nothing else changes it, to show it is still driven. Default
	// 10s.
	Heartbeat time.Duration
	// AbandonedAfter is how long a running rollout's record may stay
	// unchanged before it counts as abandoned by a stopped replica. It
	// must be well above Heartbeat (and the replicas' clock skew).
	// Default 6 × Heartbeat.
	AbandonedAfter time.Duration
	// Logger receives the rollouts' logs. Default slog.Default().
	Logger *slog.Logger
}

// Rollout states.
const (
	Running   = "running"
	Succeeded = "succeeded"
	Failed    = "failed"
)

// HostState is where a host is within a rollout.
type HostState string

// Host states within a rollout.
const (
	HostPending  HostState = "pending"
	HostUpdating HostState = "updating"
	HostDone     HostState = "done"
	HostFailed   HostState = "failed"
	// HostSkipped: not updated, because the rollout halted first or the
	// host runs the version (or a newer one) already.
	HostSkipped HostState = "skipped"
)

// Rollout is one rollout and where it is.
type Rollout struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	State   string `json:"state"`
	// Error says why it failed.
	Error string `json:"error,omitempty"`
	// Batch is the largest batch allowed (0: no limit but one per zone).
	Batch int `json:"batch"`
	// Hosts in the order they are updated.
	Hosts     []Host    `json:"hosts"`
	StartedAt time.Time `json:"startedAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	// FinishedAt is set once it ended.
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// Host is one host of a rollout.
type Host struct {
	ZoneID   string `json:"zoneId"`
	ZoneName string `json:"zoneName"`
	Node     string `json:"node"`
	MeshID   uint64 `json:"meshId"`
	MeshName string `json:"meshName"`
	// Batch is the number of its batch, from 1.
	Batch int `json:"batch"`
	// From is the version it ran before.
	From   string    `json:"from"`
	State  HostState `json:"state"`
	Reason string    `json:"reason,omitempty"`
	// Took is how long its update took, done or failed.
	Took time.Duration `json:"took,omitempty"`
}

// HostRef names a host: its zone's ID and its Proxmox node name.
type HostRef struct {
	ZoneID string
	Node   string
}

// Request asks for a rollout.
type Request struct {
	// Version is the published release to install. Required.
	Version string
	// Hosts to update; with none, every host of Zone; with no Zone either,
	// every host.
	Hosts []HostRef
	// Zone is a zone ID.
	Zone string
	// Batch bounds a batch's size; 0 grows batches without bound (one
	// host of each zone at most).
	Batch int
}

// ErrorKind classifies an Error.
type ErrorKind int

// Kinds of errors.
const (
	KindBadInput ErrorKind = iota + 1
	KindNotFound
	KindConflict
)

// Error is a rollout refused before it started; it changed nothing.
type Error struct {
	Kind ErrorKind
	// Field is the request field at fault (version, hosts, zone, batch).
	Field   string
	Message string
}

func (e *Error) Error() string { return "rollout: " + e.Message }

// Service runs rollouts.
type Service struct {
	cfg Config
	log *slog.Logger
	dir string

	mu       sync.Mutex
	running  map[string]context.CancelFunc // protected by mu
	latest   map[string]string             // by platform, protected by mu
	latestAt time.Time                     // protected by mu
	wg       sync.WaitGroup
}

// New returns a service.
func New(cfg Config) (*Service, error) {
	if cfg.Releases == nil || cfg.Registry == nil {
		return nil, errors.New("rollout: Releases and Registry are required")
	}
	if cfg.HostTimeout <= 0 {
		cfg.HostTimeout = 3 * time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	if cfg.AbandonedAfter <= 0 {
		cfg.AbandonedAfter = 6 * cfg.Heartbeat
	}
	if cfg.AbandonedAfter <= cfg.Heartbeat {
		return nil, errors.New("rollout: AbandonedAfter must be longer than Heartbeat")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	dir := filepath.Join(cfg.Releases.Dir(), "rollouts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	return &Service{cfg: cfg, log: cfg.Logger, dir: dir, running: map[string]context.CancelFunc{}}, nil
}

// Releases is the service's release store.
func (s *Service) Releases() *release.Store { return s.cfg.Releases }

// Close cancels the rollouts this service runs and waits for them; they
// are recorded as failed.
func (s *Service) Close() {
	s.mu.Lock()
	for _, cancel := range s.running {
		cancel()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Start checks a request, records the rollout and runs it in the
// background until it ends (ctx only bounds the start).
func (s *Service) Start(ctx context.Context, req Request) (*Rollout, error) {
	if !release.ValidVersion(req.Version) {
		return nil, &Error{Kind: KindBadInput, Field: "version", Message: fmt.Sprintf("version %q is not a semantic version like v1.2.3", req.Version)}
	}
	if req.Batch < 0 {
		return nil, &Error{Kind: KindBadInput, Field: "batch", Message: "batch must not be negative"}
	}
	floor, err := s.cfg.Releases.Floor()
	if err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	if floor != nil && release.Compare(req.Version, floor.Floor.MinVersion) < 0 {
		return nil, &Error{Kind: KindConflict, Field: "version", Message: fmt.Sprintf("version %s is below the floor %s: versions below it are revoked", req.Version, floor.Floor.MinVersion)}
	}
	hosts, err := s.pick(req)
	if err != nil {
		return nil, err
	}
	r := &Rollout{ID: newID(), Version: req.Version, State: Running, Batch: req.Batch, StartedAt: time.Now().UTC()}
	for _, h := range hosts {
		if _, err := s.cfg.Releases.Get(req.Version, h.Platform); err != nil {
			if errors.Is(err, release.ErrNotFound) {
				return nil, &Error{Kind: KindNotFound, Field: "version", Message: fmt.Sprintf("no release %s is published for %s (host %s)", req.Version, h.Platform, h.Node)}
			}
			return nil, &Error{Kind: KindConflict, Field: "version", Message: fmt.Sprintf("release %s for %s cannot be used: %v", req.Version, h.Platform, err)}
		}
		rh := Host{ZoneID: h.zoneID, ZoneName: h.zoneName, Node: h.Node, MeshID: h.MeshID, MeshName: h.MeshName, From: h.AgentVersion, State: HostPending}
		if release.ValidVersion(h.AgentVersion) && release.Compare(h.AgentVersion, req.Version) >= 0 {
			rh.State, rh.Reason = HostSkipped, "runs "+h.AgentVersion+" already"
		}
		r.Hosts = append(r.Hosts, rh)
	}
	plan(r)
	if err := s.claim(r); err != nil {
		return nil, err
	}
	out := clone(r)
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.mu.Lock()
	s.running[r.ID] = cancel
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		s.run(rctx, r)
		s.mu.Lock()
		delete(s.running, r.ID)
		s.mu.Unlock()
	}()
	return out, nil
}

// chosen is a host picked for a rollout.
type chosen struct {
	fleet.Host
	zoneID, zoneName string
}

// pick resolves the request's hosts; each must be online.
func (s *Service) pick(req Request) ([]chosen, error) {
	zs := s.cfg.Registry.Zones()
	var out []chosen
	add := func(z fleet.Zone, h fleet.Host) error {
		if h.Status != fleet.StatusOnline {
			return &Error{Kind: KindConflict, Field: "hosts", Message: fmt.Sprintf("host %s of zone %s is %s: an update needs it online", h.Node, z.Name, h.Status)}
		}
		if h.Platform == "" {
			h.Platform = release.Platform()
		}
		out = append(out, chosen{Host: h, zoneID: z.ID, zoneName: z.Name})
		return nil
	}
	switch {
	case len(req.Hosts) > 0:
		seen := map[HostRef]bool{}
		for i, ref := range req.Hosts {
			if seen[ref] {
				return nil, &Error{Kind: KindBadInput, Field: fmt.Sprintf("hosts[%d]", i), Message: "a host is named twice"}
			}
			seen[ref] = true
			zi := slices.IndexFunc(zs, func(z fleet.Zone) bool { return z.ID == ref.ZoneID })
			if zi < 0 {
				return nil, &Error{Kind: KindNotFound, Field: fmt.Sprintf("hosts[%d]", i), Message: "no such host"}
			}
			h, ok := zs[zi].Host(ref.Node)
			if !ok {
				return nil, &Error{Kind: KindNotFound, Field: fmt.Sprintf("hosts[%d]", i), Message: "no such host"}
			}
			if err := add(zs[zi], h); err != nil {
				return nil, err
			}
		}
	case req.Zone != "":
		zi := slices.IndexFunc(zs, func(z fleet.Zone) bool { return z.ID == req.Zone })
		if zi < 0 {
			return nil, &Error{Kind: KindNotFound, Field: "zone", Message: "no such zone"}
		}
		for _, h := range zs[zi].Hosts {
			if err := add(zs[zi], h); err != nil {
				return nil, err
			}
		}
	default:
		for _, z := range zs {
			for _, h := range z.Hosts {
				if err := add(z, h); err != nil {
					return nil, err
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, &Error{Kind: KindBadInput, Field: "hosts", Message: "no hosts to update"}
	}
	return out, nil
}

// plan numbers the batches of the hosts to update: 1 host, then 2, 4, ...
// (at most r.Batch when set), each with at most one host per zone, in
// order. The hosts are reordered by batch.
func plan(r *Rollout) {
	var pending, skipped []Host
	for _, h := range r.Hosts {
		if h.State == HostPending {
			pending = append(pending, h)
		} else {
			skipped = append(skipped, h)
		}
	}
	var ordered []Host
	size := 1
	for n := 1; len(pending) > 0; n++ {
		limit := size
		if r.Batch > 0 && limit > r.Batch {
			limit = r.Batch
		}
		zonesIn := map[string]bool{}
		var rest []Host
		taken := 0
		for _, h := range pending {
			if taken < limit && !zonesIn[h.ZoneID] {
				zonesIn[h.ZoneID] = true
				h.Batch = n
				ordered = append(ordered, h)
				taken++
				continue
			}
			rest = append(rest, h)
		}
		pending = rest
		size *= 2
	}
	r.Hosts = append(ordered, skipped...)
}

// run updates batch after batch, halting at the first failed host.
func (s *Service) run(ctx context.Context, r *Rollout) {
	log := s.log.With("rollout", r.ID, "version", r.Version)
	log.Info("rollout: started", "hosts", len(r.Hosts))
	var mu sync.Mutex // guards r while a batch runs
	save := func() {
		r.UpdatedAt = time.Now().UTC()
		if err := s.save(r); err != nil {
			log.Warn("rollout: record", "err", err)
		}
	}
	mu.Lock()
	save()
	mu.Unlock()
	beat, stopBeat := context.WithCancel(ctx)
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		t := time.NewTicker(s.cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-beat.Done():
				return
			case <-t.C:
				mu.Lock()
				save()
				mu.Unlock()
			}
		}
	}()
	for batch := 1; ; batch++ {
		var idx []int
		for i, h := range r.Hosts {
			if h.Batch == batch && h.State == HostPending {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			break
		}
		var wg sync.WaitGroup
		for _, i := range idx {
			mu.Lock()
			r.Hosts[i].State = HostUpdating
			h := r.Hosts[i]
			save()
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				err := s.updateHost(ctx, r.ID, r.Version, h, log)
				if err != nil && ctx.Err() != nil {
					// Close: whatever failed, it is because the
					// orchestrator shuts down.
					err = errShutDown
				}
				mu.Lock()
				defer mu.Unlock()
				r.Hosts[i].Took = time.Since(start)
				if err != nil {
					r.Hosts[i].State, r.Hosts[i].Reason = HostFailed, err.Error()
					log.Warn("rollout: host failed", "host", h.MeshName, "err", err)
				} else {
					r.Hosts[i].State = HostDone
					log.Info("rollout: host updated", "host", h.MeshName, "took", time.Since(start))
				}
				save()
			}()
		}
		wg.Wait()
		mu.Lock()
		if f := slices.IndexFunc(r.Hosts, func(h Host) bool { return h.State == HostFailed }); f >= 0 {
			r.State, r.Error = Failed, fmt.Sprintf("halted: host %s of zone %s failed: %s", r.Hosts[f].Node, r.Hosts[f].ZoneName, r.Hosts[f].Reason)
			for j := range r.Hosts {
				if r.Hosts[j].State == HostPending {
					r.Hosts[j].State, r.Hosts[j].Reason = HostSkipped, "the rollout halted"
				}
			}
		}
		mu.Unlock()
		if r.State == Failed {
			break
		}
	}
	stopBeat()
	<-beating
	if r.State == Running {
		r.State = Succeeded
	}
	r.FinishedAt = time.Now().UTC()
	save()
	s.release(r.ID)
	log.Info("rollout: ended", "state", r.State, "error", r.Error)
}

// errShutDown is why a host failed when its rollout's orchestrator shut
// down (Close) while it updated.
var errShutDown = errors.New("the orchestrator running the rollout shut down; the host may still finish its update on its own")

// ChunkSize is the size of the binary's pieces in an Update stream.
const ChunkSize = 256 << 10

// updateHost streams the release to one agent and waits until it reports
// the new version done, or rolled back.
func (s *Service) updateHost(ctx context.Context, id, version string, h Host, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.HostTimeout)
	defer cancel()
	host, ok := s.host(h.MeshID)
	if !ok {
		return errors.New("the host is no longer known")
	}
	platform := host.Platform
	if platform == "" {
		platform = release.Platform()
	}
	pub, err := s.cfg.Releases.Get(version, platform)
	if err != nil {
		return err
	}
	floor, err := s.cfg.Releases.Floor()
	if err != nil {
		return err
	}
	if floor != nil {
		if err := floor.Floor.Allows(version); err != nil {
			return err
		}
	}
	client, ok := s.cfg.Registry.Agent(h.MeshID)
	if !ok {
		return errors.New("the host's agent is not connected")
	}
	if err := send(ctx, client, id, pub, floor); err != nil {
		return err
	}
	log.Info("rollout: release sent; waiting for the new version", "host", h.MeshName)
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("not done within %s", s.cfg.HostTimeout)
			}
			return errShutDown
		case <-t.C:
		}
		if c, ok := s.cfg.Registry.(checker); ok {
			c.CheckSoon(h.MeshID) // the update's phase comes with the agent's Health
		}
		host, ok := s.host(h.MeshID)
		if !ok || host.Update.Operation != id {
			continue
		}
		switch host.Update.Phase {
		case "rolled-back", "refused":
			return fmt.Errorf("%s: %s", host.Update.Phase, host.Update.Reason)
		case "done":
			if host.AgentVersion == version && host.Status == fleet.StatusOnline {
				return nil
			}
		}
	}
}

// send streams a release to an agent, with the floor when there is one.
func send(ctx context.Context, client agentv1.AgentServiceClient, id string, pub *release.Published, floor *release.PublishedFloor) error {
	f, err := os.Open(pub.BinaryPath())
	if err != nil {
		return err
	}
	defer f.Close()
	stream, err := client.Update(ctx)
	if err != nil {
		return fmt.Errorf("send the release: %w", err)
	}
	first := &agentv1.UpdateRequest{Manifest: pub.Raw, Signature: pub.Signature, Operation: id}
	if floor != nil {
		first.Floor, first.FloorSignature = floor.Raw, floor.Signature
	}
	if err := stream.Send(first); err != nil {
		return fmt.Errorf("send the release: %w", closeErr(stream, err))
	}
	buf := make([]byte, ChunkSize)
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			if err := stream.Send(&agentv1.UpdateRequest{Data: buf[:n]}); err != nil {
				return fmt.Errorf("send the release: %w", closeErr(stream, err))
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		return fmt.Errorf("the agent refused the release: %w", err)
	}
	return nil
}

// closeErr returns the agent's status when a Send failed because the agent
// ended the stream (a refusal), else err.
func closeErr(stream agentv1.AgentService_UpdateClient, err error) error {
	if errors.Is(err, io.EOF) {
		if _, rerr := stream.CloseAndRecv(); rerr != nil {
			return rerr
		}
	}
	return err
}

func (s *Service) host(meshID uint64) (fleet.Host, bool) {
	for _, z := range s.cfg.Registry.Zones() {
		for _, h := range z.Hosts {
			if h.MeshID == meshID {
				return h, true
			}
		}
	}
	return fleet.Host{}, false
}

func (s *Service) path(id string) string { return filepath.Join(s.dir, id+".json") }

// activePath is the lock that lets one rollout run at a time across the
// replicas sharing the directory: created exclusively, removed at the end.
func (s *Service) activePath() string { return filepath.Join(s.dir, "active") }

// claim takes the lock for r (a stale one, of a rollout whose replica
// stopped, is taken over) and records r.
func (s *Service) claim(r *Rollout) error {
	for range 2 {
		f, err := os.OpenFile(s.activePath(), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			_, werr := f.WriteString(r.ID)
			if cerr := f.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil {
				os.Remove(s.activePath())
				return fmt.Errorf("rollout: %w", werr)
			}
			r.UpdatedAt = time.Now().UTC()
			return s.save(r)
		}
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("rollout: %w", err)
		}
		b, _ := os.ReadFile(s.activePath())
		other, gerr := s.read(string(b))
		if gerr == nil && other.State == Running {
			if !s.abandoned(other) {
				return &Error{Kind: KindConflict, Field: "version", Message: fmt.Sprintf("rollout %s of %s is running", other.ID, other.Version)}
			}
			abandon(other)
			if err := s.save(other); err != nil {
				return fmt.Errorf("rollout: record abandoned rollout %s: %w", other.ID, err)
			}
			s.log.Warn("rollout: took over the lock of an abandoned rollout", "rollout", other.ID, "version", other.Version, "updated", other.UpdatedAt)
		}
		os.Remove(s.activePath()) // ended or abandoned: take it over
	}
	return &Error{Kind: KindConflict, Field: "version", Message: "another rollout is starting"}
}

func (s *Service) release(id string) {
	if b, err := os.ReadFile(s.activePath()); err == nil && string(b) == id {
		os.Remove(s.activePath())
	}
}

func (s *Service) save(r *Rollout) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(s.path(r.ID), b, 0o644)
}

// ErrNotFound: no rollout has the id.
var ErrNotFound = errors.New("rollout not found")

// Get returns a rollout by id. A running rollout whose record has not
// changed for AbandonedAfter is reported failed: the replica running it
// stopped.
func (s *Service) Get(id string) (*Rollout, error) {
	r, err := s.read(id)
	if err != nil {
		return nil, err
	}
	if r.State == Running && s.abandoned(r) {
		abandon(r)
	}
	return r, nil
}

// abandoned says whether the running rollout r is no longer driven.
func (s *Service) abandoned(r *Rollout) bool {
	return time.Since(r.UpdatedAt) > s.cfg.AbandonedAfter
}

// abandon ends a running rollout whose replica stopped: failed, its
// updating hosts failed (each may still have finished on its own: its
// agent reports its own state), its pending hosts skipped.
func abandon(r *Rollout) {
	r.State, r.Error = Failed, fmt.Sprintf("abandoned: the orchestrator running it stopped (its record was last written at %s)", r.UpdatedAt.Format(time.RFC3339))
	for i := range r.Hosts {
		switch r.Hosts[i].State {
		case HostUpdating:
			r.Hosts[i].State, r.Hosts[i].Reason = HostFailed, "the orchestrator updating it stopped; the host's own update state says how it ended"
		case HostPending:
			r.Hosts[i].State, r.Hosts[i].Reason = HostSkipped, "the rollout was abandoned"
		}
	}
	if r.FinishedAt.IsZero() {
		r.FinishedAt = time.Now().UTC()
	}
}

// read returns a rollout's record as it is.
func (s *Service) read(id string) (*Rollout, error) {
	if !validID(id) {
		return nil, ErrNotFound
	}
	b, err := os.ReadFile(s.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	var r Rollout
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("rollout: %s: %w", id, err)
	}
	return &r, nil
}

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "upd-" + hex.EncodeToString(b)
}

func validID(id string) bool {
	if len(id) != 20 || id[:4] != "upd-" {
		return false
	}
	_, err := hex.DecodeString(id[4:])
	return err == nil
}

func clone(r *Rollout) *Rollout {
	c := *r
	c.Hosts = slices.Clone(r.Hosts)
	return &c
}

// Latest is the newest published version per platform. It is read from
// the store at most every few seconds.
func (s *Service) Latest() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.latestAt) < latestTTL {
		return s.latest
	}
	latest := map[string]string{}
	if list, err := s.cfg.Releases.List(); err == nil {
		for _, p := range list {
			if time.Now().After(p.Manifest.NotAfter) {
				continue // agents refuse it
			}
			if _, ok := latest[p.Manifest.Platform]; !ok {
				latest[p.Manifest.Platform] = p.Manifest.Version
			}
		}
	}
	s.latest, s.latestAt = latest, time.Now()
	return latest
}

// latestTTL is how long Latest keeps what it read.
const latestTTL = 3 * time.Second

// Target is what an agent's update is decided against: the newest
// published release per platform, or without releases the version the
// orchestrator ships.
type Target struct {
	// Latest is the newest published release per platform.
	Latest map[string]string
	// Shipped is the orchestrator's agent version, used without releases.
	Shipped string
}

// Target returns the target of updates now: s's newest releases (none on
// a nil Service), and shipped.
func (s *Service) Target(shipped string) Target {
	t := Target{Shipped: shipped}
	if s != nil {
		t.Latest = s.Latest()
	}
	return t
}

// UpdateAvailable says whether a newer agent than version is published for
// platform ("" for the orchestrator's own).
func (t Target) UpdateAvailable(version, platform string) bool {
	if len(t.Latest) == 0 {
		return t.Shipped != "" && version != "" && version != t.Shipped
	}
	if platform == "" {
		platform = release.Platform()
	}
	v, ok := t.Latest[platform]
	if !ok {
		return false
	}
	return !release.ValidVersion(version) || release.Compare(v, version) > 0
}
