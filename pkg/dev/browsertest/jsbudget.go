package browsertest

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// JSBudget is the portal's budget for the JavaScript of its first page,
// gzipped (issue 22): 350 KB.
const JSBudget = 350 * 1024

// Script is one JavaScript file of a page and its size gzipped.
type Script struct {
	Path    string // under the build, e.g. /_nuxt/C7znqby9.js
	Gzipped int
}

var (
	// <script type="module" src="/_nuxt/x.js"> and <link rel="modulepreload" href="/_nuxt/x.js">.
	htmlScript = regexp.MustCompile(`<(?:script[^>]*\bsrc|link[^>]*rel="modulepreload"[^>]*\bhref)="(/_nuxt/[^"]+\.js)"`)
	// Static imports of a minified module: import{a as b}from"./x.js", import"./x.js", export*from"./x.js".
	staticImport = regexp.MustCompile(`(?:\bimport|\bexport)\s*(?:[\w$*{}\s,]*?from\s*)?"(\./[^"]+\.js)"`)
	// Vite's table of the files a lazy chunk needs: __vite__mapDeps=(...m.f=["./a.js","./b.css",...]).
	mapDeps = regexp.MustCompile(`m\.f=\[((?:"[^"]*",?)*)\]`)
	// The router's record of the first page: path:"/",component:()=>X(()=>import("./p.js"),__vite__mapDeps([0,1])...
	rootRoute = regexp.MustCompile(`path:"/",component:\(\)=>[\w$]+\(\(\)=>import\("(\./[^"]+\.js)"\)(?:,__vite__mapDeps\(\[([\d,]*)\]\))?`)
)

// FirstPageJS returns the JavaScript the portal's first page (/, which shows
// the sign-in page before anyone signed in) loads from the static build in
// public, each file gzipped at level 9 as the browser test measures it:
// the scripts index.html loads, their static imports, and the route "/"'s
// page chunk with the chunks Vite preloads for it.
func FirstPageJS(public string) ([]Script, error) {
	index, err := os.ReadFile(filepath.Join(public, "index.html"))
	if err != nil {
		return nil, fmt.Errorf("browsertest: first page: %w", err)
	}
	var (
		out   []Script
		seen  = map[string]bool{}
		queue []string
	)
	for _, m := range htmlScript.FindAllSubmatch(index, -1) {
		queue = append(queue, string(m[1]))
	}
	if len(queue) == 0 {
		return nil, errors.New("browsertest: first page: index.html loads no script from /_nuxt/")
	}
	route := false
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		src, err := os.ReadFile(filepath.Join(public, filepath.FromSlash(p)))
		if err != nil {
			return nil, fmt.Errorf("browsertest: first page: %w", err)
		}
		gz, err := gzipped(src)
		if err != nil {
			return nil, fmt.Errorf("browsertest: first page: %s: %w", p, err)
		}
		out = append(out, Script{Path: p, Gzipped: gz})
		dir := path.Dir(p)
		for _, m := range staticImport.FindAllSubmatch(src, -1) {
			queue = append(queue, path.Join(dir, string(m[1])))
		}
		lazy, err := rootRouteChunks(src)
		if err != nil {
			return nil, fmt.Errorf("browsertest: first page: %s: %w", p, err)
		}
		for _, c := range lazy {
			route = true
			queue = append(queue, path.Join(dir, c))
		}
	}
	if !route {
		return nil, errors.New("browsertest: first page: no script routes \"/\" to a page chunk (has the build's shape changed?)")
	}
	return out, nil
}

// rootRouteChunks finds, in a module holding the router's records, the
// chunk of route "/" and the JavaScript chunks Vite preloads with it.
func rootRouteChunks(src []byte) ([]string, error) {
	m := rootRoute.FindSubmatch(src)
	if m == nil {
		return nil, nil
	}
	chunks := []string{string(m[1])}
	if len(m[2]) == 0 {
		return chunks, nil
	}
	table := mapDeps.FindSubmatch(src)
	if table == nil {
		return nil, errors.New("route \"/\" preloads chunks but there is no __vite__mapDeps table")
	}
	var files []string
	for f := range strings.SplitSeq(string(table[1]), ",") {
		files = append(files, strings.Trim(f, `"`))
	}
	for i := range strings.SplitSeq(string(m[2]), ",") {
		n, err := strconv.Atoi(i)
		if err != nil || n < 0 || n >= len(files) {
			return nil, fmt.Errorf("route \"/\" preloads chunk %q of %d", i, len(files))
		}
		if strings.HasSuffix(files[n], ".js") {
			chunks = append(chunks, files[n])
		}
	}
	return chunks, nil
}

func gzipped(b []byte) (int, error) {
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return 0, err
	}
	if _, err := w.Write(b); err != nil {
		return 0, err
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	return buf.Len(), nil
}

// Total is the scripts' gzipped size in all.
func Total(scripts []Script) int {
	n := 0
	for _, s := range scripts {
		n += s.Gzipped
	}
	return n
}
