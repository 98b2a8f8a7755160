package graph

import (
	"context"
	"errors"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
)

// Regions and dedicated zones: the estate service's zone policies decide
// which zones a caller sees and where a VDC may place anything.

// visibleZones returns the zones of zs the caller sees, of region when it
// is set (BAD_USER_INPUT on field for a region that is no DNS label).
func (r *Resolver) visibleZones(ctx context.Context, zs []zones.Zone, region *string, field string) ([]zones.Zone, error) {
	vis, err := r.session(ctx).Visible(ctx, viewer(ctx), zs, region, field)
	if err != nil {
		return nil, estateError(err)
	}
	return vis, nil
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

// placeable fails unless vdc may place resources in z (BAD_USER_INPUT on
// field, as for a zone that does not exist).
func (r *Resolver) placeable(ctx context.Context, z zones.Zone, vdc, field string) error {
	if err := r.session(ctx).Placeable(ctx, z, vdc, field); err != nil {
		return estateError(err)
	}
	return nil
}

// regions groups the zones the caller sees by region.
func (r *Resolver) regions(ctx context.Context) ([]*model.Region, error) {
	regs, err := r.session(ctx).Regions(ctx, viewer(ctx))
	if err != nil {
		return nil, estateError(err)
	}
	out := make([]*model.Region, 0, len(regs))
	for _, reg := range regs {
		m := &model.Region{Name: reg.Name}
		for _, z := range reg.Zones {
			m.Zones = append(m.Zones, zoneModel(z, r.agentTarget()))
		}
		out = append(out, m)
	}
	return out, nil
}

// updateZone applies input to the policy of a known zone.
func (r *Resolver) updateZone(ctx context.Context, input model.UpdateZoneInput) (*model.Zone, error) {
	z, err := r.session(ctx).SetPolicy(ctx, estate.PolicyChange{Zone: input.Name, Region: input.Region, DedicatedTo: input.DedicatedTo})
	if err != nil {
		var ie *estate.InputError
		if errors.As(err, &ie) {
			ie.Field = "input." + ie.Field
			return nil, estateError(ie)
		}
		return nil, fail(err)
	}
	return zoneModel(z, r.agentTarget()), nil
}

// zonePolicy returns the policy of zone m (nil when it has none).
func (r *Resolver) zonePolicy(ctx context.Context, m *model.Zone) (*catalog.ZonePolicy, error) {
	p, err := r.session(ctx).Policy(ctx, m.Name)
	if err != nil {
		return nil, estateError(err)
	}
	return p, nil
}
