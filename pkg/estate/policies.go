package estate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/support/fault"
)

// Regions and dedicated zones: the zone policies of the catalog, read once
// per Read, decide which zones a caller sees and where a VDC may place
// anything.

// Viewer is who reads: platform admins see every zone; anyone else the
// zones open to their VDC (without one, the zones dedicated to none).
type Viewer struct {
	PlatformAdmin bool
	// VDC is the VDC the request works in ("" for none).
	VDC string
}

// Policies returns the zone policies by zone name, read once per Read; a
// failed read is an Internal *fault.Error (and is tried again by the next
// call).
func (rd *Read) Policies(ctx context.Context) (map[string]*catalog.ZonePolicy, error) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.read {
		return rd.policies, nil
	}
	if rd.s.cfg.Catalog == nil {
		rd.policies, rd.read = map[string]*catalog.ZonePolicy{}, true
		return rd.policies, nil
	}
	ps, err := catalog.ZonePolicies(ctx, rd.s.cfg.Catalog)
	if err != nil {
		rd.s.cfg.Logger.Warn("estate: zone policies", "err", err)
		return nil, &fault.Error{Kind: fault.Internal, Message: "the zone policies cannot be read", Cause: err}
	}
	rd.policies, rd.read = ps, true
	return ps, nil
}

// Policy returns the policy of the zone called name (nil when it has none).
func (rd *Read) Policy(ctx context.Context, name string) (*catalog.ZonePolicy, error) {
	ps, err := rd.Policies(ctx)
	if err != nil {
		return nil, err
	}
	return ps[name], nil
}

func (v Viewer) sees(policies map[string]*catalog.ZonePolicy, z fleet.Zone) bool {
	p := policies[z.Name]
	return p == nil || len(p.DedicatedTo) == 0 || v.PlatformAdmin || (v.VDC != "" && p.Allows(v.VDC))
}

func regionOf(policies map[string]*catalog.ZonePolicy, zone string) string {
	if p := policies[zone]; p != nil {
		return p.Region
	}
	return ""
}

