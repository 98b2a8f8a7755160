// Package compute is the VM lifecycle of flexplane: createVM as a sequence
// of idempotent steps whose intent is recorded on the guest, recovery of
// creates left unfinished by a crash, power actions and delete, and the
// operations that report their progress. Proxmox is the system of record:
// nothing of a VM is kept here that Proxmox does not also hold, so any
// orchestrator replica can answer for any VM, and one that starts after a
// crash finishes (or cleans up) what another began.
//
// # How a create is made safe
//
//   - Input is validated before anything is written (*Error of KindBadInput
//     naming the field of the input).
//   - Quota is reserved on the VDC catalog object with a conditional write
//     (pkg/tenancy/quota), so two replicas cannot both take the last of a quota.
//   - Addresses are claimed in the Proxmox IPAM with create-if-absent IP
//     mappings (pkg/network/ipam) under MACs made for the VM; a taken static address
//     is CONFLICT, an automatic one is the first free address.
//   - The guest is cloned from the zone's template of the image with a VMID
//     from /cluster/nextid, which is only a guess: a clone that finds it
//     taken asks again. The clone carries the whole intent (sizes, NICs with
//     their MACs and addresses, cloud-init, the operation id) in its
//     description; its first config write tags it with its VDC, the
//     fp-creating marker and the operation (pkg/tenancy).
//   - Each further step observes the guest, plans the change, applies it
//     with the config digest it read (a concurrent writer makes it re-read)
//     and verifies: configure (cores, memory, NICs, cloud-init, disk IO
//     limits), resize the disk, start, then clear the marker.
//   - A guest with the marker and no live operation is finished from its
//     intent by whoever sees it (Recover), or deleted with its addresses
//     released if it cannot be finished. IPAM mappings under flexplane MACs
//     that no guest uses are released after a grace period.
package compute

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute/images"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// Zone is a zone the service works in.
type Zone struct {
	// ID is the zone's stable identity (the cluster identity); VM and
	// network ids carry it.
	ID string
	// Name is the zone's name; storage profiles map zone names to pools.
	Name string
	// Client reaches the zone's Proxmox API.
	Client *proxmox.Client
}

// Zones lists the zones the service can reach right now.
type Zones interface {
	Zones(ctx context.Context) []Zone
}

// KnownZones is implemented by Zones that also know the zones that cannot
// be reached now: Known lists every zone, those without a Client (nil) that
// cannot be reached. Quota counts them as they were last counted
// (pkg/tenancy/quota). Zones that do not implement it know only their
// reachable zones.
type KnownZones interface {
	Known(ctx context.Context) []Zone
}

// IdentifiedZones is implemented by Zones that may not know every zone yet
// (right after a restart, before the agents have reported): Identified
// waits, within ctx, until they do, and fails when ctx ends first. A zone
// or VM not found while it fails is ZONE_UNAVAILABLE, not gone.
type IdentifiedZones interface {
	Identified(ctx context.Context) error
}

// StaticZones is a fixed list of zones.
type StaticZones []Zone

// Zones implements Zones.
func (z StaticZones) Zones(context.Context) []Zone { return z }

// Config configures a Service.
type Config struct {
	// Catalog holds VDCs, profiles and images. Required.
	Catalog catalog.Store
	// Zones are the zones VMs live in. Required.
	Zones Zones
	// Volumes moves disks between zones (migrateVM across zones); nil
	// refuses such moves.
	Volumes VolumeMover
	// Snippets writes the snippet files that deliver a VM's own cloud-init
	// user-data (CreateInput.UserData) through cicustom; nil keeps it in
	// the VM's intent only.
	Snippets SnippetWriter
	// Images stages images; default images.New(Logger).
	Images *images.Stager
	// QuotaTTL is how long a quota reservation of a create lives unless the
	// create releases it; default 30m.
	QuotaTTL time.Duration
	// ZoneTimeout bounds the quota count of each zone (zones are counted
	// in parallel) and the reads that look a VM up or check a create's
	// input in its zone before anything is written (a zone that does not
	// answer within it is ZONE_UNAVAILABLE); default
	// quota.DefaultZoneTimeout.
	ZoneTimeout time.Duration
	// StaleAfter is how old the intent of an unfinished create must be
	// before Recover, in a process that does not run it, takes it over (it
	// may be live in another replica until then); default 2m.
	StaleAfter time.Duration
	// OrphanGrace is how long Recover must have seen a flexplane IPAM
	// mapping without a guest before it releases it; default 10m.
	OrphanGrace time.Duration
	// RecoverInterval is how often Run calls Recover; default 30s.
	RecoverInterval time.Duration
	// Recovers, if set, says whether Run calls Recover now: among
	// replicas, only one (the leader) takes over what a dead one left, so
	// that two never finish the same create. Nil: always.
	Recovers func() bool
	// AfterStep, if set, is called after each step of a create completes
	// (steps: "claim", "clone", "configure", "resize", "start", "finish";
	// of a move across zones: "target", "stop", "copy", "cutover")
	// with the runner's context; it lets tests stop a runner mid-way.
	AfterStep func(ctx context.Context, op, step string)
	// Logger receives the service's logs; default slog.Default().
	Logger *slog.Logger
}

