package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pinnedClient trusts exactly the certificate with the given SHA-256 fingerprint, as an
// operator who pins the printed fingerprint does.
func pinnedClient(fingerprint string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, // replaced by the pin below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			sum := sha256.Sum256(raw[0])
			var parts []string
			for _, b := range sum {
				parts = append(parts, fmt.Sprintf("%02X", b))
			}
			if strings.Join(parts, ":") != fingerprint {
				return errors.New("fingerprint mismatch")
			}
			return nil
		},
	}}}
}

// tokenFile writes tokens, one per line, into a file and returns its path.
func tokenFile(t *testing.T, tokens ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(strings.Join(tokens, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// noEnv is an empty environment.
func noEnv(string) string { return "" }

// The API tokens come from a file and the environment, never from the
// command line (which any local user reads with ps).
func TestCommandLine(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, w := io.Pipe()
	done := make(chan error, 1)
	env := func(k string) string {
		if k == "PVESIM_TOKENS" {
			return "env@pve!e=fromenv"
		}
		return ""
	}
	go func() {
		done <- run(ctx, []string{
			"--listen", "127.0.0.1:0", "--cluster", "lab", "--nodes", "3",
			"--token-file", tokenFile(t, "root@pam!ci=s3cret", "", "ops@pve!ro=other"),
			"--offline", "pve3", "--fail", "GET /nodes/*/storage 503 1", "--node-listen", "pve2=127.0.0.1:0",
		}, env, w, io.Discard)
		w.Close()
	}()
	lines := map[string]string{}
	sc := bufio.NewScanner(out)
	for len(lines) < 6 && sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ": ")
		lines[k] = v
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	base, fp := lines["url"], lines["fingerprint"]
	if !strings.HasPrefix(base, "https://127.0.0.1:") || !strings.HasSuffix(base, "/api2/json") || len(fp) != 95 ||
		lines["node pve1"] != base+" fingerprint "+fp || !strings.Contains(lines["node pve2"], "/api2/json fingerprint ") {
		t.Fatalf("printed %v", lines)
	}
	hc := pinnedClient(fp)
	get := func(token, path string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "PVEAPIToken="+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tok := range []string{"root@pam!ci=s3cret", "ops@pve!ro=other", "env@pve!e=fromenv"} {
		if code, body := get(tok, "/cluster/status"); code != 200 || !strings.Contains(body, `"name":"lab"`) || !strings.Contains(body, `"name":"pve3"`) {
			t.Fatalf("cluster status with %s: %d %s", tok, code, body)
		}
	}
	if code, _ := get("root@pam!ci=wrong", "/version"); code != 401 {
		t.Fatalf("wrong secret: %d", code)
	}
	if code, _ := get("root@pam!ci=s3cret", "/nodes/pve3/status"); code != 595 {
		t.Fatalf("offline node: %d", code)
	}
	if code, _ := get("root@pam!ci=s3cret", "/nodes/pve1/storage"); code != 503 {
		t.Fatalf("injected failure: %d", code)
	}
	if code, _ := get("root@pam!ci=s3cret", "/nodes/pve1/storage"); code != 200 {
		t.Fatalf("after the injected failure: %d", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestCommandLineRejectsBadFlags(t *testing.T) {
	t.Parallel()
	tf := tokenFile(t, "a@b!c=d")
	for _, args := range [][]string{
		{"--nodes", "2"},       // no token
		{"--token", "a@b!c=d"}, // a token on the command line
		{"--token-file", "/nonexistent/tokens"},
		{"--token-file", tokenFile(t, "not-a-token")},
		{"--token-file", tokenFile(t, "")}, // an empty file
		{"--token-file", tf, "--offline", "pve9"},
		{"--token-file", tf, "--fail", "GET /x"},
		{"--token-file", tf, "--timing", "slow"},
		{"--token-file", tf, "--cluster", "bad name!"},
		{"--token-file", tf, "--node-listen", "pve7=127.0.0.1:0"},
		{"--token-file", tf, "--node-listen", "pve2"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := run(ctx, append([]string{"--listen", "127.0.0.1:0"}, args...), noEnv, io.Discard, io.Discard)
		cancel()
		if err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

func TestCommandLineRejectsCorruptStateFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(path, []byte(`{"version": 1, "guests": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, []string{"--listen", "127.0.0.1:0", "--token-file", tokenFile(t, "a@b!c=d"), "--state-file", path}, noEnv, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("run with a corrupt state file: %v, want an error naming %s", err, path)
	}
}