// Visible returns the zones of zs that v sees, of region when it is set (a
// *catalog.ValidationError on field for a region that is no DNS label).
func (rd *Read) Visible(ctx context.Context, v Viewer, zs []fleet.Zone, region *string, field string) ([]fleet.Zone, error) {
	if region != nil {
		if err := catalog.ValidateLabel(field, *region); err != nil {
			return nil, err
		}
	}
	policies, err := rd.Policies(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(slices.Clone(zs), func(z fleet.Zone) bool {
		return !v.sees(policies, z) || (region != nil && regionOf(policies, z.Name) != *region)
	}), nil
}

// Named returns the zone called name if v sees it; otherwise an
// BadInput *fault.Error on field, as for a zone that does not exist (a
// zone dedicated to other VDCs is not disclosed), or a ZoneUnavailable one
// while the zones are not all known yet.
func (rd *Read) Named(ctx context.Context, v Viewer, name, field string) (fleet.Zone, error) {
	all, known := rd.s.Known(ctx)
	for _, z := range all {
		if z.Name != name {
			continue
		}
		vis, err := rd.Visible(ctx, v, []fleet.Zone{z}, nil, "")
		if err != nil {
			return fleet.Zone{}, err
		}
		if len(vis) == 1 {
			return z, nil
		}
	}
	if fe := (*fault.Error)(nil); errors.As(known, &fe) {
		return fleet.Zone{}, &fault.Error{Kind: fe.Kind, Zone: name, Message: fmt.Sprintf("zone %s is unavailable: %s", name, fe.Message), Cause: fe.Cause}
	}
	return fleet.Zone{}, fault.Invalid(field, "there is no zone %q", name)
}

// Placeable fails with a BadInput *fault.Error on field unless vdc may place
// resources in z (as for a zone that does not exist): a zone dedicated to
// other VDCs takes nothing of vdc, whoever asks.
func (rd *Read) Placeable(ctx context.Context, z fleet.Zone, vdc, field string) error {
	p, err := rd.Policy(ctx, z.Name)
	if err != nil {
		return err
	}
	if !catalog.PlacementAllowed(p, vdc) {
		return fault.Invalid(field, "there is no zone %q", z.Name)
	}
	return nil
}

// Region is a region and its zones that a viewer sees, by name.
type Region struct {
	Name  string
	Zones []fleet.Zone
}

// Regions groups the zones v sees by region, by name.
func (rd *Read) Regions(ctx context.Context, v Viewer) ([]Region, error) {
	zs, err := rd.Visible(ctx, v, rd.s.Zones(), nil, "")
	if err != nil {
		return nil, err
	}
	policies, _ := rd.Policies(ctx) // read by Visible
	var out []Region
	for _, z := range zs {
		name := regionOf(policies, z.Name)
		if name == "" {
			continue
		}
		i := slices.IndexFunc(out, func(r Region) bool { return r.Name == name })
		if i < 0 {
			out = append(out, Region{Name: name})
			i = len(out) - 1
		}
		out[i].Zones = append(out[i].Zones, z)
	}
	slices.SortFunc(out, func(a, b Region) int { return cmp.Compare(a.Name, b.Name) })
	for _, reg := range out {
		slices.SortFunc(reg.Zones, func(a, b fleet.Zone) int { return cmp.Compare(a.Name, b.Name) })
	}
	return out, nil
}

// PolicyChange is a change of a zone's policy; nil fields keep theirs.
type PolicyChange struct {
	// Zone names the zone.
	Zone string
	// Region moves the zone to a region ("" for none).
	Region *string
	// DedicatedTo, when not nil, dedicates the zone to these VDCs (empty:
	// to none).
	DedicatedTo []string
}

// SetPolicy applies c to the policy of a known zone and returns the zone:
// a BadInput *fault.Error on "name" or "dedicatedTo[i]" for a zone or VDC that does
// not exist; catalog errors otherwise. The Read reads the policies again
// afterwards.
func (rd *Read) SetPolicy(ctx context.Context, c PolicyChange) (fleet.Zone, error) {
	z, ok := rd.s.ZoneNamed(c.Zone)
	if !ok {
		return fleet.Zone{}, fault.Invalid("name", "there is no zone %q", c.Zone)
	}
	store := rd.s.cfg.Catalog
	for i, v := range c.DedicatedTo {
		if _, err := catalog.Get[*catalog.VDC](ctx, store, v); err != nil {
			if errors.Is(err, catalog.ErrNotFound) {
				return fleet.Zone{}, fault.Invalid(fmt.Sprintf("dedicatedTo[%d]", i), "there is no VDC %q", v)
			}
			return fleet.Zone{}, fmt.Errorf("estate: set zone policy: %w", err)
		}
	}
	change := func(p *catalog.ZonePolicy) {
		if c.Region != nil {
			p.Region = *c.Region
		}
		if c.DedicatedTo != nil {
			p.DedicatedTo = slices.Sorted(slices.Values(c.DedicatedTo))
		}
	}
	p, err := catalog.Get[*catalog.ZonePolicy](ctx, store, c.Zone)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		p = &catalog.ZonePolicy{ObjectMeta: catalog.ObjectMeta{Name: c.Zone}}
		change(p)
		_, err = catalog.Create(ctx, store, p)
	case err == nil:
		change(p)
		_, err = catalog.Update(ctx, store, p)
	}
	if err != nil {
		return fleet.Zone{}, fmt.Errorf("estate: set zone policy: %w", err)
	}
	rd.mu.Lock()
	rd.policies, rd.read = nil, false // read again: this operation changed them
	rd.mu.Unlock()
	return z, nil
}

// MigrationTarget is a zone a VM of a VDC can move to: its online hosts
// and the VDC's networks there (nil when the zone did not answer).
type MigrationTarget struct {
	Zone     fleet.Zone
	Hosts    []string
	Networks []network.Network
}

// MigrationTargets lists the zones a VM of vdc in zone from can move to:
// every other zone vdc may use, by name, each with its online hosts and
// vdc's networks there; the zones that fail are returned beside (their
// targets without networks).
func (rd *Read) MigrationTargets(ctx context.Context, vdc, from string) ([]MigrationTarget, []*ZoneError, error) {
	policies, err := rd.Policies(ctx)
	if err != nil {
		return nil, nil, err
	}
	var zs []fleet.Zone
	for _, z := range rd.s.Zones() {
		if z.ID != from && catalog.PlacementAllowed(policies[z.Name], vdc) {
			zs = append(zs, z)
		}
	}
	slices.SortFunc(zs, func(a, b fleet.Zone) int { return cmp.Compare(a.Name, b.Name) })
	nets, zerrs := rd.s.NetworksOf(ctx, zs, vdc)
	out := make([]MigrationTarget, 0, len(zs))
	for _, z := range zs {
		t := MigrationTarget{Zone: z, Hosts: OnlineHosts(z, "")}
		if ns, ok := nets[z.ID]; ok {
			t.Networks = slices.SortedFunc(slices.Values(ns), func(a, b network.Network) int {
				return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.VNet, b.VNet))
			})
		}
		out = append(out, t)
	}
	return out, zerrs, nil
}

// OnlineHosts returns the names of z's online hosts other than except,
// sorted.
func OnlineHosts(z fleet.Zone, except string) []string {
	out := []string{}
	for _, h := range z.Hosts {
		if h.Status == fleet.StatusOnline && h.Node != except {
			out = append(out, h.Node)
		}
	}
	slices.Sort(out)
	return out
}
