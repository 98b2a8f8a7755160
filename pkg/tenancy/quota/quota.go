// Package quota enforces the quotas of VDCs without a database of its own.
//
// Usage is counted from Proxmox at request time: every guest of the VDC's
// pool (tenancy.PoolID) in every zone counts its vCPUs, memory, disk and one
// VM; templates never count. A pool's members are read with one call per
// zone whose cost follows the VDC's own guests, not the zone's. Zones are
// counted in parallel, each within Ledger.ZoneTimeout.
//
// A check alone races (two replicas could both see room for the last VM),
// so a create reserves its resources on the VDC catalog object with a
// conditional write (the resourceVersion it read): of two replicas racing
// for the last of a quota one write wins, the other re-reads, sees the
// reservation and is refused. A reservation carries the create's operation
// id and zone, and the VMID its guest is cloned with, recorded before the
// clone (Bind); that guest is counted through its reservation, not twice.
// A create releases its reservation just before it finishes its guest
// (from then on the pool counts it); a failed create releases it after
// cleaning up; one left by a crashed orchestrator expires (TTL) or is
// released by the recovery that finishes the create. Should a Bind fail,
// its guest is counted twice for a while: too much, never too little.
//
// # Zones that cannot be counted
//
// A zone that is down (no reachable agent, or too slow) cannot be counted,
// yet its guests still hold their share. Every reservation records, with
// its conditional write, what it counted in each zone (catalog.VDCStatus
// Counted); a zone that cannot be read counts as it was last counted. A
// create is refused with a *ZoneUnavailableError when a zone that cannot be
// read was never counted. So an outage can make a VDC look fuller than it
// is (its guests may have been deleted meanwhile), never emptier: it never
// lets a VDC go over quota. Counts of zones the deployment no longer has
// are not used.
package quota

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Usage is an amount of the resources quotas bound.
type Usage struct {
	VCPUs      int
	MemoryMiB  int
	StorageGiB int
	VMs        int
}

func (u Usage) add(o Usage) Usage {
	return Usage{u.VCPUs + o.VCPUs, u.MemoryMiB + o.MemoryMiB, u.StorageGiB + o.StorageGiB, u.VMs + o.VMs}
}

// ExceededError is a refused reservation: Resource would go over Limit.
type ExceededError struct {
	VDC       string
	Resource  string // "vcpus", "memoryMiB", "storageGiB", "vms", "publicAddresses" or "kubernetesClusters"
	Limit     int
	Used      int // including other creates in flight
	Requested int
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("quota of VDC %s exceeded: %s would be %d of %d (%d in use)",
		e.VDC, e.Resource, e.Used+e.Requested, e.Limit, e.Used)
}

// ErrExceeded matches every *ExceededError with errors.Is.
var ErrExceeded = errors.New("quota exceeded")

// Is makes errors.Is(err, ErrExceeded) true.
func (e *ExceededError) Is(target error) bool { return target == ErrExceeded }

// ZoneUnavailableError is a zone whose usage cannot be counted now and was
// never counted before: a reservation cannot be decided without it.
type ZoneUnavailableError struct {
	// Zone is the zone's name.
	Zone string
	Err  error
}

func (e *ZoneUnavailableError) Error() string {
	return fmt.Sprintf("quota: the usage in zone %s cannot be counted: %v", e.Zone, e.Err)
}

func (e *ZoneUnavailableError) Unwrap() error { return e.Err }

// ErrZoneDown is the cause of a ZoneUnavailableError for a zone that has no
// reachable agent.
var ErrZoneDown = errors.New("the zone cannot be reached")

// Zone is a zone whose guests count against quotas.
type Zone struct {
	// ID is the zone's identity; Name its name.
	ID, Name string
	// Client reaches the zone's Proxmox API; nil while it cannot.
	Client *proxmox.Client
}

// DefaultZoneTimeout bounds the count of one zone when Ledger.ZoneTimeout
// is zero.
const DefaultZoneTimeout = 5 * time.Second

