package compute

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// finder finds what operations and queries work on: zones (reachable,
// known, identified), VMs and the guests they are, networks and nodes. It
// only reads; it keeps nothing.
type finder struct {
	zones Zones
	// timeout bounds the reads of one zone (Config.ZoneTimeout or its
	// default).
	timeout time.Duration
	// moved is the index of the guests that moved across zones, where a
	// VM that moved is looked for first; nil looks in every zone.
	moved *movedIndex
	log   *slog.Logger
}

// quotaZones lists every zone for the quota ledger, those that cannot be
// reached without a client.
func (f *finder) quotaZones(ctx context.Context) []quota.Zone {
	zs := f.zones.Zones(ctx)
	if k, ok := f.zones.(KnownZones); ok {
		zs = k.Known(ctx)
	}
	out := make([]quota.Zone, 0, len(zs))
	for _, z := range zs {
		out = append(out, quota.Zone{ID: z.ID, Name: z.Name, Client: z.Client})
	}
	return out
}

// zoneByName finds a zone by name (or ID).
func (f *finder) zoneByName(ctx context.Context, name string) (Zone, bool) {
	for _, z := range f.zones.Zones(ctx) {
		if z.Name == name || z.ID == name {
			return z, true
		}
	}
	return Zone{}, false
}

func (f *finder) zoneByID(ctx context.Context, id string) (Zone, bool) {
	for _, z := range f.zones.Zones(ctx) {
		if z.ID == id {
			return z, true
		}
	}
	return Zone{}, false
}

// errUnreachable is the cause of a ZONE_UNAVAILABLE for a zone known to
// have no reachable agent now: refused at once, without waiting for it.
var errUnreachable = errors.New("no agent of the zone can be reached now")

// zonesUnknown waits (within ctx) until the zones are all known, and
// returns why they are not when ctx ends first (nil for Zones that always
// know them).
func (f *finder) zonesUnknown(ctx context.Context) error {
	if iz, ok := f.zones.(IdentifiedZones); ok {
		return iz.Identified(ctx)
	}
	return nil
}

// unreachableZone finds a zone, by name or ID, that is known (KnownZones)
// but cannot be reached now.
func (f *finder) unreachableZone(ctx context.Context, name string) (Zone, bool) {
	k, ok := f.zones.(KnownZones)
	if !ok {
		return Zone{}, false
	}
	for _, z := range k.Known(ctx) {
		if z.Client == nil && (z.Name == name || z.ID == name) {
			return z, true
		}
	}
	return Zone{}, false
}

// notFound is the error for a VM that does not exist in the caller's VDC.
func notFound() error { return newError(KindNotFound, "no such VM") }

// lookup resolves a VM id within vdc: the zone, the guest and its intent.
// Anything that is not a VM of vdc is NOT_FOUND.
func (f *finder) lookup(ctx context.Context, vdc, id string) (Zone, pveapi.Resource, *Intent, error) {
	z, g, in, _, err := f.lookupConfig(ctx, vdc, id)
	return z, g, in, err
}

