// Package graphiql serves the GraphiQL page of the API with its scripts and
// styles from the binary, so that it works where nothing outside the site
// can be reached. The assets are GraphiQL's and React's own builds from the
// npm registry (assets/, fetched by `make generate-graphiql`); the page is
// gqlgen's GraphiQL page pointed at them, with their subresource integrity.
package graphiql

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/99designs/gqlgen/graphql/playground"
)

//go:embed assets
var assets embed.FS

// AssetDir is where, below the API's path, the assets are served: the API
// at /graphql serves them at /graphql/graphiql/NAME.
const AssetDir = "graphiql/"

// Handler serves the page and its assets; it answers at whatever path the
// API is mounted on.
type Handler struct {
	title string
	files map[string][]byte // asset name -> content
	sri   map[string]string // asset name -> subresource integrity
}

// New returns the handler of the page titled title.
func New(title string) (*Handler, error) {
	h := &Handler{title: title, files: map[string][]byte{}, sri: map[string]string{}}
	entries, err := fs.ReadDir(assets, "assets")
	if err != nil {
		return nil, fmt.Errorf("graphiql: %w", err)
	}
	for _, e := range entries {
		b, err := fs.ReadFile(assets, "assets/"+e.Name())
		if err != nil {
			return nil, fmt.Errorf("graphiql: %w", err)
		}
		sum := sha256.Sum256(b)
		h.files[e.Name()], h.sri[e.Name()] = b, "sha256-"+base64.StdEncoding.EncodeToString(sum[:])
	}
	for _, name := range pageAssets {
		if _, ok := h.files[name]; !ok {
			return nil, fmt.Errorf("graphiql: asset %s is missing (make generate-graphiql)", name)
		}
	}
	return h, nil
}

// pageAssets are what the page loads: GraphiQL's script and style, React,
// ReactDOM.
var pageAssets = [...]string{"graphiql.min.js", "graphiql.min.css", "react.production.min.js", "react-dom.production.min.js"}

// Asset reports whether r asks for one of the page's assets, and which.
func Asset(r *http.Request) (name string, ok bool) {
	dir, name := path.Split(r.URL.Path)
	return name, strings.HasSuffix(dir, "/"+AssetDir)
}

// ServePage answers with the page for the API at r's path.
func (h *Handler) ServePage(w http.ResponseWriter, r *http.Request) {
	api := r.URL.Path
	at := func(i int) (string, string) {
		return strings.TrimSuffix(api, "/") + "/" + AssetDir + pageAssets[i], h.sri[pageAssets[i]]
	}
	js, jsSRI := at(0)
	css, cssSRI := at(1)
	react, reactSRI := at(2)
	dom, domSRI := at(3)
	playground.Handler(h.title, api,
		playground.WithGraphiqlVersion(js, css, jsSRI, cssSRI),
		playground.WithGraphiqlReactVersion(react, dom, reactSRI, domSRI),
		playground.WithGraphiqlEnablePluginExplorer(false)).ServeHTTP(w, r)
}

// ServeAsset answers with the asset r asks for (see Asset).
func (h *Handler) ServeAsset(w http.ResponseWriter, r *http.Request) {
	name, _ := Asset(r)
	b, ok := h.files[name]
	if !ok || (r.Method != http.MethodGet && r.Method != http.MethodHead) || strings.HasPrefix(name, "LICENSE") {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", mime.TypeByExtension(path.Ext(name)))
	w.Header().Set("Cache-Control", "public, max-age=86400")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b)
}