// Ledger reserves and releases quota on the VDCs of a catalog.
type Ledger struct {
	// Store holds the VDCs. Required.
	Store catalog.Store
	// Zones lists every zone of the deployment, those that cannot be
	// reached now included (with a nil Client): usage spans zones.
	Zones func(ctx context.Context) []Zone
	// TTL is how long a reservation lives unless released; default 30m.
	TTL time.Duration
	// ZoneTimeout bounds the count of each zone; default DefaultZoneTimeout.
	ZoneTimeout time.Duration
}

func (l *Ledger) ttl() time.Duration {
	if l.TTL > 0 {
		return l.TTL
	}
	return DefaultTTL
}

// DefaultTTL is the lifetime of a reservation when Ledger.TTL is zero.
const DefaultTTL = 30 * time.Minute

// PoolUsage sums what the guests of vdc's pool in the zone of c use,
// leaving out the guests in skip (by VMID: their reservations count them).
// Templates are never counted. Each guest counts every disk of its
// configuration in storage, its unused disks included, and its snapshots
// their SnapshotGiB of those disks (one config and one snapshot list per
// guest, at most snapshotReads guests at a time).
func PoolUsage(ctx context.Context, c *proxmox.Client, vdc string, skip map[int]bool) (Usage, error) {
	guests, err := pveapi.PoolGuests(ctx, c, tenancy.PoolID(vdc))
	if err != nil {
		return Usage{}, fmt.Errorf("quota: usage: %w", err)
	}
	var (
		mu   sync.Mutex
		u    Usage   // protected by mu
		errs []error // protected by mu
		wg   sync.WaitGroup
		sem  = make(chan struct{}, snapshotReads)
	)
	for _, g := range guests {
		if g.Template == 1 || skip[g.VMID] {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			fail := func(err error) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("quota: usage: %w", err))
				mu.Unlock()
			}
			diskGiB, err := GuestDiskGiB(ctx, c, g)
			if err != nil {
				fail(err)
				return
			}
			gu := Usage{VCPUs: g.MaxCPU, MemoryMiB: g.MemoryMiB(), StorageGiB: diskGiB, VMs: 1}
			snaps, _, err := pveapi.Snapshots(ctx, c, g.Node, g.VMID)
			if err != nil && !pveapi.IsNotFound(err) {
				fail(err)
				return
			}
			for _, s := range snaps {
				gu.StorageGiB += SnapshotGiB(diskGiB, g.MemoryMiB(), s.VMState)
			}
			mu.Lock()
			u = u.add(gu)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return Usage{}, errors.Join(errs...)
	}
	return u, nil
}

// snapshotReads bounds the guests PoolUsage reads at once per zone (their
// configs and snapshot lists).
const snapshotReads = 8

// GuestDiskGiB is what guest g holds on storage, in GiB rounded up: every
// disk of its configuration, the unused ones (detached but kept) included.
// Proxmox's maxdisk is only the boot disk's size. A guest gone meanwhile
// counts its maxdisk.
func GuestDiskGiB(ctx context.Context, c *proxmox.Client, g pveapi.Resource) (int, error) {
	cfg, err := pveapi.GuestConfig(ctx, c, g.Node, g.VMID)
	if pveapi.IsNotFound(err) {
		return g.DiskGiB(), nil
	}
	if err != nil {
		return 0, err
	}
	n, err := pveapi.GuestDiskBytes(ctx, c, g.Node, cfg)
	if err != nil {
		return 0, err
	}
	return int((max(n, g.MaxDisk) + 1<<30 - 1) >> 30), nil
}

// SnapshotGiB is what one snapshot of a guest with disks of diskGiB and
// memoryMiB of RAM counts against its VDC's storage quota: the size of its
// disks (what the snapshot may come to hold once the guest has rewritten
// them; Proxmox reports no snapshot's size) and, when it holds the RAM, the
// guest's memory (the vmstate volume), rounded up to whole GiB.
func SnapshotGiB(diskGiB, memoryMiB int, withRAM bool) int {
	if !withRAM {
		return diskGiB
	}
	return diskGiB + (memoryMiB+1023)/1024
}

// counted is the count of one zone: fresh, or its last count (stale).
type counted struct {
	zone  Zone
	usage Usage
	fresh bool
	err   error // the zone could be counted neither now nor before
}

