package estate

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/support/paging"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

const mib, gib = 1 << 20, 1 << 30

// Guest is a VM of a VDC as its zone lists it now.
type Guest struct {
	// Ref is where its guest sits.
	Ref tenancy.VMRef
	// ID is its API id: Ref's, or the one it kept when it moved across
	// zones.
	ID string
	// Name and Node are its name and the host it runs on.
	Name, Node string
	// Status is pveapi's one mapping of its state (pveapi.GuestState), or
	// CREATING while a live quota reservation of its VDC is bound to it.
	Status string
	// VCPUs, MemoryMiB and DiskGiB are its size.
	VCPUs, MemoryMiB, DiskGiB int
	// Uptime is in seconds.
	Uptime int
	// CPUUsage is a fraction of its CPUs; MemoryUsedMiB what it uses.
	CPUUsage      float64
	MemoryUsedMiB int
	// HighAvailability: Proxmox's HA manager keeps it running (it has an HA
	// resource), so a failed host's guest is recovered on another.
	HighAvailability bool
}

// GuestStatus is the status of a member of a VDC's pool, whose entry lacks
// the lock and tags that tell a create in flight: a guest bound to a live
// quota reservation of the VDC (creating, by VMID) is CREATING.
func GuestStatus(res pveapi.Resource, creating map[int]bool) string {
	if creating[res.VMID] {
		return string(pveapi.StateCreating)
	}
	return string(res.State(tenancy.Creating(res.Tags())))
}

func guestOf(z fleet.Zone, res *pveapi.Resource, id, status string) Guest {
	ref := tenancy.VMRef{ZoneID: z.ID, VMID: res.VMID}
	if id == "" {
		id = ref.ID()
	}
	return Guest{Ref: ref, ID: id, Name: res.Name, Node: res.Node, Status: status, VCPUs: res.MaxCPU,
		MemoryMiB: int(res.MaxMem / mib), DiskGiB: int(res.MaxDisk / gib), Uptime: int(res.Uptime),
		CPUUsage: res.CPU, MemoryUsedMiB: int(res.Mem / mib), HighAvailability: res.HAState != ""}
}

// keptID is the id of the VM whose guest sits at place (Placement.KeptID).
func (s *Service) keptID(place tenancy.VMRef) (id string, notVM bool) {
	if s.cfg.Placement == nil {
		return place.ID(), false
	}
	return s.cfg.Placement.KeptID(place)
}

// VMFilter selects the VMs of a page; nil fields select all.
type VMFilter struct {
	// Status is a guest status (Guest.Status).
	Status *string
	// Name is part of the name, in any case.
	Name *string
}

// VMPage is a page of a VDC's VMs in page order (zone identity, then
// VMID).
type VMPage struct {
	VMs []Guest
	// Total is how many VMs match in all, Before how many of them lie
	// before the cursor.
	Total, Before int
	// Down are the zones that did not answer.
	Down []*ZoneError
}

// Order orders VMs by zone identity and VMID (the page order of VMs).
func Order(a, b tenancy.VMRef) int {
	return cmp.Or(cmp.Compare(a.ZoneID, b.ZoneID), cmp.Compare(a.VMID, b.VMID))
}

// VMCursor is the cursor of the VM at ref in a page of VMs.
func VMCursor(ref tenancy.VMRef) string {
	return paging.Cursor(paging.Key(ref.ZoneID, fmt.Sprintf("%09d", ref.VMID)))
}

// ParseVMCursor returns the VM a cursor of VMCursor names (nil for no
// cursor); paging.ErrBadAfter for anything else.
func ParseVMCursor(after *string) (*tenancy.VMRef, error) {
	if after == nil {
		return nil, nil
	}
	k, err := paging.Decode(*after)
	fs := paging.Fields(k)
	if err != nil || len(fs) != 2 || fs[0] == "" {
		return nil, paging.ErrBadAfter
	}
	vmid, err := strconv.Atoi(fs[1])
	if err != nil {
		return nil, paging.ErrBadAfter
	}
	return &tenancy.VMRef{ZoneID: fs[0], VMID: vmid}, nil
}

// candidate is a guest that matches a page's filter, before the page is
// cut.
type candidate struct {
	zone   fleet.Zone
	ref    tenancy.VMRef
	id     string           // its id ("" for ref's): the one it kept if it moved
	res    *pveapi.Resource // in the Read's answer; not modified
	status string
}

