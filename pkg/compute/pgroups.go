package compute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Placement groups: a VDC's rule for the hosts of a set of its VMs in one
// zone. SPREAD keeps them on distinct hosts (a create that cannot is
// CAPACITY_EXCEEDED; a best-effort SPREAD group, a node pool's, prefers
// the hosts with the fewest of them instead); PACK puts a VM on the host
// with the most of them while it fits there, else where placement would.
//
// The group is a catalog object; which VMs are in it is a fact of each
// VM, recorded in its intent (Intent.PlacementGroup) when it is created,
// like its security groups: the members are read from the VMs, a deleted
// VM leaves its group with it, and a VM that moves to another zone leaves
// its group (a group is zonal), the copy in the new zone in none.

// PlacementPolicy is a placement group's policy.
type PlacementPolicy string

// The policies of placement groups.
const (
	PolicySpread PlacementPolicy = catalog.PlacementSpread
	PolicyPack   PlacementPolicy = catalog.PlacementPack
)

// PlacementGroup is a placement group as the API shows it.
type PlacementGroup struct {
	// ID is its catalog name (<vdc>.<name>).
	ID   string
	Name string
	// Zone is the name of its zone.
	Zone   string
	Policy PlacementPolicy
	// BestEffort: a SPREAD group that shares hosts rather than refuse.
	BestEffort bool
	// VMs are the ids of its VMs, sorted.
	VMs []string
}

// PlacementGroupInput is what createPlacementGroup asks for.
type PlacementGroupInput struct {
	// VDC is the caller's VDC.
	VDC string
	// Name is a DNS label, unique among the VDC's groups.
	Name string
	// Zone is the name of a zone the VDC may place in.
	Zone   string
	Policy PlacementPolicy
	// BestEffort makes a SPREAD group soft (node pools' groups).
	BestEffort bool
}

// groupMember is a VM of a placement group where it is now.
type groupMember struct {
	ID   string
	VMID int
	Node string
}

// PlacementGroups is the placement groups of a Service's VDCs
// (Service.PlacementGroups).
type PlacementGroups struct{ d *deps }

// PlacementGroups returns the placement groups of the service's VDCs.
func (s *Service) PlacementGroups() *PlacementGroups { return &PlacementGroups{d: s.d} }

// Create creates a placement group of in.VDC. BAD_INPUT for
// a name that is not a DNS label ("name"), a zone that does not exist for
// the VDC ("zone") or another policy ("policy"); CONFLICT for a name the
// VDC uses already or when it has catalog.MaxPlacementGroups groups.
func (s *PlacementGroups) Create(ctx context.Context, in PlacementGroupInput) (*PlacementGroup, error) {
	if catalog.ValidateLabel("name", in.Name) != nil {
		return nil, badInput("name", "%q is not a DNS label (lower-case letters, digits and '-')", in.Name)
	}
	switch in.Policy {
	case PolicySpread, PolicyPack:
	default:
		return nil, badInput("policy", "%q is not %s or %s", in.Policy, PolicySpread, PolicyPack)
	}
	absent := badInput("zone", "no zone %q", in.Zone)
	z, ok := s.d.find.zoneByName(ctx, in.Zone)
	if !ok {
		if z, ok = s.d.find.unreachableZone(ctx, in.Zone); !ok {
			return nil, absent
		}
	}
	if err := placeable(ctx, s.d, z.Name, in.VDC, absent); err != nil {
		return nil, err
	}
	store := s.d.cfg.Catalog
	all, err := catalog.List[*catalog.PlacementGroup](ctx, store)
	if err != nil {
		return nil, internal("reading the catalog failed", err)
	}
	if n := countVDC(all, in.VDC); n >= catalog.MaxPlacementGroups {
		return nil, newError(KindConflict, "the VDC has %d placement groups, the most it may; delete one first", n)
	}
	g := &catalog.PlacementGroup{}
	g.Name, g.VDC, g.Zone, g.Policy, g.BestEffort = catalog.PlacementGroupName(in.VDC, in.Name), in.VDC, z.Name, string(in.Policy), in.BestEffort
	created, err := catalog.Create(ctx, store, g)
	if errors.Is(err, catalog.ErrAlreadyExists) {
		return nil, &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("the VDC has a placement group %q already", in.Name)}
	}
	if err != nil {
		return nil, internal("writing the placement group failed", err)
	}
	s.d.log.Info("placement group created", "vdc", in.VDC, "group", in.Name, "zone", z.Name, "policy", in.Policy)
	return groupOf(created, []string{}), nil
}