// count counts v in the zones of its zone set (every zone while the set
// is not complete) in parallel, each within the zone timeout, leaving out
// the guests of live reservations. Zones that cannot be read count as last
// recorded in v.
func (l *Ledger) count(ctx context.Context, v *catalog.VDC, live []catalog.QuotaReservation) []counted {
	vdc, last := v.Name, v.Status.Counted
	bound := boundGuests(live)
	timeout := l.ZoneTimeout
	if timeout <= 0 {
		timeout = DefaultZoneTimeout
	}
	zs := l.Zones(ctx)
	if v.Status.ZonesComplete {
		// A zone outside the set holds nothing of the VDC.
		zs = slices.DeleteFunc(slices.Clone(zs), func(z Zone) bool { return !v.HasZone(z.ID) })
	}
	out := make([]counted, len(zs))
	var wg sync.WaitGroup
	for i, z := range zs {
		out[i].zone = z
		if z.Client == nil {
			out[i].err = ErrZoneDown
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			type result struct {
				u   Usage
				err error
			}
			done := make(chan result, 1)
			go func() {
				u, err := PoolUsage(ctx, z.Client, vdc, bound[z.ID])
				done <- result{u, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-ctx.Done(): // a call that does not honour its context is abandoned
				r.err = fmt.Errorf("quota: count zone %s: %w", z.Name, ctx.Err())
			}
			out[i].usage, out[i].fresh, out[i].err = r.u, r.err == nil, r.err
		})
	}
	wg.Wait()
	for i := range out {
		c := &out[i]
		if c.fresh {
			continue
		}
		if lc, ok := last[c.zone.ID]; ok {
			c.usage, c.err = Usage{VCPUs: lc.VCPUs, MemoryMiB: lc.MemoryMiB, StorageGiB: lc.StorageGiB, VMs: lc.VMs}, nil
		} else {
			c.err = &ZoneUnavailableError{Zone: c.zone.Name, Err: c.err}
		}
	}
	return out
}

// used is what vdc uses: its guests in Proxmox (each zone as count found
// it) and the creates in flight (the live reservations), each counted once.
func used(cs []counted, live []catalog.QuotaReservation) (Usage, error) {
	var u Usage
	var errs []error
	for _, c := range cs {
		if c.err != nil {
			errs = append(errs, c.err)
		}
		u = u.add(c.usage)
	}
	for _, r := range live {
		u = u.add(reserved(r))
	}
	return u, errors.Join(errs...)
}

// reserved is what reservation r holds: a create's resources and one VM,
// or resources without a VM (a snapshot's storage, a disk's, the growth of
// a VM).
func reserved(r catalog.QuotaReservation) Usage {
	if r.Snapshot != "" {
		return Usage{VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB, StorageGiB: r.StorageGiB}
	}
	return Usage{r.VCPUs, r.MemoryMiB, r.StorageGiB, 1}
}

// Reserve reserves req (VMs is taken as 1) for the create with operation id
// in zone zoneID of vdc, or fails with *ExceededError, or with
// *ZoneUnavailableError when a zone can be counted neither now nor from
// before. Reserving an id twice is a no-op. It records what it counted in
// each zone on the VDC, with the reservation, and adds zoneID to the VDC's
// zone set in the same conditional write.
func (l *Ledger) Reserve(ctx context.Context, vdc, id, zoneID string, req Usage) error {
	return l.reserve(ctx, vdc, catalog.QuotaReservation{
		ID: id, VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB, StorageGiB: req.StorageGiB, Zone: zoneID,
	})
}

// ErrNameTaken is returned (wrapped) by ReserveNamed when another live
// reservation of the VDC claims the name.
var ErrNameTaken = errors.New("quota: the name is claimed by another create in flight")

// ReserveNamed is Reserve for a create that claims the VM name name in
// vdc: it fails with ErrNameTaken, in the same conditional write, when
// another live reservation claims it, so two creates of one name never
// both hold a reservation.
func (l *Ledger) ReserveNamed(ctx context.Context, vdc, id, zoneID, name string, req Usage) error {
	return l.reserve(ctx, vdc, catalog.QuotaReservation{
		ID: id, VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB, StorageGiB: req.StorageGiB, Zone: zoneID, Name: name,
	})
}

