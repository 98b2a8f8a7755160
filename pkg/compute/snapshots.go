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
	if err := validSnapshotName(in.Name); err != nil {
		return nil, err
	}
	if len(in.Description) > MaxSnapshotDescription || !utf8.ValidString(in.Description) {
		return nil, badInput("description", "a description is UTF-8 of at most %d bytes", MaxSnapshotDescription)
	}
	z, g, snaps, err := s.snapshotTarget(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	if in.WithRAM && g.Status != "running" {
		return nil, badInput("withRAM", "only a running VM's RAM can be saved")
	}
	if slices.ContainsFunc(snaps, func(sn pveapi.Snapshot) bool { return sn.Name == in.Name }) {
		return nil, &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("the VM has a snapshot %q", in.Name)}
	}
	if len(snaps) >= MaxSnapshots {
		return nil, newError(KindConflict, "the VM has %d snapshots, the most it may have", MaxSnapshots)
	}
	resID := "snap-" + newOpID()
	gib := quota.SnapshotGiB(g.DiskGiB(), g.MemoryMiB(), in.WithRAM)
	if err := s.quota.ReserveSnapshot(ctx, vdc, resID, z.ID, in.Name, gib); err != nil {
		return nil, quotaError(vdc, err)
	}
	params := map[string]any{"snapname": in.Name}
	if in.Description != "" {
		params["description"] = in.Description
	}
	if in.WithRAM {
		params["vmstate"] = 1
	}
	var upid string
	if err := z.Client.Post(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/snapshot", g.Node, g.VMID), params, &upid); err != nil {
		s.releaseQuota(vdc, resID)
		return nil, conflict(err)
	}
	// The reservation counts the snapshot until the pool does.
	s.spawn(func(ctx context.Context) {
		if err := pveapi.Wait(ctx, z.Client, upid); err != nil && ctx.Err() != nil {
			return // shutting down: the reservation expires
		}
		s.releaseQuota(vdc, resID)
	})
	return s.taskOp(z, g, id, OpCreateSnapshot, upid), nil
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
