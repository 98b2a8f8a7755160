// Package deptest keeps the import rules of flexplane's layout with tests
// (docs/develop/layout.md): it loads the import graph `go list -deps` reports
// (non-test code, for a fixed platform), fails a test for each forbidden
// package a root links (with the chain of imports that brings it in), and
// compares the dependencies of a binary with a checked-in list. Its own
// tests hold the rules that span packages: the package map (docs/develop/packages.md) is
// the module's packages, product code links no dev tool, domain packages
// import no transport, every package has a doc comment, and tests and
// tools send GraphQL with pkg/dev/gqltest only.
package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Platform is the build environment the graph is listed for. The agent
// and the orchestrator run on Proxmox VE hosts (Debian, amd64); fixing
// the platform makes a listing the same on every developer's machine.
var Platform = []string{"GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0"}

// Graph is the import graph of some root packages and everything they link.
type Graph struct {
	imports map[string][]string // package -> its imports (non-test)
	std     map[string]bool     // standard library packages
	roots   []string
}

type listed struct {
	ImportPath string
	Imports    []string
	Standard   bool
	Error      *struct{ Err string }
}

// Load lists roots (import paths or patterns such as ./...) and all they
// depend on, for Platform. It fails t when go list fails or reports a
// package error.
func Load(t testing.TB, roots ...string) *Graph {
	t.Helper()
	g, err := load(roots...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func load(roots ...string) (*Graph, error) {
	args := append([]string{"list", "-deps", "-json=ImportPath,Imports,Standard,Error"}, roots...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), Platform...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("deptest: go %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	g := &Graph{imports: map[string][]string{}, std: map[string]bool{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("deptest: decode go list: %w", err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("deptest: %s: %s", p.ImportPath, p.Error.Err)
		}
		g.imports[p.ImportPath] = p.Imports
		g.std[p.ImportPath] = p.Standard
	}
	// The roots are the packages named on the command line: list them
	// without -deps to resolve patterns and relative paths.
	cmd = exec.Command("go", append([]string{"list"}, roots...)...)
	cmd.Env = append(os.Environ(), Platform...)
	out, err = cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("deptest: go list %s: %w", strings.Join(roots, " "), err)
	}
	g.roots = strings.Fields(string(out))
	return g, nil
}

// Roots returns the import paths of the packages Load was given.
func (g *Graph) Roots() []string { return slices.Clone(g.roots) }

