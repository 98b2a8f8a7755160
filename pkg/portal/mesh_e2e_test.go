//go:build !race

// The mesh harness embeds Headscale, whose own data races fail any -race
// run (see the Makefile): the tests of this file run in the plain run only.

package portal_test

import (
	"encoding/json"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/devidp"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/portal"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/luthermonson/go-proxmox"
)

// portalMesh starts the mesh harness with opts serving the built portal
// (public) on the orchestrator's address, logging to logs, and returns it
// with its provider's issuer.
func portalMesh(t *testing.T, public string, logs slog.Handler, opts ...meshtest.Option) (*meshtest.Harness, string) {
	t.Helper()
	web := &meshtest.LateHandler{}
	h := meshtest.New(t, append(opts, meshtest.WithHandler(web))...)
	issuer := h.IDP(t).Issuer()
	p, err := portal.New(portal.Config{Dir: public, Issuer: issuer, ClientID: meshtest.APIClientID, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	web.Set(p)
	return h, issuer
}

// redUsers are the platform admin, alice (a member of VDC red) and vera
// (a viewer of red), each with the password <name>-pw.
func redUsers() []devidp.User {
	return []devidp.User{
		{Username: "admin", Name: "Ada Admin", Roles: []string{auth.PlatformAdminRole}},
		{Username: "alice", Name: "Alice", Roles: []string{auth.VDCRoleKey("red", auth.RoleMember)}},
		{Username: "vera", Name: "Vera", Roles: []string{auth.VDCRoleKey("red", auth.RoleViewer)}},
	}
}

// redEnv is the environment of a browser test signing in as redUsers
// against h, with its artifacts in artifacts, and extra.
func redEnv(h *meshtest.Harness, issuer, artifacts string, extra ...string) []string {
	return append([]string{
		"PORTAL_URL=" + h.Orchestrator.URL(),
		"OIDC_ISSUER=" + issuer,
		"PORTAL_ADMIN_USER=admin", "PORTAL_ADMIN_PASSWORD=admin-pw",
		"PORTAL_MEMBER_USER=alice", "PORTAL_MEMBER_PASSWORD=alice-pw",
		"PORTAL_MEMBER_VDCS=red",
		"PORTAL_VIEWER_USER=vera", "PORTAL_VIEWER_PASSWORD=vera-pw",
		"PORTAL_ARTIFACTS=" + artifacts,
	}, extra...)
}

// checkMigrated checks through GraphQL that the VM the browser test
// migrated (artifacts/migrated.json) is in the zone and on the host it
// moved to, under the id of the page it was moved from.
func checkMigrated(t *testing.T, h *meshtest.Harness, artifacts string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(artifacts, "migrated.json"))
	if err != nil {
		t.Fatalf("the browser test did not migrate a VM: %v", err)
	}
	var want struct{ VDC, Name, Host, Zone, Path string }
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	var vms []struct {
		ID, Name string
		Zone     struct{ Name string }
		Host     *struct{ Name string }
	}
	h.GraphQL(t, "alice", want.VDC, `{ vms(first: 50) { id name zone { name } host { name } } }`, nil).OK(t).Into(t, "vms", &vms)
	for _, vm := range vms {
		if vm.Name == want.Name {
			if vm.Zone.Name != want.Zone || vm.Host == nil || vm.Host.Name != want.Host {
				t.Errorf("VM %s after the portal's migration: in %s on %+v, want %s on %s", want.Name, vm.Zone.Name, vm.Host, want.Zone, want.Host)
			}
			if p := "/vms/" + url.PathEscape(vm.ID); p != want.Path {
				t.Errorf("VM %s is %s after the move, the page it moved from %s", want.Name, p, want.Path)
			}
			return
		}
	}
	t.Errorf("VM %s not in VDC %s: %+v", want.Name, want.VDC, vms)
}

// seedVMCatalog gives h the catalog a VM needs, as the platform admin: an
// image "tiny" served over loopback, a compute profile "small" and a
// storage profile "ssd" in each of zones.
func seedVMCatalog(t *testing.T, h *meshtest.Harness, zones ...string) {
	t.Helper()
	image, sum := vmtest.ImageServer(t, 3<<20)
	var pools []any
	for _, z := range zones {
		pools = append(pools, map[string]any{"zone": z, "pool": "local-lvm"})
	}
	h.GraphQL(t, "admin", "", `mutation($u: String!, $c: String!, $p: [ZonePoolInput!]!) {
	  createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name }
	  createStorageProfile(input: {name: "ssd", tier: "ssd", pools: $p}) { name }
	  createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name } }`,
		map[string]any{"u": image, "c": sum, "p": pools}).OK(t)
}

// redVMMesh starts the mesh harness with the one cluster spec serving the
// built portal (public), redUsers and seedVMCatalog's catalog in its zone,
// where alice made a network "lan" of red; it returns it with its
// provider's issuer.
func redVMMesh(t *testing.T, public string, spec meshtest.ClusterSpec) (*meshtest.Harness, string) {
	t.Helper()
	begin := time.Now()
	h, issuer := portalMesh(t, public, slog.DiscardHandler, meshtest.WithClusters(spec), meshtest.WithAPI(meshtest.APISpec{Users: redUsers()}))
	h.WaitOnline(t, 30*time.Second)
	seedVMCatalog(t, h, spec.Name)
	h.GraphQL(t, "alice", "red", `mutation($z: String!) { createNetwork(input: {name: "lan", zone: $z, cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`,
		map[string]any{"z": spec.Name}).OK(t)
	t.Logf("harness up and seeded in %s", time.Since(begin).Round(time.Millisecond))
	return h, issuer
}

// redGuest finds alice's VM name in red (in h's first zone) and returns
// that zone's Proxmox client, the VM's guest and its config.
func redGuest(t *testing.T, h *meshtest.Harness, name string) (*proxmox.Client, pveapi.Resource, pveapi.Config) {
	t.Helper()
	var vms []struct{ ID, Name string }
	h.GraphQL(t, "alice", "red", `{ vms(first: 50) { id name } }`, nil).OK(t).Into(t, "vms", &vms)
	i := slices.IndexFunc(vms, func(v struct{ ID, Name string }) bool { return v.Name == name })
	if i < 0 {
		t.Fatalf("no VM %s in red: %+v", name, vms)
	}
	ref, err := tenancy.ParseVMID(vms[i].ID)
	if err != nil {
		t.Fatal(err)
	}
	c := h.Orchestrator.Zones().Client(h.Zone(t, h.Clusters[0]).ID)
	g, ok, err := pveapi.FindGuest(t.Context(), c, ref.VMID)
	if err != nil || !ok {
		t.Fatalf("the guest of VM %s: %v %v", name, ok, err)
	}
	cfg, err := pveapi.GuestConfig(t.Context(), c, g.Node, g.VMID)
	if err != nil {
		t.Fatal(err)
	}
	return c, g, cfg
}

// TestBrowserMesh runs the portal's browser tests against a backend that
// really has zones, hosts and VMs: the meshtest harness (orchestrator with
// the GraphQL API, simulated Proxmox zones "alpha" with 2 nodes and "beta"
// with 1, real agents over the mesh, the development provider), serving
// the built portal on the API's own origin. tests/mesh.test.mjs signs in
// through the provider's login form, creates a VM through the wizard,
// sees its console's picture, migrates it to the other host of its zone,
// stops it and moves it to zone beta (a snapshot and a missing network
// refused first; checked here through GraphQL: beta, the same id), sees its network in use and
// its VDC's quota refuse a second VM, checks another VDC's member cannot
// see it, a viewer cannot change it, and that the admin sees every zone and
// host; then beta's agents stop and tests/zone-down.test.mjs finds beta
// unavailable and the rest working.
func TestBrowserMesh(t *testing.T) {
	t.Parallel()
	root, public := browserPrerequisites(t)
	begin := time.Now()

	users := []devidp.User{
		{Username: "admin", Name: "Ada Admin", Roles: []string{auth.PlatformAdminRole}},
		{Username: "alice", Name: "Alice", Roles: []string{auth.VDCRoleKey("red", auth.RoleMember), auth.VDCRoleKey("green", auth.RoleMember)}},
		{Username: "bob", Name: "Bob", Roles: []string{auth.VDCRoleKey("blue", auth.RoleMember)}},
		{Username: "vera", Name: "Vera", Roles: []string{auth.VDCRoleKey("red", auth.RoleViewer)}},
	}
	vdcs := meshtest.DefaultVDCs() // red and blue
	green := vdcs[0].DeepCopyObject().(*catalog.VDC)
	green.Name, green.Description = "green", "green VDC"
	vdcs = append(vdcs, green)
	vdcs[0].Quotas.VMs = 1 // red: a second VM is refused
	var logs slog.Handler = slog.DiscardHandler
	if os.Getenv("PORTAL_MESH_LOG") != "" {
		logs = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})
	}
	h, issuer := portalMesh(t, public, logs,
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2}, meshtest.ClusterSpec{Name: "beta", Nodes: 1}),
		// The harness's agents report "meshtest": every host has an update.
		meshtest.WithAPI(meshtest.APISpec{Users: users, VDCs: vdcs, AgentVersion: "meshtest-next"}),
		meshtest.WithLogHandler(logs),
	)
	h.WaitOnline(t, 30*time.Second)

	seedVMCatalog(t, h, "alpha", "beta")
	t.Logf("harness up and seeded in %s", time.Since(begin).Round(time.Millisecond))

	origin := h.Orchestrator.URL()
	artifacts := filepath.Join(root, "test-artifacts")
	env := []string{
		"PORTAL_URL=" + origin,
		"OIDC_ISSUER=" + issuer,
		"PORTAL_ADMIN_USER=admin", "PORTAL_ADMIN_PASSWORD=admin-pw",
		"PORTAL_MEMBER_USER=alice", "PORTAL_MEMBER_PASSWORD=alice-pw",
		"PORTAL_MEMBER_VDCS=red,green",
		"PORTAL_MEMBER_VM_QUOTA=1",
		"PORTAL_AGENT_UPDATE=1",
		"PORTAL_OTHER_USER=bob", "PORTAL_OTHER_PASSWORD=bob-pw",
		"PORTAL_VIEWER_USER=vera", "PORTAL_VIEWER_PASSWORD=vera-pw",
		"PORTAL_ZONES=alpha,beta",
		"PORTAL_HOSTS=" + strconv.Itoa(3),
		"PORTAL_ARTIFACTS=" + artifacts,
	}
	// Longer than runBrowserTests allows: the VM's disk moves across zones.
	start := browsertest.Run(t, root, 6*time.Minute, env, "tests/mesh.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "networks", "vm-wizard-progress", "vm-wizard-running", "vm-detail", "vm-console", "vm-migrate", "vm-migrated", "vm-migrate-refused", "vm-migrate-zone", "vm-migrated-zone", "vm-stopped", "vms", "network-in-use", "vm-quota-exceeded", "zones", "hosts")
	checkMigrated(t, h, artifacts)

	// beta goes down: its agents stop.
	for _, a := range h.Clusters[1].Agents {
		if err := a.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	start = runBrowserTests(t, root, append(env, "PORTAL_DOWN_ZONE=beta"), "tests/zone-down.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "zones-one-down", "hosts-one-down")
	t.Logf("TestBrowserMesh took %s in all", time.Since(begin).Round(time.Millisecond))
}
