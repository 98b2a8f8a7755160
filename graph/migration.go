package graph

import (
	"cmp"
	"context"
	"slices"
	"sync"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
	"github.com/flexplane/flexplane/pkg/network"
)

// Where a VM can move: the choices of migrateVM, as VM.migrationHosts and
// VM.migrationZones present them.

// onlineHosts returns the names of z's online hosts other than except,
// sorted.
func onlineHosts(z zones.Zone, except string) []string {
	out := []string{}
	for _, h := range z.Hosts {
		if h.Status == zones.StatusOnline && h.Node != except {
			out = append(out, h.Node)
		}
	}
	slices.Sort(out)
	return out
}

// migrationZones lists the zones vm can move to: every zone but its own
// that its VDC may use, each with its online hosts and, per NIC of vm, the
// VDC's networks there (the one of the NIC's network's name preselected).
// A zone that does not answer gets no networks, and its ZONE_UNAVAILABLE.
func (r *Resolver) migrationZones(ctx context.Context, vm *model.VM) ([]*model.MigrationZone, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	nics, err := r.vmNICs(ctx, vm)
	if err != nil {
		return nil, err
	}
	policies, err := r.zonePolicies(ctx)
	if err != nil {
		return nil, err
	}
	var targets []zones.Zone
	if r.Zones != nil {
		for _, z := range r.Zones.Zones() {
			if p := policies[z.Name]; z.ID != vm.Place.ZoneID && (p == nil || p.Allows(scope.VDC.Name)) {
				targets = append(targets, z)
			}
		}
	}
	slices.SortFunc(targets, func(a, b zones.Zone) int { return cmp.Compare(a.Name, b.Name) })
	var (
		mu   sync.Mutex
		nets = map[string][]*model.Network{} // by zone ID
	)
	r.eachZone(ctx, targets, func(ctx context.Context, z zones.Zone, c *proxmox.Client) error {
		list, err := network.List(ctx, c, scope.VDC.Name)
		if err != nil {
			return err
		}
		zm := zoneModel(z, r.agentTarget())
		out := make([]*model.Network, 0, len(list))
		for _, n := range list {
			out = append(out, networkModel(zm, n, z.ID))
		}
		slices.SortFunc(out, func(a, b *model.Network) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID)) })
		mu.Lock()
		defer mu.Unlock()
		nets[z.ID] = out
		return nil
	})
	out := make([]*model.MigrationZone, 0, len(targets))
	for _, z := range targets {
		mz := &model.MigrationZone{Zone: zoneModel(z, r.agentTarget()), Hosts: onlineHosts(z, ""), Nics: make([]*model.MigrationNic, 0, len(nics))}
		candidates := nets[z.ID]
		if candidates == nil {
			candidates = []*model.Network{}
		}
		for _, n := range nics {
			m := &model.MigrationNic{Index: n.Index, Network: n.Network, Candidates: candidates}
			if n.Network != nil {
				if i := slices.IndexFunc(candidates, func(c *model.Network) bool { return c.Name == n.Network.Name }); i >= 0 {
					m.SameName = candidates[i]
				}
			}
			mz.Nics = append(mz.Nics, m)
		}
		out = append(out, mz)
	}
	return out, nil
}
