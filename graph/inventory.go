package graph

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/graph/generated"
	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/inventory"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// Helpers of the inventory and network resolvers: the per-request state,
// partial answers and the translation of the estate into the API's types.

type requestKey struct{}

// request is the state of one GraphQL operation.
type request struct {
	once     sync.Once
	session  *inventory.Session
	mu       sync.Mutex
	reported map[string]bool          // zones reported unavailable, protected by mu
	hardware map[string]*hardwareRead // by VM id, protected by mu
	policies policiesRead             // the zone policies once read; protected by mu
}

// WithRequest returns ctx carrying the state of one operation: the
// inventory session (each zone is read once per operation) and which zones
// were already reported unavailable. The API handler calls it for every
// query and mutation (not for subscriptions, which must read afresh).
func WithRequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, requestKey{}, &request{reported: map[string]bool{}, hardware: map[string]*hardwareRead{}})
}

func requestFrom(ctx context.Context) *request {
	if r, ok := ctx.Value(requestKey{}).(*request); ok {
		return r
	}
	return nil
}

// inventory returns the resolver's one inventory, built at first use and
// shared by every request (so that its bound on the answers decoded at a
// time holds for the process); without a zone registry the estate is
// empty (nil).
func (r *Resolver) inventory() *inventory.Inventory {
	r.invOnce.Do(func() {
		if r.Zones == nil {
			return
		}
		// New fails only without Zones.
		r.inv, _ = inventory.New(inventory.Config{Zones: r.Zones, Timeout: cmp.Or(r.ZoneTimeout, DefaultZoneTimeout)})
	})
	return r.inv
}

// session returns the operation's inventory session (nil without zones).
func (r *Resolver) session(ctx context.Context) *inventory.Session {
	inv := r.inventory()
	if inv == nil {
		return nil
	}
	req := requestFrom(ctx)
	if req == nil {
		return inv.NewSession()
	}
	req.once.Do(func() { req.session = inv.NewSession() })
	return req.session
}

// zonesOf returns the zones, or the one named name (BAD_USER_INPUT on
// field when there is none, or the caller does not see it: a zone
// dedicated to other VDCs). Right after a restart the registry does not
// know every agent's zone yet: it waits for them within the zone timeout;
// then the zones known so far come with a ZONE_UNAVAILABLE error naming the
// agents not heard from, and a zone that is not known yet is
// ZONE_UNAVAILABLE, not BAD_USER_INPUT.
func (r *Resolver) zonesOf(ctx context.Context, name *string, field string) ([]zones.Zone, error) {
	if r.Zones == nil {
		if name != nil {
			return nil, apierr.BadInput(field, "%s: there is no zone %q", field, *name)
		}
		return nil, nil
	}
	wctx, cancel := context.WithTimeout(ctx, cmp.Or(r.ZoneTimeout, DefaultZoneTimeout))
	idErr := r.Zones.Identified(wctx)
	cancel()
	all := r.Zones.Zones()
	unknown := func() *apierr.Error {
		var ue *zones.UnidentifiedError
		if !errors.As(idErr, &ue) || ctx.Err() != nil {
			return nil
		}
		r.Logger.Warn("graphql: zones not known yet", "err", idErr)
		if len(ue.Agents) == 0 {
			return apierr.New(apierr.ZoneUnavailable, "the zones are not known yet: the orchestrator has not heard from the agents since it started")
		}
		return apierr.New(apierr.ZoneUnavailable, "the zones of %d agents are not known yet: they have not reported since the orchestrator started", len(ue.Agents))
	}
	if name == nil {
		if e := unknown(); e != nil && r.firstReport(ctx, "") {
			graphql.AddError(ctx, e)
		}
		return all, nil
	}
	for _, z := range all {
		if z.Name != *name {
			continue
		}
		vis, err := r.visibleZones(ctx, []zones.Zone{z}, nil, "")
		if err != nil {
			return nil, err
		}
		if len(vis) == 1 {
			return vis, nil
		}
	}
	if e := unknown(); e != nil {
		e.Zone = *name
		e.Message = fmt.Sprintf("zone %s is unavailable: %s", *name, e.Message)
		return nil, e
	}
	return nil, apierr.BadInput(field, "%s: there is no zone %q", field, *name)
}

