package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/vdc"
)

// services are the capability services the GraphQL resolver holds, each
// built once over the fleet registry and the catalog.
type services struct {
	networks *network.Service
	vdcs     *vdc.Service
}

// newServices builds the capability services.
func newServices(registry *zones.Registry, store catalog.Store, vms *compute.Service, zoneTimeout time.Duration, log *slog.Logger) (services, error) {
	var s services
	var err error
	if s.networks, err = network.NewService(registry); err != nil {
		return services{}, fmt.Errorf("orchestrator: %w", err)
	}
	if s.vdcs, err = vdc.New(vdc.Config{Store: store, Zones: vdcZones{registry}, Networks: s.networks, Pools: vdcPools{registry},
		Ledger: vms.Quota(), ZoneTimeout: zoneTimeout, Logger: log.With("component", "vdc")}); err != nil {
		return services{}, fmt.Errorf("orchestrator: %w", err)
	}
	return s, nil
}

// vdcZones are the registry's zones as the VDC lifecycle sees them.
type vdcZones struct{ r *zones.Registry }

// Zones implements vdc.Zones: every zone of the registry.
func (z vdcZones) Zones() []vdc.Zone {
	var out []vdc.Zone
	for _, zz := range z.r.Zones() {
		out = append(out, vdc.Zone{ID: zz.ID, Name: zz.Name})
	}
	return out
}

// vdcPools removes a VDC's Proxmox pool through the zone's client.
type vdcPools struct{ r *zones.Registry }

// RemovePool implements vdc.Pools.
func (p vdcPools) RemovePool(ctx context.Context, zoneID, vdc string) error {
	return compute.RemovePool(ctx, p.r.Client(zoneID), vdc)
}