// Imports returns, sorted, the packages pkg imports directly (non-test
// code), without the standard library unless std.
func (g *Graph) Imports(pkg string, std bool) []string {
	var out []string
	for _, p := range g.imports[pkg] {
		if std || !g.std[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Deps returns, sorted, root and every package it links, without the
// standard library unless std.
func (g *Graph) Deps(root string, std bool) []string {
	var out []string
	for p := range g.reach(root) {
		if std || !g.std[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// reach returns root and every package it links, each with the package
// that imports it on a shortest chain from root ("" for root).
func (g *Graph) reach(root string) map[string]string {
	from := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range g.imports[p] {
			if _, seen := from[imp]; !seen {
				from[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return from
}

// Ban forbids a package and every package under it.
type Ban struct {
	// Prefix is an import path; Prefix itself and Prefix/... are banned.
	Prefix string
	// Why is printed when the ban is broken.
	Why string
}

// Matches reports whether pkg is Prefix or under it.
func (b Ban) Matches(pkg string) bool {
	return pkg == b.Prefix || strings.HasPrefix(pkg, b.Prefix+"/")
}

// Violation is a banned package a root links.
type Violation struct {
	Root string
	Ban  Ban
	// Chain is the shortest chain of imports from Root to the first
	// banned package found (Root first).
	Chain []string
	// Count is how many packages of the ban Root links.
	Count int
}

func (v Violation) String() string {
	return fmt.Sprintf("%s links %s (%d of its packages; %s); it comes in by\n\t%s",
		v.Root, v.Ban.Prefix, v.Count, v.Ban.Why, strings.Join(v.Chain, "\n\t-> "))
}

// Bans maps import path prefixes to why they are banned (see Ban).
type Bans map[string]string

// sorted returns the bans by prefix.
func (bs Bans) sorted() []Ban {
	out := make([]Ban, 0, len(bs))
	for p, why := range bs {
		out = append(out, Ban{Prefix: p, Why: why})
	}
	slices.SortFunc(out, func(a, b Ban) int { return strings.Compare(a.Prefix, b.Prefix) })
	return out
}

// Violations returns, per ban that root breaks (by linking a package of
// it other than root itself), the chain that breaks it, by prefix.
func (g *Graph) Violations(root string, bans Bans) []Violation {
	from := g.reach(root)
	var out []Violation
	for _, b := range bans.sorted() {
		var v Violation
		for _, p := range g.Deps(root, true) {
			if p == root || !b.Matches(p) {
				continue
			}
			v.Count++
			if chain := chainTo(from, p); v.Chain == nil || len(chain) < len(v.Chain) {
				v.Chain = chain
			}
		}
		if v.Count > 0 {
			v.Root, v.Ban = root, b
			out = append(out, v)
		}
	}
	return out
}

func chainTo(from map[string]string, p string) []string {
	var chain []string
	for ; p != ""; p = from[p] {
		chain = append(chain, p)
	}
	slices.Reverse(chain)
	return chain
}

// Forbid fails t for every ban root breaks, printing how the banned
// package comes in.
func (g *Graph) Forbid(t testing.TB, root string, bans Bans) {
	t.Helper()
	if _, ok := g.imports[root]; !ok {
		t.Fatalf("deptest: %s is not in the loaded graph", root)
	}
	for _, v := range g.Violations(root, bans) {
		t.Error(v)
	}
}

// listHeader starts a dependency list; the list's own lines follow.
const listHeader = `# Every package that %s links
# for %s, one a line, sorted, but the standard library
# (it follows the Go toolchain that lists it, not the change).
# Generated by pkg/dev/deptest (make generate); do not edit. Its diff shows
# what a change adds to the binary.
`

// List renders the dependency list of root: a header, then the non-std
// packages root links (root included), sorted.
func (g *Graph) List(root string) string {
	var b strings.Builder
	fmt.Fprintf(&b, listHeader, root, strings.Join(Platform, " "))
	for _, p := range g.Deps(root, false) {
		b.WriteString(p + "\n")
	}
	return b.String()
}

// WriteList writes the dependency list of the package pkg (an import
// path or a relative one such as ./cmd/agent; see List) to path.
func WriteList(pkg, path string) error {
	g, err := load(pkg)
	if err != nil {
		return err
	}
	if len(g.roots) != 1 {
		return fmt.Errorf("deptest: %s names %d packages, not one", pkg, len(g.roots))
	}
	if err := os.WriteFile(path, []byte(g.List(g.roots[0])), 0o644); err != nil {
		return fmt.Errorf("deptest: write list: %w", err)
	}
	return nil
}

// CheckList fails t when the checked-in dependency list at path is not
// the list of root, printing the packages added and removed.
func (g *Graph) CheckList(t testing.TB, root, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("deptest: %v (make generate writes it)", err)
	}
	if got := g.List(root); string(b) != got {
		added, removed := diffLines(listSet(string(b)), listSet(got))
		t.Errorf("%s is stale: run make generate (packages added: %d, removed: %d)\n%s",
			path, len(added), len(removed), formatDiff(added, removed))
	}
}

// listSet returns the package lines of a list (not its comments).
func listSet(s string) map[string]bool {
	out := map[string]bool{}
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out[l] = true
		}
	}
	return out
}

// diffLines returns what want has and have lacks (added) and the reverse
// (removed), sorted.
func diffLines(have, want map[string]bool) (added, removed []string) {
	for p := range want {
		if !have[p] {
			added = append(added, p)
		}
	}
	for p := range have {
		if !want[p] {
			removed = append(removed, p)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	return added, removed
}

func formatDiff(added, removed []string) string {
	var b strings.Builder
	for _, p := range added {
		b.WriteString("+ " + p + "\n")
	}
	for _, p := range removed {
		b.WriteString("- " + p + "\n")
	}
	if b.Len() == 0 {
		b.WriteString("(only the header differs)\n")
	}
	return b.String()
}
