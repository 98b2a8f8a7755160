package pvesim_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

const (
	testTokenID     = "root@pam!test"
	testTokenSecret = "5ecr3t-t0ken"
	testToken       = testTokenID + "=" + testTokenSecret
)

// startCluster starts a simulated cluster closed at the end of the test.
func startCluster(t testing.TB, cfg pvesim.Config) *pvesim.Cluster {
	t.Helper()
	if cfg.Tokens == nil {
		cfg.Tokens = []string{testToken}
	}
	// Tests check every response against the schema; benchmarks measure the bare server.
	if _, bench := t.(*testing.B); !bench {
		cfg.CheckResponses = true
	}
	c, err := pvesim.Start(cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		// Every response of every test conforms to the schema's `returns`.
		for _, p := range c.SchemaProblems() {
			t.Errorf("response vs schema: %s", p)
		}
	})
	return c
}

// clients caches one HTTP client per cluster, so raw calls reuse TLS connections.
var clients sync.Map // *pvesim.Cluster -> *http.Client

// sharedClient is the cluster's cached HTTP client.
func sharedClient(t testing.TB, c *pvesim.Cluster) *http.Client {
	t.Helper()
	if hc, ok := clients.Load(c); ok {
		return hc.(*http.Client)
	}
	hc := httpClient(t, c)
	if prev, loaded := clients.LoadOrStore(c, hc); loaded {
		return prev.(*http.Client)
	}
	t.Cleanup(func() { clients.Delete(c) })
	return hc
}

// httpClient trusts the cluster's CA, as an operator who installed pve-root-ca.pem does.
func httpClient(t testing.TB, c *pvesim.Cluster) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CACertPEM()) {
		t.Fatal("CA PEM does not parse")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// pveClient is a go-proxmox client for the cluster with the given token.
func pveClient(t testing.TB, c *pvesim.Cluster, tokenID, secret string) *proxmox.Client {
	t.Helper()
	return proxmox.NewClient(c.URL()+"/api2/json",
		proxmox.WithHTTPClient(httpClient(t, c)),
		proxmox.WithAPIToken(tokenID, secret))
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitOK waits for a task and fails the test unless it ended with exit status OK.
func waitOK(t testing.TB, ctx context.Context, task *proxmox.Task, err error) *proxmox.Task {
	t.Helper()
	if err != nil {
		t.Fatalf("start task: %v", err)
	}
	if task == nil {
		t.Fatal("no task returned")
	}
	if err := task.Wait(ctx, 10*time.Millisecond, 2*time.Minute); err != nil {
		t.Fatalf("wait %s: %v", task.UPID, err)
	}
	if task.ExitStatus != "OK" {
		t.Fatalf("task %s: exit status %q, want OK", task.UPID, task.ExitStatus)
	}
	return task
}

// waitFailed waits for a task and returns its exit status, failing if it was OK.
func waitFailed(t testing.TB, ctx context.Context, task *proxmox.Task, err error) string {
	t.Helper()
	if err != nil {
		t.Fatalf("start task: %v", err)
	}
	if err := task.Wait(ctx, 10*time.Millisecond, 30*time.Second); err != nil {
		t.Fatalf("wait %s: %v", task.UPID, err)
	}
	if task.ExitStatus == "OK" || task.ExitStatus == "" {
		t.Fatalf("task %s: exit status %q, want a failure", task.UPID, task.ExitStatus)
	}
	return task.ExitStatus
}

// response is a raw API answer.
type response struct {
	status int
	reason string // status line, e.g. "500 VM is locked (clone)"
	body   []byte
	data   any
	errors map[string]string
}

// call sends a raw request with a urlencoded body (POST/PUT) or query (GET/DELETE).
func call(t testing.TB, c *pvesim.Cluster, token, method, path string, form url.Values) response {
	t.Helper()
	u := c.URL() + "/api2/json" + path
	var body io.Reader
	if form != nil && (method == http.MethodPost || method == http.MethodPut) {
		body = strings.NewReader(form.Encode())
	} else if form != nil {
		u += "?" + form.Encode()
	}
	req, err := http.NewRequestWithContext(testCtx(t), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if token != "" {
		req.Header.Set("Authorization", "PVEAPIToken="+token)
	}
	resp, err := sharedClient(t, c).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := response{status: resp.StatusCode, reason: resp.Status, body: b}
	if len(b) > 0 {
		var env struct {
			Data   any               `json:"data"`
			Errors map[string]string `json:"errors"`
		}
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatalf("%s %s: body %q: %v", method, path, b, err)
		}
		r.data, r.errors = env.Data, env.Errors
	}
	return r
}
