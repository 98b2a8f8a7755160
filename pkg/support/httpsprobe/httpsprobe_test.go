package httpsprobe_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/support/httpsprobe"
)

// TestPlainHTTP checks the probe of a Service without TLS (the
// orchestrator's, whose chart's test hook asks /readyz and /graphql): only
// with -plain-http, never with a TLS flag, and the status asked for.
func TestPlainHTTP(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/graphql" {
			http.Error(w, `{"errors":[{"message":"no token"}]}`, http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	}))
	t.Cleanup(srv.Close)
	probe := func(args ...string) error {
		return httpsprobe.Main(t.Context(), "probe", args, io.Discard)
	}
	for _, ok := range [][]string{
		{"-plain-http", srv.URL + "/readyz"},
		{"-plain-http", "-status", "401", srv.URL + "/graphql"},
	} {
		if err := probe(ok...); err != nil {
			t.Errorf("probe %q: %v", ok, err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{srv.URL + "/readyz"}, "not an https URL"},
		{[]string{"-plain-http", strings.Replace(srv.URL, "http:", "https:", 1) + "/readyz"}, "not an http URL"},
		{[]string{"-plain-http", "-ca-file", "/etc/ssl/certs/ca-certificates.crt", srv.URL}, "not -plain-http"},
		{[]string{"-plain-http", "-server-name", "x", srv.URL}, "not -plain-http"},
		{[]string{"-plain-http", srv.URL + "/graphql"}, "401"},
		{[]string{"-plain-http", "-status", "401", srv.URL + "/readyz"}, "200 OK"},
		{[]string{"-plain-http", "-status", "0", srv.URL}, "no HTTP status"},
	} {
		if err := probe(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("probe %q: %v, want %q", c.args, err, c.want)
		}
	}
}