func countVDC(gs []*catalog.PlacementGroup, vdc string) int {
	n := 0
	for _, g := range gs {
		if g.VDC == vdc {
			n++
		}
	}
	return n
}

func groupOf(g *catalog.PlacementGroup, vms []string) *PlacementGroup {
	return &PlacementGroup{ID: g.Name, Name: g.ShortName(), Zone: g.Zone, Policy: PlacementPolicy(g.Policy), BestEffort: g.BestEffort, VMs: vms}
}

// List lists the placement groups of vdc by name, each with its
// VMs (a zone that does not answer lists none of its groups' VMs: the
// error of each such zone is returned by zone name).
func (s *PlacementGroups) List(ctx context.Context, vdc string) ([]*PlacementGroup, map[string]error, error) {
	all, err := catalog.List[*catalog.PlacementGroup](ctx, s.d.cfg.Catalog)
	if err != nil {
		return nil, nil, internal("reading the catalog failed", err)
	}
	all = slices.DeleteFunc(all, func(g *catalog.PlacementGroup) bool { return g.VDC != vdc })
	slices.SortFunc(all, func(a, b *catalog.PlacementGroup) int { return strings.Compare(a.Name, b.Name) })
	members := map[string][]string{} // group name -> VM ids
	errs := map[string]error{}
	zones := map[string]bool{}
	for _, g := range all {
		zones[g.Zone] = true
	}
	for zn := range zones {
		z, ok := s.d.find.zoneByName(ctx, zn)
		if !ok {
			errs[zn] = zoneDown(zn, errUnreachable)
			continue
		}
		byGroup, err := zoneGroupMembers(ctx, z, vdc)
		if err != nil {
			errs[zn] = zoneDown(zn, err)
			continue
		}
		for name, ms := range byGroup {
			for _, m := range ms {
				members[name] = append(members[name], m.ID)
			}
		}
	}
	out := make([]*PlacementGroup, 0, len(all))
	for _, g := range all {
		vms := append([]string{}, members[g.ShortName()]...)
		slices.Sort(vms)
		out = append(out, groupOf(g, vms))
	}
	return out, errs, nil
}

// get reads group id (its catalog name) of vdc; another VDC's or an
// unknown one is NOT_FOUND.
func (s *PlacementGroups) get(ctx context.Context, vdc, id string) (*catalog.PlacementGroup, error) {
	notFound := newError(KindNotFound, "no placement group %q", id)
	if v, _, _ := strings.Cut(id, "."); v != vdc {
		return nil, notFound
	}
	g, err := catalog.Get[*catalog.PlacementGroup](ctx, s.d.cfg.Catalog, id)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, internal("reading the catalog failed", err)
	}
	if g.VDC != vdc {
		return nil, notFound
	}
	return g, nil
}

// Delete deletes group id of vdc and returns it. CONFLICT
// while a VM is in it (or a create into it is in flight in this process);
// ZONE_UNAVAILABLE while its zone cannot be read; NOT_FOUND for a group
// vdc does not have.
func (s *PlacementGroups) Delete(ctx context.Context, vdc, id string) (*PlacementGroup, error) {
	g, err := s.get(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	z, ok := s.d.find.zoneByName(ctx, g.Zone)
	if !ok {
		return nil, zoneDown(g.Zone, errUnreachable)
	}
	ms, err := zoneGroupMembers(ctx, z, vdc)
	if err != nil {
		return nil, zoneDown(z.Name, err)
	}
	if in := ms[g.ShortName()]; len(in) > 0 {
		return nil, newError(KindConflict, "placement group %q has %d VMs (%s first); delete or move them first", g.ShortName(), len(in), in[0].ID)
	}
	if s.d.placer.groupHeld(g.Name) {
		return nil, newError(KindConflict, "a VM is being created in placement group %q", g.ShortName())
	}
	err = s.d.cfg.Catalog.Delete(ctx, catalog.KindPlacementGroup, g.Name, g.ResourceVersion)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return nil, newError(KindNotFound, "no placement group %q", id)
	case errors.Is(err, catalog.ErrConflict):
		return nil, newError(KindConflict, "the placement group changed meanwhile; try again")
	case err != nil:
		return nil, internal("deleting the placement group failed", err)
	}
	s.d.log.Info("placement group deleted", "vdc", vdc, "group", g.ShortName(), "zone", g.Zone)
	return groupOf(g, []string{}), nil
}

