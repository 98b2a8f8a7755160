package compute

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// Snapshot operation kinds: each follows its Proxmox task.
const (
	OpCreateSnapshot   OpKind = "CREATE_SNAPSHOT"
	OpRollbackSnapshot OpKind = "ROLLBACK_SNAPSHOT"
	OpDeleteSnapshot   OpKind = "DELETE_SNAPSHOT"
)

// snapshotTasks are the Proxmox task types of the snapshot operations.
var snapshotTasks = map[string]OpKind{
	"qmsnapshot": OpCreateSnapshot, "qmrollback": OpRollbackSnapshot, "qmdelsnapshot": OpDeleteSnapshot,
}

// Snapshot is a snapshot of a VM, as Proxmox holds it.
type Snapshot struct {
	Name        string
	Description string
	// Taken is when it was taken (zero while its task runs).
	Taken time.Time
	// WithRAM reports whether it holds the VM's RAM: a rollback to it
	// resumes the VM where it was.
	WithRAM bool
	// Parent is the snapshot it was taken on top of ("" for none).
	Parent string
	// Current reports whether the VM now runs on top of it (it was the
	// last taken, or the last rolled back to).
	Current bool
	// StorageGiB is what it counts against the VDC's storage quota.
	StorageGiB int
}

// SnapshotInput asks for a snapshot of a VM.
type SnapshotInput struct {
	// Name: 2 to 40 letters, digits, '_' and '-', starting with a letter;
	// unique among the VM's snapshots; not "current", "pending" or "vzdump".
	Name string
	// Description is free text, at most MaxSnapshotDescription bytes.
	Description string
	// WithRAM saves the VM's RAM too (the VM must be running).
	WithRAM bool
}

// Bounds of snapshots.
const (
	// MaxSnapshots is how many snapshots one VM may have.
	MaxSnapshots = 32
	// MaxSnapshotDescription bounds a snapshot's description, in bytes.
	MaxSnapshotDescription = 1024
)

