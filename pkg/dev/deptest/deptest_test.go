package deptest_test

import (
	"slices"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/deptest"
)

const module = "github.com/flexplane/flexplane"

// TestViolationChain: a package that links a banned one is caught, with
// the chain of imports from it to the banned package.
func TestViolationChain(t *testing.T) {
	t.Parallel()
	root := module + "/pkg/orchestrator"
	g := deptest.Load(t, root)
	vs := g.Violations(root, deptest.Bans{"google.golang.org/grpc": "test", "example.com/none": "test"})
	if len(vs) != 1 {
		t.Fatalf("violations: %v", vs)
	}
	v := vs[0]
	if v.Chain[0] != root || !v.Ban.Matches(v.Chain[len(v.Chain)-1]) || v.Count < 10 {
		t.Errorf("violation: %+v", v)
	}
	for i := 1; i < len(v.Chain); i++ {
		if !slices.Contains(g.Deps(v.Chain[i-1], true), v.Chain[i]) {
			t.Errorf("chain %v: %s does not link %s", v.Chain, v.Chain[i-1], v.Chain[i])
		}
	}
	if deps := g.Deps(root, false); slices.Contains(deps, "net/http") || !slices.Contains(deps, root) {
		t.Errorf("Deps without std: %d packages, std or root wrong", len(deps))
	}
}