// Service runs VM lifecycles.
type Service struct {
	cfg    Config
	log    *slog.Logger
	quota  *quota.Ledger
	stager *images.Stager

	base   context.Context // parent of every runner; canceled by Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup // runners; Add only under runMu while !closed

	runMu  sync.Mutex
	closed bool // Shutdown began: no runner starts; protected by runMu

	mu      sync.Mutex
	ops     map[string]*opState // operation id -> state; protected by mu
	live    map[string]string   // "zoneID/vmid" -> operation id of a live runner; protected by mu
	pending map[string]bool     // MACs claimed by runners that have no guest yet; protected by mu
	// starting: intent ops of creates in CreateVM (before their
	// operation is recorded); protected by mu
	starting map[string]bool
	orphans  map[string]time.Time
	// orphans: "zone/ip/mac" -> first seen without a guest; protected by mu
	moved map[tenancy.VMRef]string
	// moved: the guests Recover last saw that are not the VM their place
	// names: a VM that moved there (its kept id) or a move's other copy
	// (""); by zone, protected by mu
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Catalog == nil || cfg.Zones == nil {
		return nil, errors.New("compute: new: Catalog and Zones are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Images == nil {
		cfg.Images = images.New(cfg.Logger)
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = 2 * time.Minute
	}
	if cfg.OrphanGrace == 0 {
		cfg.OrphanGrace = 10 * time.Minute
	}
	if cfg.RecoverInterval <= 0 {
		cfg.RecoverInterval = 30 * time.Second
	}
	s := &Service{
		cfg: cfg, log: cfg.Logger, stager: cfg.Images,
		ops: map[string]*opState{}, live: map[string]string{}, pending: map[string]bool{}, starting: map[string]bool{}, orphans: map[string]time.Time{},
		moved: map[tenancy.VMRef]string{},
	}
	s.quota = &quota.Ledger{Store: cfg.Catalog, TTL: cfg.QuotaTTL, Zones: s.quotaZones, ZoneTimeout: cfg.ZoneTimeout}
	s.base, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Run calls Recover every RecoverInterval, and at once whenever a zone
// comes into reach (an orchestrator that just started sees its zones only
// as their agents connect), until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTicker(min(s.cfg.RecoverInterval, time.Second))
	defer t.Stop()
	seen := map[string]bool{}
	var last time.Time
	for {
		fresh := false
		for _, z := range s.cfg.Zones.Zones(ctx) {
			if !seen[z.ID] {
				seen[z.ID], fresh = true, true
			}
		}
		if fresh || time.Since(last) >= s.cfg.RecoverInterval {
			// A replica that leaves the takeover to another still keeps its
			// index of moved guests, which every answer about them needs.
			op, pass := "recover", s.Recover
			if s.cfg.Recovers != nil && !s.cfg.Recovers() {
				op, pass = "index moved guests", s.indexMovedGuests
			}
			if err := pass(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn(op, "err", err)
			}
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Shutdown stops every runner (their creates stay recorded on the guests
// for a later Recover) and waits for them until ctx ends.
func (s *Service) Shutdown(ctx context.Context) error {
	s.runMu.Lock()
	s.closed = true
	s.runMu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("compute: shutdown: %w", ctx.Err())
	}
}

// Images returns the stager the service uses.
func (s *Service) Images() *images.Stager { return s.stager }

// Quota returns the ledger the service reserves quota with.
func (s *Service) Quota() *quota.Ledger { return s.quota }

// quotaZones lists every zone for the quota ledger, those that cannot be
// reached without a client.
func (s *Service) quotaZones(ctx context.Context) []quota.Zone {
	zs := s.cfg.Zones.Zones(ctx)
	if k, ok := s.cfg.Zones.(KnownZones); ok {
		zs = k.Known(ctx)
	}
	out := make([]quota.Zone, 0, len(zs))
	for _, z := range zs {
		out = append(out, quota.Zone{ID: z.ID, Name: z.Name, Client: z.Client})
	}
	return out
}

// zoneByName finds a zone by name (or ID).
func (s *Service) zoneByName(ctx context.Context, name string) (Zone, bool) {
	for _, z := range s.cfg.Zones.Zones(ctx) {
		if z.Name == name || z.ID == name {
			return z, true
		}
	}
	return Zone{}, false
}

func (s *Service) zoneByID(ctx context.Context, id string) (Zone, bool) {
	for _, z := range s.cfg.Zones.Zones(ctx) {
		if z.ID == id {
			return z, true
		}
	}
	return Zone{}, false
}

// zoneTimeout is Config.ZoneTimeout or its default.
func (s *Service) zoneTimeout() time.Duration {
	if s.cfg.ZoneTimeout > 0 {
		return s.cfg.ZoneTimeout
	}
	return quota.DefaultZoneTimeout
}

// errUnreachable is the cause of a ZONE_UNAVAILABLE for a zone known to
// have no reachable agent now: refused at once, without waiting for it.
var errUnreachable = errors.New("no agent of the zone can be reached now")

// zonesUnknown waits (within ctx) until the zones are all known, and
// returns why they are not when ctx ends first (nil for Zones that always
// know them).
func (s *Service) zonesUnknown(ctx context.Context) error {
	if iz, ok := s.cfg.Zones.(IdentifiedZones); ok {
		return iz.Identified(ctx)
	}
	return nil
}

// unreachableZone finds a zone, by name or ID, that is known (KnownZones)
// but cannot be reached now.
func (s *Service) unreachableZone(ctx context.Context, name string) (Zone, bool) {
	k, ok := s.cfg.Zones.(KnownZones)
	if !ok {
		return Zone{}, false
	}
	for _, z := range k.Known(ctx) {
		if z.Client == nil && (z.Name == name || z.ID == name) {
			return z, true
		}
	}
	return Zone{}, false
}

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newOpID returns a random operation id usable in a Proxmox tag.
func newOpID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return lowerBase32.EncodeToString(b[:])
}

// Status is the state of a VM (pveapi.Resource.State, the one mapping of
// Proxmox's status, lock and tags).
type Status = pveapi.GuestState

// VM states.
const (
	StatusCreating = pveapi.StateCreating
	StatusRunning  = pveapi.StateRunning
	StatusStopped  = pveapi.StateStopped
	StatusPaused   = pveapi.StatePaused
	StatusUnknown  = pveapi.StateUnknown
)

// VM is a guest of a VDC.
type VM struct {
	// ID is the opaque global id (tenancy.VMRef.ID).
	ID   string
	Ref  tenancy.VMRef
	Name string
	VDC  string
	// Zone is the zone's name; Node the Proxmox node.
	Zone, Node string
	Status     Status
	// Addresses are the IP addresses of its NICs, in NIC order.
	Addresses []string
	VCPUs     int
	MemoryMiB int
	DiskGiB   int
	// Operation is the id of the create while the VM is CREATING.
	Operation string
}

// vmFromGuest builds a VM from what Proxmox lists and the guest's intent.
func vmFromGuest(z Zone, g pveapi.Resource, in *Intent, creating bool) *VM {
	vm := &VM{
		Ref: tenancy.VMRef{ZoneID: z.ID, VMID: g.VMID}, Name: g.Name, Zone: z.Name, Node: g.Node,
		VCPUs: g.MaxCPU, MemoryMiB: g.MemoryMiB(), DiskGiB: g.DiskGiB(), Status: g.State(tenancy.Creating(g.Tags())),
	}
	vm.ID = vm.Ref.ID()
	if was, ok := wasOf(g.Tags()); ok {
		vm.ID = was.ID() // it moved here and kept its id
	}
	vm.VDC, _ = tenancy.VDCOf(g.Tags())
	if in != nil {
		vm.VDC = in.VDC
		for _, n := range in.NICs {
			vm.Addresses = append(vm.Addresses, n.Address)
		}
		if creating {
			vm.Status = StatusCreating
			vm.Operation = in.Op
			vm.Name = in.Name
			vm.VCPUs, vm.MemoryMiB, vm.DiskGiB = in.VCPUs, in.MemoryMiB, in.DiskGiB
		}
	}
	return vm
}

// isCreating reports whether a guest is an unfinished create: marked, or a
// fresh clone of a template that has no VDC tag yet.
func isCreating(g pveapi.Resource) bool {
	if g.Template == 1 || !g.HasTag(tenancy.ManagedTag) {
		return false
	}
	vdc, _ := tenancy.VDCOf(g.Tags())
	return g.HasTag(tenancy.CreatingTag) || vdc == ""
}

// notFound is the error for a VM that does not exist in the caller's VDC.
func notFound() error { return newError(KindNotFound, "no such VM") }

// lookup resolves a VM id within vdc: the zone, the guest and its intent.
// Anything that is not a VM of vdc is NOT_FOUND.
func (s *Service) lookup(ctx context.Context, vdc, id string) (Zone, pveapi.Resource, *Intent, error) {
	z, g, in, _, err := s.lookupConfig(ctx, vdc, id)
	return z, g, in, err
}

// lookupConfig is lookup that also returns the guest's configuration.
func (s *Service) lookupConfig(ctx context.Context, vdc, id string) (Zone, pveapi.Resource, *Intent, pveapi.Config, error) {
	ref, err := tenancy.ParseVMID(id)
	if err != nil {
		return Zone{}, pveapi.Resource{}, nil, nil, notFound()
	}
	z, ok := s.zoneByID(ctx, ref.ZoneID)
	if ok {
		// Within the zone timeout: a zone cut off (its hosts not yet
		// OFFLINE) is ZONE_UNAVAILABLE, not a call that hangs.
		zctx, cancel := context.WithTimeout(ctx, s.zoneTimeout())
		z, g, in, cfg, err := s.lookupAt(zctx, vdc, z, ref.VMID)
		cancel()
		if err == nil && !g.HasTag(movedTag) {
			if _, moved := wasOf(g.Tags()); !moved {
				return z, g, in, cfg, nil
			}
		}
		if err != nil && !IsKind(err, KindNotFound) {
			return Zone{}, pveapi.Resource{}, nil, nil, err
		}
	}
	// A VM that moved to another zone keeps its id: the guest it is now
	// carries the place it was created at (wasTag).
	z, g, in, cfg, err := s.lookupMoved(ctx, vdc, ref)
	if IsKind(err, KindNotFound) && !ok {
		// Not moved to a zone that answers, and its zone cannot be
		// reached, or is not known yet: unavailable, not gone (whatever
		// VDC asks).
		if down, known := s.unreachableZone(ctx, ref.ZoneID); known {
			return Zone{}, pveapi.Resource{}, nil, nil, zoneDown(down.Name, errUnreachable)
		}
		zctx, cancel := context.WithTimeout(ctx, s.zoneTimeout())
		uerr := s.zonesUnknown(zctx)
		cancel()
		if uerr != nil {
			return Zone{}, pveapi.Resource{}, nil, nil, zoneDown(ref.ZoneID, uerr)
		}
	}
	return z, g, in, cfg, err
}

// lookupPlace finds the guest at place, whichever VM it is (a guest that
// moved here is found at its place, not under the id it kept), within the
// zone timeout; an unknown zone is NOT_FOUND.
func (s *Service) lookupPlace(ctx context.Context, vdc string, place tenancy.VMRef) (Zone, pveapi.Resource, *Intent, error) {
	z, ok := s.zoneByID(ctx, place.ZoneID)
	if !ok {
		if down, known := s.unreachableZone(ctx, place.ZoneID); known {
			return Zone{}, pveapi.Resource{}, nil, zoneDown(down.Name, errUnreachable)
		}
		return Zone{}, pveapi.Resource{}, nil, notFound()
	}
	zctx, cancel := context.WithTimeout(ctx, s.zoneTimeout())
	defer cancel()
	z, g, in, _, err := s.lookupAt(zctx, vdc, z, place.VMID)
	return z, g, in, err
}

// lookupMoved finds the guest of vdc that VM ref moved to, in any zone.
func (s *Service) lookupMoved(ctx context.Context, vdc string, ref tenancy.VMRef) (Zone, pveapi.Resource, *Intent, pveapi.Config, error) {
	tag := wasTag(ref)
	for _, z := range s.cfg.Zones.Zones(ctx) {
		gs, err := pveapi.Guests(ctx, z.Client)
		if err != nil {
			continue
		}
		for _, g := range gs {
			if g.HasTag(tag) && !g.HasTag(incomingTag) && !g.HasTag(movedTag) {
				return s.lookupAt(ctx, vdc, z, g.VMID)
			}
		}
	}
	return Zone{}, pveapi.Resource{}, nil, nil, notFound()
}

// lookupAt resolves guest vmid of zone z within vdc.
func (s *Service) lookupAt(ctx context.Context, vdc string, z Zone, vmid int) (Zone, pveapi.Resource, *Intent, pveapi.Config, error) {
	ref := tenancy.VMRef{ZoneID: z.ID, VMID: vmid}
	// The VDC's pool lists its guests only (its cost follows the VDC, not
	// the zone; another VDC's guest is refused before any further read, as
	// fast as a missing one); their tags and lock are in their configs.
	gs, err := pveapi.PoolGuests(ctx, z.Client, tenancy.PoolID(vdc))
	if err != nil {
		return Zone{}, pveapi.Resource{}, nil, nil, zoneDown(z.Name, err)
	}
	i := slices.IndexFunc(gs, func(g pveapi.Resource) bool { return g.VMID == ref.VMID })
	if i < 0 || gs[i].Template == 1 {
		return Zone{}, pveapi.Resource{}, nil, nil, notFound()
	}
	g := gs[i]
	cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, g.VMID)
	if err != nil {
		if pveapi.IsNotFound(err) {
			return Zone{}, pveapi.Resource{}, nil, nil, notFound()
		}
		return Zone{}, pveapi.Resource{}, nil, nil, zoneDown(z.Name, err)
	}
	g.RawTags, g.Lock, g.Pool = cfg.Str("tags"), cfg.Str("lock"), tenancy.PoolID(vdc)
	if !g.HasTag(tenancy.ManagedTag) {
		return Zone{}, pveapi.Resource{}, nil, nil, notFound()
	}
	in, _ := ParseIntent(cfg.Str("description"))
	owner, _ := tenancy.VDCOf(g.Tags())
	tagged := owner != ""
	switch {
	case tagged && owner == vdc:
	case !tagged && in != nil && in.VDC == vdc:
	default:
		return Zone{}, pveapi.Resource{}, nil, nil, notFound()
	}
	return z, g, in, cfg, nil
}

// VM returns the VM id of vdc.
func (s *Service) VM(ctx context.Context, vdc, id string) (*VM, error) {
	z, g, in, err := s.lookup(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	return vmFromGuest(z, g, in, isCreating(g)), nil
}

// internal wraps an unexpected failure for the API (the cause is logged).
func internal(msg string, err error) error {
	var ce *Error
	if errors.As(err, &ce) {
		return ce
	}
	return &Error{Kind: KindInternal, Message: msg, Cause: err}
}

// conflict reports a Proxmox refusal that the VM's state explains.
func conflict(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, " "); i > 0 && strings.HasPrefix(msg, "500") {
		msg = msg[i+1:]
	}
	return &Error{Kind: KindConflict, Message: msg, Cause: err}
}

// Zone returns the reachable zone called name (or with that ID).
func (s *Service) Zone(ctx context.Context, name string) (Zone, bool) { return s.zoneByName(ctx, name) }

// ZoneList lists the reachable zones.
func (s *Service) ZoneList(ctx context.Context) []Zone { return s.cfg.Zones.Zones(ctx) }

// StageImage starts staging img into the zone of t (see images.Stager.Stage)
// and lets the service finish it in the background: waiting for the
// download and making the template. It returns the state at once.
func (s *Service) StageImage(ctx context.Context, t images.Target, img *catalog.Image) (images.Status, error) {
	st, err := s.stager.Stage(ctx, t, img)
	if err != nil || st.State == images.StateStaged {
		return st, err
	}
	s.spawn(func(ctx context.Context) {
		if _, err := s.stager.Ensure(ctx, t, img); err != nil && ctx.Err() == nil {
			s.log.Warn("staging failed", "image", img.Name, "zone", t.Zone, "err", err)
		}
	})
	return st, nil
}
