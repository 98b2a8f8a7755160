package server

import (
	"context"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/vdc"
)

// The state of one request is set here, the one place: the handler
// verifies the caller (auth.NewContext) and keeps the VDC the request
// names (withVDCName); beginOperation turns them into what resolvers read
// (graph.VDCScopeFrom, the operation's view of the estate, estate.WithRead).

type vdcNameKey struct{}

// withVDCName returns ctx carrying the VDC a request names (its
// graph.VDCHeader, or the websocket's connection_init payload), not yet
// checked.
func withVDCName(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, vdcNameKey{}, name)
}

// vdcNameFrom returns the VDC the request named, checked or not (the
// audit records it for an operation refused before its VDC was resolved).
func vdcNameFrom(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(vdcNameKey{}).(string)
	return name, ok
}

// beginOperation returns ctx with the state of one GraphQL operation: it
// requires a caller (UNAUTHENTICATED otherwise), resolves the VDC the
// request named into its scope (NOT_FOUND for one the caller may not use
// or that does not exist, vdc.Resolve; the caller's role is the higher of
// its claims and the VDC's grant of its user name, auth.Principal.RoleWith), and gives queries and mutations
// their view of the estate (estate.WithRead); a subscription lives on and
// reads afresh each time, so it gets none.
func beginOperation(ctx context.Context, store catalog.Store, subscription bool) (context.Context, error) {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return ctx, apierr.New(apierr.Unauthenticated, "authentication required")
	}
	if name, ok := vdcNameFrom(ctx); ok {
		// A caller without a role claim of the VDC may still hold a role
		// granted there (its member bindings): the VDC is read first, and
		// the answer is the same NOT_FOUND either way.
		v, err := vdc.Resolve(ctx, store, name, true)
		if err != nil {
			return ctx, apierr.From(err, "")
		}
		role, member := p.RoleWith(name, v.MemberRole)
		if !member {
			return ctx, vdcNotFound(name)
		}
		ctx = graph.WithVDCScope(ctx, graph.VDCScope{VDC: v, Role: role, Caller: vdc.Caller{Subject: p.Subject, Role: string(role)}})
	}
	if !subscription {
		ctx = estate.WithRead(ctx)
	}
	return ctx, nil
}

// vdcNotFound is the one answer for a VDC that does not exist and for one
// the caller may not use (vdc.NotFound).
func vdcNotFound(name string) *apierr.Error { return apierr.From(vdc.NotFound(name), "") }
