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
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// TestBrowserRefusedAgents: an agent on beta's node claims alpha's pve1,
// presenting alpha's public certificates with its own node's key. The
// orchestrator refuses it; tests/refused-agents.test.mjs finds it in the
// Hosts page's Refused agents table, claiming alpha/pve1 and failing on its
// signature, and alpha/pve1 listed once, as a host.
func TestBrowserRefusedAgents(t *testing.T) {
	t.Parallel()
	root, public := browserPrerequisites(t)
	h, issuer := portalMesh(t, public, slog.DiscardHandler, meshtest.WithAPI(meshtest.APISpec{}),
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}, meshtest.ClusterSpec{Name: "beta", Nodes: 1}))
	h.WaitOnline(t, 30*time.Second)
	imp := h.StartImpostor(t, h.Clusters[1], h.Clusters[0], "pve1", true)
	poll.True(t, 30*time.Second, "the impostor refused", func() bool {
		for _, ra := range h.Orchestrator.Zones().RefusedAgents() {
			if ra.MeshName == imp.MeshName && strings.Contains(ra.Reason, "signature") {
				return true
			}
		}
		return false
	})
	artifacts := filepath.Join(root, "test-artifacts", "refused-agents")
	start := runBrowserTests(t, root, redEnv(h, issuer, artifacts,
		"PORTAL_REFUSED_AGENT="+imp.MeshName, "PORTAL_REFUSED_CLAIM=alpha/pve1"), "tests/refused-agents.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "hosts-refused-agent")
}
