package deptest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/deptest"
)

// layer is one layer of the module: its name, what it holds, and the
// packages in it ("x/..." is x and every package under it, "x" is x alone;
// paths are relative to the module).
type layer struct {
	name     string
	holds    string
	packages []string
}

// layers are flexplane's layers, bottom up. A package may import packages
// of its own layer and of the layers below it, never one of a layer above
// (TestLayerOrder). Every package of the module is in exactly one layer:
// a new package is placed here when it is added.
var layers = []layer{
	{"support", "code that knows nothing of flexplane above it: support libraries, identity, audit events, the gRPC APIs, the embedded Helm chart",
		[]string{"pkg/support/...", "pkg/auth/...", "pkg/audit/...", "proto/...", "charts/..."}},
	{"simulator", "the Proxmox simulator of tests and make dev: it learns Proxmox from Proxmox's schema, never from flexplane's own client",
		[]string{"pkg/pvesim/..."}},
	{"proxmox", "Proxmox facts and its client; it imports neither the fleet nor tenancy",
		[]string{"pkg/proxmox/..."}},
	{"catalog", "the desired state of the platform and the agent releases",
		[]string{"pkg/catalog/...", "pkg/release/..."}},
	{"mesh", "the fleet: the mesh, the zone registry and the transport to each zone's agents; it may import proxmox, never a capability",
		[]string{"pkg/mesh/..."}},
	{"tenancy", "VDCs, their tags in Proxmox, and quota",
		[]string{"pkg/tenancy/..."}},
	{"capabilities", "one service per capability, and the reads that fan out over the zones",
		[]string{"pkg/network/...", "pkg/loadbalancer/...", "pkg/edge/...", "pkg/compute/...", "pkg/rollout/...",
			"pkg/tenantkube/...", "pkg/console/...", "pkg/inventory/...", "pkg/estate/...", "pkg/vdc/...",
			"pkg/securitygroup/...", "pkg/sshkey"}},
	{"graphql", "the API layer: resolvers, the HTTP handler, the error mapping and generated code",
		[]string{"graph/..."}},
	{"binaries", "the wiring of the binaries: the orchestrator, the portal, the agent, the flexctl CLI and the Terraform provider (clients of the API only)",
		[]string{"pkg/orchestrator/...", "pkg/portal/...", "pkg/agent/...", "pkg/flexctl/...", "pkg/tfprovider"}},
	{"dev", "dev tools and test harnesses: they start whole stacks, so they sit above everything but the mains",
		[]string{"pkg/dev/..."}},
	{"cmd", "the mains", []string{"cmd/..."}},
}

// matches reports whether the module package pkg (an import path) is one
// of pattern's (see layer.packages).
func matches(pattern, pkg string) bool {
	rel, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return false
	}
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == dir || strings.HasPrefix(rel, dir+"/")
	}
	return rel == pattern
}

// layerOf returns the index in layers of the layer that holds pkg, or -1
// with the names of every layer that claims it when not exactly one does.
func layerOf(pkg string) (int, []string) {
	at, claims := -1, []string(nil)
	for i, l := range layers {
		if slices.ContainsFunc(l.packages, func(p string) bool { return matches(p, pkg) }) {
			at = i
			claims = append(claims, l.name)
		}
	}
	if len(claims) != 1 {
		return -1, claims
	}
	return at, nil
}

// TestLayerOrder: every package of the module is in one layer, every
// pattern of a layer finds a package, and no package imports (directly)
// a package of a higher layer; a failure names the importer, the
// imported package and both layers.
func TestLayerOrder(t *testing.T) {
	t.Parallel()
	g := deptest.Load(t, module+"/...")
	pkgs := g.Roots()
	for _, l := range layers {
		for _, p := range l.packages {
			if !slices.ContainsFunc(pkgs, func(pkg string) bool { return matches(p, pkg) }) {
				t.Errorf("layer %s: %s matches no package of the module", l.name, p)
			}
		}
	}
	layerAt := map[string]int{}
	for _, p := range pkgs {
		i, claims := layerOf(p)
		if i < 0 {
			t.Errorf("package %s is in no layer, or in more than one (%v): place it in layers (layers_test.go)", p, claims)
			continue
		}
		layerAt[p] = i
	}
	for _, p := range pkgs {
		i, ok := layerAt[p]
		if !ok {
			continue
		}
		for _, imp := range g.Imports(p, false) {
			j, ok := layerAt[imp]
			if ok && j > i {
				t.Errorf("%s (layer %s) imports %s (layer %s, higher)", p, layers[i].name, imp, layers[j].name)
			}
		}
	}
	if len(layerAt) < 30 {
		t.Fatalf("only %d packages placed", len(layerAt))
	}
}

