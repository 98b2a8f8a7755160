// Package vdc is the lifecycle of the virtual data centers: a VDC is
// created and changed in the catalog, and deleted only once nothing of it
// is left in any zone (no VMs, no creates in flight, no networks), after
// which its Proxmox pool and SDN zone are removed from every zone. Who may
// use a VDC besides the identity provider's claims, its members and its
// service accounts, is changed here too (access.go). The zones are reached through small interfaces the orchestrator satisfies;
// the package imports no transport.
package vdc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// Zone is a zone a VDC may have things in.
type Zone struct {
	// ID is the zone's stable identity.
	ID string
	// Name is the zone's name, as errors report it.
	Name string
}

// Zones lists every zone known, reachable or not (a zone that cannot be
// reached makes a delete ZONE_UNAVAILABLE rather than be skipped).
type Zones interface {
	Zones() []Zone
}

// Networks reads and removes the VDCs' networks in a zone
// (*network.Service implements it).
type Networks interface {
	List(ctx context.Context, zoneID, vdc string) ([]network.Network, error)
	RemoveVDC(ctx context.Context, zoneID, vdc string) error
}

// Pools removes a VDC's Proxmox pool from a zone once it is empty.
type Pools interface {
	RemovePool(ctx context.Context, zoneID, vdc string) error
}

// Ledger counts what a VDC uses as its quotas count it (*quota.Ledger
// implements it).
type Ledger interface {
	Usage(ctx context.Context, v *catalog.VDC) (quota.Usage, error)
}

// Clusters counts a VDC's Kubernetes clusters as its kubernetesClusters
// quota counts them (*tenantkube.Service implements it).
type Clusters interface {
	CountClusters(ctx context.Context, vdc string) (int, error)
}

// DefaultZoneTimeout bounds one zone's part of a call when
// Config.ZoneTimeout is zero.
const DefaultZoneTimeout = 5 * time.Second

// Config configures a Service.
type Config struct {
	// Store holds the VDCs (required).
	Store catalog.Store
	// Zones are the zones a VDC may have things in; nil: there are none,
	// and a VDC lives in the catalog alone (Networks, Pools and Ledger
	// are then not used).
	Zones Zones
	// Networks reads and removes the VDC's networks (required with Zones).
	Networks Networks
	// Pools removes the VDC's pools (required with Zones).
	Pools Pools
	// Ledger counts the VDC's VMs (required with Zones).
	Ledger Ledger
	// Clusters counts the VDC's Kubernetes clusters for its usage; nil:
	// there is no managed Kubernetes, and it has none.
	Clusters Clusters
	// ZoneTimeout bounds each zone's part of a call; zero is
	// DefaultZoneTimeout.
	ZoneTimeout time.Duration
	// Logger receives what a delete leaves behind; nil discards it.
	Logger *slog.Logger
	// Tokens issues service account tokens; nil: service accounts cannot
	// be made.
	Tokens Tokens
	// Now is the clock of service accounts' times; nil is time.Now.
	Now func() time.Time
	// Backups lists, sizes and deletes the VDC's backups; nil: there are
	// none (Delete then counts none, and Usage none).
	Backups Backups
}

// Backups lists and deletes the backups of a VDC in every zone (the
// compute service's).
type Backups interface {
	// VDCBackups lists the ids of vdc's backup archives and counts its
	// backups still being written; an error when a zone cannot tell.
	VDCBackups(ctx context.Context, vdc string) (archives []string, running int, err error)
	// DeleteBackup deletes backup id of vdc.
	DeleteBackup(ctx context.Context, vdc, id string) error
	// UsedBytes is the size of vdc's backup archives in every zone, as
	// its backupGiB quota counts them.
	UsedBytes(ctx context.Context, vdc string) (int64, error)
}

// Service creates, changes and deletes VDCs.
type Service struct {
	cfg    Config
	log    *slog.Logger
	access accessState
}

// New checks cfg and returns the service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("vdc: Config.Store is required")
	}
	if cfg.Zones != nil && (cfg.Networks == nil || cfg.Pools == nil || cfg.Ledger == nil) {
		return nil, errors.New("vdc: Config.Networks, Pools and Ledger are required with Zones")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.ZoneTimeout = cmp.Or(cfg.ZoneTimeout, DefaultZoneTimeout)
	return &Service{cfg: cfg, log: log, access: accessState{lastUsed: map[string]time.Time{}}}, nil
}

