package server

import (
	"context"
	"strings"

	"github.com/99designs/gqlgen/graphql"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/graph/generated"
	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/auth"
)

// The schema's machinery the handler runs around the resolvers: its
// directives and the query complexity of its list fields.

func fieldName(ctx context.Context) string {
	if fc := graphql.GetFieldContext(ctx); fc != nil {
		return fc.Field.Name
	}
	return "this operation"
}

// directives implements the schema's directives: @platformAdmin and @vdc.
func directives() generated.DirectiveRoot {
	return generated.DirectiveRoot{
		PlatformAdmin: func(ctx context.Context, _ any, next graphql.Resolver) (any, error) {
			p, ok := auth.FromContext(ctx)
			if !ok {
				return nil, apierr.New(apierr.Unauthenticated, "authentication required")
			}
			if !p.PlatformAdmin {
				return nil, apierr.New(apierr.NotFound, "%q does not exist", fieldName(ctx))
			}
			return next(ctx)
		},
		Vdc: func(ctx context.Context, _ any, next graphql.Resolver, role auth.Role) (any, error) {
			s, ok := graph.VDCScopeFrom(ctx)
			if !ok {
				return nil, apierr.BadInput(graph.VDCHeader, "%s needs the %s header naming a VDC", fieldName(ctx), graph.VDCHeader)
			}
			if !s.Role.AtLeast(role) {
				// The caller is a member of the VDC (else the operation
				// would not have begun): it may know the field exists.
				return nil, apierr.New(apierr.Forbidden, "%s needs the %s role in VDC %s; yours is %s",
					fieldName(ctx), strings.ToUpper(string(role)), s.VDC.Name, strings.ToUpper(string(s.Role)))
			}
			return next(ctx)
		},
	}
}

// zoneHostsCost is what Zone.hosts counts as in query complexity.
const zoneHostsCost = 8

// complexity returns the query complexity of list fields: their
// children's cost times the number of items they may return (first);
// every other field costs 1 plus its children.
func complexity() generated.ComplexityRoot {
	var c generated.ComplexityRoot
	times := func(child int, first *int, def int) int {
		n := def
		if first != nil && *first > 0 {
			n = *first
		}
		return 1 + child*n
	}
	c.Query.Zones = func(child int, first *int, _ *string) int { return times(child, first, 20) }
	c.Query.Hosts = func(child int, _, _ *string, first *int) int { return times(child, first, 50) }
	c.Query.Vms = func(child int, _ *model.VMFilter, first *int, _ *string) int { return times(child, first, 50) }
	c.Query.Networks = func(child int, _ *string, first *int) int { return times(child, first, 50) }
	c.Zone.Hosts = func(child int) int { return 1 + child*zoneHostsCost }
	c.VM.Operations = func(child int, first *int) int { return times(child, first, 20) }
	// A connection costs its children (edges, nodes, pageInfo) times first.
	c.Query.ZonesConnection = func(child int, first *int, _, _ *string) int { return times(child, first, 20) }
	c.Query.HostsConnection = func(child int, _, _ *string, first *int, _ *string) int { return times(child, first, 50) }
	c.Query.VmsConnection = func(child int, _ *model.VMFilter, first *int, _ *string) int { return times(child, first, 50) }
	c.Query.NetworksConnection = func(child int, _ *string, first *int, _ *string) int { return times(child, first, 50) }
	c.VM.OperationsConnection = func(child int, first *int, _ *string) int { return times(child, first, 20) }
	return c
}
