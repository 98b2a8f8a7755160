package layout_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/flexplane/flexplane/"

// repoRoot is the module's root, from this package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module root: %v", err)
	}
	return root
}

// goList returns each of the module's packages with its dependencies
// (non-test, transitive), relative to the module.
func goList(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./...")
	cmd.Dir = repoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		var deps []string
		for _, d := range f[1:] {
			if rel, ok := strings.CutPrefix(d, module); ok {
				deps = append(deps, rel)
			}
		}
		pkgs[strings.TrimPrefix(f[0], module)] = deps
	}
	return pkgs
}

// TestReadmeMapListsEveryPackage: the README's package map has one line
// per package of the module, no more and no less.
func TestReadmeMapListsEveryPackage(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\| `([a-z0-9/_.-]+)` \\|")
	var mapped []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "## Package map":
			in = true
		case in && strings.HasPrefix(line, "## "):
			in = false
		case in:
			if m := row.FindStringSubmatch(line); m != nil {
				mapped = append(mapped, m[1])
			}
		}
	}
	if len(mapped) == 0 {
		t.Fatal("README.md has no package map (a \"## Package map\" section with a row per package)")
	}
	pkgs := goList(t)
	for _, p := range mapped {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("README.md maps %s, which is not a package of the module", p)
		}
	}
	for p := range pkgs {
		if !slices.Contains(mapped, p) {
			t.Errorf("package %s is missing from README.md's package map", p)
		}
	}
}

// TestProductCodeImportsNoDevTools: no package outside pkg/dev (and the dev
// stack's main) imports a dev tool or harness, even indirectly.
func TestProductCodeImportsNoDevTools(t *testing.T) {
	t.Parallel()
	for p, deps := range goList(t) {
		if strings.HasPrefix(p, "pkg/dev/") || p == "cmd/devstack" {
			continue
		}
		for _, d := range deps {
			if strings.HasPrefix(d, "pkg/dev/") {
				t.Errorf("%s imports %s: product code must not depend on dev tools or test harnesses", p, d)
			}
		}
	}
}