// ReserveSnapshot reserves gib of storage for snapshot name being taken
// under id in zone zoneID of vdc, failing as Reserve does. Once the
// snapshot exists the pool counts it too (SnapshotGiB): release the
// reservation when its task has ended; until then, or until it expires,
// the snapshot is counted twice (too much, never too little).
func (l *Ledger) ReserveSnapshot(ctx context.Context, vdc, id, zoneID, name string, gib int) error {
	return l.ReserveStorage(ctx, vdc, id, zoneID, name, gib)
}

// ReserveStorage reserves gib of storage only (no VM) under id in zone
// zoneID of vdc for what (a snapshot's name, or what else holds the
// storage: the copy of a VM's disks a move makes), failing as Reserve
// does.
func (l *Ledger) ReserveStorage(ctx context.Context, vdc, id, zoneID, what string, gib int) error {
	return l.reserve(ctx, vdc, catalog.QuotaReservation{ID: id, StorageGiB: gib, Zone: zoneID, Snapshot: what})
}

// ReserveResources reserves u (its VMs ignored) under id in zone zoneID of
// vdc for what grows an existing VM (a disk attached or grown, a larger
// compute profile), without a VM, failing as Reserve does. Release it once
// Proxmox reports the change (the pool counts it then); until then, or
// until it expires, the growth is counted twice (too much, never too
// little).
func (l *Ledger) ReserveResources(ctx context.Context, vdc, id, zoneID, what string, u Usage) error {
	return l.reserve(ctx, vdc, catalog.QuotaReservation{ID: id, VCPUs: max(u.VCPUs, 0), MemoryMiB: max(u.MemoryMiB, 0),
		StorageGiB: max(u.StorageGiB, 0), Zone: zoneID, Snapshot: what})
}

func (l *Ledger) reserve(ctx context.Context, vdc string, res catalog.QuotaReservation) error {
	for {
		v, err := catalog.Get[*catalog.VDC](ctx, l.Store, vdc)
		if err != nil {
			return fmt.Errorf("quota: reserve: %w", err)
		}
		now := time.Now()
		live := pruned(v.Status.Reservations, now)
		if slices.ContainsFunc(live, func(r catalog.QuotaReservation) bool { return r.ID == res.ID }) {
			return nil
		}
		if res.Name != "" && slices.ContainsFunc(live, func(r catalog.QuotaReservation) bool { return r.Name == res.Name }) {
			return fmt.Errorf("quota: reserve %s: %w", res.Name, ErrNameTaken)
		}
		cs := l.count(ctx, v, live)
		u, err := used(cs, live)
		if err != nil {
			return err
		}
		if err := check(vdc, v.Quotas, u, reserved(res)); err != nil {
			return err
		}
		res.Expires = now.Add(l.ttl())
		v.Status.Reservations = append(live, res)
		v.AddZone(res.Zone) // the zone set grows before anything lands in the zone
		record(v, cs, live, now)
		_, err = catalog.Update(ctx, l.Store, v)
		if errors.Is(err, catalog.ErrConflict) {
			continue // someone else wrote the VDC: decide again on what they wrote
		}
		if err != nil {
			return fmt.Errorf("quota: reserve: %w", err)
		}
		return nil
	}
}

// record sets the VDC's last count of every zone counted afresh. The count
// recorded includes the guests of live reservations (they are in the pool
// and stay there once their reservations are released), so a zone that
// goes down after its creates finished still counts them.
func record(v *catalog.VDC, cs []counted, live []catalog.QuotaReservation, now time.Time) {
	for _, c := range cs {
		if !c.fresh {
			continue
		}
		u := c.usage
		for _, r := range live {
			if r.Zone == c.zone.ID && r.VMID != 0 {
				u = u.add(reserved(r))
			}
		}
		if v.Status.Counted == nil {
			v.Status.Counted = map[string]catalog.ZoneCount{}
		}
		v.Status.Counted[c.zone.ID] = catalog.ZoneCount{VCPUs: u.VCPUs, MemoryMiB: u.MemoryMiB, StorageGiB: u.StorageGiB, VMs: u.VMs, At: now}
	}
}

