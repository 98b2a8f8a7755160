package estate

import (
	"context"
	"fmt"
)

// ZoneName returns the name of the zone with the cluster identity id
// (loadbalancer.Fleet, gateways.Fleet).
func (s *Service) ZoneName(id string) (string, bool) {
	z, ok := s.Zone(id)
	return z.Name, ok
}

// ZoneID returns the cluster identity of the zone called name
// (loadbalancer.Fleet).
func (s *Service) ZoneID(name string) (string, bool) {
	z, ok := s.ZoneNamed(name)
	return z.ID, ok
}

// PoolVMs returns the VMIDs of the guests of Proxmox pool pool in the zone
// of id zoneID, templates left out, read within the zone timeout
// (loadbalancer.Fleet, gateways.Fleet: the backends and targets a tenant
// names must be its own VDC's guests).
func (s *Service) PoolVMs(ctx context.Context, zoneID, pool string) ([]int, error) {
	z, ok := s.Zone(zoneID)
	if !ok {
		return nil, fmt.Errorf("estate: pool %s: no zone %s", pool, zoneID)
	}
	rs, err := s.inv.NewSession().PoolGuests(ctx, z, pool)
	if err != nil {
		return nil, fmt.Errorf("estate: pool %s: %w", pool, err)
	}
	var out []int
	for _, r := range rs {
		if r.Template != 1 {
			out = append(out, r.VMID)
		}
	}
	return out, nil
}
