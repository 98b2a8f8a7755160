package portal_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/portal"
)

// build lays out a directory shaped like a `nuxi generate` output.
func build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"index.html":               "<!doctype html><title>app</title>",
		"200.html":                 "<!doctype html><title>fallback</title>",
		"favicon.ico":              "ico",
		"_nuxt/entry.Ab12Cd.js":    "console.log(1)",
		"_nuxt/entry.Ab12Cd.css":   "body{}",
		"_nuxt/builds/latest.json": "{}",
		"csp/index.html": `<!doctype html><script type="module" src="/_nuxt/entry.Ab12Cd.js"></script>` +
			`<script>window.__NUXT__={}</script><script type="application/json" id="data">{"a":1}</script>`,
	}
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func serve(t *testing.T, cfg portal.Config) *httptest.Server {
	t.Helper()
	if cfg.Issuer == "" {
		cfg.Issuer = "http://127.0.0.1:9999/"
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "flexplane-portal"
	}
	h, err := portal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status int
	header http.Header
	body   string
}

func request(t *testing.T, method, url string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{res.StatusCode, res.Header, string(b)}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []portal.Config{
		{ClientID: "c"},
		{Issuer: "http://idp"},
		{Issuer: "idp.example", ClientID: "c"},
		{Issuer: "ftp://idp.example", ClientID: "c"},
	} {
		if _, err := portal.New(cfg); err == nil || !strings.HasPrefix(err.Error(), "portal: new: ") {
			t.Errorf("New(%+v) = %v, want a portal: new: error", cfg, err)
		}
	}
}

func TestConfigDocument(t *testing.T) {
	t.Parallel()
	srv := serve(t, portal.Config{Dir: build(t), Issuer: "https://id.example/", ClientID: "portal-app"})
	r := request(t, http.MethodGet, srv.URL+portal.ConfigPath)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("config: %d %v", r.status, r.header)
	}
	var doc portal.Document
	if err := json.Unmarshal([]byte(r.body), &doc); err != nil {
		t.Fatal(err)
	}
	want := portal.Document{Issuer: "https://id.example", ClientID: "portal-app", Scopes: []string{"openid", "profile", "email", "offline_access"}, GraphQL: "/graphql"}
	if doc.Issuer != want.Issuer || doc.ClientID != want.ClientID || strings.Join(doc.Scopes, " ") != "openid profile email offline_access" || doc.GraphQL != want.GraphQL {
		t.Errorf("config = %+v, want %+v", doc, want)
	}
	if strings.Contains(r.body, "cliClientId") {
		t.Errorf("config names a command line client none was given: %s", r.body)
	}

	// With the command line's client: named for flexctl login.
	srv = serve(t, portal.Config{Dir: build(t), Issuer: "https://id.example/", ClientID: "portal-app", CLIClientID: "flexctl-app"})
	r = request(t, http.MethodGet, srv.URL+portal.ConfigPath)
	doc = portal.Document{}
	if err := json.Unmarshal([]byte(r.body), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.CLIClientID != "flexctl-app" || doc.ClientID != "portal-app" || !strings.Contains(r.body, `"cliClientId":"flexctl-app"`) {
		t.Errorf("config with a command line client: %s", r.body)
	}
}

