package graph

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
)

// Regions and dedicated zones: the zone policies of the catalog, read once
// per operation, decide which zones a caller sees and where a VDC may place
// anything.

type policiesRead struct {
	done bool
	m    map[string]*catalog.ZonePolicy
	err  error
}

// zonePolicies returns the zone policies by zone name, read once per
// operation.
func (r *Resolver) zonePolicies(ctx context.Context) (map[string]*catalog.ZonePolicy, error) {
	req := requestFrom(ctx)
	if req == nil {
		return catalog.ZonePolicies(ctx, r.Catalog)
	}
	req.mu.Lock()
	defer req.mu.Unlock()
	if !req.policies.done {
		req.policies.m, req.policies.err = catalog.ZonePolicies(ctx, r.Catalog)
		req.policies.done = req.policies.err == nil
	}
	if req.policies.err != nil {
		return nil, apierr.New(apierr.Internal, "the zone policies cannot be read")
	}
	return req.policies.m, nil
}

// sees reports whether the caller of ctx sees zone z: platform admins see
// every zone; anyone else the zones open to the request's VDC (without a
// VDC, the zones dedicated to none).
func sees(ctx context.Context, policies map[string]*catalog.ZonePolicy, z zones.Zone) bool {
	p := policies[z.Name]
	if p == nil || len(p.DedicatedTo) == 0 {
		return true
	}
	if pr, ok := auth.FromContext(ctx); ok && pr.PlatformAdmin {
		return true
	}
	s, ok := VDCScopeFrom(ctx)
	return ok && s.VDC != nil && p.Allows(s.VDC.Name)
}

// visibleZones returns the zones of zs the caller sees, of region when it
// is set (BAD_USER_INPUT on field for a region that is no DNS label).
func (r *Resolver) visibleZones(ctx context.Context, zs []zones.Zone, region *string, field string) ([]zones.Zone, error) {
	if region != nil {
		if err := catalog.ValidateLabel(field, *region); err != nil {
			return nil, apierr.From(err, "")
		}
	}
	policies, err := r.zonePolicies(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(slices.Clone(zs), func(z zones.Zone) bool {
		return !sees(ctx, policies, z) || (region != nil && regionOf(policies, z.Name) != *region)
	}), nil
}

// scopedZones returns the zones a list's filters name: the zone named zone
// (which the caller must see) or every zone, and of those only region's
// that the caller sees when region is set.
func (r *Resolver) scopedZones(ctx context.Context, zone, region *string, zoneField, regionField string) ([]zones.Zone, error) {
	zs, err := r.zonesOf(ctx, zone, zoneField)
	if err == nil && region != nil {
		zs, err = r.visibleZones(ctx, zs, region, regionField)
	}
	return zs, err
}

func regionOf(policies map[string]*catalog.ZonePolicy, zone string) string {
	if p := policies[zone]; p != nil {
		return p.Region
	}
	return ""
}

// placeable fails unless vdc may place resources in z (BAD_USER_INPUT on
// field, as for a zone that does not exist): a zone dedicated to other
// VDCs takes nothing of vdc, whoever asks.
func (r *Resolver) placeable(ctx context.Context, z zones.Zone, vdc, field string) error {
	policies, err := r.zonePolicies(ctx)
	if err != nil {
		return err
	}
	if p := policies[z.Name]; p != nil && !p.Allows(vdc) {
		return apierr.BadInput(field, "%s: there is no zone %q", field, z.Name)
	}
	return nil
}

// regions groups the zones the caller sees by region.
func (r *Resolver) regions(ctx context.Context) ([]*model.Region, error) {
	var all []zones.Zone
	if r.Zones != nil {
		all = r.Zones.Zones()
	}
	zs, err := r.visibleZones(ctx, all, nil, "")
	if err != nil {
		return nil, err
	}
	policies, _ := r.zonePolicies(ctx) // read by visibleZones
	byName := map[string]*model.Region{}
	var out []*model.Region
	for _, z := range zs {
		name := regionOf(policies, z.Name)
		if name == "" {
			continue
		}
		reg := byName[name]
		if reg == nil {
			reg = &model.Region{Name: name}
			byName[name] = reg
			out = append(out, reg)
		}
		reg.Zones = append(reg.Zones, zoneModel(z, r.agentTarget()))
	}
	slices.SortFunc(out, func(a, b *model.Region) int { return cmp.Compare(a.Name, b.Name) })
	for _, reg := range out {
		slices.SortFunc(reg.Zones, func(a, b *model.Zone) int { return cmp.Compare(a.Name, b.Name) })
	}
	return out, nil
}

// updateZone applies input to the policy of a known zone.
func (r *Resolver) updateZone(ctx context.Context, input model.UpdateZoneInput) (*model.Zone, error) {
	var z zones.Zone
	found := false
	if r.Zones != nil {
		for _, c := range r.Zones.Zones() {
			if c.Name == input.Name {
				z, found = c, true
			}
		}
	}
	if !found {
		return nil, apierr.BadInput("input.name", "input.name: there is no zone %q", input.Name)
	}
	for i, v := range input.DedicatedTo {
		if _, err := catalog.Get[*catalog.VDC](ctx, r.Catalog, v); err != nil {
			field := fmt.Sprintf("input.dedicatedTo[%d]", i)
			if errors.Is(err, catalog.ErrNotFound) {
				return nil, apierr.BadInput(field, "%s: there is no VDC %q", field, v)
			}
			return nil, fail(err)
		}
	}
	change := func(p *catalog.ZonePolicy) {
		set(&p.Region, input.Region)
		if input.DedicatedTo != nil {
			p.DedicatedTo = slices.Sorted(slices.Values(input.DedicatedTo))
		}
	}
	p, err := catalog.Get[*catalog.ZonePolicy](ctx, r.Catalog, input.Name)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		p = &catalog.ZonePolicy{ObjectMeta: catalog.ObjectMeta{Name: input.Name}}
		change(p)
		_, err = catalog.Create(ctx, r.Catalog, p)
	case err == nil:
		change(p)
		_, err = catalog.Update(ctx, r.Catalog, p)
	}
	if err != nil {
		return nil, fail(err)
	}
	if req := requestFrom(ctx); req != nil {
		req.mu.Lock()
		req.policies = policiesRead{} // read again: this operation changed them
		req.mu.Unlock()
	}
	return zoneModel(z, r.agentTarget()), nil
}

// zonePolicy returns the policy of zone m (nil when it has none).
func (r *Resolver) zonePolicy(ctx context.Context, m *model.Zone) (*catalog.ZonePolicy, error) {
	policies, err := r.zonePolicies(ctx)
	if err != nil {
		return nil, err
	}
	return policies[m.Name], nil
}
