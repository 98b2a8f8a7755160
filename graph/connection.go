package graph

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/support/paging"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Cursor connections and the Node interface (graph/node.graphqls). Every
// connection pages a list sorted by a string key (package paging).

// errBadCursor is the one answer for an after that is not a cursor.
var errBadCursor = apierr.BadInput("after", "after: not a cursor of this list")

func encodeCursor(key string) string { return paging.Cursor(key) }

// sortKey joins sort fields into a connection's key.
func sortKey(fields ...string) string { return paging.Key(fields...) }

// page is one page of a connection.
type page[T any] struct {
	items   []T
	cursors []string
	info    *model.PageInfo
	total   int
}

// paginate sorts items by key and cuts the page of at most first (default
// def) items after the cursor after.
func paginate[T any](items []T, key func(T) string, first *int, def int, after *string) (page[T], error) {
	n, err := limit(first, def)
	if err != nil {
		return page[T]{}, err
	}
	p, err := paging.Cut(items, key, n, after)
	if err != nil {
		return page[T]{}, errBadCursor
	}
	return page[T]{items: p.Items, cursors: p.Cursors, info: pageInfo(p.Cursors, p.Before, p.More), total: p.Total}, nil
}

func pageInfo(cursors []string, before, more bool) *model.PageInfo {
	info := &model.PageInfo{HasNextPage: more, HasPreviousPage: before}
	if len(cursors) > 0 {
		info.StartCursor = &cursors[0]
		info.EndCursor = &cursors[len(cursors)-1]
	}
	return info
}

// edges pairs a page's items with their cursors.
func edges[T, E any](p page[T], edge func(cursor string, node T) E) []E {
	out := make([]E, len(p.items))
	for i, it := range p.items {
		out[i] = edge(p.cursors[i], it)
	}
	return out
}

func zoneKey(z *model.Zone) string { return sortKey(z.Name, z.ID) }

func hostKey(h *model.Host) string { return sortKey(h.Zone.Name, h.Zone.ID, h.Name) }

func networkKey(n *model.Network) string { return sortKey(n.Zone.Name, n.Zone.ID, n.Name) }

// opKey orders operations newest first, as compute's History does:
// Proxmox keeps task start times in seconds, and within one second a task
// is newer than the create that started it.
func opKey(o *model.Operation) string {
	var sec int64
	if o.StartedAt != nil {
		sec = o.StartedAt.Unix()
	}
	tie := "0"
	if o.Kind == model.OperationKindCreateVM {
		tie = "1"
	}
	return sortKey(fmt.Sprintf("%019d", math.MaxInt64-sec), tie, o.ID)
}

// vmCursorKey is a VM's key: vms' order (zone identity, then VMID).
func vmCursorKey(ref tenancy.VMRef) string { return sortKey(ref.ZoneID, fmt.Sprintf("%09d", ref.VMID)) }

// vmCursor decodes a cursor of vmsConnection into the VM it names.
func vmCursor(after *string) (*tenancy.VMRef, error) {
	if after == nil {
		return nil, nil
	}
	k, err := paging.Decode(*after)
	fs := paging.Fields(k)
	if err != nil || len(fs) != 2 || fs[0] == "" {
		return nil, errBadCursor
	}
	zone := fs[0]
	vmid, err := strconv.Atoi(fs[1])
	if err != nil {
		return nil, errBadCursor
	}
	return &tenancy.VMRef{ZoneID: zone, VMID: vmid}, nil
}

func zoneConnection(p page[*model.Zone]) *model.ZoneConnection {
	return &model.ZoneConnection{
		Edges: edges(p, func(c string, n *model.Zone) *model.ZoneEdge { return &model.ZoneEdge{Cursor: c, Node: n} }),
		Nodes: p.items, PageInfo: p.info, TotalCount: p.total,
	}
}

