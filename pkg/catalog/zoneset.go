package catalog

import (
	"context"
	"fmt"
	"slices"
)

// HasZone reports whether zoneID is in v's zone set.
func (v *VDC) HasZone(zoneID string) bool {
	_, ok := slices.BinarySearch(v.Status.Zones, zoneID)
	return ok
}

// AddZone adds zoneID to v's zone set (in memory) and reports whether it
// was not there yet.
func (v *VDC) AddZone(zoneID string) bool {
	i, ok := slices.BinarySearch(v.Status.Zones, zoneID)
	if ok || zoneID == "" {
		return false
	}
	v.Status.Zones = slices.Insert(v.Status.Zones, i, zoneID)
	return true
}

// RecordVDCZone adds zone zoneID to the zone set of VDC vdc before a
// resource of it is created there, with a conditional write (again on
// the version a concurrent writer left, so two replicas never lose each
// other's zones). A zone already in the set writes nothing. A VDC that is
// not there is ErrNotFound.
func RecordVDCZone(ctx context.Context, s Store, vdc, zoneID string) error {
	if _, err := Modify(ctx, s, vdc, func(v *VDC) bool { return v.AddZone(zoneID) }); err != nil {
		return fmt.Errorf("catalog: record zone of VDC %s: %w", vdc, err)
	}
	return nil
}

// CompleteVDCZones stores a rebuilt zone set of VDC vdc: the zones found
// (by asking every zone) joined with those recorded meanwhile, marked
// complete, with a conditional write (again on a conflict). It returns the
// VDC as written.
func CompleteVDCZones(ctx context.Context, s Store, vdc string, found []string) (*VDC, error) {
	v, err := Modify(ctx, s, vdc, func(v *VDC) bool {
		changed := !v.Status.ZonesComplete
		for _, z := range found {
			changed = v.AddZone(z) || changed
		}
		v.Status.ZonesComplete = true
		return changed
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: complete zones of VDC %s: %w", vdc, err)
	}
	return v, nil
}