func TestServesBuild(t *testing.T) {
	t.Parallel()
	srv := serve(t, portal.Config{Dir: build(t)})
	cases := []struct {
		path, body, contentType, cache string
		status                         int
	}{
		{"/", "<!doctype html><title>app</title>", "text/html; charset=utf-8", "no-cache", 200},
		{"/index.html", "<!doctype html><title>app</title>", "text/html; charset=utf-8", "no-cache", 200},
		// The app's own routes get index.html.
		{"/images", "<!doctype html><title>app</title>", "text/html; charset=utf-8", "no-cache", 200},
		{"/platform/vdcs/prod", "<!doctype html><title>app</title>", "text/html; charset=utf-8", "no-cache", 200},
		{"/auth/callback?code=x&state=y", "<!doctype html><title>app</title>", "text/html; charset=utf-8", "no-cache", 200},
		{"/_nuxt/entry.Ab12Cd.js", "console.log(1)", "text/javascript; charset=utf-8", "public, max-age=31536000, immutable", 200},
		{"/_nuxt/entry.Ab12Cd.css", "body{}", "text/css; charset=utf-8", "public, max-age=31536000, immutable", 200},
		{"/_nuxt/builds/latest.json", "{}", "application/json", "no-cache", 200},
		{"/favicon.ico", "ico", "image/x-icon", "no-cache", 200},
		// Missing files are 404s, never the app's HTML.
		{"/_nuxt/gone.Zz99.js", "404 page not found\n", "text/plain; charset=utf-8", "", 404},
		{"/_nuxt/builds", "404 page not found\n", "text/plain; charset=utf-8", "", 404},
		{"/robots.txt", "404 page not found\n", "text/plain; charset=utf-8", "", 404},
		// Paths cannot leave the directory: they are app routes.
		{"/../../../../etc/passwd", "<!doctype html><title>app</title>", "text/html; charset=utf-8", "no-cache", 200},
		{"/%2e%2e/%2e%2e/etc/hostname", "<!doctype html><title>app</title>", "text/html; charset=utf-8", "no-cache", 200},
		{"/..%2f..%2f..%2fetc/hosts.txt", "404 page not found\n", "text/plain; charset=utf-8", "", 404},
	}
	for _, c := range cases {
		r := request(t, http.MethodGet, srv.URL+c.path)
		if r.status != c.status || r.body != c.body || r.header.Get("Content-Type") != c.contentType || r.header.Get("Cache-Control") != c.cache {
			t.Errorf("GET %s = %d %q type %q cache %q; want %d %q type %q cache %q", c.path,
				r.status, r.body, r.header.Get("Content-Type"), r.header.Get("Cache-Control"), c.status, c.body, c.contentType, c.cache)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff header", c.path)
		}
	}
	if r := request(t, http.MethodHead, srv.URL+"/_nuxt/entry.Ab12Cd.js"); r.status != 200 || r.body != "" || r.header.Get("Content-Length") != "14" {
		t.Errorf("HEAD asset = %d %q %v", r.status, r.body, r.header)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		if r := request(t, m, srv.URL+"/"); r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s / = %d %v", m, r.status, r.header)
		}
	}
}

func TestContentSecurityPolicy(t *testing.T) {
	t.Parallel()
	srv := serve(t, portal.Config{Dir: build(t), Issuer: "https://id.example:8443/realm"})
	sum := sha256.Sum256([]byte("window.__NUXT__={}"))
	want := "default-src 'self'; connect-src 'self' https://id.example:8443; img-src 'self' data:; " +
		"style-src 'self' 'unsafe-inline'; object-src 'none'; base-uri 'self'; frame-ancestors 'none'; " +
		"script-src 'self' 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	if r := request(t, http.MethodGet, srv.URL+"/csp/"); r.status != 200 || r.header.Get("Content-Security-Policy") != want {
		t.Errorf("page %q policy = %q, want %q", r.body, r.header.Get("Content-Security-Policy"), want)
	}
	// A page without inline scripts allows only the origin's own.
	if r := request(t, http.MethodGet, srv.URL+"/vms"); !strings.HasSuffix(r.header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("app policy = %q", r.header.Get("Content-Security-Policy"))
	}
	// An absolute API endpoint may be reached too.
	srv = serve(t, portal.Config{Dir: build(t), GraphQLPath: "https://api.example/graphql"})
	if r := request(t, http.MethodGet, srv.URL+"/"); !strings.Contains(r.header.Get("Content-Security-Policy"), "connect-src 'self' http://127.0.0.1:9999 https://api.example;") {
		t.Errorf("policy with absolute API = %q", r.header.Get("Content-Security-Policy"))
	}
}

func TestMissingBuildIsUnavailable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, cfg := range []portal.Config{{}, {Dir: dir}, {Dir: filepath.Join(dir, "absent")}} {
		srv := serve(t, cfg)
		for _, p := range []string{"/", "/images", "/_nuxt/entry.js"} {
			r := request(t, http.MethodGet, srv.URL+p)
			if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "The flexplane portal is not available") ||
				r.header.Get("Cache-Control") != "no-store" || strings.Contains(r.body, dir) {
				t.Errorf("dir %q GET %s = %d %q", cfg.Dir, p, r.status, r.body)
			}
		}
		// The configuration document does not need the build.
		if r := request(t, http.MethodGet, srv.URL+portal.ConfigPath); r.status != http.StatusOK {
			t.Errorf("dir %q config = %d", cfg.Dir, r.status)
		}
	}
	// A build that appears later is served without a restart.
	srv := serve(t, portal.Config{Dir: dir})
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte("built"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := request(t, http.MethodGet, srv.URL+"/vms"); r.status != http.StatusOK || r.body != "built" {
		t.Errorf("after build: %d %q", r.status, r.body)
	}
}
