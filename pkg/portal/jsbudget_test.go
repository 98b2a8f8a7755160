package portal_test

import (
	"path/filepath"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/browsertest"
)

// TestFirstPageJSBudget checks the built portal's first page (the sign-in
// page) loads at most browsertest.JSBudget (350 KB) of JavaScript,
// gzipped; tests/conventions.test.mjs checks the same in the browser.
func TestFirstPageJSBudget(t *testing.T) {
	t.Parallel()
	_, public := browserPrerequisites(t)
	scripts, err := browsertest.FirstPageJS(public)
	if err != nil {
		t.Fatal(err)
	}
	total := browsertest.Total(scripts)
	t.Logf("first page JavaScript: %d files, %.1f KiB gzipped (budget %d KiB)", len(scripts), float64(total)/1024, browsertest.JSBudget/1024)
	if total > browsertest.JSBudget {
		t.Errorf("first page JavaScript is %d bytes gzipped, over the budget of %d", total, browsertest.JSBudget)
	}
}

// BenchmarkFirstPageJS reports the built portal's first-page JavaScript
// for `make bench`: its gzipped size in KiB, its files, and its ratio to
// the budget (the baseline: at most 1).
func BenchmarkFirstPageJS(b *testing.B) {
	public := filepath.Join(browsertestRoot(b), ".output", "public")
	var scripts []browsertest.Script
	for b.Loop() {
		var err error
		if scripts, err = browsertest.FirstPageJS(public); err != nil {
			b.Fatal(err)
		}
	}
	total := browsertest.Total(scripts)
	b.ReportMetric(float64(total)/1024, "KiB-gzip")
	b.ReportMetric(float64(len(scripts)), "files")
	b.ReportMetric(float64(total)/browsertest.JSBudget, "ratio-to-budget")
	if total > browsertest.JSBudget {
		b.Errorf("first page JavaScript is %d bytes gzipped, over the budget of %d", total, browsertest.JSBudget)
	}
}

// browsertestRoot is the portal's source directory; the build must be
// there (make portal), the browser need not.
func browsertestRoot(b *testing.B) string {
	root, err := filepath.Abs(filepath.Join("..", "..", "portal"))
	if err != nil {
		b.Fatal(err)
	}
	return root
}
