//go:build !race

// The mesh harness embeds Headscale, whose own data races fail any -race
// run (see the Makefile): the tests of this file run in the plain run only.

package portal_test

import (
	"log/slog"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
)

// TestBrowserSecurityGroups runs tests/security-groups.test.mjs against
// the mesh harness (zone alpha of one node, VDC red with a network and a
// VM "guarded" there): a member creates a group on the Security groups
// page (a reversed port range refused on its rule's ports field), puts
// the VM in it on the VM's page, sees it listed as a member, is refused
// the delete while it is, takes it out and deletes the group; the
// platform admin, in red, makes a group red's default, is refused its
// delete, sets the default back to none and deletes it. Checked here
// through GraphQL afterwards: red has no group nor default and the VM is
// in none.
func TestBrowserSecurityGroups(t *testing.T) {
	t.Parallel()
	root, public := browserPrerequisites(t)
	h, issuer := portalMesh(t, public, slog.DiscardHandler,
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{Users: redUsers()}),
	)
	h.WaitOnline(t, 30*time.Second)
	seedVMCatalog(t, h, "alpha")
	var net struct{ ID string }
	h.GraphQL(t, "alice", "red", `mutation { createNetwork(input: {name: "lan", zone: "alpha", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`, nil).
		OK(t).Into(t, "createNetwork", &net)
	vmID := createVM(t, h, "guarded", net.ID)

	artifacts := filepath.Join(root, "test-artifacts", "security-groups")
	start := runBrowserTests(t, root, redEnv(h, issuer, artifacts,
		"PORTAL_VM_PATH=/vms/"+url.PathEscape(vmID), "PORTAL_VM_NAME=guarded"), "tests/security-groups.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "security-groups-invalid", "security-groups", "security-groups-conflict", "security-groups-deleted", "security-groups-default")

	var groups []struct{ Name string }
	h.GraphQL(t, "alice", "red", `{ securityGroups { name } }`, nil).OK(t).Into(t, "securityGroups", &groups)
	if len(groups) != 0 {
		t.Errorf("red's groups after the browser deleted its one: %+v", groups)
	}
	var vdc struct{ DefaultSecurityGroup *string }
	h.GraphQL(t, "alice", "red", `{ currentVDC { defaultSecurityGroup } }`, nil).OK(t).Into(t, "currentVDC", &vdc)
	if vdc.DefaultSecurityGroup != nil {
		t.Errorf("red's default group after the admin set it back to none: %q", *vdc.DefaultSecurityGroup)
	}
	var vm struct{ SecurityGroups []string }
	h.GraphQL(t, "alice", "red", `query($id: ID!) { vm(id: $id) { securityGroups } }`, map[string]any{"id": vmID}).OK(t).Into(t, "vm", &vm)
	if len(vm.SecurityGroups) != 0 {
		t.Errorf("the VM's groups after the browser took it out: %v", vm.SecurityGroups)
	}
}