// zoneByID returns the zone with the cluster identity id.
func (r *Resolver) zoneByID(id string) (zones.Zone, bool) {
	if r.Zones == nil {
		return zones.Zone{}, false
	}
	return r.Zones.Zone(id)
}

// firstReport reports whether the operation has not reported zone id
// unavailable yet ("" stands for the zones not known yet), and records it.
func (r *Resolver) firstReport(ctx context.Context, id string) bool {
	req := requestFrom(ctx)
	if req == nil {
		return true
	}
	req.mu.Lock()
	defer req.mu.Unlock()
	seen := req.reported[id]
	req.reported[id] = true
	return !seen
}

// zoneDown adds one ZONE_UNAVAILABLE error per zone and operation, and
// logs the cause.
func (r *Resolver) zoneDown(ctx context.Context, z zones.Zone, err error) {
	if !r.firstReport(ctx, z.ID) {
		return
	}
	r.Logger.Warn("graphql: zone unavailable", "zone", z.Name, "zone_id", z.ID, "err", err)
	graphql.AddError(ctx, apierr.ZoneDown(z.Name, err))
}

// eachZone runs fn for every zone concurrently, each within the per-zone
// timeout; zones whose fn fails are reported unavailable.
func (r *Resolver) eachZone(ctx context.Context, zs []zones.Zone, fn func(ctx context.Context, z zones.Zone, c *proxmox.Client) error) {
	inv := r.inventory()
	if inv == nil {
		return
	}
	for _, ze := range inv.Each(ctx, zs, fn) {
		r.zoneDown(ctx, ze.Zone, ze.Err)
	}
}

// maxFirst bounds every list's first.
const maxFirst = 1000

// limit checks a list's first argument.
func limit(first *int, def int) (int, error) {
	if first == nil {
		return def, nil
	}
	if *first < 0 || *first > maxFirst {
		return 0, apierr.BadInput("first", "first: must be between 0 and %d", maxFirst)
	}
	return *first, nil
}

func zoneModel(z zones.Zone, target agentTarget) *model.Zone {
	m := &model.Zone{ID: z.ID, Name: z.Name, Standalone: z.Standalone}
	online := 0
	for _, h := range z.Hosts {
		if h.Status == zones.StatusOnline {
			online++
		}
		m.Hosts = append(m.Hosts, hostModel(m, h, target))
	}
	switch {
	case online == len(z.Hosts):
		m.Status = model.ZoneStatusOnline
	case online > 0:
		m.Status = model.ZoneStatusDegraded
	default:
		m.Status = model.ZoneStatusOffline
	}
	return m
}

func hostModel(zm *model.Zone, h zones.Host, target agentTarget) *model.Host {
	m := &model.Host{
		ID:              tenancy.HostRef{ZoneID: zm.ID, Node: h.Node}.ID(),
		Name:            h.Node,
		Status:          model.HostStatusOffline,
		Zone:            zm,
		AgentVersion:    ptr(h.AgentVersion),
		ProxmoxVersion:  ptr(h.ProxmoxVersion),
		UpdateAvailable: ptr(target.updateAvailable(h)),
		Update:          hostUpdateModel(h.Update),
	}
	if h.Status == zones.StatusOnline {
		m.Status = model.HostStatusOnline
	} else {
		detail := h.Detail
		if h.Status == zones.StatusDegraded {
			detail = "the agent cannot reach Proxmox: " + detail
		}
		m.StatusDetail = &detail
	}
	return m
}

func ptr[T any](v T) *T { return &v }

