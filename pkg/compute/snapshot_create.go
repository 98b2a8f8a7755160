package compute

import (
	"context"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// CreateSnapshot takes a snapshot of VM id of vdc (with its RAM if asked:
// the VM must be running). Its storage (quota.SnapshotGiB) is reserved
// against the VDC's quota first. The operation follows the Proxmox task.
func (s *Service) CreateSnapshot(ctx context.Context, vdc, id string, in SnapshotInput) (*Operation, error) {
	d := s.d
	sc := &snapshotScope{deps: d, vdc: vdc, id: id, in: in}
	if err := runPhases(ctx, d.eng, "", "", snapshotPhases(), sc); err != nil {
		return nil, cause(err)
	}
	// The reservation counts the snapshot until the pool does.
	d.eng.spawn(func(ctx context.Context) {
		if err := pveapi.Wait(ctx, sc.z.Client, sc.upid); err != nil && ctx.Err() != nil {
			return // shutting down: the reservation expires
		}
		sc.releaseReservation()
	})
	return taskOp(sc.z, sc.g, id, OpCreateSnapshot, sc.upid), nil
}

// snapshotScope is what the phases of a snapshot's creation work on.
type snapshotScope struct {
	*deps
	vdc, id string
	in      SnapshotInput
	// z, g and snaps: the VM's zone, guest and snapshots (check).
	z     Zone
	g     pveapi.Resource
	snaps []pveapi.Snapshot
	resID string // the quota reservation (reserve)
	upid  string // the snapshot task (request)
}

// snapshotPhases are the phases of a snapshot's creation, in order: check
// (the input, and the VM: created, not locked, room for one more snapshot
// of that name), reserve (the snapshot's storage against the VDC's
// quota), request (the Proxmox task; a refused one gives the reservation
// back). Once the task ends, the reservation is released (the pool counts
// the snapshot).
func snapshotPhases() []phase[snapshotScope] {
	return []phase[snapshotScope]{
		step("check", (*snapshotScope).check),
		step("reserve", (*snapshotScope).reserve),
		step("request", (*snapshotScope).request),
	}
}

// check checks the input and the VM of a snapshot's creation.
func (sc *snapshotScope) check(ctx context.Context) error {
	in := sc.in
	if err := validSnapshotName(in.Name); err != nil {
		return err
	}
	if len(in.Description) > MaxSnapshotDescription || !utf8.ValidString(in.Description) {
		return badInput("description", "a description is UTF-8 of at most %d bytes", MaxSnapshotDescription)
	}
	z, g, snaps, err := snapshotTarget(ctx, sc.deps, sc.vdc, sc.id)
	if err != nil {
		return err
	}
	sc.z, sc.g, sc.snaps = z, g, snaps
	if in.WithRAM && g.Status != "running" {
		return badInput("withRAM", "only a running VM's RAM can be saved")
	}
	if slices.ContainsFunc(snaps, func(sn pveapi.Snapshot) bool { return sn.Name == in.Name }) {
		return &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("the VM has a snapshot %q", in.Name)}
	}
	if len(snaps) >= MaxSnapshots {
		return newError(KindConflict, "the VM has %d snapshots, the most it may have", MaxSnapshots)
	}
	return nil
}

// reserve reserves the snapshot's storage against the VDC's quota.
func (sc *snapshotScope) reserve(ctx context.Context) error {
	sc.resID = "snap-" + newOpID()
	disks, err := quota.GuestDiskGiB(ctx, sc.z.Client, sc.g)
	if err != nil {
		return zoneDown(sc.z.Name, err)
	}
	gib := quota.SnapshotGiB(disks, sc.g.MemoryMiB(), sc.in.WithRAM)
	if err := sc.quota.ReserveSnapshot(ctx, sc.vdc, sc.resID, sc.z.ID, sc.in.Name, gib); err != nil {
		return quotaError(sc.vdc, err)
	}
	return nil
}

// request asks Proxmox for the snapshot's task; a refused one gives the
// reservation back.
func (sc *snapshotScope) request(ctx context.Context) error {
	params := map[string]any{"snapname": sc.in.Name}
	if sc.in.Description != "" {
		params["description"] = sc.in.Description
	}
	if sc.in.WithRAM {
		params["vmstate"] = 1
	}
	if err := sc.z.Client.Post(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/snapshot", sc.g.Node, sc.g.VMID), params, &sc.upid); err != nil {
		sc.releaseReservation()
		return conflict(err)
	}
	return nil
}

// releaseReservation drops the snapshot's quota reservation, logging a
// failure (the reservation then expires).
func (sc *snapshotScope) releaseReservation() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sc.quota.Release(ctx, sc.vdc, sc.resID); err != nil {
		sc.log.Warn("releasing quota", "vdc", sc.vdc, "reservation", sc.resID, "err", err)
	}
}
