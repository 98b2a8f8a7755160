package graph

import (
	"context"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
)

// Helpers shared by the catalog resolvers (VDCs, profiles, images).

// fail classifies an error for the client; catalog validation errors name
// the field under "input".
func fail(err error) error { return apierr.From(err, "input") }

// update applies change to the named object and writes it conditionally:
// on resourceVersion when the client gave one, else on the version just
// read (a concurrent write in between is a CONFLICT, never lost).
func update[P catalog.ObjectPtr[T], T any](ctx context.Context, store catalog.Store, name string, resourceVersion *string, change func(P)) (P, error) {
	cur, err := catalog.Get[P](ctx, store, name)
	if err != nil {
		return nil, fail(err)
	}
	if resourceVersion != nil {
		if *resourceVersion == "" {
			return nil, apierr.BadInput("input.resourceVersion", "input.resourceVersion: must not be empty when given")
		}
		cur.GetObjectMeta().ResourceVersion = *resourceVersion
	}
	change(cur)
	out, err := catalog.Update(ctx, store, cur)
	if err != nil {
		return nil, fail(err)
	}
	return out, nil
}

// remove deletes the named object, conditionally when resourceVersion is
// given.
func remove[P catalog.ObjectPtr[T], T any](ctx context.Context, store catalog.Store, name string, resourceVersion *string) (*model.Deleted, error) {
	rv := ""
	if resourceVersion != nil {
		if *resourceVersion == "" {
			return nil, apierr.BadInput("resourceVersion", "resourceVersion: must not be empty when given")
		}
		rv = *resourceVersion
	}
	if err := catalog.Delete[P](ctx, store, name, rv); err != nil {
		return nil, fail(err)
	}
	return &model.Deleted{Name: name}, nil
}

func get[P catalog.ObjectPtr[T], T any](ctx context.Context, store catalog.Store, name string) (P, error) {
	o, err := catalog.Get[P](ctx, store, name)
	if err != nil {
		return nil, fail(err)
	}
	return o, nil
}

func list[P catalog.ObjectPtr[T], T any](ctx context.Context, store catalog.Store) ([]P, error) {
	o, err := catalog.List[P](ctx, store)
	if err != nil {
		return nil, fail(err)
	}
	return o, nil
}

func set[V any](dst *V, v *V) {
	if v != nil {
		*dst = *v
	}
}

// deref is *v, or the zero value for nil.
func deref[V any](v *V) V {
	var zero V
	if v == nil {
		return zero
	}
	return *v
}

func quotas(q *model.VDCQuotasInput) catalog.VDCQuotas {
	return catalog.VDCQuotas{VCPUs: q.Vcpus, MemoryMiB: q.MemoryMiB, StorageGiB: q.StorageGiB, VMs: q.Vms, PublicAddresses: q.PublicAddresses}
}

func pools(in []*model.ZonePoolInput) []catalog.ZonePool {
	out := make([]catalog.ZonePool, 0, len(in))
	for _, p := range in {
		out = append(out, catalog.ZonePool{Zone: p.Zone, Pool: p.Pool})
	}
	return out
}
