package compute

import (
	"context"

	"github.com/flexplane/flexplane/pkg/mesh/zones"
)

// RegistryZones is the zones of a zone registry that have an online host,
// with the registry's client (the agents' Proxy over the mesh) for each; it
// is KnownZones (the zones without one are known too).
func RegistryZones(r *zones.Registry) Zones { return registryZones{r} }

type registryZones struct{ r *zones.Registry }

func (z registryZones) Zones(ctx context.Context) []Zone {
	var out []Zone
	for _, zz := range z.Known(ctx) {
		if zz.Client != nil {
			out = append(out, zz)
		}
	}
	return out
}

// Known lists every zone of the registry; those without an online host
// have no client.
func (z registryZones) Known(context.Context) []Zone {
	var out []Zone
	for _, zz := range z.r.Zones() {
		m := Zone{ID: zz.ID, Name: zz.Name}
		for _, h := range zz.Hosts {
			if h.Status == zones.StatusOnline {
				m.Client = z.r.Client(zz.ID)
				break
			}
		}
		out = append(out, m)
	}
	return out
}
