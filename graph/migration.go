package graph

import (
	"context"

	"github.com/flexplane/flexplane/graph/model"
)

// Where a VM can move: the choices of migrateVM, as VM.migrationHosts and
// VM.migrationZones present them.

// migrationZones lists the zones vm can move to (the estate service's
// migration targets), each with, per NIC of vm, the VDC's networks there
// (the one of the NIC's network's name preselected). A zone that does not
// answer gets no networks, and its ZONE_UNAVAILABLE.
func (r *Resolver) migrationZones(ctx context.Context, vm *model.VM) ([]*model.MigrationZone, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	nics, err := r.vmNICs(ctx, vm)
	if err != nil {
		return nil, err
	}
	targets, down, err := r.session(ctx).MigrationTargets(ctx, scope.VDC.Name, vm.Place.ZoneID)
	if err != nil {
		return nil, estateError(err)
	}
	r.reportDown(ctx, nil, down...)
	out := make([]*model.MigrationZone, 0, len(targets))
	for _, t := range targets {
		zm := zoneModel(t.Zone, r.agentTarget())
		mz := &model.MigrationZone{Zone: zm, Hosts: t.Hosts, Nics: make([]*model.MigrationNic, 0, len(nics))}
		candidates := make([]*model.Network, 0, len(t.Networks))
		for _, n := range t.Networks {
			candidates = append(candidates, networkModel(zm, n, t.Zone.ID))
		}
		for _, n := range nics {
			m := &model.MigrationNic{Index: n.Index, Network: n.Network, Candidates: candidates}
			for _, c := range candidates {
				if n.Network != nil && c.Name == n.Network.Name && m.SameName == nil {
					m.SameName = c
				}
			}
			mz.Nics = append(mz.Nics, m)
		}
		out = append(out, mz)
	}
	return out, nil
}
