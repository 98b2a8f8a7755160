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
	"net"
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

// startRun runs the command with args until the test ends (or stop is
// called, which returns run's error) and returns what it printed, "key:
// value" lines by key, once it printed want of them.
func startRun(t *testing.T, args []string, env func(string) string, want int) (lines map[string]string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, args, env, w, io.Discard)
		w.Close()
	}()
	lines = map[string]string{}
	sc := bufio.NewScanner(out)
	for len(lines) < want && sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ": ")
		lines[k] = v
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return lines, func() error { cancel(); return <-done }
}

// The API tokens come from a file and the environment, never from the
// command line (which any local user reads with ps).
func TestCommandLine(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := func(k string) string {
		if k == "PVESIM_TOKENS" {
			return "env@pve!e=fromenv"
		}
		return ""
	}
	files := t.TempDir()
	lines, stop := startRun(t, []string{
		"--listen", "127.0.0.1:0", "--cluster", "lab", "--nodes", "3", "--file-root", files,
		"--token-file", tokenFile(t, "root@pam!ci=s3cret", "", "ops@pve!ro=other"),
		"--offline", "pve3", "--fail", "GET /nodes/*/storage 503 1", "--node-listen", "pve2=127.0.0.1:0",
	}, env, 6)
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
	// --file-root: each node's file system holds its storages' directories
	// (a shared storage's leads to one directory).
	for _, node := range []string{"pve1", "pve2", "pve3"} {
		if fi, err := os.Stat(filepath.Join(files, node, "var", "lib", "vz")); err != nil || !fi.IsDir() {
			t.Errorf("node %s has no directory of storage local under --file-root: %v", node, err)
		}
		if dir, err := filepath.EvalSymlinks(filepath.Join(files, node, "mnt", "pve", "shared")); err != nil || dir != filepath.Join(files, "shared", "mnt", "pve", "shared") {
			t.Errorf("node %s's directory of storage shared: %q, %v", node, dir, err)
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
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// TestControlSocketTakesANodeOfflineAndBack: --control serves the fault
// control on an owner-only unix socket; an offline node answers 595 through
// the others, as in Proxmox, and its own endpoint drops connections.
func TestControlSocketTakesANodeOfflineAndBack(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "control.sock")
	lines, stop := startRun(t, []string{"--listen", "127.0.0.1:0", "--cluster", "lab", "--nodes", "2",
		"--token-file", tokenFile(t, "root@pam!ci=s3cret"), "--control", sock}, noEnv, 5)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket: %v %v, want mode 0600", fi, err)
	}
	control := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	post := func(path string) int {
		resp, err := control.Post("http://pvesim"+path, "", nil)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	status := func(endpoint, node string) int {
		url, fp, _ := strings.Cut(lines[endpoint], " fingerprint ")
		req, _ := http.NewRequest(http.MethodGet, url+"/nodes/"+node+"/status", nil)
		req.Header.Set("Authorization", "PVEAPIToken=root@pam!ci=s3cret")
		resp, err := pinnedClient(fp).Do(req)
		if err != nil {
			return 0 // the connection dropped
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("/nodes/pve2/offline"); got != http.StatusNoContent {
		t.Fatalf("offline: %d", got)
	}
	if a, b := status("node pve1", "pve2"), status("node pve2", "pve2"); a != 595 || b != 0 {
		t.Fatalf("offline pve2 through pve1: %d, at its own endpoint: %d; want 595 and a dropped connection", a, b)
	}
	if got := post("/nodes/pve2/online"); got != http.StatusNoContent {
		t.Fatalf("online: %d", got)
	}
	if a, b := status("node pve1", "pve2"), status("node pve2", "pve2"); a != 200 || b != 200 {
		t.Fatalf("pve2 back: %d through pve1, %d at its endpoint", a, b)
	}
	if got := post("/nodes/pve9/offline"); got != http.StatusNotFound {
		t.Errorf("unknown node: %d, want 404", got)
	}
	if err := stop(); err != nil {
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
		{"--token-file", tf, "--control", "/nonexistent/control.sock"},
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
