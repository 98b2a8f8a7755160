// Package estate is the read service of the fleet for the API: the zones
// and hosts of the fleet registry, which of them a caller sees and where a
// VDC may place anything (the catalog's zone policies: regions and
// dedicated zones), and what Proxmox says of them now (a VDC's guests, the
// hosts' figures, a zone's capacity, addresses, networks and metrics).
//
// Reads that span zones ask every zone concurrently, each bounded by
// Config.Timeout: a zone that fails or is too slow comes back as a
// ZoneError beside the others' answers, never failing the whole read.
// Nothing is cached beyond one Read, which is one API operation: every
// answer is built from what Proxmox says now. Errors are a *ZoneError for
// a zone that does not answer, else *fault.Error, which the API's edge maps
// to its codes.
package estate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/inventory"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// DefaultTimeout bounds one zone's part of a read when Config.Timeout is
// zero.
const DefaultTimeout = 5 * time.Second

// Placement tells where VMs that moved across zones are now; the VM
// lifecycle (*compute.Service) implements it.
type Placement interface {
	// KeptID returns the id of the VM whose guest sits at place, and
	// notVM for a move's other copy (which is no VM of the API).
	KeptID(place tenancy.VMRef) (id string, notVM bool)
	// PlaceOf returns where the VM of id sits now, if it moved.
	PlaceOf(id string) (tenancy.VMRef, bool)
}

// Config configures a Service.
type Config struct {
	// Zones is the fleet registry. Nil serves an empty estate.
	Zones *fleet.Registry
	// Catalog holds the zone policies. Nil reads none (every zone is open
	// to every VDC and in no region).
	Catalog catalog.Store
	// Placement tells the VMs that moved across zones; nil: none moved.
	Placement Placement
	// Inventory reads Proxmox; nil builds one over Zones. Share the
	// process's one so that its bound on the answers decoded at a time
	// holds across every service.
	Inventory *inventory.Inventory
	// Timeout bounds each zone's part of a read. Zero is DefaultTimeout.
	Timeout time.Duration
	// Logger receives the service's diagnostics; nil discards them.
	Logger *slog.Logger
}

// Service reads the estate. One Service serves a whole process and is safe
// for concurrent use: its bound on the answers decoded at a time holds
// across all operations only if they share it.
type Service struct {
	cfg Config
	inv *inventory.Inventory // nil without Zones
}

// New returns a service over cfg.Zones.
func New(cfg Config) *Service {
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, inv: cfg.Inventory}
	if cfg.Zones != nil && s.inv == nil {
		// New fails only without Zones.
		s.inv, _ = inventory.New(inventory.Config{Zones: cfg.Zones, Timeout: cfg.Timeout})
	}
	return s
}

// InventoryForTest returns the inventory the service reads Proxmox with
// (nil without zones).
func (s *Service) InventoryForTest() *inventory.Inventory { return s.inv }

// ZoneError is a zone that could not answer.
type ZoneError struct {
	Zone fleet.Zone
	Err  error
}

func (e *ZoneError) Error() string { return fmt.Sprintf("estate: zone %s: %v", e.Zone.Name, e.Err) }

func (e *ZoneError) Unwrap() error { return e.Err }

// notFound is the one error of a VM that is not there, or not of the VDC
// asked about.
func notFound() error { return fault.New(fault.NotFound, "VM not found") }

// Zones returns the zones of the registry (none without one).
func (s *Service) Zones() []fleet.Zone {
	if s.cfg.Zones == nil {
		return nil
	}
	return s.cfg.Zones.Zones()
}

// Zone returns the zone with the cluster identity id.
func (s *Service) Zone(id string) (fleet.Zone, bool) {
	if s.cfg.Zones == nil {
		return fleet.Zone{}, false
	}
	return s.cfg.Zones.Zone(id)
}

