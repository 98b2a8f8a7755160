package compute

import "context"

// DeleteSnapshot deletes snapshot name of VM id of vdc; the snapshots
// taken on top of it take its parent. The operation follows the Proxmox
// task.
func (s *Service) DeleteSnapshot(ctx context.Context, vdc, id, name string) (*Operation, error) {
	sc := &snapshotDeleteScope{deps: s.d, snap: snapshotRef{vdc: vdc, id: id, name: name}}
	if err := runPhases(ctx, s.d.eng, "", "", snapshotDeletePhases(), sc); err != nil {
		return nil, cause(err)
	}
	return taskOp(sc.snap.z, sc.snap.g, id, OpDeleteSnapshot, sc.upid), nil
}

// snapshotDeleteScope is what the phases of a snapshot's deletion work on.
type snapshotDeleteScope struct {
	*deps
	snap snapshotRef // the snapshot and its VM (check)
	upid string      // the delete task (request)
}

// snapshotDeletePhases are the phases of a snapshot's deletion, in order:
// check (the VM: created, not locked, with a snapshot of that name),
// request (Proxmox's delete task, which the operation then follows; the
// snapshot's storage leaves the VDC's usage with it).
func snapshotDeletePhases() []phase[snapshotDeleteScope] {
	return []phase[snapshotDeleteScope]{
		step("check", (*snapshotDeleteScope).check),
		step("request", (*snapshotDeleteScope).request),
	}
}

// check finds the VM and its snapshot.
func (sc *snapshotDeleteScope) check(ctx context.Context) error { return sc.snap.resolve(ctx, sc.deps) }

// request asks Proxmox for the delete's task.
func (sc *snapshotDeleteScope) request(ctx context.Context) error {
	if err := sc.snap.z.Client.DeleteWithParams(ctx, sc.snap.path(), map[string]any{}, &sc.upid); err != nil {
		return conflict(err)
	}
	return nil
}
