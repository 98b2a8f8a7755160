package catalog

import (
	"context"
	"errors"
	"fmt"
)

// Store keeps catalog objects. Implementations validate every object they
// write, set ResourceVersion (and CreationTimestamp on create), and make
// Update and Delete conditional on the caller's resourceVersion. Returned
// objects are copies the caller may modify.
//
// Errors: *NotFoundError, *AlreadyExistsError, *ConflictError and
// *ValidationError (match with errors.Is and ErrNotFound, ErrAlreadyExists,
// ErrConflict, ErrInvalid); anything else is an internal failure.
type Store interface {
	// Get returns the object of kind with name.
	Get(ctx context.Context, kind Kind, name string) (Object, error)
	// List returns every object of kind, sorted by name.
	List(ctx context.Context, kind Kind) ([]Object, error)
	// Create stores a new object; its ResourceVersion must be empty.
	Create(ctx context.Context, obj Object) (Object, error)
	// Update replaces an existing object if obj's ResourceVersion (which
	// must be set) is the stored one; CreationTimestamp is kept.
	Update(ctx context.Context, obj Object) (Object, error)
	// Delete removes an object; a non-empty resourceVersion must be the
	// stored one.
	Delete(ctx context.Context, kind Kind, name, resourceVersion string) error
}

// ObjectPtr constrains P to be a pointer to a catalog type T (such as
// *VDC), so the typed helpers below are called as Get[*VDC].
type ObjectPtr[T any] interface {
	*T
	Object
}

func kindOf[P ObjectPtr[T], T any]() Kind { return P(new(T)).ObjectKind() }

func as[P ObjectPtr[T], T any](o Object) (P, error) {
	p, ok := o.(P)
	if !ok {
		return nil, fmt.Errorf("catalog: store returned %T, want %T", o, P(nil))
	}
	return p, nil
}

// Get is Store.Get typed: catalog.Get[*catalog.VDC](ctx, s, "prod").
func Get[P ObjectPtr[T], T any](ctx context.Context, s Store, name string) (P, error) {
	o, err := s.Get(ctx, kindOf[P](), name)
	if err != nil {
		return nil, err
	}
	return as[P](o)
}

// List is Store.List typed.
func List[P ObjectPtr[T], T any](ctx context.Context, s Store) ([]P, error) {
	objs, err := s.List(ctx, kindOf[P]())
	if err != nil {
		return nil, err
	}
	out := make([]P, 0, len(objs))
	for _, o := range objs {
		p, err := as[P](o)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Create is Store.Create typed.
func Create[P ObjectPtr[T], T any](ctx context.Context, s Store, obj P) (P, error) {
	o, err := s.Create(ctx, obj)
	if err != nil {
		return nil, err
	}
	return as[P](o)
}

// Update is Store.Update typed.
func Update[P ObjectPtr[T], T any](ctx context.Context, s Store, obj P) (P, error) {
	o, err := s.Update(ctx, obj)
	if err != nil {
		return nil, err
	}
	return as[P](o)
}

// Delete is Store.Delete typed.
func Delete[P ObjectPtr[T], T any](ctx context.Context, s Store, name, resourceVersion string) error {
	return s.Delete(ctx, kindOf[P](), name, resourceVersion)
}

// Change applies change to the object called name and writes it
// conditionally: on resourceVersion when the caller gave one (an empty
// one is a ValidationError of "resourceVersion"), else on the version
// just read, so that a concurrent write in between is a conflict, never
// lost.
func Change[P ObjectPtr[T], T any](ctx context.Context, s Store, name string, resourceVersion *string, change func(P)) (P, error) {
	cur, err := Get[P](ctx, s, name)
	if err != nil {
		return nil, err
	}
	if resourceVersion != nil {
		if *resourceVersion == "" {
			return nil, invalid("resourceVersion", "must not be empty when given")
		}
		cur.GetObjectMeta().ResourceVersion = *resourceVersion
	}
	change(cur)
	return Update(ctx, s, cur)
}

// Modify reads the object called name, lets change alter it and writes
// it on the version it read, again from a fresh read whenever a
// concurrent writer got there first (ErrConflict), so that neither
// write is lost. change reports whether it altered the object; when it
// did not, nothing is written and the object read is returned.
func Modify[P ObjectPtr[T], T any](ctx context.Context, s Store, name string, change func(P) bool) (P, error) {
	for {
		cur, err := Get[P](ctx, s, name)
		if err != nil {
			return nil, err
		}
		if !change(cur) {
			return cur, nil
		}
		out, err := Update(ctx, s, cur)
		if errors.Is(err, ErrConflict) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		return out, err
	}
}

// DeleteAt deletes the object called name, conditionally on
// resourceVersion when the caller gave one (an empty one is a
// ValidationError of "resourceVersion").
func DeleteAt[P ObjectPtr[T], T any](ctx context.Context, s Store, name string, resourceVersion *string) error {
	if resourceVersion != nil && *resourceVersion == "" {
		return invalid("resourceVersion", "must not be empty when given")
	}
	rv := ""
	if resourceVersion != nil {
		rv = *resourceVersion
	}
	return Delete[P](ctx, s, name, rv)
}