// TestLayerOf: the patterns match as documented, and a package outside
// every layer is in none.
func TestLayerOf(t *testing.T) {
	t.Parallel()
	for pkg, want := range map[string]string{
		module + "/pkg/proxmox":                 "proxmox",
		module + "/pkg/proxmox/pveapi":          "proxmox",
		module + "/pkg/proxmoxy":                "",
		module + "/graph/generated":             "graphql",
		module + "/cmd/orchestrator":            "cmd",
		"example.com/other/pkg/proxmox":         "",
		module + "/pkg/tenantkube/capiprovider": "capabilities",
	} {
		i, _ := layerOf(pkg)
		got := ""
		if i >= 0 {
			got = layers[i].name
		}
		if got != want {
			t.Errorf("layerOf(%s) = %q, want %q", pkg, got, want)
		}
	}
}

// graphPackages are the only packages under graph/ (besides graph itself,
// the resolvers): a package there holds the HTTP handler, the error
// mapping or generated code; a capability's logic goes into its service
// under pkg/, not into a sub-package of the API layer.
var graphPackages = map[string]string{
	"graph/server":          "the HTTP handler of the API: transports, authentication, limits, audit, metrics, tracing",
	"graph/server/apierr":   "the error mapping: typed domain errors to the codes clients see",
	"graph/server/graphiql": "the GraphiQL page's embedded assets",
	"graph/generated":       "generated code (gqlgen)",
	"graph/model":           "generated code (gqlgen's models)",
	"graph/scalar":          "the schema's scalars, which generated code marshals",
	"graph/internal/sdl":    "the generator of the checked-in SDL (make generate-graphql)",
}

// TestGraphHoldsOnlyTheAPILayer: every package under graph/ is one of
// graphPackages, and each of those exists.
func TestGraphHoldsOnlyTheAPILayer(t *testing.T) {
	t.Parallel()
	pkgs := deptest.Load(t, module+"/graph/...").Roots()
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p, module+"/")
		if _, ok := graphPackages[rel]; !ok && rel != "graph" {
			t.Errorf("%s is a package under graph/ that is not the HTTP handler, the error mapping or generated code: move its logic into a service under pkg/ (or list it in graphPackages, layers_test.go, with why it belongs to the API layer)", p)
		}
	}
	for rel := range graphPackages {
		if !slices.Contains(pkgs, module+"/"+rel) {
			t.Errorf("graphPackages lists %s, which is not a package", rel)
		}
	}
}

// maxGraphHelperLines bounds the Go files at the top of graph/ other than
// the resolvers (*.resolvers.go, resolver.go) and tests: what is left
// there maps a service's answer to the schema's types, and the logic
// (sorting, merging state, deciding statuses, validation, zone
// resolution, pagination) lives in the capabilities' services.
const maxGraphHelperLines = 1000

// TestGraphHelpersStayThin: the Go files at the top of graph/ other than
// *.resolvers.go, resolver.go and tests hold at most maxGraphHelperLines
// lines.
func TestGraphHelpersStayThin(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "graph", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	total, counts := 0, []string{}
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasSuffix(name, ".resolvers.go") || name == "resolver.go" || strings.HasSuffix(name, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n := strings.Count(string(b), "\n")
		total += n
		counts = append(counts, fmt.Sprintf("%s %d", name, n))
	}
	if total > maxGraphHelperLines {
		t.Errorf("graph/*.go other than *.resolvers.go, resolver.go and tests hold %d lines, more than %d (%s): "+
			"a resolver maps its input to one call of a capability's service and the answer to the model; move the logic "+
			"(sorting, merging state, deciding statuses, validation, zone resolution, pagination) into the service under pkg/, "+
			"bind schema types to the domain's Go types in gqlgen.yml where they match, and put schema machinery of the "+
			"HTTP handler (complexity, directives) in graph/server",
			total, maxGraphHelperLines, strings.Join(counts, ", "))
	}
}