// hostResource returns the /cluster/resources entry of a host; ok is false
// when it cannot be read (its zone was reported) or there is none.
func (r *Resolver) hostResource(ctx context.Context, h *model.Host) (pveapi.Resource, bool) {
	ref, err := tenancy.ParseHostID(h.ID)
	if err != nil {
		return pveapi.Resource{}, false
	}
	z, ok := r.zoneByID(ref.ZoneID)
	s := r.session(ctx)
	if !ok || s == nil {
		return pveapi.Resource{}, false
	}
	// Only the nodes: the whole list carries every guest of the zone.
	rs, err := s.Resources(ctx, z, "node")
	if err != nil {
		r.zoneDown(ctx, z, err)
		return pveapi.Resource{}, false
	}
	for _, res := range rs {
		if res.Type == "node" && res.Node == ref.Node && res.Status == "online" {
			return res, true
		}
	}
	return pveapi.Resource{}, false
}

const mib, gib = 1 << 20, 1 << 30

// capacity sums a zone's online nodes and its storage (shared storage
// once).
func capacity(rs []pveapi.Resource) *model.Capacity {
	var c model.Capacity
	var cpuUsed float64
	var memTotal, memUsed, stTotal, stUsed int64
	shared := map[string]bool{}
	for _, res := range rs {
		switch res.Type {
		case "node":
			if res.Status != "online" {
				continue
			}
			c.Cpus += res.MaxCPU
			cpuUsed += res.CPU * float64(res.MaxCPU)
			memTotal += res.MaxMem
			memUsed += res.Mem
		case "storage":
			if res.Status != "available" || res.MaxDisk == 0 {
				continue
			}
			if res.Shared == 1 {
				if shared[res.Storage] {
					continue
				}
				shared[res.Storage] = true
			}
			stTotal += res.MaxDisk
			stUsed += res.Disk
		}
	}
	c.MemoryTotal, c.MemoryUsed = int(memTotal/mib), int(memUsed/mib)
	c.StorageTotal, c.StorageUsed = int(stTotal/gib), int(stUsed/gib)
	c.CPUUsage = fraction(cpuUsed, float64(c.Cpus))
	c.MemoryUsage = fraction(float64(memUsed), float64(memTotal))
	c.StorageUsage = fraction(float64(stUsed), float64(stTotal))
	return &c
}

func fraction(used, total float64) float64 {
	if total <= 0 {
		return 0
	}
	return min(used/total, 1)
}

func vmModel(zm *model.Zone, res pveapi.Resource, status model.VMStatus) *model.VM {
	place := tenancy.VMRef{ZoneID: zm.ID, VMID: res.VMID}
	m := &model.VM{
		ID:            place.ID(),
		Place:         place,
		Name:          res.Name,
		Status:        status,
		Zone:          zm,
		Vcpus:         res.MaxCPU,
		MemoryMiB:     int(res.MaxMem / mib),
		DiskGiB:       int(res.MaxDisk / gib),
		Uptime:        int(res.Uptime),
		CPUUsage:      res.CPU,
		MemoryUsedMiB: int(res.Mem / mib),
	}
	for _, h := range zm.Hosts {
		if h.Name == res.Node {
			m.Host = h
		}
	}
	return m
}

// vmStatus is the API's status of a guest: pveapi's one mapping, given
// whether tenancy's marker says its create has not finished.
func vmStatus(res pveapi.Resource) model.VMStatus {
	return model.VMStatus(res.State(tenancy.Creating(res.Tags())))
}

// guestStatus is the status of a member of a VDC's pool, whose entry lacks
// the lock and tags that tell a create in flight: a guest bound to a live
// quota reservation of the VDC (creating, by VMID) is CREATING.
func guestStatus(res pveapi.Resource, creating map[int]bool) model.VMStatus {
	if creating[res.VMID] {
		return model.VMStatusCreating
	}
	return vmStatus(res)
}

// vmNotFound is the one answer for a VM id that is malformed, forged, of
// another VDC or gone.
func vmNotFound() error { return apierr.New(apierr.NotFound, "VM not found") }

// vmOrder orders VMs by zone identity and VMID (the page order of vms).
func vmOrder(a, b tenancy.VMRef) int {
	return cmp.Or(cmp.Compare(a.ZoneID, b.ZoneID), cmp.Compare(a.VMID, b.VMID))
}

