// Package pvetest gives tests a go-proxmox client straight to a simulated
// Proxmox cluster (pkg/pvesim), authenticated with one of its API tokens and
// trusting the cluster's CA, as an operator at the cluster would be; and
// certificates of a cluster in memory (Certs), for fake agents that prove
// their membership of it.
package pvetest

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

// Client returns a go-proxmox client for sim with token
// ("USER@REALM!ID=SECRET"); t.Cleanup closes its idle connections.
func Client(t testing.TB, sim *pvesim.Cluster, token string) *proxmox.Client {
	t.Helper()
	return client(t, sim, token, nil)
}

// ClientBefore is Client that runs before once, just before the first
// request whose method is method and whose path contains path: a test's way
// to land a concurrent change at one exact moment of a call.
func ClientBefore(t testing.TB, sim *pvesim.Cluster, token, method, path string, before func()) *proxmox.Client {
	t.Helper()
	return client(t, sim, token, func(next http.RoundTripper) http.RoundTripper {
		return &beforeRequest{next: next, method: method, path: path, before: before}
	})
}

// Counter counts the requests a client of CountingClient sent.
type Counter struct {
	n     atomic.Int64
	mu    sync.Mutex
	paths map[string]int64 // "METHOD path" -> requests; protected by mu
}

// Requests is how many requests were sent so far.
func (c *Counter) Requests() int64 { return c.n.Load() }

// Matching is how many requests of method whose path (below /api2/json)
// ends with suffix were sent so far.
func (c *Counter) Matching(method, suffix string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for k, v := range c.paths {
		m, p, _ := strings.Cut(k, " ")
		if m == method && strings.HasSuffix(p, suffix) {
			n += v
		}
	}
	return n
}

// CountingClient is Client whose requests are counted in the Counter it
// returns: a test's way to tell which clusters a call asked.
func CountingClient(t testing.TB, sim *pvesim.Cluster, token string) (*proxmox.Client, *Counter) {
	t.Helper()
	n := &Counter{}
	return client(t, sim, token, func(next http.RoundTripper) http.RoundTripper {
		return countRequests{next: next, n: n}
	}), n
}

type countRequests struct {
	next http.RoundTripper
	n    *Counter
}

func (c countRequests) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.n.Add(1)
	c.n.mu.Lock()
	if c.n.paths == nil {
		c.n.paths = map[string]int64{}
	}
	c.n.paths[r.Method+" "+strings.TrimPrefix(r.URL.Path, "/api2/json")]++
	c.n.mu.Unlock()
	return c.next.RoundTrip(r)
}

func client(t testing.TB, sim *pvesim.Cluster, token string, wrap func(http.RoundTripper) http.RoundTripper) *proxmox.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(sim.CACertPEM()) {
		t.Fatal("pvetest: the cluster's CA does not parse")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	var rt http.RoundTripper = tr
	if wrap != nil {
		rt = wrap(tr)
	}
	id, secret, ok := strings.Cut(token, "=")
	if !ok {
		t.Fatal("pvetest: the token is not USER@REALM!ID=SECRET")
	}
	return proxmox.NewClient(sim.URL()+"/api2/json",
		proxmox.WithHTTPClient(&http.Client{Transport: rt, Timeout: 30 * time.Second}),
		proxmox.WithAPIToken(id, secret))
}

// beforeRequest runs before once, before the first matching request.
type beforeRequest struct {
	next         http.RoundTripper
	method, path string
	once         sync.Once
	before       func()
}

func (b *beforeRequest) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == b.method && strings.Contains(r.URL.Path, b.path) {
		b.once.Do(b.before)
	}
	return b.next.RoundTrip(r)
}

// Start starts a simulated cluster accepting token, closed by t.Cleanup,
// and returns it with a client.
func Start(t testing.TB, cfg pvesim.Config, token string) (*pvesim.Cluster, *proxmox.Client) {
	t.Helper()
	cfg.Tokens = append(cfg.Tokens, token)
	sim, err := pvesim.Start(cfg)
	if err != nil {
		t.Fatalf("pvetest: %v", err)
	}
	t.Cleanup(func() { sim.Close() })
	return sim, Client(t, sim, token)
}
