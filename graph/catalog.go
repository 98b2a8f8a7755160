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

// update applies change to the named object and writes it conditionally
// (catalog.Change).
func update[P catalog.ObjectPtr[T], T any](ctx context.Context, store catalog.Store, name string, resourceVersion *string, change func(P)) (P, error) {
	out, err := catalog.Change(ctx, store, name, resourceVersion, change)
	if err != nil {
		return nil, fail(err)
	}
	return out, nil
}

// remove deletes the named object, conditionally when resourceVersion is
// given (catalog.DeleteAt).
func remove[P catalog.ObjectPtr[T], T any](ctx context.Context, store catalog.Store, name string, resourceVersion *string) (*model.Deleted, error) {
	if err := catalog.DeleteAt[P](ctx, store, name, resourceVersion); err != nil {
		return nil, apierr.From(err, "")
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

func pools(in []*model.ZonePoolInput) []catalog.ZonePool {
	out := make([]catalog.ZonePool, 0, len(in))
	for _, p := range in {
		out = append(out, catalog.ZonePool{Zone: p.Zone, Pool: p.Pool})
	}
	return out
}
