package graph

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// Cursor connections and the Node interface (graph/node.graphqls).
//
// Every connection pages a list sorted by a string key: the key joins the
// list's sort fields with NUL (which no name or id holds), so that the
// order of keys is the order of the fields. A cursor is the opaque encoding
// of its item's key, and after=cursor takes the items whose key is greater:
// a page stays right when items before the cursor come and go.

const cursorPrefix = "cursor/"

func encodeCursor(key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + key))
}

// errBadCursor is the one answer for an after that is not a cursor.
var errBadCursor = apierr.BadInput("after", "after: not a cursor of this list")

func decodeCursor(c string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || !strings.HasPrefix(string(raw), cursorPrefix) {
		return "", errBadCursor
	}
	return strings.TrimPrefix(string(raw), cursorPrefix), nil
}

// sortKey joins sort fields into a connection's key.
func sortKey(fields ...string) string { return strings.Join(fields, "\x00") }

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
	keys := make(map[int]string, len(items))
	idx := make([]int, len(items))
	for i, it := range items {
		idx[i] = i
		keys[i] = key(it)
	}
	slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	start := 0
	if after != nil {
		k, err := decodeCursor(*after)
		if err != nil {
			return page[T]{}, err
		}
		start, _ = slices.BinarySearchFunc(idx, k, func(i int, k string) int {
			if keys[i] <= k {
				return -1
			}
			return 1
		})
	}
	end := min(start+n, len(idx))
	p := page[T]{items: make([]T, 0, end-start), total: len(items)}
	for _, i := range idx[start:end] {
		p.items = append(p.items, items[i])
		p.cursors = append(p.cursors, encodeCursor(keys[i]))
	}
	p.info = pageInfo(p.cursors, start > 0, end < len(idx))
	return p, nil
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
	k, err := decodeCursor(*after)
	if err != nil {
		return nil, err
	}
	zone, num, ok := strings.Cut(k, "\x00")
	vmid, err := strconv.Atoi(num)
	if !ok || err != nil || zone == "" {
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

// node resolves a global id in the caller's scope: the kinds of id are
// told apart by their encoding (tenancy's kinds, a zone's cluster
// identity, compute's operation ids), and each is looked up as its own
// field would, so another VDC's object answers NOT_FOUND.
func (r *Resolver) node(ctx context.Context, id string) (model.Node, error) {
	_, inVDC := VDCScopeFrom(ctx)
	if _, err := tenancy.ParseVMID(id); err == nil {
		if !inVDC {
			return nil, nodeNotFound()
		}
		vm, err := (&queryResolver{r}).VM(ctx, id)
		if err != nil {
			return nil, err
		}
		return vm, nil
	}
	if ref, err := tenancy.ParseNetworkID(id); err == nil {
		if !inVDC {
			return nil, nodeNotFound()
		}
		return r.networkNode(ctx, ref)
	}
	if ref, err := tenancy.ParseHostID(id); err == nil {
		p, err := caller(ctx)
		if err != nil {
			return nil, err
		}
		z, ok := r.zoneByID(ref.ZoneID)
		if !p.PlatformAdmin || !ok {
			return nil, nodeNotFound()
		}
		for _, h := range zoneModel(z, r.agentTarget()).Hosts {
			if h.ID == id {
				return h, nil
			}
		}
		return nil, nodeNotFound()
	}
	if z, ok := r.zoneByID(id); ok {
		return zoneModel(z, r.agentTarget()), nil
	}
	if !inVDC {
		return nil, nodeNotFound()
	}
	op, err := (&queryResolver{r}).Operation(ctx, id)
	if err != nil {
		var ae *apierr.Error
		if errors.As(err, &ae) && (ae.Code == apierr.NotFound || ae.Code == apierr.BadUserInput) {
			return nil, nodeNotFound()
		}
		return nil, err
	}
	return op, nil
}

// networkNode finds the network ref names among the current VDC's.
func (r *Resolver) networkNode(ctx context.Context, ref tenancy.NetworkRef) (model.Node, error) {
	scope, _ := VDCScopeFrom(ctx)
	z, ok := r.zoneByID(ref.ZoneID)
	if !ok {
		return nil, nodeNotFound()
	}
	nets, err := network.List(ctx, r.Zones.Client(z.ID), scope.VDC.Name)
	if err != nil {
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
	s := r.session(ctx)
	creating := quota.Creating(scope.VDC)
	var (
		mu            sync.Mutex
		byZone        [][]vmCandidate
		total, before int
	)
	r.eachZone(ctx, zs, func(ctx context.Context, z zones.Zone, _ *proxmox.Client) error {
		rs, err := s.PoolGuests(ctx, z, tenancy.PoolID(scope.VDC.Name))
		if err != nil {
			return err
		}
		zm := zoneModel(z, r.agentTarget())
		cs := make([]vmCandidate, 0, len(rs))
		matched, skipped := 0, 0
		for i := range rs {
			res := &rs[i]
			if res.Template == 1 {
				continue
			}
			ref := tenancy.VMRef{ZoneID: z.ID, VMID: res.VMID}
			id, notVM := r.keptID(ref)
			if notVM {
				continue // a move's other copy
			}
			if id == ref.ID() {
				id = ""
			}
			status := guestStatus(*res, creating[z.ID])
			if filter.Status != nil && status != *filter.Status {
				continue
			}
			if filter.Name != nil && !strings.Contains(strings.ToLower(res.Name), strings.ToLower(*filter.Name)) {
				continue
			}
			matched++
			if cursor != nil && vmOrder(ref, *cursor) <= 0 {
				skipped++
				continue
			}
			cs = append(cs, vmCandidate{ref: ref, id: id, zone: zm, res: res, status: status})
		}
		mu.Lock()
		byZone = append(byZone, cs)
		total += matched
		before += skipped
		mu.Unlock()
		return nil
	})
	return vmPageResult{vms: pageVMs(byZone, n), total: total, before: before}, nil
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
	var (
		mu  sync.Mutex
		all []*model.Network
	)
	r.eachZone(ctx, zs, func(ctx context.Context, z zones.Zone, c *proxmox.Client) error {
		nets, err := network.List(ctx, c, scope.VDC.Name)
		if err != nil {
			return err
		}
		zm := zoneModel(z, r.agentTarget())
		mu.Lock()
		defer mu.Unlock()
		for _, nw := range nets {
			all = append(all, networkModel(zm, nw, z.ID))
		}
		return nil
	})
	return paginate(all, networkKey, first, 50, after)
}
