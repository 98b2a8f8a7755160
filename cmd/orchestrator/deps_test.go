package main

import (
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/deptest"
)

// TestDeps: the orchestrator binary links no simulator, dev provider, dev
// tool or test harness (rule 1 of the layout, docs/develop/layout.md).
func TestDeps(t *testing.T) {
	t.Parallel()
	const self = "github.com/flexplane/flexplane/cmd/orchestrator"
	g := deptest.Load(t, self)
	g.Forbid(t, self, deptest.Bans{
		"github.com/flexplane/flexplane/pkg/pvesim": "the Proxmox simulator is a product of its own (cmd/pvesim)",
		"github.com/flexplane/flexplane/pkg/dev":    "dev tools and test harnesses are never linked into a product",
		"github.com/flexplane/flexplane/cmd":        "a binary does not link another's main",
		"github.com/zitadel/oidc/v3/pkg/op":         "an OpenID provider is a dev tool (pkg/dev/devidp)",
		"github.com/chromedp":                       "browser automation is for tests",
	})
	if n := len(g.Deps(self, false)); n < 200 {
		t.Fatalf("only %d dependencies listed; the check did not run on the real graph", n)
	}
}