// lookupConfig is lookup that also returns the guest's configuration.
func (f *finder) lookupConfig(ctx context.Context, vdc, id string) (Zone, pveapi.Resource, *Intent, pveapi.Config, error) {
	ref, err := tenancy.ParseVMID(id)
	if err != nil {
		return Zone{}, pveapi.Resource{}, nil, nil, notFound()
	}
	z, ok := f.zoneByID(ctx, ref.ZoneID)
	if ok {
		// Within the zone timeout: a zone cut off (its hosts not yet
		// OFFLINE) is ZONE_UNAVAILABLE, not a call that hangs.
		zctx, cancel := context.WithTimeout(ctx, f.timeout)
		z, g, in, cfg, err := f.lookupAt(zctx, vdc, z, ref.VMID)
		cancel()
		if err == nil && !g.HasTag(movedTag) {
			if _, moved := wasOf(g.Tags()); !moved {
				return z, g, in, cfg, nil
			}
		}
		if err != nil && !IsKind(err, KindNotFound) {
			return Zone{}, pveapi.Resource{}, nil, nil, err
		}
	}
	// A VM that moved to another zone keeps its id: the guest it is now
	// carries the place it was created at (wasTag).
	z, g, in, cfg, err := f.lookupMoved(ctx, vdc, ref)
	if IsKind(err, KindNotFound) && !ok {
		// Not moved to a zone that answers, and its zone cannot be
		// reached, or is not known yet: unavailable, not gone (whatever
		// VDC asks).
		if down, known := f.unreachableZone(ctx, ref.ZoneID); known {
			return Zone{}, pveapi.Resource{}, nil, nil, zoneDown(down.Name, errUnreachable)
		}
		zctx, cancel := context.WithTimeout(ctx, f.timeout)
		uerr := f.zonesUnknown(zctx)
		cancel()
		if uerr != nil {
			return Zone{}, pveapi.Resource{}, nil, nil, zoneDown(ref.ZoneID, uerr)
		}
	}
	return z, g, in, cfg, err
}

// lookupPlace finds the guest at place, whichever VM it is (a guest that
// moved here is found at its place, not under the id it kept), within the
// zone timeout; an unknown zone is NOT_FOUND.
func (f *finder) lookupPlace(ctx context.Context, vdc string, place tenancy.VMRef) (Zone, pveapi.Resource, *Intent, error) {
	z, ok := f.zoneByID(ctx, place.ZoneID)
	if !ok {
		if down, known := f.unreachableZone(ctx, place.ZoneID); known {
			return Zone{}, pveapi.Resource{}, nil, zoneDown(down.Name, errUnreachable)
		}
		return Zone{}, pveapi.Resource{}, nil, notFound()
	}
	zctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	z, g, in, _, err := f.lookupAt(zctx, vdc, z, place.VMID)
	return z, g, in, err
}

// lookupMoved finds the guest of vdc that VM ref moved to: first at the
// place the index of moved guests knows for it (that zone only), else in
// every zone that answers, all asked at once, each within the zone
// timeout. A zone that does not answer in time is passed over: the VM is
// not found there.
func (f *finder) lookupMoved(ctx context.Context, vdc string, ref tenancy.VMRef) (Zone, pveapi.Resource, *Intent, pveapi.Config, error) {
	tag := wasTag(ref)
	isTarget := func(g pveapi.Resource) bool {
		return g.HasTag(tag) && !g.HasTag(incomingTag) && !g.HasTag(movedTag)
	}
	if f.moved != nil {
		if place, ok := f.moved.placeOf(ref.ID()); ok {
			if z, ok := f.zoneByID(ctx, place.ZoneID); ok {
				zctx, cancel := context.WithTimeout(ctx, f.timeout)
				z, g, in, cfg, err := f.lookupAt(zctx, vdc, z, place.VMID)
				cancel()
				if err == nil && isTarget(g) {
					return z, g, in, cfg, nil
				}
			}
		}
	}
	zs := f.zones.Zones(ctx)
	found, _ := eachZone(ctx, f.timeout, zs, func(ctx context.Context, z Zone) (int, error) {
		gs, err := pveapi.Guests(ctx, z.Client)
		if err != nil {
			return 0, err
		}
		if j := slices.IndexFunc(gs, isTarget); j >= 0 {
			return gs[j].VMID, nil
		}
		return 0, nil
	})
	for i, vmid := range found { // the VMID of the guest it moved to, by zone; 0 for none
		if vmid != 0 {
			zctx, cancel := context.WithTimeout(ctx, f.timeout)
			defer cancel()
			return f.lookupAt(zctx, vdc, zs[i], vmid)
		}
	}
	return Zone{}, pveapi.Resource{}, nil, nil, notFound()
}

