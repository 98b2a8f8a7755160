// Package compute is the VM lifecycle of flexplane: create, power
// actions, delete, snapshots, moves within and across zones, console
// targets and hardware, recovery of what a crash left unfinished, and the
// operations that report their progress. Proxmox is the system of record:
// nothing of a VM is kept here that Proxmox does not also hold, so any
// orchestrator replica can answer for any VM, and one that starts after a
// crash finishes (or cleans up) what another began.
//
// # Engine and phases
//
// The Service is the public API and nothing else: the entry points that
// start operations and the read queries, each a few lines that build an
// operation's scope and run its phases. Behind it:
//
//   - the engine (engine.go) runs operations whatever they do: this
//     process's records of them (what Operation and Watch answer from
//     memory), their runners under one context that Shutdown cancels, the
//     guests a runner works on, and the phase runner (phase.go);
//   - the finder (find.go) finds zones, VMs and the guests they are,
//     networks and nodes; it only reads;
//   - deps (compute.go) are what every operation works with (the engine,
//     the finder, the quota ledger, the image stager, the snippets, the
//     index of moved guests), built once by New.
//
// Each operation is an ordered list of named phases over a small scope of
// its own (its inputs, what earlier phases found, and deps), in the
// operation's file; each phase is a method of that scope:
//
//   - create (create.go, createScope): claim, stage, clone, configure,
//     resize, user-data, start, finish;
//   - delete (delete.go, deleteScope): stop, destroy, release;
//   - power actions (power.go, powerScope): lookup, request;
//   - snapshot (snapshot_create.go, snapshotScope): check, reserve,
//     request;
//   - rollback to a snapshot (snapshot_rollback.go, rollbackScope):
//     check, request;
//   - snapshot deletion (snapshot_delete.go, snapshotDeleteScope): check,
//     request;
//   - move within a zone (migrate.go, migrateScope): preflight, request;
//   - move across zones (crosszone.go, moveScope): preflight, reserve,
//     claim before its operation exists, then target, stop, copy,
//     cutover, finish in its runner;
//   - an image's staging into a zone (staging.go, stageScope): request,
//     then template in the background;
//   - a disk attached (disk_attach.go, attachScope): check, reserve,
//     request; grown (disk_resize.go, diskResizeScope): check, reserve,
//     request; detached (disk_detach.go, detachScope): check, request;
//   - a VM resized to another compute profile (vm_resize.go,
//     resizeScope): check, plan, reserve, apply, reboot, then its end
//     (marker cleared, reservation released) once the reboot has ended.
//
// Hardware, console targets, history and user-data are read queries, not
// operations; a VM's user-data snippet is written by the create's
// user-data phase and deleted by the delete's release phase (snippets.go).
//
// The runner runs the phases in order, records the running phase as the
// operation's Step (so the operation, and the log of its failure, say
// which phase it is in or failed in), calls Config.AfterStep after each,
// and stops at the first error, which names its phase; a phase that finds
// the work done by someone else ends the operation. Phases observe before
// they act and do only what is left, so a runner may run them again, and
// Recover runs the hook of the operation a guest was left in
// (recoveryHooks: a create's phases from configure on, a move's
// recovery, a resize's reboot and end). A new operation, or a new step of one, is a new phase list
// over a new scope, or a new phase, never a new method on the Service: a
// test (shape_test.go) keeps the Service within a budget of exported
// methods and every phase list a function beside its scope.
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
//   - Each further phase observes the guest, plans its change, applies it
//     with the config digest it read (a concurrent writer makes it re-read)
//     and verifies: configure (cores, memory, NICs, cloud-init, disk IO
//     limits), resize the disk, user-data, start, then finish: clear the
//     marker.
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
	"log/slog"
	"strings"
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
	// Uploads streams uploaded images to the agents of zones' nodes
	// (uploadImage); nil refuses uploads.
	Uploads VolumeUploader
	// Images stages images; default images.New(Logger).
	Images *images.Stager
	// QuotaTTL is how long a quota reservation of a create lives unless the
	// create releases it; default 30m.
	QuotaTTL time.Duration
	// ZoneTimeout bounds the quota count of each zone (zones are counted
	// in parallel) and the reads that look a VM up or check a create's
	// input in its zone before anything is written (a zone that does not
	// answer within it is ZONE_UNAVAILABLE), and each zone's part of the
	// scans over all zones (asked in parallel) for a VM that moved across
	// zones or the VMIDs moved VMs keep (a zone that does not answer
	// within it is passed over); default quota.DefaultZoneTimeout.
	ZoneTimeout time.Duration
	// StaleAfter is how old the intent of an unfinished create must be
	// before Recover, in a process that does not run it, takes it over (it
	// may be live in another replica until then); default 2m.
	StaleAfter time.Duration
	// OrphanGrace is how long Recover must have seen a flexplane IPAM
	// mapping without a guest before it releases it; default 10m.
	OrphanGrace time.Duration
	// RecoverInterval is how often Run makes a recovery pass; default 30s.
	// A pass lists each zone's guests once and reads the config only of
	// the managed guests that are new, whose listing (node, state, lock,
	// tags, name, sizes) changed, that restarted, or that carry an
	// unfinished operation; an idle pass reads no guest's config.
	RecoverInterval time.Duration
	// RecoverResyncInterval is how often Run's pass reads the config of
	// every managed guest of a zone again, for what changed without
	// showing in the listing (a description written alone); default 10m.
	// Recover always reads every one.
	RecoverResyncInterval time.Duration
	// BackupQuotaInterval is how often Run checks the VDCs' backups
	// against their backupGiB quotas, pausing and resuming their backup
	// schedules (backup_quota.go), while Recovers says so; default 1m.
	BackupQuotaInterval time.Duration
	// ImageCopyRecoverInterval is how often Run looks, while Recovers says
	// so, for copies of VDC images into zones (stageVDCImage) that were
	// cut off: copy guests whose copier has not recorded a beat within
	// StaleAfter. Each is deleted and its image copied into the zone
	// afresh (vdcstage.go); default 1m.
	ImageCopyRecoverInterval time.Duration
	// Recovers, if set, says whether Run calls Recover now: among
	// replicas, only one (the leader) takes over what a dead one left, so
	// that two never finish the same create. Nil: always.
	Recovers func() bool
	// AfterStep, if set, is called after each phase of a create completes
	// (phases: "claim", "stage" when the image was not staged, "clone",
	// "configure", "resize", "user-data", "firewall", "start", "finish"; of a move
	// across zones: "target", "stop", "copy", "cutover", "finish") with
	// the intent's operation id and the runner's context (the request's
	// for "claim"); it lets tests stop a runner mid-way.
	AfterStep func(ctx context.Context, op, step string)
	// Maintenance, if set, returns the hosts (node names) of zone that are
	// in maintenance: placement puts no new VM on them. Nil: the hosts
	// the zone's policy lists as in maintenance (Hosts.SetMaintenance).
	Maintenance func(ctx context.Context, zone string) (map[string]bool, error)
	// HARecovered, if set, is told of each VM that Proxmox's HA manager
	// recovered onto another host (ha.go), once, by the replica whose
	// Recover pass (Recovers) sees it: the orchestrator records it as an
	// audit event. Nil: only logged.
	HARecovered func(ctx context.Context, r HARecovery)
	// HARequestTimeout bounds the wait for Proxmox's HA manager to do a
	// start, stop or migration of an HA VM it was asked for (hawait.go):
	// an operation whose VM is not there by then fails. Default
	// DefaultHARequestTimeout.
	HARequestTimeout time.Duration
	// Firewall, if set, writes the security groups of a VM into its
	// zone's firewall (sgsync.Syncer): a create, or a move across zones,
	// of a VM in groups waits for it before it starts the guest, so that
	// the guest never runs without its groups (fail-closed from the first
	// boot). Nil: nothing waits (the groups are written by whatever
	// writes them, after the guest started).
	Firewall Firewall
	// FirewallTimeout bounds that wait; a create whose VM's firewall is
	// not written within it fails (its guest deleted), a move's finish
	// fails and is finished again by Recover. Default 2m.
	FirewallTimeout time.Duration
	// DrainParallel is how many VMs the drain of hosts in maintenance
	// migrates at once per zone; default DefaultDrainParallel (4).
	DrainParallel int
	// Logger receives the service's logs; default slog.Default().
	Logger *slog.Logger
}

