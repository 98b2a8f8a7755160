package compute

import (
	"context"

	"github.com/flexplane/flexplane/pkg/mesh/zones"
)

// RegistryZones is the zones of a zone registry that have an online host,
// with the registry's client (the agents' Proxy over the mesh) for each.
func RegistryZones(r *zones.Registry) Zones { return registryZones{r} }

type registryZones struct{ r *zones.Registry }

func (z registryZones) Zones(context.Context) []Zone {
	var out []Zone
	for _, zz := range z.r.Zones() {
		for _, h := range zz.Hosts {
			if h.Status == zones.StatusOnline {
				out = append(out, Zone{ID: zz.ID, Name: zz.Name, Client: z.r.Client(zz.ID)})
				break
			}
		}
	}
	return out
}
