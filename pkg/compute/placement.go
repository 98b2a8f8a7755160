package compute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute/images"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Placement: which host of a zone takes a new VM. Every VM the service
// creates in a zone (createVM, node-pool workers through it, arrivals of
// moves across zones) asks place.
//
// The candidates are the zone's hosts that are online, not in
// maintenance (Config.Maintenance), that have the VM's storage available,
// with room for its memory, vCPUs and disk (fit); of those, the one with
// the lowest score wins, ties by name. The figures are Proxmox's own
// (/cluster/resources), plus the placements of this process whose guests
// are not yet counted there as the create will leave them (held slots).

// hostLoad is a host's figures as placement counts them.
type hostLoad struct {
	Node   string
	Online bool
	// MaxMem is the host's memory (bytes), MaxCPU its logical CPUs.
	MaxMem int64
	MaxCPU int
	// UsedMem is the memory in use by its running guests plus the
	// configured memory of the others (bytes): what fit checks.
	UsedMem int64
	// CommittedMem is the configured memory of all its guests (bytes),
	// VCPUs their configured vCPUs: what the score weighs.
	CommittedMem int64
	VCPUs        int
	// Storages are the storages of the host by id.
	Storages map[string]storeLoad
	// Guests counts the guests on the host (templates aside).
	Guests int
}

// storeLoad is a storage as one host sees it.
type storeLoad struct {
	// Available: enabled and active on the host.
	Available bool
	Shared    bool
	// Free is its free space in bytes.
	Free int64
}

// demand is what a new VM needs of its host.
type demand struct {
	MemBytes  int64
	VCPUs     int
	DiskBytes int64
	Storage   string
}

// ratios are a zone's overcommit ratios (catalog.ZonePolicy.Overcommit).
type ratios struct{ Memory, CPU float64 }

// fit reports whether host h can take d: why is "" when it can (score is
// then its score after placing d), else the reason it cannot, which may
// be shown to the caller; detail adds the host's figures, for the logs.
//
// The score is the larger of two fractions after placing: the configured
// memory of the host's guests over its memory times the memory ratio, and
// their vCPUs over its CPUs times the CPU ratio. Lower is less loaded.
func fit(h hostLoad, d demand, r ratios, maintenance bool) (score float64, why, detail string) {
	switch {
	case !h.Online:
		return 0, "offline", ""
	case maintenance:
		return 0, "in maintenance", ""
	}
	st, ok := h.Storages[d.Storage]
	if !ok || !st.Available {
		return 0, fmt.Sprintf("storage %s is not available on it", d.Storage), ""
	}
	if st.Free < d.DiskBytes {
		return 0, fmt.Sprintf("not enough free space on storage %s", d.Storage),
			fmt.Sprintf("%d GiB free, %d GiB needed", st.Free>>30, (d.DiskBytes+1<<30-1)>>30)
	}
	memCap := float64(h.MaxMem) * r.Memory
	if float64(h.UsedMem+d.MemBytes) > memCap {
		return 0, "not enough free memory",
			fmt.Sprintf("%d MiB free, %d MiB needed", max(int64(memCap)-h.UsedMem, 0)>>20, d.MemBytes>>20)
	}
	cpuCap := float64(h.MaxCPU) * r.CPU
	if float64(h.VCPUs+d.VCPUs) > cpuCap {
		return 0, "not enough free vCPUs", fmt.Sprintf("%d of %g taken, %d needed", h.VCPUs, cpuCap, d.VCPUs)
	}
	mem := float64(h.CommittedMem+d.MemBytes) / memCap
	cpu := float64(h.VCPUs+d.VCPUs) / cpuCap
	return max(mem, cpu), "", ""
}

// verdict is fit's answer for one host.
type verdict struct {
	Node   string
	Score  float64
	Why    string // "" for a candidate
	Detail string // figures behind Why, for the logs
}