// eachZone calls fn for every zone of zs at once, each call bounded by
// timeout, and returns the answer and error of each zone, by index, when
// all have answered or timed out. A call that outlives its timeout is
// abandoned (its context is cancelled and its answer no longer waited
// for): its zone's error is the context's.
func eachZone[T any](ctx context.Context, timeout time.Duration, zs []Zone, fn func(ctx context.Context, z Zone) (T, error)) ([]T, []error) {
	out, errs := make([]T, len(zs)), make([]error, len(zs))
	var wg sync.WaitGroup
	for i, z := range zs {
		wg.Go(func() {
			zctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			type answer struct {
				v   T
				err error
			}
			done := make(chan answer, 1)
			go func() {
				v, err := fn(zctx, z)
				done <- answer{v, err}
			}()
			select {
			case a := <-done:
				out[i], errs[i] = a.v, a.err
			case <-zctx.Done():
				errs[i] = fmt.Errorf("zone %s: %w", z.Name, zctx.Err())
			}
		})
	}
	wg.Wait()
	return out, errs
}

// lookupAt resolves guest vmid of zone z within vdc.
func (f *finder) lookupAt(ctx context.Context, vdc string, z Zone, vmid int) (Zone, pveapi.Resource, *Intent, pveapi.Config, error) {
	ref := tenancy.VMRef{ZoneID: z.ID, VMID: vmid}
	// The VDC's pool lists its guests only (its cost follows the VDC, not
	// the zone; another VDC's guest is refused before any further read, as
	// fast as a missing one); their tags and lock are in their configs.
	gs, err := pveapi.PoolGuests(ctx, z.Client, tenancy.PoolID(vdc))
	if err != nil {
		return Zone{}, pveapi.Resource{}, nil, nil, zoneDown(z.Name, err)
	}
	i := slices.IndexFunc(gs, func(g pveapi.Resource) bool { return g.VMID == ref.VMID })
	if i < 0 || gs[i].Template == 1 {
		return Zone{}, pveapi.Resource{}, nil, nil, notFound()
	}
	g := gs[i]
	cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, g.VMID)
	if err != nil {
		if pveapi.IsNotFound(err) {
			return Zone{}, pveapi.Resource{}, nil, nil, notFound()
		}
		return Zone{}, pveapi.Resource{}, nil, nil, zoneDown(z.Name, err)
	}
	g.RawTags, g.Lock, g.Pool = cfg.Str("tags"), cfg.Str("lock"), tenancy.PoolID(vdc)
	if !g.HasTag(tenancy.ManagedTag) {
		return Zone{}, pveapi.Resource{}, nil, nil, notFound()
	}
	in, _ := ParseIntent(cfg.Str("description"))
	owner, _ := tenancy.VDCOf(g.Tags())
	tagged := owner != ""
	switch {
	case tagged && owner == vdc:
	case !tagged && in != nil && in.VDC == vdc:
	default:
		return Zone{}, pveapi.Resource{}, nil, nil, notFound()
	}
	return z, g, in, cfg, nil
}

// errNoNetwork: the network is not one of the VDC in the zone.
var errNoNetwork = errors.New("no such network")

// network resolves a network id to its subnet, if it is a network of vdc
// in zone z.
func (f *finder) network(ctx context.Context, z Zone, vdc, id string) (ipam.Subnet, error) {
	ref, err := tenancy.ParseNetworkID(id)
	if err != nil || ref.ZoneID != z.ID {
		return ipam.Subnet{}, errNoNetwork
	}
	var vn struct {
		Zone  string `json:"zone"`
		Alias string `json:"alias"`
	}
	if err := z.Client.Get(ctx, "/cluster/sdn/vnets/"+url.PathEscape(ref.VNet), &vn); err != nil {
		if pveapi.IsNotFound(err) {
			return ipam.Subnet{}, errNoNetwork
		}
		return ipam.Subnet{}, err
	}
	if !tenancy.VNetBelongs(vdc, vn.Zone, vn.Alias) {
		return ipam.Subnet{}, errNoNetwork
	}
	var subs []struct {
		CIDR    string `json:"cidr"`
		Gateway string `json:"gateway"`
	}
	if err := z.Client.Get(ctx, "/cluster/sdn/vnets/"+url.PathEscape(ref.VNet)+"/subnets", &subs); err != nil {
		return ipam.Subnet{}, err
	}
	if len(subs) == 0 {
		return ipam.Subnet{}, errNoNetwork
	}
	pfx, err := netip.ParsePrefix(subs[0].CIDR)
	if err != nil {
		return ipam.Subnet{}, fmt.Errorf("compute: subnet of %s: %w", ref.VNet, err)
	}
	gw, _ := netip.ParseAddr(subs[0].Gateway)
	return ipam.Subnet{Zone: vn.Zone, VNet: ref.VNet, Prefix: pfx, Gateway: gw}, nil
}

