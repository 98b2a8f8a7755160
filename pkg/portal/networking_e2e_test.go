//go:build !race

// The mesh harness embeds Headscale, whose own data races fail any -race
// run (see the Makefile): the tests of this file run in the plain run only.

package portal_test

import (
	"log/slog"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/nettest"
)

// TestBrowserNetworking runs tests/networking.test.mjs against the mesh
// harness with the simulator's data plane (zone alpha with 2 nodes, real
// agents running the edge gateways in network namespaces; root): the
// platform admin creates alpha's external network on the External networks
// page (bad input refused with the API's error), a member of VDC red
// creates a firewall rule, a port forward to one of red's VMs (picked from
// the VDC's VMs), a 1:1 address and bandwidth limits on the Networking
// page and sees them on the gateway, which becomes active on a node with
// the pool's first address; a viewer of red sees them and cannot change
// them; the member deletes the rule and then the gateway, whose addresses
// go back to the pool. Checked here through GraphQL after the browser.
func TestBrowserNetworking(t *testing.T) {
	t.Parallel()
	nettest.NeedRoot(t)
	root, public := browserPrerequisites(t)
	begin := time.Now()
	h, issuer := portalMesh(t, public, slog.DiscardHandler,
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2}),
		meshtest.WithAPI(meshtest.APISpec{Users: redUsers()}),
		meshtest.WithDataPlane(netip.MustParsePrefix("203.0.113.254/24")),
	)
	h.WaitOnline(t, 30*time.Second)
	seedGuests(t, h.Clusters[0].Proxmox(t), "red", 2, 0)
	t.Logf("harness up and seeded in %s", time.Since(begin).Round(time.Millisecond))

	artifacts := filepath.Join(root, "test-artifacts", "networking")
	// Generous: under CI's load the four tests took 2.5 minutes.
	start := browsertest.Run(t, root, 8*time.Minute, redEnv(h, issuer, artifacts), "tests/networking.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "external-networks", "networking", "networking-viewer", "networking-deleted")

	// What the browser did, through the API: red's gateway is gone and its
	// addresses are back in the pool.
	var gws struct{ TotalCount int }
	h.GraphQL(t, "alice", "red", `{ edgeGateways { totalCount } }`, nil).OK(t).Into(t, "edgeGateways", &gws)
	var exts struct {
		Nodes []struct {
			Zone                string
			PoolSize, Allocated int
		}
	}
	h.GraphQL(t, "admin", "", `{ externalNetworks { nodes { zone poolSize allocated } } }`, nil).OK(t).Into(t, "externalNetworks", &exts)
	if gws.TotalCount != 0 || len(exts.Nodes) != 1 || exts.Nodes[0].Zone != "alpha" || exts.Nodes[0].PoolSize != 11 || exts.Nodes[0].Allocated != 0 {
		t.Errorf("after the browser: red has %d gateways, external networks %+v", gws.TotalCount, exts.Nodes)
	}
}
