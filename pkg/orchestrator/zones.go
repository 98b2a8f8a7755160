package orchestrator

import (
	"context"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
)

// computeZones adapts the zone registry to the zones the VM lifecycle
// works in: the zones that have an online host, each with the registry's
// client (the agents' Proxy over the mesh). It lives here, at the wiring,
// so that package compute knows no mesh.
type computeZones struct{ r *zones.Registry }

// Zones implements compute.Zones.
func (z computeZones) Zones(context.Context) []compute.Zone {
	var out []compute.Zone
	for _, zz := range z.r.Zones() {
		for _, h := range zz.Hosts {
			if h.Status == zones.StatusOnline {
				out = append(out, compute.Zone{ID: zz.ID, Name: zz.Name, Client: z.r.Client(zz.ID)})
				break
			}
		}
	}
	return out
}