// OfVM returns the placement group VM id of vdc is in, nil
// when none (or when its group was deleted meanwhile); anything not a VM
// of vdc is NOT_FOUND.
func (s *PlacementGroups) OfVM(ctx context.Context, vdc, id string) (*PlacementGroup, error) {
	_, _, in, err := s.d.find.lookup(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	if in == nil || in.PlacementGroup == "" {
		return nil, nil
	}
	g, err := s.get(ctx, vdc, catalog.PlacementGroupName(vdc, in.PlacementGroup))
	var e *Error
	if errors.As(err, &e) && e.Kind == KindNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return groupOf(g, nil), nil
}

// createPlacementGroup checks the placement group a create names ("" for
// none): a group of vdc (NOT_FOUND otherwise) in zone (BAD_INPUT
// otherwise), on the field "placementGroup".
func createPlacementGroup(ctx context.Context, store catalog.Store, vdc, zone, name string) (*catalog.PlacementGroup, error) {
	if name == "" {
		return nil, nil
	}
	const field = "placementGroup"
	notFound := &Error{Kind: KindNotFound, Field: field, Message: fmt.Sprintf("no placement group %q", name)}
	if catalog.ValidateLabel(field, name) != nil {
		return nil, notFound
	}
	g, err := catalog.Get[*catalog.PlacementGroup](ctx, store, catalog.PlacementGroupName(vdc, name))
	if errors.Is(err, catalog.ErrNotFound) || (err == nil && g.VDC != vdc) {
		return nil, notFound
	}
	if err != nil {
		return nil, internal("reading the catalog failed", err)
	}
	if g.Zone != zone {
		return nil, badInput(field, "placement group %q is in zone %s, not in zone %s", name, g.Zone, zone)
	}
	return g, nil
}

// zoneGroupMembers lists vdc's VMs in z that are in a placement group, by
// the group's short name (the source of a move across zones left out).
func zoneGroupMembers(ctx context.Context, z Zone, vdc string) (map[string][]groupMember, error) {
	ms, err := zoneMembers(ctx, z, vdc)
	if err != nil {
		return nil, err
	}
	out := map[string][]groupMember{}
	for _, m := range ms {
		if m.PlacementGroup != "" {
			out[m.PlacementGroup] = append(out[m.PlacementGroup], groupMember{ID: m.ID, VMID: m.Ref.VMID, Node: m.Node})
		}
	}
	return out, nil
}

// groupPlace is what placement weighs of a VM's placement group: how many
// of its VMs each host holds (Proxmox's and this process's creates in
// flight).
type groupPlace struct {
	key, name string // catalog and short name
	policy    PlacementPolicy
	soft      bool
	count     map[string]int // node -> VMs of the group
	members   map[int]bool   // the VMIDs of its VMs Proxmox has
	// before are this process's creates in the group when its VMs were
	// read.
	before []*slot
}

// newGroupPlace reads where the VMs of group g are in z; before are this
// process's creates in the group, read first (countHeld counts them).
func newGroupPlace(ctx context.Context, z Zone, g *catalog.PlacementGroup, before []*slot) (*groupPlace, error) {
	ms, err := zoneGroupMembers(ctx, z, g.VDC)
	if err != nil {
		return nil, err
	}
	gp := &groupPlace{key: g.Name, name: g.ShortName(), policy: PlacementPolicy(g.Policy), soft: g.BestEffort,
		count: map[string]int{}, members: map[int]bool{}, before: before}
	for _, m := range ms[gp.name] {
		gp.count[m.Node]++
		gp.members[m.VMID] = true
	}
	return gp, nil
}

// countHeld counts the group's creates in flight, each once: those held
// now (held, of the zone) and those held when its VMs were read (one
// that ended in between has its guest recorded, or gone with its failed
// create), but for those whose guest was read as a VM of the group. The
// placer's lock is held.
func (gp *groupPlace) countHeld(held []*slot) {
	if gp == nil {
		return
	}
	seen := map[*slot]bool{}
	for _, s := range append(slices.Clone(gp.before), held...) {
		if s.group != gp.key || seen[s] {
			continue
		}
		seen[s] = true
		if s.vmid != 0 && gp.members[s.vmid] {
			continue
		}
		gp.count[s.node]++
	}
}

// apply weighs the group in placement's verdicts (candidates first): a
// hard SPREAD refuses the hosts holding one of its VMs; a soft SPREAD
// prefers the hosts with the fewest, PACK those with the most; within
// the same count the score decides as before. ok is whether a candidate
// is left.
func (gp *groupPlace) apply(vs []verdict) (out []verdict, ok bool) {
	if gp == nil {
		return vs, len(vs) > 0 && vs[0].Why == ""
	}
	out = slices.Clone(vs)
	for i, v := range out {
		if v.Why == "" && gp.policy == PolicySpread && !gp.soft && gp.count[v.Node] > 0 {
			out[i].Why = "holds a VM of the placement group (SPREAD)"
		}
	}
	slices.SortStableFunc(out, func(a, b verdict) int {
		if (a.Why == "") != (b.Why == "") {
			if a.Why == "" {
				return -1
			}
			return 1
		}
		if a.Why != "" {
			return strings.Compare(a.Node, b.Node)
		}
		ca, cb := gp.count[a.Node], gp.count[b.Node]
		if gp.policy == PolicyPack {
			ca, cb = -ca, -cb
		}
		if c := cmp.Compare(ca, cb); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Score, b.Score); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})
	return out, len(out) > 0 && out[0].Why == ""
}

