package graph

import (
	"context"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
)

// Regions and dedicated zones: the estate service's zone policies decide
// which zones a caller sees and where a VDC may place anything.

// visibleZones returns the zones of zs the caller sees, of region when it
// is set (BAD_USER_INPUT on field for a region that is no DNS label).
func (r *Resolver) visibleZones(ctx context.Context, zs []fleet.Zone, region *string, field string) ([]fleet.Zone, error) {
	vis, err := r.session(ctx).Visible(ctx, viewer(ctx), zs, region, field)
	if err != nil {
		return nil, apierr.From(err, "")
	}
	return vis, nil
}

// scopedZones returns the zones a list's filters name: the zone named zone
// (which the caller must see) or every zone, and of those only region's
// that the caller sees when region is set.
func (r *Resolver) scopedZones(ctx context.Context, zone, region *string, zoneField, regionField string) ([]fleet.Zone, error) {
	zs, err := r.zonesOf(ctx, zone, zoneField)
	if err == nil && region != nil {
		zs, err = r.visibleZones(ctx, zs, region, regionField)
	}
	return zs, err
}

// placeable fails unless vdc may place resources in z (BAD_USER_INPUT on
// field, as for a zone that does not exist).
func (r *Resolver) placeable(ctx context.Context, z fleet.Zone, vdc, field string) error {
	if err := r.session(ctx).Placeable(ctx, z, vdc, field); err != nil {
		return apierr.From(err, "")
	}
	return nil
}

// zonePolicy returns the policy of zone m (nil when it has none).
func (r *Resolver) zonePolicy(ctx context.Context, m *model.Zone) (*catalog.ZonePolicy, error) {
	p, err := r.session(ctx).Policy(ctx, m.Name)
	if err != nil {
		return nil, apierr.From(err, "")
	}
	return p, nil
}
