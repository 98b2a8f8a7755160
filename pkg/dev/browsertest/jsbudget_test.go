package browsertest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFirstPageJS measures a build shaped as nuxi generate writes it: the
// entry from index.html, its static import, the route "/"'s page chunk and
// the chunks preloaded with it; not the other routes' chunks, the
// prefetched ones nor the CSS.
func TestFirstPageJS(t *testing.T) {
	t.Parallel()
	public := t.TempDir()
	files := map[string]string{
		"index.html": `<html><head><link rel="modulepreload" as="script" crossorigin href="/_nuxt/entry.js">` +
			`<script type="module" src="/_nuxt/entry.js" crossorigin></script>` +
			`<link rel="prefetch" as="script" href="/_nuxt/prefetched.js"></head></html>`,
		"_nuxt/entry.js": `const __vite__mapDeps=(i,m=__vite__mapDeps,d=(m.f||(m.f=["./home.js","./shared.js","./home.css","./other.js"])))=>i.map(i=>d[i]);` +
			`import{a as b}from"./vendor.js";const r=[{name:"vms",path:"/vms",component:()=>L(()=>import("./other.js"),__vite__mapDeps([3]),import.meta.url)},` +
			`{name:"index",path:"/",component:()=>L(()=>import("./home.js"),__vite__mapDeps([0,1,2]),import.meta.url)}];`,
		"_nuxt/vendor.js":     strings.Repeat("vendor ", 100),
		"_nuxt/home.js":       `import"./shared.js";export default 1`,
		"_nuxt/shared.js":     `export const s=1`,
		"_nuxt/home.css":      `body{}`,
		"_nuxt/other.js":      strings.Repeat("other ", 1000),
		"_nuxt/prefetched.js": strings.Repeat("prefetched ", 1000),
	}
	for name, body := range files {
		p := filepath.Join(public, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	scripts, err := FirstPageJS(public)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, s := range scripts {
		paths = append(paths, s.Path)
		if s.Gzipped <= 0 {
			t.Errorf("%s: %d bytes gzipped", s.Path, s.Gzipped)
		}
	}
	slices.Sort(paths)
	want := []string{"/_nuxt/entry.js", "/_nuxt/home.js", "/_nuxt/shared.js", "/_nuxt/vendor.js"}
	if !slices.Equal(paths, want) {
		t.Errorf("first page scripts = %v, want %v", paths, want)
	}
	if Total(scripts) <= 0 || Total(scripts) > 2000 {
		t.Errorf("total %d bytes gzipped", Total(scripts))
	}

	// A build whose router has no route "/" is refused, not measured short.
	if err := os.WriteFile(filepath.Join(public, "_nuxt", "entry.js"), []byte(`import"./vendor.js"`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FirstPageJS(public); err == nil || !strings.Contains(err.Error(), `routes "/"`) {
		t.Errorf("a build without route \"/\": err = %v", err)
	}
}
