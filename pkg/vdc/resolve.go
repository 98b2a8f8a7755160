package vdc

import (
	"context"
	"errors"
	"fmt"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/support/fault"
)

// NotFound is the one answer for a VDC that does not exist and for one
// the caller may not use: existence is never disclosed.
func NotFound(name string) error {
	return fault.New(fault.NotFound, "%s %q not found", catalog.KindVDC, name)
}

// Resolve returns the VDC called name for a caller who may use it
// (member: the caller's identity gives it a role there): NotFound when it
// may not or the VDC does not exist, never a refusal that tells the VDC
// exists.
func Resolve(ctx context.Context, store catalog.Store, name string, member bool) (*catalog.VDC, error) {
	if !member {
		return nil, NotFound(name)
	}
	v, err := catalog.Get[*catalog.VDC](ctx, store, name)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, NotFound(name)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve VDC: %w", err)
	}
	return v, nil
}