// choose assesses every host for d and returns the verdicts, candidates
// first by score (ties by name), then the refused by name; ok is whether
// there is a candidate (the first verdict).
func choose(hosts []hostLoad, d demand, r ratios, maintenance map[string]bool) (vs []verdict, ok bool) {
	for _, h := range hosts {
		s, why, detail := fit(h, d, r, maintenance[h.Node])
		vs = append(vs, verdict{Node: h.Node, Score: s, Why: why, Detail: detail})
	}
	slices.SortFunc(vs, func(a, b verdict) int {
		if (a.Why == "") != (b.Why == "") {
			if a.Why == "" {
				return -1
			}
			return 1
		}
		if a.Why == "" {
			if c := cmp.Compare(a.Score, b.Score); c != 0 {
				return c
			}
		}
		return strings.Compare(a.Node, b.Node)
	})
	return vs, len(vs) > 0 && vs[0].Why == ""
}

// loads sums the figures of /cluster/resources per host; the guests in
// skip are left out (held slots count them).
func loads(rs []pveapi.Resource, skip map[int]bool) map[string]*hostLoad {
	hosts := map[string]*hostLoad{}
	host := func(n string) *hostLoad {
		h := hosts[n]
		if h == nil {
			h = &hostLoad{Node: n, Storages: map[string]storeLoad{}}
			hosts[n] = h
		}
		return h
	}
	for _, r := range rs {
		switch r.Type {
		case "node":
			h := host(r.Node)
			h.Online, h.MaxMem, h.MaxCPU = r.Status == "online", r.MaxMem, r.MaxCPU
		case "qemu", "lxc":
			if r.Template == 1 || skip[r.VMID] || r.Node == "" {
				continue
			}
			h := host(r.Node)
			h.Guests++
			h.CommittedMem += r.MaxMem
			h.VCPUs += r.MaxCPU
			if r.Status == "running" {
				h.UsedMem += r.Mem
			} else {
				h.UsedMem += r.MaxMem
			}
		case "storage":
			host(r.Node).Storages[r.Storage] = storeLoad{Available: r.Status == "available", Shared: r.Shared == 1, Free: max(r.MaxDisk-r.Disk, 0)}
		}
	}
	return hosts
}

// placer holds the placements of this process until their creates end,
// so that concurrent creates in a zone see each other's choices before
// Proxmox counts their guests. Another replica's placements are not seen
// here: a guest is counted from Proxmox's figures once its clone has
// begun (the clone takes the template's configuration until the configure
// phase sets the VM's own), so two replicas placing at the same moment
// may pick one host from one set of figures.
type placer struct {
	mu   sync.Mutex
	held map[*slot]struct{} // protected by mu
}

func newPlacer() *placer { return &placer{held: map[*slot]struct{}{}} }

// slot is a host's room held for one create.
type slot struct {
	p      *placer
	zone   string
	node   string
	shared bool // the VM's storage is shared in the zone
	d      demand
	group  string // the catalog name of its placement group, "" for none
	vmid   int    // the guest, once cloned; protected by p.mu
}

// bind records the guest of the slot's create: from then on the slot
// stands for that guest's figures in Proxmox.
func (s *slot) bind(vmid int) {
	if s == nil {
		return
	}
	s.p.mu.Lock()
	s.vmid = vmid
	s.p.mu.Unlock()
}

// release gives the room back (the create has ended, or never began).
func (s *slot) release() {
	if s == nil {
		return
	}
	s.p.mu.Lock()
	delete(s.p.held, s)
	s.p.mu.Unlock()
}

// errCapacity is the cause of a KindCapacityExceeded error.
var errCapacity = errors.New("compute: no host can take the VM")

// placeRequest is what place is asked.
type placeRequest struct {
	Zone   Zone
	Demand demand
	// Pin is a host the caller named (a host id or a node name), "" for
	// any; Field is its input field, for the errors about it.
	Pin, Field string
	// VM names the VM in the logs.
	VM string
	// Group is the VM's placement group (pgroups.go), nil for none.
	Group *catalog.PlacementGroup
}

