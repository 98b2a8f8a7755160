package compute

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"time"

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
	z, g, _, err := s.d.find.lookup(ctx, vdc, id)
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
func snapshotTarget(ctx context.Context, d *deps, vdc, id string) (Zone, pveapi.Resource, []pveapi.Snapshot, error) {
	z, g, _, err := d.find.lookup(ctx, vdc, id)
	if err != nil {
		return Zone{}, g, nil, err
	}
	if isCreating(g) || d.eng.isLive(z, g.VMID) {
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

// snapshotRef is the snapshot a rollback or a delete works on and the VM
// that has it, as their check phase finds them.
type snapshotRef struct {
	vdc, id, name string
	z             Zone
	g             pveapi.Resource
}

// resolve finds the VM and its snapshot: NOT_FOUND (field "name") when
// the VM has none of that name, CONFLICT while it is being created or
// Proxmox holds it locked.
func (r *snapshotRef) resolve(ctx context.Context, d *deps) error {
	z, g, snaps, err := snapshotTarget(ctx, d, r.vdc, r.id)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(snaps, func(sn pveapi.Snapshot) bool { return sn.Name == r.name }) {
		return &Error{Kind: KindNotFound, Field: "name", Message: "the VM has no such snapshot"}
	}
	r.z, r.g = z, g
	return nil
}

// path is the snapshot's API path.
func (r *snapshotRef) path() string {
	return fmt.Sprintf("/nodes/%s/qemu/%d/snapshot/%s", r.g.Node, r.g.VMID, url.PathEscape(r.name))
}

// taskOp is the running operation of kind following task upid on guest g.
func taskOp(z Zone, g pveapi.Resource, id string, kind OpKind, upid string) *Operation {
	return &Operation{ID: taskOpID(z.ID, g.VMID, kind, upid), Kind: kind, State: OpRunning, Step: pveapi.TypeOfUPID(upid),
		VMID: id, Started: time.Now()}
}
