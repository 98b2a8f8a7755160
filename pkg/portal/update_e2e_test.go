//go:build !race

// The mesh harness embeds Headscale, whose own data races fail any -race
// run (see the Makefile): the tests of this file run in the plain run only.

package portal_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
)

// TestBrowserAgentUpdate updates an agent from the portal's Hosts page: the
// meshtest harness with the GraphQL API and releases serves the built
// portal, a simulated zone "alpha" of 2 nodes runs real agent processes
// built at v1.0.0 under a supervisor like systemd, and a signed v1.1.0 is
// published. tests/agent-update.test.mjs signs the admin in, sees both
// hosts at v1.0.0 with an update available, presses Update on alpha/pve1
// and follows the rollout through to done at v1.1.0, alpha/pve2 untouched.
// Then the orchestrator must see alpha/pve1's agent at v1.1.0 and its state
// directory must have switched to v1.1.0, alpha/pve2 still at v1.0.0.
func TestBrowserAgentUpdate(t *testing.T) {
	t.Parallel()
	root, public := browserPrerequisites(t)
	begin := time.Now()
	bin := t.TempDir()
	v1 := meshtest.BuildAgent(t, bin, "v1.0.0")
	v11 := meshtest.BuildAgent(t, bin, "v1.1.0")
	k := meshtest.NewReleaseKey(t)

	var logs slog.Handler = slog.DiscardHandler
	if os.Getenv("PORTAL_MESH_LOG") != "" {
		logs = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})
	}
	h, issuer := portalMesh(t, public, logs, meshtest.WithoutAgents(), meshtest.WithAPI(meshtest.APISpec{}), meshtest.WithReleases(k.Public, 3*time.Minute),
		meshtest.WithLogHandler(logs), meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2}))

	agents := h.StartProcessAgents(t, h.Clusters[0], v1, agent.EnvReleaseKey+"="+k.Public)
	at := func(p *meshtest.ProcessAgent, version string) bool {
		host, _, ok := h.ProcessHost(p)
		return ok && host.Status == fleet.StatusOnline && host.AgentVersion == version
	}
	for _, p := range agents {
		poll.True(t, 2*time.Minute, p.MeshName+" online at v1.0.0", func() bool { return at(p, "v1.0.0") })
	}
	k.Publish(t, h, v11, "v1.1.0")
	t.Logf("harness up with 2 agent processes and v1.1.0 published in %s", time.Since(begin).Round(time.Millisecond))

	artifacts := filepath.Join(root, "test-artifacts", "agent-update")
	start := runBrowserTests(t, root, []string{
		"PORTAL_URL=" + h.Orchestrator.URL(),
		"OIDC_ISSUER=" + issuer,
		"PORTAL_ADMIN_USER=admin", "PORTAL_ADMIN_PASSWORD=admin-pw",
		"PORTAL_MEMBER_USER=alice", "PORTAL_MEMBER_PASSWORD=alice-pw",
		"PORTAL_MEMBER_VDCS=red",
		"PORTAL_UPDATE_HOST=alpha/pve1", "PORTAL_UPDATE_OTHER=alpha/pve2",
		"PORTAL_UPDATE_FROM=v1.0.0", "PORTAL_UPDATE_TO=v1.1.0",
		"PORTAL_ARTIFACTS=" + artifacts,
	}, "tests/agent-update.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "agent-update-available", "agent-update-running", "agent-update-done")

	updated, untouched := agents[0], agents[1]
	if updated.Node != "pve1" || untouched.Node != "pve2" {
		t.Fatalf("agents %s and %s, want pve1 then pve2", updated.Node, untouched.Node)
	}
	if host, _, _ := h.ProcessHost(updated); !at(updated, "v1.1.0") || host.Update.Phase != "done" || host.Update.Version != "v1.1.0" {
		t.Errorf("alpha/pve1 after the update from the portal: %s %s, update %+v; want online at v1.1.0, done", host.Status, host.AgentVersion, host.Update)
	}
	if cur, err := os.Readlink(filepath.Join(updated.StateDir, "update", "current")); err != nil || filepath.Base(cur) != "v1.1.0" {
		t.Errorf("alpha/pve1's update/current: %q %v, want versions/v1.1.0", cur, err)
	}
	if host, _, _ := h.ProcessHost(untouched); !at(untouched, "v1.0.0") {
		t.Errorf("alpha/pve2, not updated: %s %s, want online at v1.0.0", host.Status, host.AgentVersion)
	}
	if _, err := os.Lstat(filepath.Join(untouched.StateDir, "update", "current")); !os.IsNotExist(err) {
		t.Errorf("alpha/pve2 has an update/current (%v), want none", err)
	}
	t.Logf("TestBrowserAgentUpdate took %s in all", time.Since(begin).Round(time.Millisecond))
}