// target is a VM found for an operation: its zone, guest and intent.
type target struct {
	z  Zone
	g  pveapi.Resource
	in *Intent
}

// settledVM looks VM id of vdc up for an operation that needs it created:
// one still being created is CONFLICT.
func (f *finder) settledVM(ctx context.Context, vdc, id string) (target, error) {
	z, g, in, err := f.lookup(ctx, vdc, id)
	if err != nil {
		return target{}, err
	}
	if isCreating(g) {
		return target{}, newError(KindConflict, "the VM is still being created")
	}
	return target{z: z, g: g, in: in}, nil
}

// targetNode resolves host (a host id of zone z or a node name) to an
// online node of z.
func (f *finder) targetNode(ctx context.Context, z Zone, host string) (string, error) {
	node := host
	if ref, err := tenancy.ParseHostID(host); err == nil {
		if ref.ZoneID != z.ID {
			return "", badInput("host", "host %q is not in zone %s", host, z.Name)
		}
		node = ref.Node
	}
	nodes, err := pveapi.Resources(ctx, z.Client, "node")
	if err != nil {
		return "", zoneDown(z.Name, err)
	}
	i := slices.IndexFunc(nodes, func(n pveapi.Resource) bool { return n.Type == "node" && n.Node == node })
	if i < 0 {
		return "", badInput("host", "zone %s has no host %q", z.Name, host)
	}
	if nodes[i].Status != "online" {
		return "", &Error{Kind: KindConflict, Field: "host", Message: fmt.Sprintf("host %s is not online", node)}
	}
	return node, nil
}

// keptVMIDs are the VMIDs of zone z that VMs which moved away from z keep
// in their ids (their fp-was tags), found in every zone that answers
// within the zone timeout (asked at once).
func (f *finder) keptVMIDs(ctx context.Context, z Zone) map[int]bool {
	zs := f.zones.Zones(ctx)
	kept, errs := eachZone(ctx, f.timeout, zs, func(ctx context.Context, zz Zone) ([]int, error) {
		gs, err := pveapi.Guests(ctx, zz.Client)
		if err != nil {
			return nil, err
		}
		var vmids []int
		for _, g := range gs {
			if was, ok := wasOf(g.Tags()); ok && was.ZoneID == z.ID {
				vmids = append(vmids, was.VMID)
			}
		}
		return vmids, nil
	})
	out := map[int]bool{}
	for i, err := range errs {
		if err != nil {
			f.log.Warn("listing the VMIDs moved VMs keep", "zone", zs[i].Name, "err", err)
			continue
		}
		for _, vmid := range kept[i] {
			out[vmid] = true
		}
	}
	return out
}

// networkName is the name of the VDC network of VNet vnet in zone z.
func (f *finder) networkName(ctx context.Context, z Zone, vnet string) (string, error) {
	var vn struct {
		Zone  string `json:"zone"`
		Alias string `json:"alias"`
	}
	if err := z.Client.Get(ctx, "/cluster/sdn/vnets/"+url.PathEscape(vnet), &vn); err != nil {
		return "", zoneDown(z.Name, err)
	}
	_, name, ok := tenancy.VNetOf(vn.Zone, vn.Alias)
	if !ok {
		return "", newError(KindConflict, "the VM's network %s is not a network of its VDC", vnet)
	}
	return name, nil
}
