//go:build !race

// The mesh harness embeds Headscale, whose own data races fail any -race
// run (see the Makefile): the tests of this file run in the plain run only.

package portal_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/lbtest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbsync"
	"github.com/flexplane/flexplane/pkg/orchestrator"
)

// TestBrowserLoadBalancers runs tests/load-balancers.test.mjs against the
// mesh harness (zone alpha with 2 nodes, real agents, an external network
// of alpha, VDC red with two guests) whose orchestrator pushes alpha's
// load balancers to a flexgateway replica's admin API (lbtest.Replica: the
// control side, no data plane): a member of red creates a balancer with a
// TCP listener over one of red's VMs (port 70000 refused by the form, a
// certificate not matching its key by the API, each on its field) and
// sees it with its public address; the member edits it (the listener to
// port 8081, a second backend, a TCP health check, a certificate whose
// PEM the form never shows back); a viewer sees it without buttons to
// change it; the member deletes it. Checked here through GraphQL and the
// configs the replica received.
func TestBrowserLoadBalancers(t *testing.T) {
	t.Parallel()
	root, public := browserPrerequisites(t)
	begin := time.Now()
	pki := lbtest.NewPKI(t)
	replica := lbtest.NewReplica(t, pki, "lb-token")
	lbs := orchestrator.LoadBalancersConfig{Tokens: map[string]string{"alpha": "lb-token"}, TLS: pki.Client, Zones: map[string]lbsync.Zone{"alpha": {Replicas: []string{replica.URL}}}}
	h, issuer := portalMesh(t, public, slog.DiscardHandler,
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2}),
		meshtest.WithAPI(meshtest.APISpec{Users: redUsers(), LoadBalancers: lbs}),
	)
	h.WaitOnline(t, 30*time.Second)
	h.GraphQL(t, "admin", "", `mutation { createExternalNetwork(input: {zone: "alpha", bridge: "vmbr0", cidr: "203.0.113.0/24",
	  gateway: "203.0.113.254", poolStart: "203.0.113.10", poolEnd: "203.0.113.20"}) { zone } }`, nil).OK(t)
	seedGuests(t, h.Clusters[0].Proxmox(t), "red", 2, 0)
	t.Logf("harness up and seeded in %s", time.Since(begin).Round(time.Millisecond))

	cert, key := lbtest.Certificate(t, "web.example.com")
	_, otherKey := lbtest.Certificate(t, "web.example.com")
	artifacts := filepath.Join(root, "test-artifacts", "load-balancers")
	start := browsertest.Run(t, root, 6*time.Minute, redEnv(h, issuer, artifacts, "LB_CERT_PEM="+cert, "LB_KEY_PEM="+key, "LB_OTHER_KEY_PEM="+otherKey),
		"tests/load-balancers.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "load-balancers", "load-balancers-edited", "load-balancers-viewer", "load-balancers-deleted")

	// What the browser did, through the API and the data plane's config:
	// red has no balancer left, and the replica had it (one listener of
	// red's over one backend), then had it edited (two backends under a
	// TCP check, the certificate with its key), before its last
	// config, which has none.
	var lbList struct{ TotalCount int }
	h.GraphQL(t, "alice", "red", `{ loadBalancers { totalCount } }`, nil).OK(t).Into(t, "loadBalancers", &lbList)
	if lbList.TotalCount != 0 {
		t.Errorf("after the browser: red has %d load balancers", lbList.TotalCount)
	}
	had, edited := false, false
	for _, c := range replica.Configs() {
		if len(c.Balancers) != 1 || c.Balancers[0].VDC != "red" || len(c.Balancers[0].Listeners) != 1 {
			continue
		}
		b := c.Balancers[0]
		if len(b.Pools) != 1 {
			continue
		}
		p := b.Pools[0]
		had = had || len(p.Backends) == 1 && p.HealthCheck == nil && len(b.Certificates) == 0
		edited = edited || len(p.Backends) == 2 && p.HealthCheck != nil && p.HealthCheck.Protocol == lbconfig.HealthCheckTCP &&
			len(b.Certificates) == 1 && b.Certificates[0].Name == "cert1" &&
			strings.TrimSpace(b.Certificates[0].CertPEM) == strings.TrimSpace(cert) && strings.TrimSpace(b.Certificates[0].KeyPEM) == strings.TrimSpace(key)
	}
	replica.Await(t, 30*time.Second, func(c lbconfig.Config) bool { return len(c.Balancers) == 0 })
	if !had {
		t.Errorf("the replica never had the balancer: %d configs", len(replica.Configs()))
	}
	if !edited {
		t.Errorf("the replica never had the edited balancer: %d configs", len(replica.Configs()))
	}
}
