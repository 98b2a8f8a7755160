package main

import (
	"strings"
	"testing"

	"tailscale.com/tstest/deptest"
)

// TestDeps keeps the mesh control server and the GraphQL server out of the
// agent binary.
func TestDeps(t *testing.T) {
	forbidden := []string{
		"github.com/juanfont/headscale",
		"github.com/99designs/gqlgen",
		"github.com/vektah/gqlparser",
		"github.com/graph-gophers/graphql-go",
		"github.com/flexplane/flexplane/pkg/mesh/meshcontrol",
		"github.com/flexplane/flexplane/pkg/orchestrator",
		"github.com/flexplane/flexplane/pkg/mesh/zones",
	}
	var seen int
	deptest.DepChecker{
		OnDep: func(dep string) {
			seen++
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") {
					t.Errorf("cmd/agent depends on %s", dep)
				}
			}
		},
	}.Check(t)
	if seen < 100 {
		t.Fatalf("only %d dependencies listed; the check did not run on the real graph", seen)
	}
}
