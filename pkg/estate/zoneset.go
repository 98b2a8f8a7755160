package estate

import (
	"context"
	"slices"
	"sync"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Following narrows zs to the zones vdc has resources in: its zone set
// (catalog.VDCStatus Zones). While the set is not complete (a VDC older
// than it, or one whose set was lost) it is rebuilt first, once per Read,
// by asking every zone of the registry for the VDC's guests and networks,
// and stored; should a zone not answer then, nothing is stored and zs is
// returned whole, so a read never misses a zone.
func (rd *Read) Following(ctx context.Context, vdc *catalog.VDC, zs []fleet.Zone) []fleet.Zone {
	set, ok := rd.zoneSet(ctx, vdc)
	if !ok {
		return zs
	}
	return slices.DeleteFunc(slices.Clone(zs), func(z fleet.Zone) bool {
		_, in := slices.BinarySearch(set, z.ID)
		return !in
	})
}

// zoneSet returns the complete zone set of vdc, rebuilding it when it is
// not complete; false when it cannot be told.
func (rd *Read) zoneSet(ctx context.Context, vdc *catalog.VDC) ([]string, bool) {
	if vdc.Status.ZonesComplete {
		return vdc.Status.Zones, true
	}
	v, err := rd.Memo("zoneset/"+vdc.Name, func() (any, error) { return rd.rebuildZoneSet(ctx, vdc) })
	if err != nil || v == nil {
		return nil, false
	}
	return v.([]string), true
}

// rebuildZoneSet asks every zone whether vdc has guests (its pool) or
// networks there, adds the zones of its creates in flight, and stores the
// set found as complete. It returns nil when a zone does not answer or the
// set cannot be stored.
func (rd *Read) rebuildZoneSet(ctx context.Context, vdc *catalog.VDC) (any, error) {
	if rd.s.cfg.Catalog == nil {
		return nil, nil
	}
	var (
		mu    sync.Mutex
		found []string
	)
	for _, r := range vdc.Status.Reservations {
		found = append(found, r.Zone)
	}
	zerrs := rd.s.each(ctx, rd.s.Zones(), func(ctx context.Context, z fleet.Zone, c *proxmox.Client) error {
		rs, err := rd.poolGuests(ctx, z, tenancy.PoolID(vdc.Name))
		if err != nil {
			return err
		}
		has := len(rs) > 0
		if !has {
			nets, err := network.List(ctx, c, vdc.Name)
			if err != nil {
				return err
			}
			has = len(nets) > 0
		}
		if has {
			mu.Lock()
			found = append(found, z.ID)
			mu.Unlock()
		}
		return nil
	})
	if len(zerrs) > 0 {
		rd.s.cfg.Logger.Warn("estate: zone set not rebuilt: a zone does not answer", "vdc", vdc.Name, "zone", zerrs[0].Zone.Name, "err", zerrs[0].Err)
		return nil, nil
	}
	v, err := catalog.CompleteVDCZones(ctx, rd.s.cfg.Catalog, vdc.Name, found)
	if err != nil {
		rd.s.cfg.Logger.Warn("estate: zone set not stored", "vdc", vdc.Name, "err", err)
		return nil, nil
	}
	rd.s.cfg.Logger.Info("estate: zone set rebuilt", "vdc", vdc.Name, "zones", len(v.Status.Zones))
	return v.Status.Zones, nil
}

// VDCNetworks lists the networks of vdc in the zones of zs it has
// resources in (Following), by zone ID.
func (rd *Read) VDCNetworks(ctx context.Context, vdc *catalog.VDC, zs []fleet.Zone) (map[string][]network.Network, []*ZoneError) {
	return rd.s.NetworksOf(ctx, rd.Following(ctx, vdc, zs), vdc.Name)
}