// Bind records on the reservation id of vdc the VMID vmid its create
// clones its guest with (before the clone, again for each VMID it tries),
// so that the guest is counted through the reservation (and shown as being
// created) while it lives. Binding an absent reservation is a no-op.
func (l *Ledger) Bind(ctx context.Context, vdc, id string, vmid int) error {
	return l.edit(ctx, vdc, "bind", func(rs []catalog.QuotaReservation) ([]catalog.QuotaReservation, bool) {
		i := slices.IndexFunc(rs, func(r catalog.QuotaReservation) bool { return r.ID == id })
		if i < 0 || rs[i].VMID == vmid {
			return rs, false
		}
		rs[i].VMID = vmid
		return rs, true
	})
}

// Usage returns what VDC v uses as its quotas count it: its guests in
// every zone (a zone that cannot be read as last counted) and the creates
// in flight. Its error is a *ZoneUnavailableError per zone that can be
// counted neither now nor from before; the usage of the others is returned
// with it.
func (l *Ledger) Usage(ctx context.Context, v *catalog.VDC) (Usage, error) {
	live := pruned(v.Status.Reservations, time.Now())
	return used(l.count(ctx, v, live), live)
}

// Release drops the reservation id of vdc (and expired ones). Releasing an
// absent reservation is a no-op.
func (l *Ledger) Release(ctx context.Context, vdc, id string) error {
	return l.edit(ctx, vdc, "release", func(rs []catalog.QuotaReservation) ([]catalog.QuotaReservation, bool) {
		before := len(rs)
		rs = slices.DeleteFunc(rs, func(r catalog.QuotaReservation) bool { return r.ID == id })
		return rs, len(rs) != before
	})
}

// edit applies fn to the live reservations of vdc and writes them back
// (conditionally, again on a conflict) when fn reports a change.
func (l *Ledger) edit(ctx context.Context, vdc, op string, fn func([]catalog.QuotaReservation) ([]catalog.QuotaReservation, bool)) error {
	for {
		v, err := catalog.Get[*catalog.VDC](ctx, l.Store, vdc)
		if errors.Is(err, catalog.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("quota: %s: %w", op, err)
		}
		rs, changed := fn(pruned(v.Status.Reservations, time.Now()))
		if !changed {
			return nil
		}
		v.Status.Reservations = rs
		_, err = catalog.Update(ctx, l.Store, v)
		if errors.Is(err, catalog.ErrConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("quota: %s: %w", op, err)
		}
		return nil
	}
}

// Reservations returns the unexpired reservations of vdc.
func (l *Ledger) Reservations(ctx context.Context, vdc string) ([]catalog.QuotaReservation, error) {
	v, err := catalog.Get[*catalog.VDC](ctx, l.Store, vdc)
	if err != nil {
		return nil, fmt.Errorf("quota: reservations: %w", err)
	}
	return pruned(v.Status.Reservations, time.Now()), nil
}

// Creating returns the guests of v's creates in flight (bound to a live
// reservation), by zone identity and VMID.
func Creating(v *catalog.VDC) map[string]map[int]bool {
	return boundGuests(pruned(v.Status.Reservations, time.Now()))
}

func boundGuests(live []catalog.QuotaReservation) map[string]map[int]bool {
	out := map[string]map[int]bool{}
	for _, r := range live {
		if r.VMID != 0 {
			if out[r.Zone] == nil {
				out[r.Zone] = map[int]bool{}
			}
			out[r.Zone][r.VMID] = true
		}
	}
	return out
}

func pruned(rs []catalog.QuotaReservation, now time.Time) []catalog.QuotaReservation {
	out := make([]catalog.QuotaReservation, 0, len(rs)+1)
	for _, r := range rs {
		if r.Expires.After(now) {
			out = append(out, r)
		}
	}
	return out
}

func check(vdc string, q catalog.VDCQuotas, used, req Usage) error {
	for _, c := range []struct {
		name            string
		limit, use, ask int
	}{
		{"vms", q.VMs, used.VMs, req.VMs},
		{"vcpus", q.VCPUs, used.VCPUs, req.VCPUs},
		{"memoryMiB", q.MemoryMiB, used.MemoryMiB, req.MemoryMiB},
		{"storageGiB", q.StorageGiB, used.StorageGiB, req.StorageGiB},
	} {
		if c.ask > 0 && c.use+c.ask > c.limit {
			return &ExceededError{VDC: vdc, Resource: c.name, Limit: c.limit, Used: c.use, Requested: c.ask}
		}
	}
	return nil
}