// Firewall writes the security groups of a VM into its zone's firewall
// (sgsync.Syncer implements it).
type Firewall interface {
	// WaitVM returns once zone's firewall holds what guest vmid of vdc
	// needs of its security groups (as recorded in its intent), or an
	// error saying what is missing when ctx ends.
	WaitVM(ctx context.Context, zone, vdc string, vmid int) error
}

// Service runs VM lifecycles. Its methods are its public API: the entry
// points that start operations and the read queries. What an operation
// does is in its phases, on its own scope (see the package doc).
type Service struct {
	// d are the parts the operations share; each operation's scope
	// holds them.
	d *deps
}

// deps are what the operations of a Service work with, built once by New
// and shared by every scope: the configuration, the engine that runs the
// operations, the finder of zones and guests, the quota ledger, the image
// stager, the snippets, and the service's two indexes.
type deps struct {
	cfg    Config
	log    *slog.Logger
	eng    *engine
	find   *finder
	quota  *quota.Ledger
	stager *images.Stager
	snips  snippets
	// addrs: the addresses claimed by runners and the orphans Recover saw.
	addrs *addressBook
	// moved: the guests Recover last saw that are not the VM their place
	// names (see movedIndex).
	moved *movedIndex
	// placer: the placements of the creates in flight (placement.go).
	placer *placer
	// ha: the HA VMs Recover last saw, to tell their recoveries (ha.go).
	ha *haWatch
	// drainer: the migrations of hosts in maintenance (drain.go).
	drainer *drainer
	// seen: what Run's recovery passes last read of each managed guest's
	// config (recoverseen.go).
	seen *seenConfigs
	// unplaced: creates skip placement and clone on the template's node
	// (set only by DisablePlacementForTest, to measure placement's cost).
	unplaced bool
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
	if cfg.FirewallTimeout <= 0 {
		cfg.FirewallTimeout = 2 * time.Minute
	}
	if cfg.OrphanGrace == 0 {
		cfg.OrphanGrace = 10 * time.Minute
	}
	if cfg.BackupQuotaInterval <= 0 {
		cfg.BackupQuotaInterval = time.Minute
	}
	if cfg.RecoverInterval <= 0 {
		cfg.RecoverInterval = 30 * time.Second
	}
	if cfg.RecoverResyncInterval <= 0 {
		cfg.RecoverResyncInterval = 10 * time.Minute
	}
	if cfg.ImageCopyRecoverInterval <= 0 {
		cfg.ImageCopyRecoverInterval = time.Minute
	}
	if cfg.HARequestTimeout <= 0 {
		cfg.HARequestTimeout = DefaultHARequestTimeout
	}
	if cfg.DrainParallel <= 0 {
		cfg.DrainParallel = DefaultDrainParallel
	}
	timeout := cfg.ZoneTimeout
	if timeout <= 0 {
		timeout = quota.DefaultZoneTimeout
	}
	moved := newMovedIndex()
	find := &finder{zones: cfg.Zones, timeout: timeout, moved: moved, log: cfg.Logger}
	d := &deps{
		cfg: cfg, log: cfg.Logger, stager: cfg.Images, eng: newEngine(cfg.Logger, cfg.AfterStep), find: find,
		snips: snippets{w: cfg.Snippets}, addrs: newAddressBook(), moved: moved,
		placer: newPlacer(), drainer: newDrainer(), ha: &haWatch{last: map[tenancy.VMRef]haSeen{}}, seen: newSeenConfigs(),
	}
	if d.cfg.Maintenance == nil {
		d.cfg.Maintenance = d.maintenanceHosts
	}
	d.quota = &quota.Ledger{Store: cfg.Catalog, TTL: cfg.QuotaTTL, Zones: find.quotaZones, ZoneTimeout: cfg.ZoneTimeout}
	return &Service{d: d}, nil
}

