package main

import (
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/deptest"
)

const self = "github.com/flexplane/flexplane/cmd/agent"

// TestDeps keeps the mesh control server, the GraphQL server, the
// orchestrator's wiring and every dev tool out of the agent binary, which
// runs on every hypervisor (rule 1 of the layout, docs/develop/layout.md).
func TestDeps(t *testing.T) {
	t.Parallel()
	g := deptest.Load(t, self)
	g.Forbid(t, self, deptest.Bans{
		"github.com/juanfont/headscale":                       "mesh control runs in the orchestrator",
		"github.com/99designs/gqlgen":                         "the GraphQL API is the orchestrator's",
		"github.com/vektah/gqlparser":                         "the GraphQL API is the orchestrator's",
		"github.com/graph-gophers/graphql-go":                 "the GraphQL API is the orchestrator's",
		"github.com/flexplane/flexplane/pkg/mesh/meshcontrol": "mesh control runs in the orchestrator",
		"github.com/flexplane/flexplane/pkg/mesh/fleet":       "the zone registry is the orchestrator's",
		"github.com/flexplane/flexplane/pkg/orchestrator":     "the orchestrator's wiring",
		"github.com/flexplane/flexplane/pkg/pvesim":           "the Proxmox simulator is a product of its own (cmd/pvesim)",
		"github.com/flexplane/flexplane/pkg/dev":              "dev tools and test harnesses are never linked into a product",
		"github.com/zitadel/oidc/v3/pkg/op":                   "an OpenID provider is a dev tool (pkg/dev/devidp)",
	})
	if n := len(g.Deps(self, false)); n < 100 {
		t.Fatalf("only %d dependencies listed; the check did not run on the real graph", n)
	}
}

// TestDepList: deps.txt is the full list of what the agent links; a change
// that adds to the binary shows in its diff (make generate rewrites it).
func TestDepList(t *testing.T) {
	t.Parallel()
	deptest.Load(t, self).CheckList(t, self, "deps.txt")
}