// snapshotNameRE is Proxmox's pve-configid, at most 40 characters.
var snapshotNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{1,39}$`)

// validSnapshotName checks name as the name of a snapshot.
func validSnapshotName(name string) error {
	switch {
	case !snapshotNameRE.MatchString(name):
		return badInput("name", "a snapshot name has 2 to 40 letters, digits, '_' and '-' and starts with a letter")
	case name == "current" || name == "pending" || name == "vzdump":
		return badInput("name", "%q is a reserved name", name)
	}
	return nil
}

// Snapshots lists the snapshots of VM id of vdc, oldest first.
func (s *Service) Snapshots(ctx context.Context, vdc, id string) ([]Snapshot, error) {
	z, g, _, err := s.lookup(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	snaps, current, err := pveapi.Snapshots(ctx, z.Client, g.Node, g.VMID)
	if err != nil {
		if pveapi.IsNotFound(err) {
			return nil, notFound()
		}
		return nil, zoneDown(z.Name, err)
	}
	out := make([]Snapshot, 0, len(snaps))
	for _, sn := range snaps {
		out = append(out, Snapshot{Name: sn.Name, Description: sn.Description, Taken: sn.Taken, WithRAM: sn.VMState,
			Parent: sn.Parent, Current: sn.Name == current, StorageGiB: quota.SnapshotGiB(g.DiskGiB(), g.MemoryMiB(), sn.VMState)})
	}
	slices.SortStableFunc(out, func(a, b Snapshot) int { return a.Taken.Compare(b.Taken) })
	return out, nil
}

// snapshotTarget resolves VM id of vdc for a snapshot operation: a VM that
// is being created, or that Proxmox holds locked, answers CONFLICT.
func (s *Service) snapshotTarget(ctx context.Context, vdc, id string) (Zone, pveapi.Resource, []pveapi.Snapshot, error) {
	z, g, _, err := s.lookup(ctx, vdc, id)
	if err != nil {
		return Zone{}, g, nil, err
	}
	if isCreating(g) || s.isLive(z, g.VMID) {
		return Zone{}, g, nil, newError(KindConflict, "the VM is still being created")
	}
	if g.Lock != "" {
		return Zone{}, g, nil, newError(KindConflict, "the VM is busy (Proxmox holds it locked: %s)", g.Lock)
	}
	snaps, _, err := pveapi.Snapshots(ctx, z.Client, g.Node, g.VMID)
	if err != nil {
		return Zone{}, g, nil, zoneDown(z.Name, err)
	}
	return z, g, snaps, nil
}

// CreateSnapshot takes a snapshot of VM id of vdc (with its RAM if asked:
// the VM must be running). Its storage (quota.SnapshotGiB) is reserved
// against the VDC's quota first. The operation follows the Proxmox task.
func (s *Service) CreateSnapshot(ctx context.Context, vdc, id string, in SnapshotInput) (*Operation, error) {
	sc := &snapshotScope{vdc: vdc, id: id, in: in}
	if err := runPhases(ctx, s.engine, "", "", s.snapshotPhases(), sc); err != nil {
		return nil, cause(err)
	}
	// The reservation counts the snapshot until the pool does.
	z, upid, resID := sc.z, sc.upid, sc.resID
	s.spawn(func(ctx context.Context) {
		if err := pveapi.Wait(ctx, z.Client, upid); err != nil && ctx.Err() != nil {
			return // shutting down: the reservation expires
		}
		s.releaseQuota(vdc, resID)
	})
	return s.taskOp(sc.z, sc.g, id, OpCreateSnapshot, sc.upid), nil
}

// snapshotScope is what the phases of a snapshot's creation work on.
type snapshotScope struct {
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
func (s *Service) snapshotPhases() []phase[snapshotScope] {
	return []phase[snapshotScope]{
		{name: "check", run: s.checkSnapshot},
		{name: "reserve", run: func(ctx context.Context, sc *snapshotScope) error {
			sc.resID = "snap-" + newOpID()
			gib := quota.SnapshotGiB(sc.g.DiskGiB(), sc.g.MemoryMiB(), sc.in.WithRAM)
			if err := s.quota.ReserveSnapshot(ctx, sc.vdc, sc.resID, sc.z.ID, sc.in.Name, gib); err != nil {
				return quotaError(sc.vdc, err)
			}
			return nil
		}},
		{name: "request", run: func(ctx context.Context, sc *snapshotScope) error {
			params := map[string]any{"snapname": sc.in.Name}
			if sc.in.Description != "" {
				params["description"] = sc.in.Description
			}
			if sc.in.WithRAM {
				params["vmstate"] = 1
			}
			if err := sc.z.Client.Post(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/snapshot", sc.g.Node, sc.g.VMID), params, &sc.upid); err != nil {
				s.releaseQuota(sc.vdc, sc.resID)
				return conflict(err)
			}
			return nil
		}},
	}
}

// checkSnapshot checks the input and the VM of a snapshot's creation.
func (s *Service) checkSnapshot(ctx context.Context, sc *snapshotScope) error {
	in := sc.in
	if err := validSnapshotName(in.Name); err != nil {
		return err
	}
	if len(in.Description) > MaxSnapshotDescription || !utf8.ValidString(in.Description) {
		return badInput("description", "a description is UTF-8 of at most %d bytes", MaxSnapshotDescription)
	}
	z, g, snaps, err := s.snapshotTarget(ctx, sc.vdc, sc.id)
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

// RollbackSnapshot puts VM id of vdc back to snapshot name: the VM stops,
// and runs again afterwards if the snapshot holds its RAM or start asks.
func (s *Service) RollbackSnapshot(ctx context.Context, vdc, id, name string, start bool) (*Operation, error) {
	z, g, err := s.existingSnapshot(ctx, vdc, id, name)
	if err != nil {
		return nil, err
	}
	params := map[string]any{}
	if start {
		params["start"] = 1
	}
	var upid string
	if err := z.Client.Post(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/snapshot/%s/rollback", g.Node, g.VMID, url.PathEscape(name)), params, &upid); err != nil {
		return nil, conflict(err)
	}
	return s.taskOp(z, g, id, OpRollbackSnapshot, upid), nil
}

// DeleteSnapshot deletes snapshot name of VM id of vdc; the snapshots
// taken on top of it take its parent.
func (s *Service) DeleteSnapshot(ctx context.Context, vdc, id, name string) (*Operation, error) {
	z, g, err := s.existingSnapshot(ctx, vdc, id, name)
	if err != nil {
		return nil, err
	}
	var upid string
	if err := z.Client.DeleteWithParams(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/snapshot/%s", g.Node, g.VMID, url.PathEscape(name)), map[string]any{}, &upid); err != nil {
		return nil, conflict(err)
	}
	return s.taskOp(z, g, id, OpDeleteSnapshot, upid), nil
}

// existingSnapshot resolves snapshot name of VM id of vdc: NOT_FOUND (field
// "name") when the VM has none of that name.
func (s *Service) existingSnapshot(ctx context.Context, vdc, id, name string) (Zone, pveapi.Resource, error) {
	z, g, snaps, err := s.snapshotTarget(ctx, vdc, id)
	if err != nil {
		return Zone{}, g, err
	}
	if !slices.ContainsFunc(snaps, func(sn pveapi.Snapshot) bool { return sn.Name == name }) {
		return Zone{}, g, &Error{Kind: KindNotFound, Field: "name", Message: "the VM has no such snapshot"}
	}
	return z, g, nil
}

// taskOp is the running operation of kind following task upid on guest g.
func (s *Service) taskOp(z Zone, g pveapi.Resource, id string, kind OpKind, upid string) *Operation {
	return &Operation{ID: taskOpID(z.ID, g.VMID, kind, upid), Kind: kind, State: OpRunning, Step: pveapi.TypeOfUPID(upid),
		VMID: id, Started: time.Now()}
}

// releaseQuota drops quota reservation id of vdc, logging a failure (the
// reservation then expires).
func (s *Service) releaseQuota(vdc, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.quota.Release(ctx, vdc, id); err != nil {
		s.log.Warn("releasing quota", "vdc", vdc, "reservation", id, "err", err)
	}
}