// groupSlots returns the creates in flight in group key in zone.
func (p *placer) groupSlots(zone, key string) []*slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*slot
	for s := range p.held {
		if s.zone == zone && s.group == key {
			out = append(out, s)
		}
	}
	return out
}

// groupHeld reports whether a create in flight holds a slot in group key.
func (p *placer) groupHeld(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.held {
		if s.group == key {
			return true
		}
	}
	return false
}

// checkSpreadTarget refuses moving VM in (of vdc, its guest g) to node
// when that breaks its hard SPREAD group: another of the group's VMs is
// there (BAD_INPUT of "host").
func checkSpreadTarget(ctx context.Context, d *deps, z Zone, g pveapi.Resource, in *Intent, node string) error {
	if in == nil || in.PlacementGroup == "" {
		return nil
	}
	pg, err := catalog.Get[*catalog.PlacementGroup](ctx, d.cfg.Catalog, catalog.PlacementGroupName(in.VDC, in.PlacementGroup))
	if errors.Is(err, catalog.ErrNotFound) {
		return nil
	}
	if err != nil {
		return internal("reading the catalog failed", err)
	}
	if pg.Policy != catalog.PlacementSpread || pg.BestEffort {
		return nil
	}
	ms, err := zoneGroupMembers(ctx, z, in.VDC)
	if err != nil {
		return zoneDown(z.Name, err)
	}
	for _, m := range ms[in.PlacementGroup] {
		if m.Node == node && m.ID != (tenancy.VMRef{ZoneID: z.ID, VMID: g.VMID}).ID() {
			return badInput("host", "host %s holds VM %s of placement group %q (SPREAD): its VMs stay on distinct hosts", node, m.ID, in.PlacementGroup)
		}
	}
	for _, s := range d.placer.groupSlots(z.ID, pg.Name) {
		if s.node == node {
			return badInput("host", "a VM of placement group %q (SPREAD) is being created on host %s", in.PlacementGroup, node)
		}
	}
	return nil
}
