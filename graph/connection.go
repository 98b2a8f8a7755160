package graph

import (
	"context"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/support/paging"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Cursor connections and the Node interface (graph/node.graphqls). Every
// connection is a page package paging cuts; PageInfo is its paging.Info.

func zoneKey(z *model.Zone) string { return paging.Key(z.Name, z.ID) }

func hostKey(h *model.Host) string { return paging.Key(h.Zone.Name, h.Zone.ID, h.Name) }

func networkKey(n *model.Network) string { return paging.Key(n.Zone.Name, n.Zone.ID, n.Name) }

func zoneConnection(p paging.Page[*model.Zone]) *model.ZoneConnection {
	return &model.ZoneConnection{Edges: paging.Edges(p, func(c string, n *model.Zone) *model.ZoneEdge { return &model.ZoneEdge{Cursor: c, Node: n} }),
		Nodes: p.Items, PageInfo: p.Info(), TotalCount: p.Total}
}

func hostConnection(p paging.Page[*model.Host]) *model.HostConnection {
	return &model.HostConnection{Edges: paging.Edges(p, func(c string, n *model.Host) *model.HostEdge { return &model.HostEdge{Cursor: c, Node: n} }),
		Nodes: p.Items, PageInfo: p.Info(), TotalCount: p.Total}
}

func networkConnection(p paging.Page[*model.Network]) *model.NetworkConnection {
	return &model.NetworkConnection{Edges: paging.Edges(p, func(c string, n *model.Network) *model.NetworkEdge { return &model.NetworkEdge{Cursor: c, Node: n} }),
		Nodes: p.Items, PageInfo: p.Info(), TotalCount: p.Total}
}

// nodeNotFound is the one answer of node(id:) for an id that names nothing
// the caller may see.
func nodeNotFound() error { return apierr.New(apierr.NotFound, "no object of that id") }

// vmPage is a page of vms: at most n VMs after cursor, of the filter's
// zones the caller sees.
func (r *Resolver) vmPage(ctx context.Context, filter *model.VMFilter, n int, cursor *tenancy.VMRef) ([]*model.VM, estate.VMPage, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	if filter == nil {
		filter = &model.VMFilter{}
	}
	if filter.Status != nil && !filter.Status.IsValid() {
		return nil, estate.VMPage{}, apierr.BadInput("filter.status", "filter.status: unknown status %q", *filter.Status)
	}
	zs, err := r.scopedZones(ctx, filter.Zone, filter.Region, "filter.zone", "filter.region")
	if err != nil {
		return nil, estate.VMPage{}, err
	}
	f := estate.VMFilter{Name: filter.Name}
	if filter.Status != nil {
		f.Status = ptr(string(*filter.Status))
	}
	p := r.session(ctx).VMs(ctx, scope.VDC, zs, f, n, cursor)
	r.reportDown(ctx, nil, p.Down...)
	return r.vmModels(p.VMs), p, nil
}

// networkPage lists the current VDC's networks (of one zone, or all) and
// cuts the page after the cursor after.
func (r *Resolver) networkPage(ctx context.Context, zone *string, first *int, after *string) (paging.Page[*model.Network], error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	if _, err := paging.Limit(first, 50); err != nil {
		return paging.Page[*model.Network]{}, err
	}
	zs, err := r.zonesOf(ctx, zone, "zone")
	if err != nil {
		return paging.Page[*model.Network]{}, err
	}
	byZone, down := r.session(ctx).VDCNetworks(ctx, scope.VDC, zs)
	r.reportDown(ctx, nil, down...)
	var all []*model.Network
	for _, z := range zs {
		zm := zoneModel(z, r.agentTarget())
		for _, nw := range byZone[z.ID] {
			all = append(all, networkModel(zm, nw, z.ID))
		}
	}
	return paging.List(all, networkKey, first, 50, after)
}
