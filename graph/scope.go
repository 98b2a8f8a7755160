package graph

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/99designs/gqlgen/graphql"

	"github.com/flexplane/flexplane/graph/generated"
	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
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

// vdcNotFound is the one answer for a VDC that does not exist and for one
// the caller may not use: existence is never disclosed.
func vdcNotFound(name string) *apierr.Error {
	return apierr.New(apierr.NotFound, "%s %q not found", catalog.KindVDC, name)
}

// ResolveVDC checks that p may use the VDC called name and that it exists,
// and returns the scope; otherwise NOT_FOUND (never FORBIDDEN).
func ResolveVDC(ctx context.Context, store catalog.Store, p *auth.Principal, name string) (VDCScope, error) {
	role, ok := p.RoleIn(name)
	if !ok {
		return VDCScope{}, vdcNotFound(name)
	}
	v, err := catalog.Get[*catalog.VDC](ctx, store, name)
	if err != nil {
		if ae := apierr.From(err, ""); ae.Code == apierr.NotFound {
			return VDCScope{}, vdcNotFound(name)
		}
		return VDCScope{}, fmt.Errorf("resolve VDC: %w", err)
	}
	return VDCScope{VDC: v, Role: role}, nil
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

func fieldName(ctx context.Context) string {
	if fc := graphql.GetFieldContext(ctx); fc != nil {
		return fc.Field.Name
	}
	return "this operation"
}

// Directives implements the schema's directives: @platformAdmin and @vdc.
func Directives() generated.DirectiveRoot {
	return generated.DirectiveRoot{
		PlatformAdmin: func(ctx context.Context, _ any, next graphql.Resolver) (any, error) {
			p, err := caller(ctx)
			if err != nil {
				return nil, err
			}
			if !p.PlatformAdmin {
				return nil, apierr.New(apierr.NotFound, "%q does not exist", fieldName(ctx))
			}
			return next(ctx)
		},
		Vdc: func(ctx context.Context, _ any, next graphql.Resolver, role model.VDCRole) (any, error) {
			s, ok := VDCScopeFrom(ctx)
			if !ok {
				return nil, apierr.BadInput(VDCHeader, "%s needs the %s header naming a VDC", fieldName(ctx), VDCHeader)
			}
			if !s.Role.AtLeast(authRole(role)) {
				return nil, vdcNotFound(s.VDC.Name)
			}
			return next(ctx)
		},
	}
}

func authRole(r model.VDCRole) auth.Role { return auth.Role(strings.ToLower(string(r))) }

func modelRole(r auth.Role) model.VDCRole { return model.VDCRole(strings.ToUpper(string(r))) }

// roleKeys renders the caller's roles as role keys, sorted.
func roleKeys(p *auth.Principal) []string {
	var keys []string
	if p.PlatformAdmin {
		keys = append(keys, auth.PlatformAdminRole)
	}
	for v, r := range p.VDCRoles {
		keys = append(keys, auth.VDCRoleKey(v, r))
	}
	slices.Sort(keys)
	return keys
}
