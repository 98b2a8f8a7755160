package graph

import (
	"context"
	"errors"

	"github.com/99designs/gqlgen/graphql"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Helpers of the inventory and network resolvers: the per-request state,
// partial answers and the translation of the estate into the API's types.

// session returns the operation's view of the estate.
func (r *Resolver) session(ctx context.Context) *estate.Read { return r.Estate.ReadOf(ctx) }

// viewer is who reads the estate: the caller and the request's VDC.
func viewer(ctx context.Context) estate.Viewer {
	var v estate.Viewer
	if p, ok := auth.FromContext(ctx); ok {
		v.PlatformAdmin = p.PlatformAdmin
	}
	if s, ok := VDCScopeFrom(ctx); ok && s.VDC != nil {
		v.VDC = s.VDC.Name
	}
	return v
}

// zonesOf returns the zones, or the one named name (BAD_USER_INPUT on
// field when there is none, or the caller does not see it). While the
// zones are not all known yet (right after a restart), all zones come with
// a ZONE_UNAVAILABLE error, and a zone that is not known yet is
// ZONE_UNAVAILABLE, not BAD_USER_INPUT.
func (r *Resolver) zonesOf(ctx context.Context, name *string, field string) ([]fleet.Zone, error) {
	if name == nil {
		all, err := r.Estate.Known(ctx)
		if err != nil && r.firstReport(ctx, "") {
			graphql.AddError(ctx, apierr.From(err, ""))
		}
		return all, nil
	}
	z, err := r.session(ctx).Named(ctx, viewer(ctx), *name, field)
	if err != nil {
		return nil, apierr.From(err, "")
	}
	return []fleet.Zone{z}, nil
}

// zoneNamed is the zone named name, or a stand-in of that name and id
// while the registry does not know it.
func (r *Resolver) zoneNamed(name string) *model.Zone {
	if z, ok := r.Estate.ZoneNamed(name); ok {
		return zoneModel(z, r.agentTarget())
	}
	return &model.Zone{ID: name, Name: name}
}

// zoneByID returns the zone with the cluster identity id.
func (r *Resolver) zoneByID(id string) (fleet.Zone, bool) { return r.Estate.Zone(id) }

// firstReport reports whether the operation has not reported zone id
// unavailable yet ("" stands for the zones not known yet), and records it.
func (r *Resolver) firstReport(ctx context.Context, id string) bool {
	return r.session(ctx).FirstReport(id)
}

// zoneDown adds one ZONE_UNAVAILABLE error per zone and operation, and
// logs the cause.
func (r *Resolver) zoneDown(ctx context.Context, z fleet.Zone, err error) {
	if !r.firstReport(ctx, z.ID) {
		return
	}
	r.Logger.Warn("graphql: zone unavailable", "zone", z.Name, "zone_id", z.ID, "err", err)
	graphql.AddError(ctx, apierr.ZoneDown(z.Name, err))
}

// reportDown reports the zones of a partial answer unavailable and says
// whether err was one; other errors are left to the caller.
func (r *Resolver) reportDown(ctx context.Context, err error, more ...*estate.ZoneError) bool {
	for _, ze := range more {
		r.zoneDown(ctx, ze.Zone, ze.Err)
	}
	var ze *estate.ZoneError
	if errors.As(err, &ze) {
		r.zoneDown(ctx, ze.Zone, ze.Err)
		return true
	}
	return false
}

func zoneModel(z fleet.Zone, target agentTarget) *model.Zone {
	m := &model.Zone{ID: z.ID, Name: z.Name, Standalone: z.Standalone, Status: model.ZoneStatus(estate.StatusOf(z))}
	for _, h := range z.Hosts {
		m.Hosts = append(m.Hosts, hostModel(m, h, target))
	}
	return m
}

func hostModel(zm *model.Zone, h fleet.Host, target agentTarget) *model.Host {
	m := &model.Host{
		ID:              tenancy.HostRef{ZoneID: zm.ID, Node: h.Node}.ID(),
		Name:            h.Node,
		Status:          model.HostStatusOnline,
		Zone:            zm,
		AgentVersion:    ptr(h.AgentVersion),
		ProxmoxVersion:  ptr(h.ProxmoxVersion),
		UpdateAvailable: ptr(target.UpdateAvailable(h.AgentVersion, h.Platform)),
		Update:          hostUpdateModel(h.Update),
	}
	if down, why := estate.HostDown(h); down {
		m.Status, m.StatusDetail = model.HostStatusOffline, &why
	}
	return m
}

func ptr[T any](v T) *T { return &v }

func vmModel(zm *model.Zone, g estate.Guest) *model.VM {
	m := &model.VM{ID: g.ID, Place: g.Ref, Name: g.Name, Status: model.VMStatus(g.Status), Zone: zm, Vcpus: g.VCPUs,
		MemoryMiB: g.MemoryMiB, DiskGiB: g.DiskGiB, Uptime: g.Uptime, CPUUsage: g.CPUUsage, MemoryUsedMiB: g.MemoryUsedMiB,
		HighAvailability: g.HighAvailability}
	for _, h := range zm.Hosts {
		if h.Name == g.Node {
			m.Host = h
		}
	}
	return m
}

// vmModels renders guests, building each zone's model once.
func (r *Resolver) vmModels(gs []estate.Guest) []*model.VM {
	zms := map[string]*model.Zone{}
	out := make([]*model.VM, 0, len(gs))
	for _, g := range gs {
		zm := zms[g.Ref.ZoneID]
		if zm == nil {
			z, _ := r.zoneByID(g.Ref.ZoneID)
			zm = zoneModel(z, r.agentTarget())
			zms[g.Ref.ZoneID] = zm
		}
		out = append(out, vmModel(zm, g))
	}
	return out
}

// hostFigures returns what Proxmox says of host h now; ok is false when
// it cannot be read (its zone is reported) or the host is not online.
func (r *Resolver) hostFigures(ctx context.Context, h *model.Host) (estate.HostFigures, bool) {
	ref, err := tenancy.ParseHostID(h.ID)
	if err != nil {
		return estate.HostFigures{}, false
	}
	f, ok, err := r.session(ctx).Host(ctx, ref.ZoneID, ref.Node)
	r.reportDown(ctx, err)
	return f, ok
}

// vmNotFound is the one answer for a VM id that is malformed, forged, of
// another VDC or gone.
func vmNotFound() error { return apierr.New(apierr.NotFound, "VM not found") }

// Enrollment keys.

func keysUnavailable() error {
	return apierr.New(apierr.NotFound, "enrollment keys are not managed by this orchestrator")
}

// Networks.

func networkModel(zm *model.Zone, n network.Network, zoneID string) *model.Network {
	m := &model.Network{
		ID:   tenancy.NetworkRef{ZoneID: zoneID, VNet: n.VNet}.ID(),
		Name: n.Name,
		Zone: zm,
		Vnet: n.VNet,
	}
	if n.CIDR.IsValid() {
		m.Cidr = n.CIDR.String()
	}
	if n.Gateway.IsValid() {
		m.Gateway = n.Gateway.String()
	}
	return m
}

// zoneError is err, or ZONE_UNAVAILABLE when z's agent cannot be reached
// or did not answer in time.
func zoneError(z fleet.Zone, err error) error {
	if errors.Is(err, fleet.ErrNoAgent) || errors.Is(err, context.DeadlineExceeded) {
		return apierr.ZoneDown(z.Name, err)
	}
	return err
}
