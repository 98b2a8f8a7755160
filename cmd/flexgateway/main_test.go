package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/syncbuf"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// TestFlags checks the flags' errors: a missing token file or data
// directory, a short token, an unknown level.
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
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "-token-file and -data-dir are required"},
		{[]string{"-token-file", short, "-data-dir", dir}, "shorter than 16"},
		{[]string{"-token-file", filepath.Join(dir, "none"), "-data-dir", dir}, "no such file"},
		{[]string{"-token-file", good, "-data-dir", dir, "-log-level", "loud"}, "-log-level"},
		{[]string{"-token-file", good, "-data-dir", dir, "-caddy-log-level", "loud"}, "-caddy-log-level"},
		{[]string{"-token-file", good, "-data-dir", dir, "extra"}, "unexpected arguments"},
	} {
		_, _, err := parse(c.args, noenv, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	cfg, _, err := parse(nil, func(k string) string {
		return map[string]string{"FLEXGATEWAY_TOKEN_FILE": good, "FLEXGATEWAY_DATA_DIR": dir, "FLEXGATEWAY_ADMIN_ADDR": "127.0.0.1:1"}[k]
	}, &bytes.Buffer{})
	if err != nil || cfg.Token != "0123456789abcdef0123" || cfg.AdminAddr != "127.0.0.1:1" || cfg.DataDir != dir || cfg.CaddyLogLevel != "WARN" {
		t.Errorf("from the environment: %+v, %v", cfg, err)
	}
}

// TestRun runs flexgateway as main does: it serves the admin API with the
// token of its file, becomes ready with a config and stops when its
// context ends.
func TestRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var logs syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-admin-addr", "127.0.0.1:0", "-token-file", tokenFile, "-data-dir", filepath.Join(dir, "data")},
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
	c := &lbconfig.Client{BaseURL: "http://" + addr, Token: "0123456789abcdef0123"}
	if err := c.Apply(t.Context(), lbconfig.Config{Revision: "r1"}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/readyz")
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