// place chooses the host of a new VM (see the package's placement notes)
// and holds its room until the returned slot is released. It answers a
// *Error of KindCapacityExceeded when no host can take the VM, of
// KindBadInput on req.Field when the pinned host cannot (unknown,
// offline, in maintenance, too full), of KindZoneUnavailable when the
// zone's figures cannot be read.
func (d *deps) place(ctx context.Context, req placeRequest) (*slot, error) {
	z := req.Zone
	pol, err := catalog.Get[*catalog.ZonePolicy](ctx, d.cfg.Catalog, z.Name)
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return nil, internal("reading the zone's policy failed", err)
	}
	var r ratios
	r.Memory, r.CPU = pol.Overcommit()
	var maint map[string]bool
	if d.cfg.Maintenance != nil {
		if maint, err = d.cfg.Maintenance(ctx, z.Name); err != nil {
			return nil, internal("reading the hosts in maintenance failed", err)
		}
	}
	rs, err := pveapi.Resources(ctx, z.Client, "")
	if err != nil {
		return nil, zoneDown(z.Name, err)
	}
	var gp *groupPlace
	if req.Group != nil {
		// The group's creates in flight are read before its members, so
		// that one ending in between is seen as a member (its guest
		// records the group before its slot is released).
		if gp, err = newGroupPlace(ctx, z, req.Group, d.placer.groupSlots(z.ID, req.Group.Name)); err != nil {
			return nil, zoneDown(z.Name, err)
		}
	}
	pin := req.Pin
	if ref, err := tenancy.ParseHostID(pin); err == nil {
		if ref.ZoneID != z.ID {
			return nil, badInput(req.Field, "host %q is not in zone %s", pin, z.Name)
		}
		pin = ref.Node
	}

	p := d.placer
	p.mu.Lock()
	defer p.mu.Unlock()
	skip := map[int]bool{}
	var held []*slot
	for s := range p.held {
		if s.zone == z.ID {
			held = append(held, s)
			if s.vmid != 0 {
				skip[s.vmid] = true
			}
		}
	}
	byNode := loads(rs, skip)
	gp.countHeld(held)
	for _, s := range held {
		h := byNode[s.node]
		if h == nil {
			continue
		}
		h.UsedMem += s.d.MemBytes
		h.CommittedMem += s.d.MemBytes
		h.VCPUs += s.d.VCPUs
		h.Guests++
		if st, ok := h.Storages[s.d.Storage]; ok && !st.Shared {
			st.Free -= s.d.DiskBytes
			h.Storages[s.d.Storage] = st
		}
	}
	hosts := make([]hostLoad, 0, len(byNode))
	for _, h := range byNode {
		hosts = append(hosts, *h)
	}
	if pin != "" {
		i := slices.IndexFunc(hosts, func(h hostLoad) bool { return h.Node == pin })
		if i < 0 {
			return nil, badInput(req.Field, "zone %s has no host %q", z.Name, req.Pin)
		}
		hosts = hosts[i : i+1]
	}
	vs, _ := choose(hosts, req.Demand, r, maint)
	vs, ok := gp.apply(vs)
	attrs := []any{"vm", req.VM, "zone", z.Name, "memMiB", req.Demand.MemBytes >> 20, "vcpus", req.Demand.VCPUs,
		"diskGiB", req.Demand.DiskBytes >> 30, "storage", req.Demand.Storage, "memRatio", r.Memory, "cpuRatio", r.CPU}
	if gp != nil {
		attrs = append(attrs, "placementGroup", gp.name, "policy", gp.policy, "groupVMsPerHost", gp.count)
	}
	for _, v := range vs {
		switch {
		case v.Detail != "":
			attrs = append(attrs, "refused."+v.Node, v.Why+" ("+v.Detail+")")
		case v.Why != "":
			attrs = append(attrs, "refused."+v.Node, v.Why)
		}
	}
	if !ok {
		d.log.Info("placement: no host can take the VM", attrs...)
		if pin != "" {
			return nil, badInput(req.Field, "host %s cannot take the VM: %s", pin, vs[0].Why)
		}
		return nil, &Error{Kind: KindCapacityExceeded, Message: capacityMessage(z.Name, vs), Cause: errCapacity}
	}
	win := vs[0]
	d.log.Info("placement: host chosen", append([]any{"host", win.Node, "score", win.Score, "pinned", pin != ""}, attrs...)...)
	s := &slot{p: p, zone: z.ID, node: win.Node, d: req.Demand, shared: byNode[win.Node].Storages[req.Demand.Storage].Shared}
	if gp != nil {
		s.group = gp.key
	}
	p.held[s] = struct{}{}
	return s, nil
}

