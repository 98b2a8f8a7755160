//go:build !race

// The mesh harness embeds Headscale, whose own data races fail any -race
// run (see the Makefile): the tests of this file run in the plain run only.

package portal_test

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// TestBrowserMaintenance: tests/maintenance.test.mjs puts the host of a
// running VM in maintenance from the Hosts page, follows the drain until
// the host is in maintenance with the VM moved, and ends the maintenance;
// checked here through GraphQL: the VM running on the other host, the
// host back in placement.
func TestBrowserMaintenance(t *testing.T) {
	t.Parallel()
	root, public := browserPrerequisites(t)
	h, issuer := portalMesh(t, public, slog.DiscardHandler, meshtest.WithAPI(meshtest.APISpec{Users: redUsers()}),
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2}))
	h.WaitOnline(t, 30*time.Second)
	vmID := createRedVM(t, h, "drained")
	type vmState struct {
		Status string
		Host   struct{ Name string }
	}
	var before vmState
	h.GraphQL(t, "alice", "red", `query($id: ID!) { vm(id: $id) { status host { name } } }`, map[string]any{"id": vmID}).
		OK(t).Into(t, "vm", &before)

	artifacts := filepath.Join(root, "test-artifacts", "maintenance")
	start := runBrowserTests(t, root, redEnv(h, issuer, artifacts,
		"PORTAL_MAINT_HOST=alpha/"+before.Host.Name, "PORTAL_MAINT_VM=drained"), "tests/maintenance.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "host-maintenance-drained", "host-maintenance-ended")

	poll.True(t, 30*time.Second, "the VM running on the other host", func() bool {
		var after vmState
		h.GraphQL(t, "alice", "red", `query($id: ID!) { vm(id: $id) { status host { name } } }`, map[string]any{"id": vmID}).
			OK(t).Into(t, "vm", &after)
		return after.Status == "RUNNING" && after.Host.Name != "" && after.Host.Name != before.Host.Name
	})
	var zones []struct {
		Hosts []struct{ Name, Maintenance string }
	}
	h.GraphQL(t, "admin", "", `{ zones { hosts { name maintenance } } }`, nil).OK(t).Into(t, "zones", &zones)
	for _, z := range zones {
		for _, hs := range z.Hosts {
			if hs.Maintenance != "NONE" {
				t.Errorf("host %s: %s after the portal ended maintenance", hs.Name, hs.Maintenance)
			}
		}
	}
}
