package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/lbtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/syncbuf"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// TestFlags checks the flags' errors: a missing token file or data
// directory, a short token, missing TLS files, an unknown level.
func TestFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	short, good := filepath.Join(dir, "short"), filepath.Join(dir, "good")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noenv := func(string) string { return "" }
	tlsArgs := []string{"-tls-cert-file", "c", "-tls-key-file", "k", "-client-ca-file", "ca"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "-token-file and -data-dir are required"},
		{[]string{"-token-file", good, "-data-dir", dir}, "-tls-cert-file, -tls-key-file and -client-ca-file are required"},
		{[]string{"-token-file", good, "-data-dir", dir, "-tls-cert-file", "c", "-tls-key-file", "k"}, "-client-ca-file are required"},
		{append([]string{"-token-file", short, "-data-dir", dir}, tlsArgs...), "shorter than 16"},
		{append([]string{"-token-file", filepath.Join(dir, "none"), "-data-dir", dir}, tlsArgs...), "no such file"},
		{append([]string{"-token-file", good, "-data-dir", dir, "-log-level", "loud"}, tlsArgs...), "-log-level"},
		{append([]string{"-token-file", good, "-data-dir", dir, "-caddy-log-level", "loud"}, tlsArgs...), "-caddy-log-level"},
		{append([]string{"-token-file", good, "-data-dir", dir}, append(tlsArgs, "extra")...), "unexpected arguments"},
	} {
		_, _, err := parse(c.args, noenv, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	cfg, _, err := parse(nil, func(k string) string {
		return map[string]string{"FLEXGATEWAY_TOKEN_FILE": good, "FLEXGATEWAY_DATA_DIR": dir, "FLEXGATEWAY_ADMIN_ADDR": "127.0.0.1:1",
			"FLEXGATEWAY_TLS_CERT_FILE": "c", "FLEXGATEWAY_TLS_KEY_FILE": "k", "FLEXGATEWAY_CLIENT_CA_FILE": "ca"}[k]
	}, &bytes.Buffer{})
	if err != nil || cfg.Token != "0123456789abcdef0123" || cfg.AdminAddr != "127.0.0.1:1" || cfg.DataDir != dir || cfg.CaddyLogLevel != "WARN" ||
		cfg.TLS != (lbconfig.TLSFiles{CertFile: "c", KeyFile: "k", CAFile: "ca"}) {
		t.Errorf("from the environment: %+v, %v", cfg, err)
	}
}

// TestRun runs flexgateway as main does: it serves the admin API over TLS
// with the certificates and token of its files, becomes ready with a
// config and stops when its context ends; `flexgateway probe` fails on it
// before the config, succeeds after, and fails for another name or
// without the CA.
func TestRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pki := lbtest.NewPKI(t)
	ctx, cancel := context.WithCancel(t.Context())
	var logs syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-admin-addr", "127.0.0.1:0", "-token-file", tokenFile, "-data-dir", filepath.Join(dir, "data"),
			"-tls-cert-file", pki.Server.CertFile, "-tls-key-file", pki.Server.KeyFile, "-client-ca-file", pki.Server.CAFile},
			func(string) string { return "" }, &logs)
	}()
	var addr string
	re := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`)
	poll.Until(t, 30*time.Second, "the admin address logged", func() error {
		m := re.FindStringSubmatch(logs.String())
		if m == nil {
			return fmt.Errorf("not in the log:\n%s", logs.String())
		}
		addr = m[1]
		return nil
	})
	hc := pki.HTTP(t, 30*time.Second)
	c := &lbconfig.Client{BaseURL: "https://" + addr, Token: "0123456789abcdef0123", HTTP: hc}
	// `flexgateway probe` (the chart's helm test): /readyz must answer
	// 200 over TLS verified for the name asked.
	readyz := "https://" + addr + "/readyz"
	probeRun := func(args ...string) error {
		return run(t.Context(), append([]string{"probe"}, args...), func(string) string { return "" }, &bytes.Buffer{})
	}
	if err := probeRun("-ca-file", pki.Server.CAFile, "-server-name", "flexgateway", readyz); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("probe before any config: %v, want a 503", err)
	}
	if err := c.Apply(t.Context(), lbconfig.Config{Revision: "r1"}); err != nil {
		t.Fatal(err)
	}
	if err := probeRun("-ca-file", pki.Server.CAFile, "-server-name", "flexgateway", readyz); err != nil {
		t.Errorf("probe once ready: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-ca-file", pki.Server.CAFile, "-server-name", "other.example", readyz}, "certificate"},
		{[]string{"-server-name", "flexgateway", readyz}, "certificate"},
		{[]string{"-ca-file", pki.Server.CertFile + ".none", readyz}, "no such file"},
		{[]string{"http://" + addr + "/readyz"}, "not an https URL"},
		{[]string{readyz, readyz}, "want one URL"},
	} {
		if err := probeRun(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("probe %q: %v, want %q", c.args, err, c.want)
		}
	}
	resp, err := hc.Get("https://" + addr + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/readyz: %v %v", resp, err)
	}
	resp.Body.Close()
	if st, err := c.Status(t.Context()); err != nil || st.Revision != "r1" {
		t.Errorf("status %+v, %v", st, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}
