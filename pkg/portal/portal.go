// Package portal serves flexplane's web portal: the static single-page app
// built from portal/ (`make portal`, Nuxt with ssr off) and the runtime
// configuration document the app reads at start, so that one build serves
// every deployment.
//
// The orchestrator mounts the handler at "/" next to the API:
//
//	h, err := portal.New(portal.Config{Dir: "portal/.output/public", Issuer: iss, ClientID: "flexplane-portal"})
//	mux.Handle("/graphql", apiHandler)
//	mux.Handle("/", h)
//
// The built portal is read from Config.Dir at request time: the Go build
// never needs it, and while it is missing every page answers 503 with a
// short explanation (the configuration document still works). Pages carry
// a Content-Security-Policy that lets them load only from their own origin
// and connect only to it and the issuer: the portal works air-gapped, and
// the browser enforces it.
package portal

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"regexp"
	"strings"
	"time"
)

// ConfigPath is where the handler serves the runtime configuration
// document (see Document).
const ConfigPath = "/config.json"

// AssetPrefix is the directory of the build's content-hashed files; they
// are cached by browsers for a year, except the build manifests under
// AssetPrefix + "builds/" (latest.json tells the app a new build exists).
const AssetPrefix = "/_nuxt/"

// Config configures the portal handler. Issuer and ClientID are required.
type Config struct {
	// Dir is the directory of the built portal (portal/.output/public after
	// `make portal`). "" or a directory without index.html serves a 503
	// page until the build appears; it is looked up on every request.
	Dir string
	// Issuer is the OpenID issuer URL the portal logs in with (its
	// discovery document is Issuer + "/.well-known/openid-configuration").
	// The pages may connect to its origin only (Content-Security-Policy),
	// so its token endpoint must be on that origin, as Zitadel's is.
	Issuer string
	// ClientID is the portal's OAuth client id at the issuer (a public
	// client using the authorization code flow with PKCE). Its redirect
	// URI is <portal origin>/auth/callback and its post-logout redirect
	// URI <portal origin>/.
	ClientID string
	// CLIClientID is the client id of the command line's native OIDC
	// application (a public client with the device authorization grant
	// and refresh tokens), published in the configuration document for
	// flexctl login; "" publishes none, and flexctl signs in as ClientID.
	CLIClientID string
	// Scopes requested at login; nil is openid, profile, email and
	// offline_access (which gets the session a refresh token, so that it
	// renews before its access token expires).
	Scopes []string
	// GraphQLPath is the API endpoint, relative to the portal's origin or
	// absolute; "" is "/graphql".
	GraphQLPath string
	// Logger receives errors serving files; nil discards.
	Logger *slog.Logger
}

// Document is the runtime configuration the portal fetches from
// ConfigPath before anything else.
type Document struct {
	Issuer   string   `json:"issuer"`
	ClientID string   `json:"clientId"`
	Scopes   []string `json:"scopes"`
	GraphQL  string   `json:"graphql"`
	// CLIClientID is the client flexctl login signs in as (device
	// authorization); absent, it signs in as ClientID.
	CLIClientID string `json:"cliClientId,omitempty"`
}

// Handler serves the portal. It is safe for concurrent use.
type Handler struct {
	dir     string
	config  []byte
	policy0 string // the Content-Security-Policy of pages, before script hashes
	log     *slog.Logger
}

// New checks cfg and returns the portal's handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" {
		return nil, errors.New("portal: new: Issuer and ClientID are required")
	}
	if u, err := url.Parse(cfg.Issuer); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("portal: new: Issuer %q is not an absolute http(s) URL", cfg.Issuer)
	}
	if cfg.Scopes == nil {
		cfg.Scopes = []string{"openid", "profile", "email", "offline_access"}
	}
	if cfg.GraphQLPath == "" {
		cfg.GraphQLPath = "/graphql"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// Scripts, styles, fonts and images come from the portal's own origin;
	// the page talks to its origin and the issuer (discovery, token).
	connect := []string{"'self'", issuerOrigin(cfg.Issuer)}
	if u, err := url.Parse(cfg.GraphQLPath); err == nil && u.Host != "" {
		connect = append(connect, u.Scheme+"://"+u.Host)
	}
	policy := "default-src 'self'; connect-src " + strings.Join(connect, " ") +
		"; img-src 'self' data:; style-src 'self' 'unsafe-inline'; object-src 'none'; base-uri 'self'; frame-ancestors 'none'; script-src 'self'"
	doc, err := json.Marshal(Document{
		Issuer:      strings.TrimSuffix(cfg.Issuer, "/"),
		ClientID:    cfg.ClientID,
		Scopes:      cfg.Scopes,
		GraphQL:     cfg.GraphQLPath,
		CLIClientID: cfg.CLIClientID,
	})
	if err != nil {
		return nil, fmt.Errorf("portal: new: %w", err)
	}
	return &Handler{dir: cfg.Dir, config: doc, policy0: policy, log: cfg.Logger}, nil
}

