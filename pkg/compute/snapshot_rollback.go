package compute

import "context"

// RollbackSnapshot puts VM id of vdc back to snapshot name: the VM stops,
// and runs again afterwards if the snapshot holds its RAM or start asks.
// The operation follows the Proxmox task.
func (s *Service) RollbackSnapshot(ctx context.Context, vdc, id, name string, start bool) (*Operation, error) {
	sc := &rollbackScope{deps: s.d, snap: snapshotRef{vdc: vdc, id: id, name: name}, start: start}
	if err := runPhases(ctx, s.d.eng, "", "", rollbackPhases(), sc); err != nil {
		return nil, cause(err)
	}
	return taskOp(sc.snap.z, sc.snap.g, id, OpRollbackSnapshot, sc.upid), nil
}

// rollbackScope is what the phases of a rollback to a snapshot work on.
type rollbackScope struct {
	*deps
	snap  snapshotRef // the snapshot and its VM (check)
	start bool        // start the VM after the rollback
	upid  string      // the rollback task (request)
}

// rollbackPhases are the phases of a rollback to a snapshot, in order:
// check (the VM: created, not locked, with a snapshot of that name),
// request (Proxmox's rollback task, which the operation then follows).
func rollbackPhases() []phase[rollbackScope] {
	return []phase[rollbackScope]{
		step("check", (*rollbackScope).check),
		step("request", (*rollbackScope).request),
	}
}

// check finds the VM and its snapshot.
func (sc *rollbackScope) check(ctx context.Context) error { return sc.snap.resolve(ctx, sc.deps) }

// request asks Proxmox for the rollback's task.
func (sc *rollbackScope) request(ctx context.Context) error {
	params := map[string]any{}
	if sc.start {
		params["start"] = 1
	}
	if err := sc.snap.z.Client.Post(ctx, sc.snap.path()+"/rollback", params, &sc.upid); err != nil {
		return conflict(err)
	}
	return nil
}
