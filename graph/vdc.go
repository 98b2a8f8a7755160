package graph

import (
	"context"
	"fmt"
	"sync"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/pkg/api/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
	"github.com/flexplane/flexplane/pkg/network"
)

// deleteVDC deletes the VDC name once nothing of it is left: while it has
// VMs (or creates in flight) or networks in any zone, or a zone cannot
// tell, it answers CONFLICT (ZONE_UNAVAILABLE) and changes nothing. The
// delete is conditional on the version read for that check (or the
// caller's), so a create that reserves quota meanwhile makes it CONFLICT.
// Then the VDC's Proxmox pool and SDN zone are removed from every zone; one
// left behind by a zone that fails there is logged (it is empty, and a VDC
// of the same name would use it again).
func (r *Resolver) deleteVDC(ctx context.Context, name string, resourceVersion *string) (*model.Deleted, error) {
	if resourceVersion != nil && *resourceVersion == "" {
		return nil, apierr.BadInput("resourceVersion", "resourceVersion: must not be empty when given")
	}
	v, err := get[*catalog.VDC](ctx, r.Catalog, name)
	if err != nil {
		return nil, err
	}
	rv := v.ResourceVersion
	if resourceVersion != nil {
		rv = *resourceVersion
	}
	if r.Zones != nil {
		if err := r.vdcIsEmpty(ctx, v); err != nil {
			return nil, err
		}
	}
	out, err := remove[*catalog.VDC](ctx, r.Catalog, name, &rv)
	if err != nil || r.Zones == nil {
		return out, err
	}
	for _, ze := range r.estate().Each(ctx, r.Zones.Zones(), func(ctx context.Context, z zones.Zone) error {
		c := r.Zones.Client(z.ID)
		if err := network.RemoveVDC(ctx, c, name); err != nil {
			return err
		}
		return compute.RemovePool(ctx, c, name)
	}) {
		r.Logger.Warn("graphql: deleteVDC: the VDC's pool or SDN zone is left", "vdc", name, "zone", ze.Zone.Name, "err", ze.Err)
	}
	return out, nil
}

// vdcIsEmpty returns CONFLICT while v has VMs (or creates in flight) or
// networks in any zone, ZONE_UNAVAILABLE when a zone cannot tell.
func (r *Resolver) vdcIsEmpty(ctx context.Context, v *catalog.VDC) error {
	usage, err := r.vdcUsage(ctx, v)
	if err != nil {
		return err
	}
	var (
		mu   sync.Mutex
		nets int
	)
	if zerrs := r.estate().Each(ctx, r.Zones.Zones(), func(ctx context.Context, z zones.Zone) error {
		ns, err := network.List(ctx, r.Zones.Client(z.ID), v.Name)
		mu.Lock()
		defer mu.Unlock()
		nets += len(ns)
		return err
	}); len(zerrs) > 0 {
		r.Logger.Warn("graphql: deleteVDC: networks", "vdc", v.Name, "zone", zerrs[0].Zone.Name, "err", zerrs[0].Err)
		return apierr.ZoneDown(zerrs[0].Zone.Name, zerrs[0].Err)
	}
	if usage.Vms > 0 || nets > 0 {
		return apierr.New(apierr.Conflict, "VDC %s still has %s and %s: delete them first", v.Name, plural(usage.Vms, "VM"), plural(nets, "network"))
	}
	return nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
