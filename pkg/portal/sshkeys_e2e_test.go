//go:build !race

// The mesh harness embeds Headscale, whose own data races fail any -race
// run (see the Makefile): the tests of this file run in the plain run only.

package portal_test

import (
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/catalogtest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestBrowserSSHKeys runs tests/ssh-keys.test.mjs against the mesh
// harness (zone alpha of one node, VDC red with a network there): a member
// of red adds an SSH key with options on the SSH keys page (a malformed
// one and a taken name refused on their fields), sees its fingerprint,
// creates a VM picking it by name in the wizard, and deletes it. Checked
// here after the browser: the VM's guest has the key in its cloud-init
// keys, and the member has no key left.
func TestBrowserSSHKeys(t *testing.T) {
	t.Parallel()
	root, public := browserPrerequisites(t)
	begin := time.Now()
	h, issuer := portalMesh(t, public, slog.DiscardHandler,
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{Users: redUsers()}),
	)
	h.WaitOnline(t, 30*time.Second)
	seedVMCatalog(t, h, "alpha")
	h.GraphQL(t, "alice", "red", `mutation { createNetwork(input: {name: "lan", zone: "alpha", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`, nil).OK(t)
	t.Logf("harness up and seeded in %s", time.Since(begin).Round(time.Millisecond))

	key := `no-pty,from="10.0.0.0/8" ` + catalogtest.SSHKey(7, "e2e@portal")
	artifacts := filepath.Join(root, "test-artifacts", "ssh-keys")
	start := browsertest.Run(t, root, 4*time.Minute, redEnv(h, issuer, artifacts,
		"PORTAL_SSH_KEY="+key, "PORTAL_ZONE=alpha", "PORTAL_VM_NAME=keyed"), "tests/ssh-keys.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "ssh-keys-invalid", "ssh-keys", "vm-wizard-keys", "ssh-keys-deleted")

	var vms []struct{ ID, Name string }
	h.GraphQL(t, "alice", "red", `{ vms(first: 10) { id name } }`, nil).OK(t).Into(t, "vms", &vms)
	i := slices.IndexFunc(vms, func(v struct{ ID, Name string }) bool { return v.Name == "keyed" })
	if i < 0 {
		t.Fatalf("no VM keyed in red: %+v", vms)
	}
	ref, err := tenancy.ParseVMID(vms[i].ID)
	if err != nil {
		t.Fatal(err)
	}
	c := h.Orchestrator.Zones().Client(h.Zone(t, h.Clusters[0]).ID)
	g, ok, err := pveapi.FindGuest(t.Context(), c, ref.VMID)
	if err != nil || !ok {
		t.Fatalf("the VM's guest: %v %v", ok, err)
	}
	cfg, err := pveapi.GuestConfig(t.Context(), c, g.Node, g.VMID)
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := url.QueryUnescape(cfg.Str("sshkeys")); err != nil || !slices.Contains(strings.Split(keys, "\n"), key) {
		t.Errorf("the guest's sshkeys %q (%v), want %q among them", keys, err, key)
	}
	var me struct{ SSHKeys []struct{ Name string } }
	h.GraphQL(t, "alice", "", `{ me { sshKeys { name } } }`, nil).OK(t).Into(t, "me", &me)
	if len(me.SSHKeys) != 0 {
		t.Errorf("alice's keys after the browser deleted hers: %+v", me.SSHKeys)
	}
}