func hostConnection(p page[*model.Host]) *model.HostConnection {
	return &model.HostConnection{
		Edges: edges(p, func(c string, n *model.Host) *model.HostEdge { return &model.HostEdge{Cursor: c, Node: n} }),
		Nodes: p.items, PageInfo: p.info, TotalCount: p.total,
	}
}

func networkConnection(p page[*model.Network]) *model.NetworkConnection {
	return &model.NetworkConnection{
		Edges: edges(p, func(c string, n *model.Network) *model.NetworkEdge { return &model.NetworkEdge{Cursor: c, Node: n} }),
		Nodes: p.items, PageInfo: p.info, TotalCount: p.total,
	}
}

func operationConnection(p page[*model.Operation]) *model.OperationConnection {
	return &model.OperationConnection{
		Edges: edges(p, func(c string, n *model.Operation) *model.OperationEdge {
			return &model.OperationEdge{Cursor: c, Node: n}
		}),
		Nodes: p.items, PageInfo: p.info, TotalCount: p.total,
	}
}

// nodeNotFound is the one answer of node(id:) for an id that names nothing
// the caller may see.
func nodeNotFound() error { return apierr.New(apierr.NotFound, "no object of that id") }

// networkNode finds the network ref names among the current VDC's.
func (r *Resolver) networkNode(ctx context.Context, ref tenancy.NetworkRef) (model.Node, error) {
	scope, _ := VDCScopeFrom(ctx)
	z, ok := r.zoneByID(ref.ZoneID)
	if !ok {
		return nil, nodeNotFound()
	}
	nets, err := r.estate().Networks(ctx, z, scope.VDC.Name)
	if err != nil {
		var ze *estate.ZoneError
		if errors.As(err, &ze) {
			err = ze.Err
		}
		return nil, zoneError(z, networkError(err))
	}
	for _, n := range nets {
		if n.VNet == ref.VNet {
			return networkModel(zoneModel(z, r.agentTarget()), n, z.ID), nil
		}
	}
	return nil, nodeNotFound()
}

// vmPage is a page of vms: at most n VMs after cursor, how many match in
// all and how many of them lie before the cursor.
type vmPageResult struct {
	vms           []*model.VM
	total, before int
}

func (r *Resolver) vmPage(ctx context.Context, filter *model.VMFilter, n int, cursor *tenancy.VMRef) (vmPageResult, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	if filter == nil {
		filter = &model.VMFilter{}
	}
	if filter.Status != nil && !filter.Status.IsValid() {
		return vmPageResult{}, apierr.BadInput("filter.status", "filter.status: unknown status %q", *filter.Status)
	}
	zs, err := r.scopedZones(ctx, filter.Zone, filter.Region, "filter.zone", "filter.region")
	if err != nil {
		return vmPageResult{}, err
	}
	f := estate.VMFilter{Name: filter.Name}
	if filter.Status != nil {
		f.Status = ptr(string(*filter.Status))
	}
	p := r.session(ctx).VMs(ctx, scope.VDC, zs, f, n, cursor)
	r.reportDown(ctx, nil, p.Down...)
	return vmPageResult{vms: r.vmModels(p.VMs), total: p.Total, before: p.Before}, nil
}

// networkPage lists the current VDC's networks (of one zone, or all) and
// cuts the page after the cursor after.
func (r *Resolver) networkPage(ctx context.Context, zone *string, first *int, after *string) (page[*model.Network], error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	if _, err := limit(first, 50); err != nil {
		return page[*model.Network]{}, err
	}
	zs, err := r.zonesOf(ctx, zone, "zone")
	if err != nil {
		return page[*model.Network]{}, err
	}
	byZone, down := r.estate().NetworksOf(ctx, zs, scope.VDC.Name)
	r.reportDown(ctx, nil, down...)
	var all []*model.Network
	for _, z := range zs {
		zm := zoneModel(z, r.agentTarget())
		for _, nw := range byZone[z.ID] {
			all = append(all, networkModel(zm, nw, z.ID))
		}
	}
	return paginate(all, networkKey, first, 50, after)
}
