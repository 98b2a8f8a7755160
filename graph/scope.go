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

// VDCScope is the VDC a request works in and the caller's role there.
type VDCScope struct {
	VDC  *catalog.VDC
	Role auth.Role
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

// RoleIn returns p's effective role in v: the higher of its role claims
// and the role v's member bindings grant its user name; ok is false when
// p may not use v.
func RoleIn(p *auth.Principal, v *catalog.VDC) (auth.Role, bool) {
	return p.Granted(v.Name, auth.Role(v.MemberRole(p.Username)))
}

// accessCaller is the request's caller as the VDC service's access
// changes name it, with its role in the request's VDC.
func accessCaller(ctx context.Context) (vdcName string, c vdc.Caller, err error) {
	p, err := caller(ctx)
	if err != nil {
		return "", vdc.Caller{}, err
	}
	s, ok := VDCScopeFrom(ctx) // @vdc guarantees it
	if !ok {
		return "", vdc.Caller{}, apierr.BadInput(VDCHeader, "the %s header must name a VDC", VDCHeader)
	}
	return s.VDC.Name, vdc.Caller{Subject: p.Subject, Role: string(s.Role)}, nil
}