// VMs returns the first n VMs of vdc in zones zs after cursor (nil: from
// the first) that match f. Only the zones of zs in vdc's zone set are
// asked (Following).
func (rd *Read) VMs(ctx context.Context, vdc *catalog.VDC, zs []fleet.Zone, f VMFilter, n int, cursor *tenancy.VMRef) VMPage {
	creating := quota.Creating(vdc)
	zs = rd.Following(ctx, vdc, zs)
	var (
		mu     sync.Mutex
		byZone [][]candidate
		p      VMPage
	)
	p.Down = rd.s.Each(ctx, zs, func(ctx context.Context, z fleet.Zone) error {
		rs, err := rd.poolGuests(ctx, z, tenancy.PoolID(vdc.Name))
		if err != nil {
			return err
		}
		cs := make([]candidate, 0, len(rs))
		matched, skipped := 0, 0
		for i := range rs {
			res := &rs[i]
			if res.Template == 1 {
				continue
			}
			ref := tenancy.VMRef{ZoneID: z.ID, VMID: res.VMID}
			id, notVM := rd.s.keptID(ref)
			if notVM {
				continue // a move's other copy
			}
			if id == ref.ID() {
				id = ""
			}
			status := GuestStatus(*res, creating[z.ID])
			if f.Status != nil && status != *f.Status {
				continue
			}
			if f.Name != nil && !strings.Contains(strings.ToLower(res.Name), strings.ToLower(*f.Name)) {
				continue
			}
			matched++
			if cursor != nil && Order(ref, *cursor) <= 0 {
				skipped++
				continue
			}
			cs = append(cs, candidate{zone: z, ref: ref, id: id, res: res, status: status})
		}
		mu.Lock()
		byZone = append(byZone, cs)
		p.Total += matched
		p.Before += skipped
		mu.Unlock()
		return nil
	})
	p.VMs = page(byZone, n)
	return p
}

// page returns the first n candidates in page order (zone identity, then
// VMID), given one slice of candidates per zone, and builds the Guests of
// those only: building one per guest of every zone was most of a page's
// CPU and garbage. Zones are taken in order and sorted only while the page
// is not full.
func page(byZone [][]candidate, n int) []Guest {
	byZone = slices.DeleteFunc(byZone, func(cs []candidate) bool { return len(cs) == 0 })
	slices.SortFunc(byZone, func(a, b []candidate) int { return cmp.Compare(a[0].ref.ZoneID, b[0].ref.ZoneID) })
	var out []Guest
	for _, cs := range byZone {
		if len(out) >= n {
			break
		}
		slices.SortFunc(cs, func(a, b candidate) int { return Order(a.ref, b.ref) })
		for _, c := range cs[:min(n-len(out), len(cs))] {
			out = append(out, guestOf(c.zone, c.res, c.id, c.status))
		}
	}
	return out
}

// VM returns the VM id of vdc, where it is now (in another zone if it moved
// there); a NotFound *fault.Error for an id that is malformed, forged, of another VDC
// or gone, a *ZoneError when its zone does not answer.
func (rd *Read) VM(ctx context.Context, vdc *catalog.VDC, id string) (Guest, error) {
	ref, err := tenancy.ParseVMID(id)
	if err != nil {
		return Guest{}, notFound()
	}
	if z, ok := rd.s.Zone(ref.ZoneID); ok {
		g, found, err := rd.guest(ctx, vdc, z, ref.VMID, func(kept string, notVM bool) bool { return !notVM && kept == id })
		if found || err != nil {
			return g, err
		}
	}
	// Moved across zones: read that zone's pool of vdc only.
	if rd.s.cfg.Placement == nil {
		return Guest{}, notFound()
	}
	place, ok := rd.s.cfg.Placement.PlaceOf(id)
	if !ok {
		return Guest{}, notFound()
	}
	z, ok := rd.s.Zone(place.ZoneID)
	if !ok {
		return Guest{}, notFound()
	}
	g, found, err := rd.guest(ctx, vdc, z, place.VMID, nil)
	if err != nil || !found {
		return Guest{}, cmp.Or(err, notFound())
	}
	g.ID = id
	return g, nil
}

// guest finds VMID vmid in z's pool of vdc, a VM (not a template) for
// which keep (when set) says yes given its kept id.
func (rd *Read) guest(ctx context.Context, vdc *catalog.VDC, z fleet.Zone, vmid int, keep func(kept string, notVM bool) bool) (Guest, bool, error) {
	rs, err := rd.poolGuests(ctx, z, tenancy.PoolID(vdc.Name))
	if err != nil {
		return Guest{}, false, &ZoneError{Zone: z, Err: err}
	}
	for i := range rs {
		res := &rs[i]
		if res.VMID != vmid || res.Template == 1 {
			continue
		}
		ref := tenancy.VMRef{ZoneID: z.ID, VMID: vmid}
		kept, notVM := rd.s.keptID(ref)
		if keep != nil && !keep(kept, notVM) {
			continue
		}
		return guestOf(z, res, ref.ID(), GuestStatus(*res, quota.Creating(vdc)[z.ID])), true, nil
	}
	return Guest{}, false, nil
}

// resources reads zone zoneID's /cluster/resources of type typ once per
// Read; ok is false for a zone that is not known.
func (rd *Read) resources(ctx context.Context, zoneID, typ string) ([]pveapi.Resource, bool, error) {
	z, ok := rd.s.Zone(zoneID)
	if !ok || rd.sess == nil {
		return nil, false, nil
	}
	rs, err := rd.sess.Resources(ctx, z, typ)
	if err != nil {
		return nil, false, &ZoneError{Zone: z, Err: err}
	}
	return rs, true, nil
}