func issuerOrigin(issuer string) string {
	u, _ := url.Parse(issuer) // checked by New
	return u.Scheme + "://" + u.Host
}

// inlineScript matches a script element; group 1 is its attributes, group
// 2 its text.
var inlineScript = regexp.MustCompile(`(?is)<script\b([^>]*)>(.*?)</script>`)

// policy is the Content-Security-Policy of an HTML page: the base policy,
// plus the hash of each inline script the page carries (the build puts its
// runtime configuration in one), so that nothing else can run.
func (h *Handler) policy(page []byte) string {
	var b strings.Builder
	b.WriteString(h.policy0)
	for _, m := range inlineScript.FindAllSubmatch(page, -1) {
		attrs := strings.ToLower(string(m[1]))
		if strings.Contains(attrs, "src=") || (strings.Contains(attrs, "type=") &&
			!strings.Contains(attrs, "javascript") && !strings.Contains(attrs, "module")) {
			continue // external, or a data block that never runs
		}
		sum := sha256.Sum256(m[2])
		b.WriteString(" 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'")
	}
	return b.String()
}

// contentTypes fixes the types of the files a build contains, so they do
// not depend on the host's mime tables.
var contentTypes = map[string]string{
	".html":        "text/html; charset=utf-8",
	".js":          "text/javascript; charset=utf-8",
	".mjs":         "text/javascript; charset=utf-8",
	".css":         "text/css; charset=utf-8",
	".json":        "application/json",
	".map":         "application/json",
	".svg":         "image/svg+xml",
	".png":         "image/png",
	".ico":         "image/x-icon",
	".webp":        "image/webp",
	".woff2":       "font/woff2",
	".woff":        "font/woff",
	".txt":         "text/plain; charset=utf-8",
	".webmanifest": "application/manifest+json",
}

func contentType(name string) string {
	ext := path.Ext(name)
	if t, ok := contentTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	return "application/octet-stream"
}

// ServeHTTP serves ConfigPath, the files of the build, and index.html for
// any other path without a file extension (the app's own routes).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	p := path.Clean("/" + r.URL.Path)
	if p == ConfigPath {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(h.config))
		return
	}
	if h.dir == "" {
		h.unavailable(w, "no portal directory is configured")
		return
	}
	root := os.DirFS(h.dir)
	if _, err := fs.Stat(root, "index.html"); err != nil {
		h.log.Warn("portal: not built", "dir", h.dir, "err", err)
		h.unavailable(w, "the portal has not been built (run `make portal`)")
		return
	}
	name := strings.TrimPrefix(p, "/")
	if name == "" {
		name = "index.html"
	}
	if st, err := fs.Stat(root, name); err == nil && st.IsDir() {
		name = path.Join(name, "index.html")
	}
	if h.serveFile(w, r, root, name) {
		return
	}
	// Missing: the app's own routes (no extension, not under the asset
	// directory) get the app; a missing file is a plain 404 so that a
	// stale script reference never receives HTML.
	if strings.HasPrefix(p, AssetPrefix) || path.Ext(p) != "" {
		http.NotFound(w, r)
		return
	}
	if !h.serveFile(w, r, root, "index.html") {
		h.unavailable(w, "the portal's index.html cannot be read")
	}
}

// serveFile serves name from root with its content type and caching
// headers; false when it does not exist (nothing was written).
func (h *Handler) serveFile(w http.ResponseWriter, r *http.Request, root fs.FS, name string) bool {
	if !fs.ValidPath(name) {
		return false
	}
	f, err := root.Open(name)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			h.log.Error("portal: open", "file", name, "err", err)
		}
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.IsDir() {
		return false
	}
	rs, ok := f.(io.ReadSeeker)
	if !ok {
		return false
	}
	if path.Ext(name) == ".html" {
		// Pages are small: read them to allow exactly their inline scripts.
		page, err := io.ReadAll(rs)
		if err != nil {
			h.log.Error("portal: read", "file", name, "err", err)
			return false
		}
		w.Header().Set("Content-Security-Policy", h.policy(page))
		rs = bytes.NewReader(page)
	}
	w.Header().Set("Content-Type", contentType(name))
	if p := "/" + name; strings.HasPrefix(p, AssetPrefix) && !strings.HasPrefix(p, AssetPrefix+"builds/") {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		// index.html and other unhashed files: revalidate every time so a
		// new build is picked up at once.
		w.Header().Set("Cache-Control", "no-cache")
	}
	http.ServeContent(w, r, name, st.ModTime(), rs)
	return true
}

var unavailablePage = template.Must(template.New("unavailable").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>flexplane portal unavailable</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto; padding: 0 1rem">
<h1>The flexplane portal is not available</h1>
<p>{{.}}.</p>
<p>The GraphQL API at <code>/graphql</code> is not affected.</p>
</body></html>
`))

func (h *Handler) unavailable(w http.ResponseWriter, why string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Retry-After", "30")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = unavailablePage.Execute(w, why)
}