// keptID is the id of the VM whose guest sits at place (compute.Service.KeptID);
// notVM for a move's other copy.
func (r *Resolver) keptID(place tenancy.VMRef) (id string, notVM bool) {
	if r.Compute == nil {
		return place.ID(), false
	}
	return r.Compute.KeptID(place)
}

// movedVM finds VM id of vdc where it moved to across zones
// (compute.Service.PlaceOf), reading that zone's pool of vdc only;
// NOT_FOUND if it is nowhere.
func (r *Resolver) movedVM(ctx context.Context, vdc *catalog.VDC, id string) (*model.VM, error) {
	if r.Compute == nil {
		return nil, vmNotFound()
	}
	place, ok := r.Compute.PlaceOf(id)
	if !ok {
		return nil, vmNotFound()
	}
	z, ok := r.zoneByID(place.ZoneID)
	if !ok {
		return nil, vmNotFound()
	}
	rs, err := r.session(ctx).PoolGuests(ctx, z, tenancy.PoolID(vdc.Name))
	if err != nil {
		return nil, apierr.ZoneDown(z.Name, err)
	}
	for _, res := range rs {
		if res.VMID == place.VMID && res.Template != 1 {
			m := vmModel(zoneModel(z, r.agentTarget()), res, guestStatus(res, quota.Creating(vdc)[z.ID]))
			m.ID = id
			return m, nil
		}
	}
	return nil, vmNotFound()
}

func mustVMRef(id string) tenancy.VMRef {
	ref, err := tenancy.ParseVMID(id)
	if err != nil {
		panic(fmt.Sprintf("graph: VM id %q made here does not parse: %v", id, err))
	}
	return ref
}

// vmCandidate is a guest that matches a vms query, before its page is cut.
type vmCandidate struct {
	ref    tenancy.VMRef // its place
	id     string        // its id ("" for ref's): the one it kept if it moved
	zone   *model.Zone
	res    *pveapi.Resource // in the session's answer; not modified
	status model.VMStatus
}

// pageVMs returns the first n candidates in page order (zone identity,
// then VMID), given one slice of candidates per zone, and builds the models
// of those only: building one per guest of every zone (and parsing its id
// back to sort) was most of the vms resolver's CPU and garbage. Zones are
// taken in order and sorted only while the page is not full.
func pageVMs(byZone [][]vmCandidate, n int) []*model.VM {
	byZone = slices.DeleteFunc(byZone, func(cs []vmCandidate) bool { return len(cs) == 0 })
	slices.SortFunc(byZone, func(a, b []vmCandidate) int { return cmp.Compare(a[0].ref.ZoneID, b[0].ref.ZoneID) })
	var vms []*model.VM
	for _, cs := range byZone {
		if len(vms) >= n {
			break
		}
		slices.SortFunc(cs, func(a, b vmCandidate) int { return vmOrder(a.ref, b.ref) })
		for _, c := range cs[:min(n-len(vms), len(cs))] {
			m := vmModel(c.zone, *c.res, c.status)
			if c.id != "" {
				m.ID = c.id
			}
			vms = append(vms, m)
		}
	}
	return vms
}

// zoneHostsCost is what Zone.hosts counts as in query complexity.
const zoneHostsCost = 8

// Complexity returns the query complexity of list fields: their children's
// cost times the number of items they may return (first); every other
// field costs 1 plus its children.
func Complexity() generated.ComplexityRoot {
	var c generated.ComplexityRoot
	times := func(child int, first *int, def int) int {
		n := def
		if first != nil && *first > 0 {
			n = *first
		}
		return 1 + child*n
	}
	c.Query.Zones = func(child int, first *int, _ *string) int { return times(child, first, 20) }
	c.Query.Hosts = func(child int, _, _ *string, first *int) int { return times(child, first, 50) }
	c.Query.Vms = func(child int, _ *model.VMFilter, first *int, _ *string) int { return times(child, first, 50) }
	c.Query.Networks = func(child int, _ *string, first *int) int { return times(child, first, 50) }
	c.Zone.Hosts = func(child int) int { return 1 + child*zoneHostsCost }
	c.VM.Operations = func(child int, first *int) int { return times(child, first, 20) }
	// A connection costs its children (edges, nodes, pageInfo) times first.
	c.Query.ZonesConnection = func(child int, first *int, _, _ *string) int { return times(child, first, 20) }
	c.Query.HostsConnection = func(child int, _, _ *string, first *int, _ *string) int { return times(child, first, 50) }
	c.Query.VmsConnection = func(child int, _ *model.VMFilter, first *int, _ *string) int { return times(child, first, 50) }
	c.Query.NetworksConnection = func(child int, _ *string, first *int, _ *string) int { return times(child, first, 50) }
	c.VM.OperationsConnection = func(child int, first *int, _ *string) int { return times(child, first, 20) }
	return c
}