// HostFigures are what Proxmox says of an online host now.
type HostFigures struct {
	Uptime, CPUs                  int
	CPUUsage                      float64
	MemoryUsedMiB, MemoryTotalMiB int
}

// Host returns the figures of host node of zone zoneID; ok is false when
// it is not online or not known. Only the zone's nodes are read: the whole
// list carries every guest of the zone.
func (rd *Read) Host(ctx context.Context, zoneID, node string) (HostFigures, bool, error) {
	rs, ok, err := rd.resources(ctx, zoneID, "node")
	if !ok {
		return HostFigures{}, false, err
	}
	for _, res := range rs {
		if res.Type == "node" && res.Node == node && res.Status == "online" {
			return HostFigures{Uptime: int(res.Uptime), CPUs: res.MaxCPU, CPUUsage: res.CPU,
				MemoryUsedMiB: int(res.Mem / mib), MemoryTotalMiB: int(res.MaxMem / mib)}, true, nil
		}
	}
	return HostFigures{}, false, nil
}

// Capacity is what a zone's online nodes and its storage hold and use.
type Capacity struct {
	CPUs                      int
	MemoryTotal, MemoryUsed   int // MiB
	StorageTotal, StorageUsed int // GiB
	// CPUUsage, MemoryUsage and StorageUsage are fractions of the total.
	CPUUsage, MemoryUsage, StorageUsage float64
}

// Capacity sums zone zoneID's online nodes and its storage (shared
// storage once); ok is false for a zone that is not known.
func (rd *Read) Capacity(ctx context.Context, zoneID string) (Capacity, bool, error) {
	rs, ok, err := rd.resources(ctx, zoneID, "")
	if !ok {
		return Capacity{}, false, err
	}
	return capacity(rs), true, nil
}

func capacity(rs []pveapi.Resource) Capacity {
	var c Capacity
	var cpuUsed float64
	var memTotal, memUsed, stTotal, stUsed int64
	shared := map[string]bool{}
	for _, res := range rs {
		switch res.Type {
		case "node":
			if res.Status != "online" {
				continue
			}
			c.CPUs += res.MaxCPU
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
	c.CPUUsage = fraction(cpuUsed, float64(c.CPUs))
	c.MemoryUsage = fraction(float64(memUsed), float64(memTotal))
	c.StorageUsage = fraction(float64(stUsed), float64(stTotal))
	return c
}

func fraction(used, total float64) float64 {
	if total <= 0 {
		return 0
	}
	return min(used/total, 1)
}

// Counters are a guest's bytes through its NICs and disks since it
// started.
type Counters struct {
	NetIn, NetOut, DiskRead, DiskWrite int64
}

// Counters reads the counters of the VM at ref off its zone's resources; a
// VM the zone no longer lists (or a zone not known) counts 0.
func (rd *Read) Counters(ctx context.Context, ref tenancy.VMRef) (Counters, error) {
	rs, _, err := rd.resources(ctx, ref.ZoneID, "vm")
	if err != nil {
		return Counters{}, err
	}
	for _, res := range rs {
		if res.Type == "qemu" && res.VMID == ref.VMID {
			return Counters{NetIn: res.NetIn, NetOut: res.NetOut, DiskRead: res.DiskRead, DiskWrite: res.DiskWrite}, nil
		}
	}
	return Counters{}, nil
}

// ipam reads the zone's IPAM mappings once per Read; ok is false for a
// zone that is not known.
func (rd *Read) ipam(ctx context.Context, zoneID string) ([]pveapi.IPMapping, bool, error) {
	z, ok := rd.s.Zone(zoneID)
	if !ok || rd.sess == nil {
		return nil, false, nil
	}
	ms, err := rd.sess.IPAM(ctx, z)
	if err != nil {
		return nil, false, &ZoneError{Zone: z, Err: err}
	}
	return ms, true, nil
}

// Addresses returns the addresses the zone's IPAM holds for the VM at ref
// (gateways aside), sorted and each once.
func (rd *Read) Addresses(ctx context.Context, ref tenancy.VMRef) ([]string, error) {
	ms, _, err := rd.ipam(ctx, ref.ZoneID)
	out := []string{}
	for _, m := range ms {
		if int(m.VMID) == ref.VMID && m.Gateway == 0 {
			out = append(out, m.IP)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), err
}

// AddressesByMAC returns the addresses the zone's IPAM holds by lower-case
// MAC address (gateways aside).
func (rd *Read) AddressesByMAC(ctx context.Context, zoneID string) (map[string][]string, error) {
	ms, _, err := rd.ipam(ctx, zoneID)
	out := map[string][]string{}
	for _, m := range ms {
		if m.Gateway == 0 && m.MAC != "" {
			mac := strings.ToLower(m.MAC)
			out[mac] = append(out[mac], m.IP)
		}
	}
	return out, err
}