// RefusedAgents lists the agents of the mesh the registry keeps out of
// every zone, and why (none without a registry).
func (s *Service) RefusedAgents() []fleet.RefusedAgent {
	if s.cfg.Zones == nil {
		return nil
	}
	return s.cfg.Zones.RefusedAgents()
}

// ZoneNamed returns the zone called name.
func (s *Service) ZoneNamed(name string) (fleet.Zone, bool) {
	for _, z := range s.Zones() {
		if z.Name == name {
			return z, true
		}
	}
	return fleet.Zone{}, false
}

// Known returns the zones known so far. Right after a restart it waits
// for every agent's zone within the zone timeout; then the zones known so
// far come with a *fault.Error of ZoneUnavailable saying how many agents
// were not heard from.
func (s *Service) Known(ctx context.Context) ([]fleet.Zone, error) {
	if s.cfg.Zones == nil {
		return nil, nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	idErr := s.cfg.Zones.Identified(wctx)
	cancel()
	all := s.cfg.Zones.Zones()
	var ue *fleet.UnidentifiedError
	if !errors.As(idErr, &ue) || ctx.Err() != nil {
		return all, nil
	}
	s.cfg.Logger.Warn("estate: zones not known yet", "err", idErr)
	msg := fmt.Sprintf("the zones of %d agents are not known yet: they have not reported since the orchestrator started", len(ue.Agents))
	if len(ue.Agents) == 0 {
		msg = "the zones are not known yet: the orchestrator has not heard from the agents since it started"
	}
	return all, &fault.Error{Kind: fault.ZoneUnavailable, Message: msg, Cause: idErr}
}

// Each runs fn for every zone of zs concurrently, each within the zone
// timeout, and returns the zones whose fn failed, in the order of zs.
func (s *Service) Each(ctx context.Context, zs []fleet.Zone, fn func(ctx context.Context, z fleet.Zone) error) []*ZoneError {
	if s.inv == nil {
		return nil
	}
	return s.each(ctx, zs, func(ctx context.Context, z fleet.Zone, _ *proxmox.Client) error { return fn(ctx, z) })
}

// each is Each with the zone's go-proxmox client.
func (s *Service) each(ctx context.Context, zs []fleet.Zone, fn func(ctx context.Context, z fleet.Zone, c *proxmox.Client) error) []*ZoneError {
	if s.inv == nil {
		return nil
	}
	var out []*ZoneError
	for _, ze := range s.inv.Each(ctx, zs, fn) {
		out = append(out, &ZoneError{Zone: ze.Zone, Err: ze.Err})
	}
	return out
}

// Networks lists the networks of vdc in zone z, within the zone timeout.
func (s *Service) Networks(ctx context.Context, z fleet.Zone, vdc string) ([]network.Network, error) {
	var nets []network.Network
	if zerrs := s.each(ctx, []fleet.Zone{z}, func(ctx context.Context, _ fleet.Zone, c *proxmox.Client) (err error) {
		nets, err = network.List(ctx, c, vdc)
		return err
	}); len(zerrs) > 0 {
		return nil, zerrs[0]
	}
	return nets, nil
}

// Network returns the network of vdc that ref names, and its zone: a
// NotFound *fault.Error when the zone or the network is not known, a
// ZoneUnavailable one when the zone does not answer.
func (s *Service) Network(ctx context.Context, ref tenancy.NetworkRef, vdc string) (fleet.Zone, network.Network, error) {
	z, ok := s.Zone(ref.ZoneID)
	if !ok {
		return z, network.Network{}, fault.New(fault.NotFound, "no object of that id")
	}
	nets, err := s.Networks(ctx, z, vdc)
	if err != nil {
		if ze := (*ZoneError)(nil); errors.As(err, &ze) {
			err = ze.Err
		}
		if errors.Is(err, fleet.ErrNoAgent) || errors.Is(err, context.DeadlineExceeded) {
			return z, network.Network{}, fault.ZoneDown(z.Name, err)
		}
		return z, network.Network{}, err
	}
	for _, n := range nets {
		if n.VNet == ref.VNet {
			return z, n, nil
		}
	}
	return z, network.Network{}, fault.New(fault.NotFound, "no object of that id")
}

// NetworksOf lists the networks of vdc in every zone of zs, by zone ID; the
// zones that fail are returned beside.
func (s *Service) NetworksOf(ctx context.Context, zs []fleet.Zone, vdc string) (map[string][]network.Network, []*ZoneError) {
	var mu sync.Mutex
	out := map[string][]network.Network{}
	zerrs := s.each(ctx, zs, func(ctx context.Context, z fleet.Zone, c *proxmox.Client) error {
		nets, err := network.List(ctx, c, vdc)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		out[z.ID] = nets
		return nil
	})
	return out, zerrs
}

// Read is one API operation's view of the estate: each zone is read at
// most once per kind of read, and the zone policies once, so that every
// field of one answer sees the same state. It is not a cache across
// operations. A Read is safe for concurrent use.
type Read struct {
	s    *Service
	sess *inventory.Session // nil without zones

	mu       sync.Mutex
	policies map[string]*catalog.ZonePolicy // once read; protected by mu
	read     bool                           // policies were read; protected by mu
	memos    map[string]*memo               // by key; protected by mu
	reported map[string]bool                // zones reported unavailable; protected by mu
}

// NewRead starts the view of one operation.
func (s *Service) NewRead() *Read {
	rd := &Read{s: s}
	if s.inv != nil {
		rd.sess = s.inv.NewSession()
	}
	return rd
}

// Service returns the service rd reads through.
func (rd *Read) Service() *Service { return rd.s }

// poolGuests reads the QEMU guests of the pool poolid of zone z as Proxmox
// lists them, once per Read (none without zones).
func (rd *Read) poolGuests(ctx context.Context, z fleet.Zone, poolid string) ([]pveapi.Resource, error) {
	if rd.sess == nil {
		return nil, nil
	}
	return rd.sess.PoolGuests(ctx, z, poolid)
}

// Memo returns what read returns for key, calling read once per Read: the
// fields of one operation share one read of what another service says (a
// VM's configuration, say). A failed read is shared too.
func (rd *Read) Memo(key string, read func() (any, error)) (any, error) {
	rd.mu.Lock()
	if rd.memos == nil {
		rd.memos = map[string]*memo{}
	}
	m := rd.memos[key]
	if m == nil {
		m = &memo{}
		rd.memos[key] = m
	}
	rd.mu.Unlock()
	m.once.Do(func() { m.val, m.err = read() })
	return m.val, m.err
}

type memo struct {
	once sync.Once
	val  any
	err  error
}

// FirstReport reports whether zone id ("" for the zones not known yet) has
// not been reported unavailable in this Read yet, and records that it is:
// an operation reports each zone once however many fields it fails.
func (rd *Read) FirstReport(id string) bool {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.reported == nil {
		rd.reported = map[string]bool{}
	}
	seen := rd.reported[id]
	rd.reported[id] = true
	return !seen
}

type readKey struct{}

// readHolder is the one Read of an operation, made at its first use.
type readHolder struct {
	once sync.Once
	read *Read
}

// WithRead returns ctx carrying the state of one API operation: its view
// of the estate, made at first use (ReadOf), so that each zone is read
// once per operation and reported unavailable once. The API's handler
// calls it for every query and mutation (not for subscriptions, which
// must read afresh).
func WithRead(ctx context.Context) context.Context {
	return context.WithValue(ctx, readKey{}, &readHolder{})
}

// ReadOf returns the operation's view of the estate (WithRead), or a new
// Read when ctx carries no operation.
func (s *Service) ReadOf(ctx context.Context) *Read {
	h, ok := ctx.Value(readKey{}).(*readHolder)
	if !ok {
		return s.NewRead()
	}
	h.once.Do(func() { h.read = s.NewRead() })
	return h.read
}
