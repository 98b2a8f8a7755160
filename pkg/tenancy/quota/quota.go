// Package quota enforces the quotas of VDCs without a database of its own.
//
// Usage is computed from Proxmox at request time: every guest tagged with
// the VDC (pkg/tenancy) in every zone counts its vCPUs, memory, disk and one
// VM. A check alone races (two replicas could both see room for the last
// VM), so a create reserves its resources on the VDC catalog object with a
// conditional write (the resourceVersion it read): of two replicas racing
// for the last of a quota one write wins, the other re-reads, sees the
// reservation and is refused. A reservation carries the create's operation
// id; the create's guest carries the same id as a tag (tenancy.OpTag) until
// it is finished, and such a guest is counted through its reservation, not
// twice. A create releases its reservation just before it removes the op
// tag from its finished guest (from then on Proxmox counts the guest, so it
// is neither counted twice nor missed); a failed create releases it after
// cleaning up; one left by
// a crashed orchestrator expires (TTL) or is released by the recovery that
// finishes the create.
package quota

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	Resource  string // "vcpus", "memoryMiB", "storageGiB" or "vms"
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

// ProxmoxUsage sums what the guests of vdc use in the zones of clients; a
// guest tagged with an operation in skip is left out (its reservation
// counts it). Templates are never counted.
func ProxmoxUsage(ctx context.Context, clients []*proxmox.Client, vdc string, skip map[string]bool) (Usage, error) {
	var u Usage
	for _, c := range clients {
		guests, err := pveapi.Guests(ctx, c)
		if err != nil {
			return Usage{}, fmt.Errorf("quota: usage: %w", err)
		}
		for _, g := range guests {
			tags := g.Tags()
			if v, ok := tenancy.VDCOf(tags); !ok || v != vdc || g.Template == 1 {
				continue
			}
			if op := tenancy.OpOf(tags); op != "" && skip[op] {
				continue
			}
			u = u.add(Usage{VCPUs: g.MaxCPU, MemoryMiB: g.MemoryMiB(), StorageGiB: g.DiskGiB(), VMs: 1})
		}
	}
	return u, nil
}

// Ledger reserves and releases quota on the VDCs of a catalog.
type Ledger struct {
	// Store holds the VDCs. Required.
	Store catalog.Store
	// Clients are the Proxmox clients of every zone (usage spans zones).
	Clients func(ctx context.Context) []*proxmox.Client
	// TTL is how long a reservation lives unless released; default 30m.
	TTL time.Duration
}

func (l *Ledger) ttl() time.Duration {
	if l.TTL > 0 {
		return l.TTL
	}
	return 30 * time.Minute
}

// Reserve reserves req (VMs is taken as 1) for the create with operation id
// in vdc, or fails with *ExceededError. Reserving an id twice is a no-op.
func (l *Ledger) Reserve(ctx context.Context, vdc, id string, req Usage) error {
	req.VMs = 1
	for {
		v, err := catalog.Get[*catalog.VDC](ctx, l.Store, vdc)
		if err != nil {
			return fmt.Errorf("quota: reserve: %w", err)
		}
		now := time.Now()
		live := pruned(v.Status.Reservations, now)
		if slices.ContainsFunc(live, func(r catalog.QuotaReservation) bool { return r.ID == id }) {
			return nil
		}
		used, err := l.used(ctx, vdc, live)
		if err != nil {
			return err
		}
		if err := check(vdc, v.Quotas, used, req); err != nil {
			return err
		}
		v.Status.Reservations = append(live, catalog.QuotaReservation{
			ID: id, VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB, StorageGiB: req.StorageGiB, Expires: now.Add(l.ttl()),
		})
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

// used is what vdc uses: its guests in Proxmox and the creates in flight
// (the live reservations), each counted once.
func (l *Ledger) used(ctx context.Context, vdc string, live []catalog.QuotaReservation) (Usage, error) {
	skip := map[string]bool{}
	var reserved Usage
	for _, r := range live {
		skip[r.ID] = true
		reserved = reserved.add(Usage{r.VCPUs, r.MemoryMiB, r.StorageGiB, 1})
	}
	used, err := ProxmoxUsage(ctx, l.Clients(ctx), vdc, skip)
	if err != nil {
		return Usage{}, err
	}
	return used.add(reserved), nil
}

// Usage returns what VDC v uses as its quotas count it: its guests in
// every zone and the creates in flight.
func (l *Ledger) Usage(ctx context.Context, v *catalog.VDC) (Usage, error) {
	return l.used(ctx, v.Name, pruned(v.Status.Reservations, time.Now()))
}

// Release drops the reservation id of vdc (and expired ones). Releasing an
// absent reservation is a no-op.
func (l *Ledger) Release(ctx context.Context, vdc, id string) error {
	for {
		v, err := catalog.Get[*catalog.VDC](ctx, l.Store, vdc)
		if errors.Is(err, catalog.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("quota: release: %w", err)
		}
		before := len(v.Status.Reservations)
		live := slices.DeleteFunc(pruned(v.Status.Reservations, time.Now()), func(r catalog.QuotaReservation) bool { return r.ID == id })
		if len(live) == before {
			return nil
		}
		v.Status.Reservations = live
		_, err = catalog.Update(ctx, l.Store, v)
		if errors.Is(err, catalog.ErrConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("quota: release: %w", err)
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
		if c.use+c.ask > c.limit {
			return &ExceededError{VDC: vdc, Resource: c.name, Limit: c.limit, Used: c.use, Requested: c.ask}
		}
	}
	return nil
}