// Enrollment keys.

func keysUnavailable() error {
	return apierr.New(apierr.NotFound, "enrollment keys are not managed by this orchestrator")
}

// agentKeys lists the keys that enroll agents (the orchestrator's own
// mesh key is not the API's business).
func (r *Resolver) agentKeys(ctx context.Context) ([]meshcontrol.Key, error) {
	ks, err := r.Keys.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list enrollment keys: %w", err)
	}
	return slices.DeleteFunc(ks, func(k meshcontrol.Key) bool {
		return !slices.Equal(k.Tags, []string{meshcontrol.TagAgent})
	}), nil
}

// agentKey returns the agent key with the API id id; NOT_FOUND otherwise.
func (r *Resolver) agentKey(ctx context.Context, id string) (meshcontrol.Key, error) {
	n, err := strconv.ParseUint(id, 10, 64)
	if err == nil {
		ks, err := r.agentKeys(ctx)
		if err != nil {
			return meshcontrol.Key{}, err
		}
		for _, k := range ks {
			if k.ID == n {
				return k, nil
			}
		}
	}
	return meshcontrol.Key{}, apierr.New(apierr.NotFound, "enrollment key %q not found", id)
}

func keyModel(k meshcontrol.Key) *model.EnrollmentKey {
	return &model.EnrollmentKey{
		ID:        strconv.FormatUint(k.ID, 10),
		Reusable:  k.Reusable,
		Used:      k.Used,
		Expired:   k.Expired(time.Now()),
		CreatedAt: k.CreatedAt,
		ExpiresAt: k.Expiration,
	}
}

// Networks.

func networkModel(zm *model.Zone, n network.Network, zoneID string) *model.Network {
	m := &model.Network{
		ID:   tenancy.NetworkRef{ZoneID: zoneID, VNet: n.VNet}.ID(),
		Name: n.Name,
		Zone: zm,
		Vnet: n.VNet,
	}
	if n.CIDR.IsValid() {
		m.Cidr = n.CIDR.String()
	}
	if n.Gateway.IsValid() {
		m.Gateway = n.Gateway.String()
	}
	return m
}

// networkError classifies the errors of package network.
func networkError(err error) error {
	var ie *network.InputError
	switch {
	case errors.As(err, &ie):
		return apierr.BadInput("input."+ie.Field, "input.%s: %s", ie.Field, ie.Message)
	case errors.Is(err, network.ErrExists):
		return &apierr.Error{Code: apierr.Conflict, Message: "the VDC already has a network of that name in the zone", Cause: err}
	case errors.Is(err, network.ErrInUse):
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, network.ErrInUse.Error()+": "); ok {
			msg = "the network is in use: " + after
		}
		return &apierr.Error{Code: apierr.Conflict, Message: msg, Cause: err}
	}
	return err
}

// zoneError reports an error caused by a zone without a reachable agent
// as ZONE_UNAVAILABLE; other errors pass.
func zoneError(z zones.Zone, err error) error {
	var ae *apierr.Error
	if errors.As(err, &ae) {
		return err
	}
	if errors.Is(err, zones.ErrNoAgent) || errors.Is(err, context.DeadlineExceeded) {
		return apierr.ZoneDown(z.Name, err)
	}
	return err
}
