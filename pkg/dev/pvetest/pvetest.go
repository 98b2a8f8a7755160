// Package pvetest gives tests a go-proxmox client straight to a simulated
// Proxmox cluster (pkg/pvesim), authenticated with one of its API tokens and
// trusting the cluster's CA, as an operator at the cluster would be.
package pvetest

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

// Client returns a go-proxmox client for sim with token
// ("USER@REALM!ID=SECRET"); t.Cleanup closes its idle connections.
func Client(t testing.TB, sim *pvesim.Cluster, token string) *proxmox.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(sim.CACertPEM()) {
		t.Fatal("pvetest: the cluster's CA does not parse")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	id, secret, ok := strings.Cut(token, "=")
	if !ok {
		t.Fatal("pvetest: the token is not USER@REALM!ID=SECRET")
	}
	return proxmox.NewClient(sim.URL()+"/api2/json",
		proxmox.WithHTTPClient(&http.Client{Transport: tr, Timeout: 30 * time.Second}),
		proxmox.WithAPIToken(id, secret))
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