// Run makes a recovery pass (Recover's, reading only the guest configs
// that may have changed: see Config.RecoverInterval and
// RecoverResyncInterval) every RecoverInterval, and at once whenever a zone
// comes into reach (an orchestrator that just started sees its zones only
// as their agents connect), drains the hosts in maintenance (each
// second, while Recovers says so) and pauses or resumes backup schedules
// by the backupGiB quotas (every BackupQuotaInterval, while Recovers says
// so) and copies VDC images into zones again whose copy was cut off
// (every ImageCopyRecoverInterval, while Recovers says so, from the
// listings of a recovery pass it makes in the same tick), until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	cfg := s.d.cfg
	t := time.NewTicker(min(cfg.RecoverInterval, cfg.ImageCopyRecoverInterval, time.Second))
	defer t.Stop()
	seen := map[string]bool{}
	var last, lastQuota, lastCopies time.Time
	rec := recovery{deps: s.d}
	led := false // the last pass was a recovery pass
	// The image-copy pass reads the guests the recovery pass listed: when
	// it is due, the recovery pass runs in the same tick.
	var listings map[string][]pveapi.Resource // by zone ID, while collecting
	rec.listed = func(z Zone, guests []pveapi.Resource) {
		if listings != nil {
			listings[z.ID] = guests
		}
	}
	for {
		fresh := false
		for _, z := range cfg.Zones.Zones(ctx) {
			if !seen[z.ID] {
				seen[z.ID], fresh = true, true
			}
		}
		leads := cfg.Recovers == nil || cfg.Recovers()
		copiesDue := leads && time.Since(lastCopies) >= cfg.ImageCopyRecoverInterval
		if copiesDue {
			listings = map[string][]pveapi.Resource{}
		}
		if fresh || copiesDue || time.Since(last) >= cfg.RecoverInterval {
			// A replica that leaves the takeover to another still keeps its
			// index of moved guests, which every answer about them needs.
			// One that takes it (over) reads every config first: what it
			// read before may be stale by more than its listing shows.
			full := !led
			op, pass := "recover", func(ctx context.Context) error { return rec.pass(ctx, full) }
			led = true
			if cfg.Recovers != nil && !cfg.Recovers() {
				op, pass, led = "index moved guests", rec.indexMovedGuests, false
			}
			if err := pass(ctx); err != nil && ctx.Err() == nil {
				s.d.log.Warn(op, "err", err)
			}
			last = time.Now()
		}
		if cfg.Recovers == nil || cfg.Recovers() {
			s.d.drainPass(ctx)
			if time.Since(lastQuota) >= cfg.BackupQuotaInterval {
				if err := s.d.backupQuotaPass(ctx); err != nil && ctx.Err() == nil {
					s.d.log.Warn("backup quota", "err", err)
				}
				lastQuota = time.Now()
			}
			if copiesDue && led {
				if err := s.Images().recoverCopies(ctx, listings); err != nil && ctx.Err() == nil {
					s.d.log.Warn("recover image copies", "err", err)
				}
				lastCopies = time.Now()
			}
			listings = nil
		}
		select {
		case <-ctx.Done():
			// The drain's waits end with ctx (the migrations go on in
			// Proxmox; the next leader sees them locked).
			s.d.drainer.wg.Wait()
			return nil
		case <-t.C:
		}
	}
}