// Create creates v in the catalog. A new VDC has resources in no zone:
// its zone set starts empty and complete.
func (s *Service) Create(ctx context.Context, v *catalog.VDC) (*catalog.VDC, error) {
	v.Status.Zones, v.Status.ZonesComplete = nil, true
	out, err := catalog.Create(ctx, s.cfg.Store, v)
	if err != nil {
		return nil, fmt.Errorf("vdc: create %s: %w", v.Name, err)
	}
	return out, nil
}

// Update applies change to the VDC name and writes it conditionally: on
// resourceVersion when given (an empty one is bad input), else on the
// version just read, so a concurrent write in between is a conflict,
// never lost.
func (s *Service) Update(ctx context.Context, name string, resourceVersion *string, change func(*catalog.VDC)) (*catalog.VDC, error) {
	cur, err := catalog.Get[*catalog.VDC](ctx, s.cfg.Store, name)
	if err != nil {
		return nil, fmt.Errorf("vdc: update %s: %w", name, err)
	}
	if resourceVersion != nil {
		if *resourceVersion == "" {
			return nil, fault.Invalid("resourceVersion", "must not be empty when given")
		}
		cur.ResourceVersion = *resourceVersion
	}
	change(cur)
	out, err := catalog.Update(ctx, s.cfg.Store, cur)
	if err != nil {
		return nil, fmt.Errorf("vdc: update %s: %w", name, err)
	}
	return out, nil
}

// Usage is what a VDC uses as its quotas count it.
type Usage struct {
	// VMs are the quota ledger's counts (zero without zones).
	VMs quota.Usage
	// PublicAddresses is the number of public addresses the VDC holds.
	PublicAddresses int
	// KubernetesClusters is the number of its Kubernetes clusters.
	KubernetesClusters int
	// BackupBytes is the size of its backup archives (Config.Backups).
	BackupBytes int64
}

// Usage reads what v uses: its VMs (the quota ledger's count, read within
// the zone timeout), the public addresses it holds (the catalog's count)
// its Kubernetes clusters (Config.Clusters) and the size of its backups
// (Config.Backups). A zone that does not answer makes it ZONE_UNAVAILABLE.
func (s *Service) Usage(ctx context.Context, v *catalog.VDC) (Usage, error) {
	addrs, err := catalog.PublicAddressesOf(ctx, s.cfg.Store, v.Name)
	if err != nil {
		return Usage{}, fmt.Errorf("vdc: usage of %s: %w", v.Name, err)
	}
	clusters := 0
	if s.cfg.Clusters != nil {
		if clusters, err = s.cfg.Clusters.CountClusters(ctx, v.Name); err != nil {
			return Usage{}, fmt.Errorf("vdc: usage of %s: %w", v.Name, err)
		}
	}
	if s.cfg.Zones == nil {
		return Usage{PublicAddresses: addrs, KubernetesClusters: clusters}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ZoneTimeout)
	defer cancel()
	u, err := s.cfg.Ledger.Usage(ctx, v)
	var backups int64
	if err == nil && s.cfg.Backups != nil {
		backups, err = s.cfg.Backups.UsedBytes(ctx, v.Name)
	}
	if err != nil {
		s.log.Warn("vdc: usage", "vdc", v.Name, "err", err)
		return Usage{}, &fault.Error{Kind: fault.ZoneUnavailable, Cause: err,
			Message: fmt.Sprintf("the usage of VDC %s cannot be read: a zone does not answer", v.Name)}
	}
	return Usage{VMs: u, PublicAddresses: addrs, KubernetesClusters: clusters, BackupBytes: backups}, nil
}

// Delete deletes the VDC name once nothing of it is left: while it has
// VMs (or creates in flight) or networks in any zone it is a conflict, and
// while a zone cannot tell ZONE_UNAVAILABLE, and nothing changes. The
// delete is conditional on the version read for that check (or on
// resourceVersion, when given: an empty one is bad input), so a create
// that reserves quota meanwhile makes it a conflict. Then the VDC's pool
// and SDN zone are removed from every zone; one left behind by a zone that
// fails there is logged (it is empty, and a VDC of the same name would use
// it again). Backups outlive their VMs: while the VDC has some it is a
// conflict too, unless deleteBackups, which deletes them (once the VDC is
// otherwise empty and resourceVersion, when given, is still its own).
func (s *Service) Delete(ctx context.Context, name string, resourceVersion *string, deleteBackups bool) error {
	if resourceVersion != nil && *resourceVersion == "" {
		return fault.Invalid("resourceVersion", "must not be empty when given")
	}
	v, err := catalog.Get[*catalog.VDC](ctx, s.cfg.Store, name)
	if err != nil {
		return fmt.Errorf("vdc: delete %s: %w", name, err)
	}
	rv := v.ResourceVersion
	if resourceVersion != nil {
		if *resourceVersion != rv {
			return fmt.Errorf("vdc: delete %s: %w", name, &catalog.ConflictError{Kind: catalog.KindVDC, Name: name, Expected: *resourceVersion, Actual: rv})
		}
		rv = *resourceVersion
	}
	if s.cfg.Zones != nil {
		if err := s.isEmpty(ctx, v); err != nil {
			return err
		}
	}
	if err := s.dropBackups(ctx, name, deleteBackups); err != nil {
		return err
	}
	if err := catalog.Delete[*catalog.VDC](ctx, s.cfg.Store, name, rv); err != nil {
		return fmt.Errorf("vdc: delete %s: %w", name, err)
	}
	if s.cfg.Zones == nil {
		return nil
	}
	for _, ze := range s.each(ctx, func(ctx context.Context, z Zone) error {
		if err := s.cfg.Networks.RemoveVDC(ctx, z.ID, name); err != nil {
			return err
		}
		return s.cfg.Pools.RemovePool(ctx, z.ID, name)
	}) {
		s.log.Warn("vdc: delete: the VDC's pool or SDN zone is left", "vdc", name, "zone", ze.zone.Name, "err", ze.err)
	}
	return nil
}

