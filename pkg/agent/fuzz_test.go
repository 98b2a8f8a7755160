package agent

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"testing"
)

// FuzzAllowlist checks the agent's Proxy allowlist (policy.allowed) on any
// method and path. Seeds: testdata/fuzz/FuzzAllowlist. What it admits
//   - is clean: no "..", "." or empty segment, no trailing slash, nothing
//     escaped, no query or fragment, and reaches Proxmox unchanged through
//     the URL the agent builds (so what was checked is what Proxmox sees);
//   - is what net/http's ServeMux, an independent matcher of the same
//     templates, serves for that method (of the clean paths);
//   - stops being admitted when made unclean: a "." or ".." segment, a "//",
//     an escaped dot, a query or a fragment spliced in anywhere.
//
// And it is deterministic.
func FuzzAllowlist(f *testing.F) {
	p := newPolicy()
	mux := http.NewServeMux()
	for _, r := range p.rules {
		mux.HandleFunc(r.method+" "+r.tmpl, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	}
	base, err := url.Parse("https://127.0.0.1:8006/api2/json")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, p0 string) {
		ok := p.allowed(method, p0)
		if p.allowed(method, p0) != ok {
			t.Fatalf("allowed(%q, %q) is not deterministic", method, p0)
		}
		if cleanPath(p0) {
			// Served, not only looked up: ServeMux answers a path that
			// lacks the trailing slash of a {name...} pattern with a
			// redirect. Its GET patterns also match HEAD; the agent
			// refuses HEAD before the allowlist, and so does the allowlist.
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, &http.Request{Method: method, URL: &url.URL{Path: p0}, Host: "pve", Header: http.Header{}})
			if muxOK := rec.Code == http.StatusNoContent && method != http.MethodHead; muxOK != ok {
				t.Fatalf("allowed(%q, %q) = %v, but ServeMux answers %d", method, p0, ok, rec.Code)
			}
		}
		if !ok {
			return
		}
		if path.Clean(p0) != p0 || strings.ContainsAny(p0, "%?#\\ \x00") {
			t.Fatalf("allowed(%q, %q) admits an unclean path", method, p0)
		}
		u := *base
		u.Path += p0
		sent, err := url.Parse(u.String())
		if err != nil || sent.Path != base.Path+p0 || sent.RawQuery != "" || sent.Fragment != "" {
			t.Fatalf("allowed(%q, %q), but Proxmox would be sent %q (%v)", method, p0, u.String(), err)
		}
		for _, bad := range unclean(p0) {
			if p.allowed(method, bad) {
				t.Errorf("allowed(%q, %q) admits the unclean %q", method, p0, bad)
			}
		}
	})
}

// unclean returns variants of the clean path p that must never be admitted:
// a traversal, an empty segment, an escaped dot, a query or a fragment
// spliced in at every segment boundary.
func unclean(p string) []string {
	var out []string
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		for _, ins := range []string{"/.", "/..", "/", "/%2e", "/%2E%2e", "?x=1", "#f", "/x/.."} {
			out = append(out, p[:i]+ins+p[i:])
		}
	}
	return append(out, p+"/", p+"/.", p+"/..", p+"?", p+"#", p+"%2f", p+"/%2e%2e")
}