// capacityMessage says why no host of zone can take a VM: how many hosts
// refused it for each reason, not which (the hosts and their load are
// the platform admins' to see; the log names them).
func capacityMessage(zone string, vs []verdict) string {
	if len(vs) == 0 {
		return fmt.Sprintf("zone %s has no host", zone)
	}
	count := map[string]int{}
	var whys []string
	for _, v := range vs {
		if count[v.Why] == 0 {
			whys = append(whys, v.Why)
		}
		count[v.Why]++
	}
	slices.Sort(whys)
	parts := make([]string, 0, len(whys))
	for _, w := range whys {
		parts = append(parts, fmt.Sprintf("%d %s: %s", count[w], plural(count[w], "host", "hosts"), w))
	}
	return fmt.Sprintf("no host of zone %s can take the VM (%s)", zone, strings.Join(parts, "; "))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// templateNode is the node whose own template a VM placed in s is cloned
// from: its host when its storage is local (a clone of a template on
// local storage stays on the template's node), "" (the zone's template,
// cloned with a target) when it is shared.
func (s *slot) templateNode() string {
	if s == nil || s.shared {
		return ""
	}
	return s.node
}

// host is the node the clone puts the VM on: the slot's, or the
// template's node tpl when nothing was placed.
func (s *slot) host(tpl string) string {
	if s == nil {
		return tpl
	}
	return s.node
}

// placeCreate places the VM of a create's plan p (its host held in
// p.slot) and reads whether the image is staged where the VM is cloned
// from (p.tpl). On error nothing is held.
func placeCreate(ctx context.Context, d *deps, p *plan, in CreateInput) error {
	if d.unplaced {
		return stagedState(ctx, d, p, in)
	}
	s, err := d.place(ctx, placeRequest{Zone: p.zone, Pin: in.Host, Field: "host", VM: in.Name, Group: p.pgroup, Demand: demand{
		MemBytes: int64(p.cp.MemoryMiB) << 20, VCPUs: p.cp.VCPUs, DiskBytes: int64(in.DiskGiB) << 30, Storage: p.storage}})
	if err != nil {
		return err
	}
	p.slot = s
	if err := stagedState(ctx, d, p, in); err != nil {
		s.release()
		return err
	}
	return nil
}

// stagedState reads whether the image of p is staged where its VM is
// cloned from (p.tpl), and checks the disk against the image's size.
func stagedState(ctx context.Context, d *deps, p *plan, in CreateInput) error {
	if p.img == nil {
		return nil // a VM of an ISO alone: a blank disk
	}
	st, err := d.stager.Status(ctx, p.target(), p.img)
	if err != nil {
		return zoneDown(p.zone.Name, err)
	}
	if st.State == images.StateStaged {
		p.tpl = &st.Template
		if need := int((st.Template.DiskBytes + 1<<30 - 1) >> 30); in.DiskGiB < need {
			return badInput("diskGiB", "diskGiB must be at least %d, the size of image %s", need, p.img.Name)
		}
	}
	return nil
}

// unplace gives back the host's room a create held.
func (sc *createScope) unplace() {
	if sc.p != nil {
		sc.p.slot.release()
	}
}

// stageOnHost stages the image of a create where its VM is cloned from
// and returns that template. A VM of local storage needs its host's own
// template: the image is staged on every node that may host first (as
// staging it into the zone does), so that the next creates, placed
// elsewhere, find theirs; a node that fails there only matters if it is
// the host.
func (sc *createScope) stageOnHost(ctx context.Context) (images.Template, error) {
	t := sc.p.target()
	if t.Node != "" {
		all := t
		all.Node = ""
		if _, err := sc.stager.Ensure(ctx, all, sc.p.img); err != nil {
			sc.log.Warn("staging the image on every node", "image", sc.p.img.Name, "zone", t.Zone, "err", err)
		}
	}
	return sc.stager.Ensure(ctx, t, sc.p.img)
}
