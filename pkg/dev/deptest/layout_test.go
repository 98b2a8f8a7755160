package deptest_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/deptest"
)

// packageMap is the page of the manual that maps the module's packages.
const packageMap = "docs/develop/packages.md"

// TestPackageMapListsEveryPackage: the package map (docs/develop/packages.md)
// has one row per package of the module, no more and no less.
func TestPackageMapListsEveryPackage(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join("..", "..", "..", filepath.FromSlash(packageMap)))
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
		case line == "# Package map":
			in = true
		case in && strings.HasPrefix(line, "# "):
			in = false
		case in:
			if m := row.FindStringSubmatch(line); m != nil {
				mapped = append(mapped, module+"/"+m[1])
			}
		}
	}
	if len(mapped) == 0 {
		t.Fatal(packageMap + " has no package map (a \"# Package map\" section with a row per package)")
	}
	pkgs := deptest.Load(t, module+"/...").Roots()
	for _, p := range mapped {
		if !slices.Contains(pkgs, p) {
			t.Errorf("%s maps %s, which is not a package of the module", packageMap, p)
		}
	}
	for _, p := range pkgs {
		if !slices.Contains(mapped, p) {
			t.Errorf("package %s is missing from the package map, %s", p, packageMap)
		}
	}
}

// TestProductCodeImportsNoDevTools: no package outside pkg/dev (and the dev
// stack's main) links a dev tool or test harness, even indirectly.
func TestProductCodeImportsNoDevTools(t *testing.T) {
	t.Parallel()
	g := deptest.Load(t, module+"/...")
	bans := deptest.Bans{module + "/pkg/dev": "dev tools and test harnesses are for tests and make dev only"}
	for _, p := range g.Roots() {
		if strings.HasPrefix(p, module+"/pkg/dev/") || p == module+"/cmd/devstack" {
			continue
		}
		g.Forbid(t, p, bans)
	}
}
