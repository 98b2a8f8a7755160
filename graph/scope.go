package graph

import (
	"context"

	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/vdc"
)

// VDCHeader names the VDC a request works in.
const VDCHeader = "FlexPlane-VDC-ID"

// VDCScope is the VDC a request works in and the caller's role there
// (Caller: the same, as the VDC service's access changes take it).
type VDCScope struct {
	VDC    *catalog.VDC
	Role   auth.Role
	Caller vdc.Caller
}

type vdcScopeKey struct{}

// WithVDCScope returns ctx carrying the request's VDC scope.
func WithVDCScope(ctx context.Context, s VDCScope) context.Context {
	return context.WithValue(ctx, vdcScopeKey{}, s)
}

// VDCScopeFrom returns the VDC scope of the request, if its header named one.
func VDCScopeFrom(ctx context.Context) (VDCScope, bool) {
	s, ok := ctx.Value(vdcScopeKey{}).(VDCScope)
	return s, ok
}

// caller returns the verified caller; the HTTP layer guarantees one, so
// its absence is UNAUTHENTICATED rather than a crash.
func caller(ctx context.Context) (*auth.Principal, error) {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return nil, apierr.New(apierr.Unauthenticated, "authentication required")
	}
	return p, nil
}