// dropBackups is a conflict while VDC vdc has backups, unless del, which
// deletes them; a conflict too while one is being written.
func (s *Service) dropBackups(ctx context.Context, vdc string, del bool) error {
	if s.cfg.Backups == nil {
		return nil
	}
	ids, running, err := s.cfg.Backups.VDCBackups(ctx, vdc)
	if err != nil {
		return fmt.Errorf("vdc: delete %s: listing its backups: %w", vdc, err)
	}
	if running > 0 {
		return fault.New(fault.Conflict, "VDC %s has %s being written: wait for them to end", vdc, plural(running, "backup"))
	}
	if len(ids) == 0 {
		return nil
	}
	if !del {
		return fault.New(fault.Conflict, "VDC %s still has %s: delete them first, or delete the VDC with deleteBackups", vdc, plural(len(ids), "backup"))
	}
	for _, id := range ids {
		if err := s.cfg.Backups.DeleteBackup(ctx, vdc, id); err != nil {
			return fmt.Errorf("vdc: delete %s: deleting its backup %s: %w", vdc, id, err)
		}
	}
	return nil
}

// isEmpty is a conflict while v has VMs (or creates in flight) or
// networks in any zone, ZONE_UNAVAILABLE when a zone cannot tell.
func (s *Service) isEmpty(ctx context.Context, v *catalog.VDC) error {
	usage, err := s.Usage(ctx, v)
	if err != nil {
		return err
	}
	var (
		mu   sync.Mutex
		nets int
	)
	if zerrs := s.each(ctx, func(ctx context.Context, z Zone) error {
		ns, err := s.cfg.Networks.List(ctx, z.ID, v.Name)
		mu.Lock()
		defer mu.Unlock()
		nets += len(ns)
		return err
	}); len(zerrs) > 0 {
		s.log.Warn("vdc: delete: networks", "vdc", v.Name, "zone", zerrs[0].zone.Name, "err", zerrs[0].err)
		return fault.ZoneDown(zerrs[0].zone.Name, zerrs[0].err)
	}
	if usage.VMs.VMs > 0 || nets > 0 {
		return fault.New(fault.Conflict, "VDC %s still has %s and %s: delete them first", v.Name, plural(usage.VMs.VMs, "VM"), plural(nets, "network"))
	}
	return nil
}

type zoneError struct {
	zone Zone
	err  error
}

// each runs fn for every zone concurrently, each call bounded by the zone
// timeout (a call that outlives it is abandoned), and returns the zones
// whose call failed, in the order of the zones.
func (s *Service) each(ctx context.Context, fn func(ctx context.Context, z Zone) error) []zoneError {
	zs := s.cfg.Zones.Zones()
	errs := make([]error, len(zs))
	var wg sync.WaitGroup
	for i, z := range zs {
		wg.Go(func() {
			zctx, cancel := context.WithTimeout(ctx, s.cfg.ZoneTimeout)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- fn(zctx, z) }()
			select {
			case errs[i] = <-done:
				if errs[i] != nil && zctx.Err() != nil {
					errs[i] = fmt.Errorf("vdc: zone %s: %w", z.Name, zctx.Err())
				}
			case <-zctx.Done():
				errs[i] = fmt.Errorf("vdc: zone %s: %w", z.Name, zctx.Err())
			}
		})
	}
	wg.Wait()
	var out []zoneError
	for i, err := range errs {
		if err != nil {
			out = append(out, zoneError{zone: zs[i], err: err})
		}
	}
	return out
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
