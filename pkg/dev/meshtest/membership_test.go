package meshtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
)

// TestImpostorAgents: an attacker with root on beta's node and a valid
// enrollment key runs the real agent in front of a "local Proxmox" that
// answers alpha's certificates and cluster name, claiming alpha's pve1: one
// presents alpha's public CA and node certificate with its own node's key,
// one no certificates at all. Neither becomes a host of alpha, neither gets
// one of alpha's Proxy calls, the orchestrator hands out neither's client
// for alpha's node, and both are listed as refused with why, claiming
// alpha; alpha's genuine agent keeps serving. A second mesh identity of
// alpha's pve1, with pve1's real files (the node reinstalled), is refused
// too while the first is in the mesh, and takes the node once the first is
// removed from the mesh.
func TestImpostorAgents(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithAPI(meshtest.APISpec{}),
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}, meshtest.ClusterSpec{Name: "beta", Nodes: 1}))
	alpha, beta := h.Clusters[0], h.Clusters[1]
	h.WaitOnline(t, 30*time.Second)
	zone := h.Zone(t, alpha)
	reg := h.Orchestrator.Zones()

	withCerts := h.StartImpostor(t, beta, alpha, "pve1", true)
	without := h.StartImpostor(t, beta, alpha, "pve1", false)
	want := map[string]string{withCerts.MeshName: "signature", without.MeshName: "could not prove its membership"}
	poll.True(t, 30*time.Second, "both impostors refused", func() bool {
		n := 0
		for _, ra := range reg.RefusedAgents() {
			if w, ok := want[ra.MeshName]; ok && strings.Contains(ra.Reason, w) {
				n++
			}
		}
		return n == len(want)
	})
	for _, ra := range reg.RefusedAgents() {
		if _, ok := want[ra.MeshName]; ok && (ra.ClaimedZoneID != zone.ID || ra.ClaimedZone != "alpha" || ra.ClaimedNode != "pve1" || ra.Since.IsZero()) {
			t.Errorf("refused %+v: want it claiming alpha's pve1 (zone %s), since when", ra, zone.ID)
		}
	}

	// Platform admins see them in refusedAgents, anyone else does not see
	// the field.
	var listed []struct{ MeshName, ClaimedZone, ClaimedNode, Reason string }
	h.GraphQL(t, "admin", "", `{ refusedAgents { meshName claimedZone claimedNode reason since } }`, nil).OK(t).Into(t, "refusedAgents", &listed)
	seen := 0
	for _, l := range listed {
		if w, ok := want[l.MeshName]; ok && strings.Contains(l.Reason, w) && l.ClaimedZone == "alpha" && l.ClaimedNode == "pve1" {
			seen++
		}
	}
	if seen != len(want) {
		t.Errorf("refusedAgents for the admin: %+v; want both impostors claiming alpha/pve1", listed)
	}
	if r := h.GraphQL(t, "alice", "", `{ refusedAgents { meshName } }`, nil); !r.HasCode("NOT_FOUND") {
		t.Errorf("refusedAgents for a VDC member: %+v; want NOT_FOUND", r)
	}

	// Calls to alpha go to its genuine agent only, again and again.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	px := reg.Client(zone.ID)
	for range 20 {
		var st map[string]any
		if err := px.Get(ctx, "/nodes/pve1/status", &st); err != nil {
			t.Fatalf("alpha's pve1 with impostors in the mesh: %v", err)
		}
	}
	for _, imp := range []*meshtest.Impostor{withCerts, without} {
		if n := imp.Forwarded(); n != 0 {
			t.Errorf("impostor %s got %d of alpha's requests", imp.MeshName, n)
		}
		if host, ok := imp.Host(); ok {
			t.Errorf("impostor %s is a host: %+v", imp.MeshName, host)
		}
	}
	z := h.Zone(t, alpha)
	if len(z.Hosts) != 1 || z.Hosts[0].MeshName != alpha.Agents[0].MeshName || z.Hosts[0].Status != fleet.StatusOnline {
		t.Errorf("alpha's hosts with impostors in the mesh: %+v; want its one genuine agent, online", z.Hosts)
	}
	if _, host, ok := reg.AgentOfNode(zone.ID, "pve1"); !ok || host.MeshName != alpha.Agents[0].MeshName {
		t.Errorf("the agent of alpha's pve1: %+v, %v", host, ok)
	}
	if z.ID != zone.ID {
		t.Errorf("alpha's zone ID changed from %s to %s", zone.ID, z.ID)
	}

	// pve1 enrolled again, with a new mesh identity: refused, the first
	// keeps the node.
	again := h.NewAgent(t, alpha, "pve1", "")
	h.StartAgents(t, again)
	poll.True(t, 30*time.Second, "the second identity of pve1 refused", func() bool {
		for _, ra := range reg.RefusedAgents() {
			if ra.MeshName == again.MeshName && strings.Contains(ra.Reason, "held by mesh node "+alpha.Agents[0].MeshName) {
				return true
			}
		}
		return false
	})
	if _, host, ok := reg.AgentOfNode(zone.ID, "pve1"); !ok || host.MeshName != alpha.Agents[0].MeshName {
		t.Errorf("the agent of alpha's pve1 with a second identity in the mesh: %+v, %v", host, ok)
	}
	first, _ := alpha.Agents[0].Host()

	// alpha's genuine agent goes away: alpha is unavailable, its calls
	// fail rather than go to an impostor.
	if err := alpha.Agents[0].Stop(); err != nil {
		t.Fatal(err)
	}
	if err := again.Stop(); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 30*time.Second, "alpha's agent offline", func() bool {
		host, ok := alpha.Agents[0].Host()
		return ok && host.Status == fleet.StatusOffline
	})
	for range 3 {
		var st map[string]any
		if err := px.Get(ctx, "/nodes/pve1/status", &st); err == nil {
			t.Error("a call to alpha without its agent succeeded")
		}
	}
	for _, imp := range []*meshtest.Impostor{withCerts, without} {
		if n := imp.Forwarded(); n != 0 {
			t.Errorf("impostor %s got %d of alpha's requests once alpha's agent was gone", imp.MeshName, n)
		}
	}

	// The admin removes the first identity from the mesh: the second,
	// started again, holds pve1 and serves alpha.
	if err := h.Orchestrator.Control().DeleteNode(ctx, first.MeshID); err != nil {
		t.Fatal(err)
	}
	h.StartAgents(t, again)
	poll.True(t, 30*time.Second, "the second identity of pve1 online in alpha", func() bool {
		host, ok := again.Host()
		return ok && host.Status == fleet.StatusOnline && host.Node == "pve1"
	})
	var st map[string]any
	if err := px.Get(ctx, "/nodes/pve1/status", &st); err != nil {
		t.Errorf("alpha through its new agent: %v", err)
	}
	if z, ok := reg.Zone(zone.ID); !ok || len(z.Hosts) != 1 || z.Hosts[0].MeshName != again.MeshName {
		t.Errorf("alpha after its node's new agent took over: %+v; want zone %s with one host", z, zone.ID)
	}
}
