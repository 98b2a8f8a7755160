package graph

import (
	"context"

	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
)

// The state of one request is defined and set here, the one place: the
// HTTP handler (graph/server) verifies the caller (auth.NewContext) and
// hands over the VDC the request names (WithVDCName); BeginOperation turns
// them into what resolvers read (VDCScopeFrom, the operation's inventory
// session of WithRequest).

type vdcNameKey struct{}

// WithVDCName returns ctx carrying the VDC a request names (its VDCHeader,
// or the websocket's connection_init payload), not yet checked.
func WithVDCName(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, vdcNameKey{}, name)
}

// VDCNameFrom returns the VDC the request named, checked or not (the
// audit records it for an operation refused before its VDC was resolved).
func VDCNameFrom(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(vdcNameKey{}).(string)
	return name, ok
}

// BeginOperation returns ctx with the state of one GraphQL operation: it
// requires a caller (UNAUTHENTICATED otherwise), resolves the VDC the
// request named into its scope (NOT_FOUND for one the caller may not use
// or that does not exist, ResolveVDC), and gives queries and mutations
// their per-operation state (WithRequest); a subscription lives on and
// reads afresh each time, so it gets none.
func BeginOperation(ctx context.Context, store catalog.Store, subscription bool) (context.Context, error) {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return ctx, apierr.New(apierr.Unauthenticated, "authentication required")
	}
	if name, ok := VDCNameFrom(ctx); ok {
		scope, err := ResolveVDC(ctx, store, p, name)
		if err != nil {
			return ctx, err
		}
		ctx = WithVDCScope(ctx, scope)
	}
	if !subscription {
		ctx = WithRequest(ctx)
	}
	return ctx, nil
}
