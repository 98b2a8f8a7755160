package orchestrator

import (
	"context"
	"log/slog"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/orchestrator/snippets"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// computeZones adapts the zone registry to the zones the VM lifecycle
// works in: the zones that have an online host, each with the registry's
// client (the agents' Proxy over the mesh). It lives here, at the wiring,
// so that package compute knows no mesh.
type computeZones struct{ r *fleet.Registry }

// NewComputeZones returns the zones of r as the orchestrator's compute
// service sees them (another replica's, in tests).
func NewComputeZones(r *fleet.Registry) compute.Zones { return computeZones{r} }

// Zones implements compute.Zones.
func (z computeZones) Zones(ctx context.Context) []compute.Zone {
	var out []compute.Zone
	for _, zz := range z.Known(ctx) {
		if zz.Client != nil {
			out = append(out, zz)
		}
	}
	return out
}

// Known implements compute.KnownZones: every zone of the registry, those
// without an online host without a client.
func (z computeZones) Known(context.Context) []compute.Zone {
	var out []compute.Zone
	for _, zz := range z.r.Zones() {
		m := compute.Zone{ID: zz.ID, Name: zz.Name}
		for _, h := range zz.Hosts {
			if h.Status == fleet.StatusOnline {
				m.Client = z.r.Client(zz.ID)
				break
			}
		}
		out = append(out, m)
	}
	return out
}

// Identified implements compute.IdentifiedZones: it waits (within ctx)
// until the registry knows the zone of every agent in the mesh.
func (z computeZones) Identified(ctx context.Context) error { return z.r.Identified(ctx) }

// NewSnippetWriter returns the snippet writer of the orchestrator's compute
// service: the agent of r on the snippet's node writes it.
func NewSnippetWriter(r *fleet.Registry) compute.SnippetWriter {
	return snippets.NewWriter(func(zoneID, node string) (agentv1.AgentServiceClient, bool) {
		c, _, ok := r.AgentOfNode(zoneID, node)
		return c, ok
	})
}

// NewVolumeUploader returns the uploader of the orchestrator's compute
// service: the agent of r on the upload's node forwards it to Proxmox,
// taking the bytes on its data listener when it has one (log: the
// warnings of uploads that fall back to the mesh).
func NewVolumeUploader(r *fleet.Registry, log *slog.Logger) compute.VolumeUploader {
	return snippets.NewUploader(func(zoneID, node string) (agentv1.AgentServiceClient, bool) {
		c, _, ok := r.AgentOfNode(zoneID, node)
		return c, ok
	}, log)
}