// Shutdown stops every runner (their creates stay recorded on the guests
// for a later Recover) and waits for them until ctx ends.
func (s *Service) Shutdown(ctx context.Context) error {
	return s.d.eng.shutdown(ctx)
}

// Quota returns the ledger the service reserves quota with.
func (s *Service) Quota() *quota.Ledger { return s.d.quota }

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
	// HighAvailability: the guest is a Proxmox HA resource (ha.go).
	HighAvailability bool
}

// vmFromGuest builds a VM from what Proxmox lists and the guest's intent.
func vmFromGuest(z Zone, g pveapi.Resource, in *Intent, creating bool) *VM {
	vm := &VM{
		Ref: tenancy.VMRef{ZoneID: z.ID, VMID: g.VMID}, Name: g.Name, Zone: z.Name, Node: g.Node,
		VCPUs: g.MaxCPU, MemoryMiB: g.MemoryMiB(), DiskGiB: g.DiskGiB(), Status: g.State(tenancy.Creating(g.Tags())),
		HighAvailability: g.HAState != "",
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

// VM returns the VM id of vdc.
func (s *Service) VM(ctx context.Context, vdc, id string) (*VM, error) {
	z, g, in, err := s.d.find.lookup(ctx, vdc, id)
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
func (s *Service) Zone(ctx context.Context, name string) (Zone, bool) {
	return s.d.find.zoneByName(ctx, name)
}

// ZoneList lists the reachable zones.
func (s *Service) ZoneList(ctx context.Context) []Zone { return s.d.cfg.Zones.Zones(ctx) }
