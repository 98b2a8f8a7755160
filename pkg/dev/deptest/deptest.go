// Package deptest keeps the import rules of flexplane with tests: it loads
// the import graph `go list -deps` reports (non-test code, for a fixed
// platform), fails a test for each forbidden package a root links (with
// the chain of imports that brings it in), and compares the dependencies
// of a binary with a checked-in list.
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
	return fmt.Sprintf("%s links %s (%d packages of it: %s); it comes in by\n\t%s",
		v.Root, v.Ban.Prefix, v.Count, v.Ban.Why, strings.Join(v.Chain, "\n\t-> "))
}

// Violations returns, per ban that root breaks, the chain that breaks it.
func (g *Graph) Violations(root string, bans []Ban) []Violation {
	from := g.reach(root)
	var out []Violation
	for _, b := range bans {
		var v Violation
		for _, p := range g.Deps(root, true) {
			if !b.Matches(p) {
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
func (g *Graph) Forbid(t testing.TB, root string, bans []Ban) {
	t.Helper()
	if _, ok := g.imports[root]; !ok {
		t.Fatalf("deptest: %s is not in the loaded graph", root)
	}
	for _, v := range g.Violations(root, bans) {
		t.Error(v)
	}
}
