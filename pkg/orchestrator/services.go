package orchestrator

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/edge/edgesync"
	"github.com/flexplane/flexplane/pkg/edge/gateways"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/inventory"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbsync"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/securitygroup"
	"github.com/flexplane/flexplane/pkg/securitygroup/sgsync"
	"github.com/flexplane/flexplane/pkg/sshkey"
	"github.com/flexplane/flexplane/pkg/tenantkube"
	"github.com/flexplane/flexplane/pkg/vdc"
)

// services are the capability services the GraphQL resolver holds, each
// built once over the fleet registry and the catalog.
type services struct {
	networks  *network.Service
	vdcs      *vdc.Service
	balancers *loadbalancer.Service // nil when the catalog keeps no secrets
	gateways  *gateways.Service
	estate    *estate.Service
	groups    *securitygroup.Service
	sshKeys   *sshkey.Service
}

// newServices builds the capability services.
func newServices(registry *fleet.Registry, store catalog.Store, vms *compute.Service, kube *tenantkube.Service, lbs *lbsync.Syncer, edge *edgesync.Syncer,
	groups *sgsync.Syncer, zoneTimeout time.Duration, log *slog.Logger) (services, error) {
	var s services
	inv, err := inventory.New(inventory.Config{Zones: registry, Timeout: cmp.Or(zoneTimeout, graph.DefaultZoneTimeout)})
	if err != nil {
		return services{}, fmt.Errorf("orchestrator: %w", err)
	}
	s.estate = estate.New(estate.Config{Zones: registry, Catalog: store, Placement: vms, Inventory: inv, Timeout: zoneTimeout,
		Logger: log.With("component", "estate")})
	if secrets, ok := store.(catalog.SecretStore); ok {
		s.balancers = &loadbalancer.Service{Store: store, Secrets: secrets, Fleet: s.estate}
		if lbs != nil {
			s.balancers.Sync = lbs
		}
	}
	gcfg := gateways.Config{Store: store, Fleet: s.estate, Logger: log.With("component", "gateways")}
	if edge != nil {
		gcfg.Running = edge
	}
	if s.gateways, err = gateways.New(gcfg); err != nil {
		return services{}, fmt.Errorf("orchestrator: %w", err)
	}
	if s.sshKeys, err = sshkey.New(sshkey.Config{Catalog: store}); err != nil {
		return services{}, fmt.Errorf("orchestrator: %w", err)
	}
	if s.groups, err = securitygroup.New(securitygroup.Config{Store: store, VMs: vms, State: groups, Changed: groups.Kick,
		Firewall: groups, Logger: log.With("component", "securitygroup")}); err != nil {
		return services{}, fmt.Errorf("orchestrator: %w", err)
	}
	if s.networks, err = network.NewService(registry, zoneSet{store}); err != nil {
		return services{}, fmt.Errorf("orchestrator: %w", err)
	}
	vcfg := vdc.Config{Store: store, Zones: vdcZones{registry}, Networks: s.networks, Pools: vdcPools{registry},
		Ledger: vms.Quota(), ZoneTimeout: zoneTimeout, Logger: log.With("component", "vdc"), Tokens: auth.ServiceAccountTokens{}}
	if kube != nil {
		vcfg.Clusters = kube
	}
	if vms != nil {
		vcfg.Backups = vdcBackups{vms.Disks().Backups()}
	}
	if s.vdcs, err = vdc.New(vcfg); err != nil {
		return services{}, fmt.Errorf("orchestrator: %w", err)
	}
	return s, nil
}

// zoneSet records a zone in a VDC's zone set in the catalog.
type zoneSet struct{ store catalog.Store }

func (z zoneSet) Record(ctx context.Context, vdc, zoneID string) error {
	return catalog.RecordVDCZone(ctx, z.store, vdc, zoneID)
}

// vdcBackups are the compute service's backups as the VDC lifecycle sees
// them.
type vdcBackups struct{ b *compute.Backups }

// VDCBackups implements vdc.Backups: the VDC's archives, and its backups
// still being written (failed ones are no archives).
func (v vdcBackups) VDCBackups(ctx context.Context, vdc string) ([]string, int, error) {
	list, err := v.b.List(ctx, vdc, "")
	if err != nil {
		return nil, 0, err
	}
	var ids []string
	running := 0
	for _, b := range list {
		switch b.Status {
		case compute.BackupSucceeded:
			ids = append(ids, b.ID)
		case compute.BackupRunning:
			running++
		}
	}
	return ids, running, nil
}

// DeleteBackup implements vdc.Backups.
func (v vdcBackups) DeleteBackup(ctx context.Context, vdc, id string) error {
	return v.b.Delete(ctx, vdc, id)
}

// UsedBytes implements vdc.Backups: what the VDC's archives use of its
// backupGiB quota.
func (v vdcBackups) UsedBytes(ctx context.Context, vdc string) (int64, error) {
	return v.b.UsedBytes(ctx, vdc)
}

// vdcZones are the registry's zones as the VDC lifecycle sees them.
type vdcZones struct{ r *fleet.Registry }

// Zones implements vdc.Zones: every zone of the registry.
func (z vdcZones) Zones() []vdc.Zone {
	var out []vdc.Zone
	for _, zz := range z.r.Zones() {
		out = append(out, vdc.Zone{ID: zz.ID, Name: zz.Name})
	}
	return out
}

// vdcPools removes a VDC's Proxmox pool through the zone's client.
type vdcPools struct{ r *fleet.Registry }

// RemovePool implements vdc.Pools.
func (p vdcPools) RemovePool(ctx context.Context, zoneID, vdc string) error {
	return compute.RemovePool(ctx, p.r.Client(zoneID), vdc)
}
