package deptest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/deptest"
)

const module = "github.com/flexplane/flexplane"

// domain are the domain packages (rule 2 of the layout, docs/develop/layout.md): the VM
// lifecycle and images, networks and IPAM, tenancy and quota, the
// catalog, with every package that will be added under them.
var domain = []string{
	module + "/pkg/compute/...",
	module + "/pkg/network/...",
	module + "/pkg/tenancy/...",
	module + "/pkg/catalog/...",
	module + "/pkg/edge", // the gateway's data plane; edgesync, its orchestrator side, speaks gRPC
	module + "/pkg/vdc",
	module + "/pkg/edge/gateways", // the gateways' objects as the API changes them
	module + "/pkg/securitygroup", // the security groups as the API changes them; sgsync writes them to Proxmox
	module + "/pkg/sshkey",
}

// mustBeDomain are packages the patterns above must find (a pattern that
// matched nothing would make the test pass on nothing).
var mustBeDomain = []string{
	module + "/pkg/compute", module + "/pkg/compute/images", module + "/pkg/network",
	module + "/pkg/network/ipam", module + "/pkg/tenancy", module + "/pkg/tenancy/quota", module + "/pkg/catalog",
	module + "/pkg/edge", module + "/pkg/vdc", module + "/pkg/edge/gateways", module + "/pkg/securitygroup", module + "/pkg/sshkey",
}

// transport is what domain packages must not link: the GraphQL server,
// gRPC, the mesh (tsnet and Headscale), OpenID Connect, and flexplane's
// own edge and wiring packages that carry them. Domain packages return
// typed errors; the API layer maps them to codes and field paths.
var transport = deptest.Bans{
	"github.com/99designs/gqlgen":   "GraphQL belongs to the API layer (graph/...)",
	"github.com/vektah/gqlparser":   "GraphQL belongs to the API layer (graph/...)",
	"google.golang.org/grpc":        "gRPC belongs to the mesh and the agent",
	"tailscale.com":                 "the mesh (tsnet) belongs to pkg/mesh",
	"github.com/tailscale":          "the mesh (tsnet) belongs to pkg/mesh",
	"github.com/juanfont/headscale": "mesh control belongs to pkg/mesh/meshcontrol",
	"github.com/coreos/go-oidc":     "OpenID Connect belongs to pkg/auth",
	module + "/graph":               "the API layer maps domain errors, not the reverse",
	module + "/pkg/auth":            "identity belongs to the API layer",
	module + "/pkg/mesh":            "the mesh is wired in by pkg/orchestrator",
	module + "/proto":               "the agent's gRPC API belongs to the mesh",
	module + "/pkg/orchestrator":    "wiring imports the domain, not the reverse",
}

// TestDomainImportsNoTransport: no domain package links a transport, even
// transitively; a failure prints the chain of imports that brings it in.
func TestDomainImportsNoTransport(t *testing.T) {
	t.Parallel()
	g := deptest.Load(t, domain...)
	roots := g.Roots()
	for _, p := range mustBeDomain {
		if !slices.Contains(roots, p) {
			t.Errorf("domain patterns %v do not find %s", domain, p)
		}
	}
	for _, root := range roots {
		g.Forbid(t, root, transport)
	}
}

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

// TestEveryPackageHasDoc: every package of the module has a doc comment
// that starts as Go's convention says, "Package <name> ..." for a library
// and "Command <name> ..." for a command (rule 4 of the layout, docs/develop/layout.md).
func TestEveryPackageHasDoc(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-json=ImportPath,Name,Doc", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	n := 0
	for {
		var p struct{ ImportPath, Name, Doc string }
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		want := "Package " + p.Name + " "
		if p.Name == "main" {
			want = "Command " + path.Base(p.ImportPath) + " "
		}
		switch {
		case p.Doc == "":
			t.Errorf("%s has no package doc comment", p.ImportPath)
		case !strings.HasPrefix(p.Doc+" ", want):
			t.Errorf("%s: doc comment %q does not start with %q", p.ImportPath, p.Doc, want)
		}
	}
	if n < 30 {
		t.Fatalf("only %d packages listed", n)
	}
}
