//go:build !race

// The mesh harness embeds Headscale, whose own data races fail any -race
// run (see the Makefile): the tests of this file run in the plain run only.

package portal_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
)

// TestBrowserUserData runs tests/user-data.test.mjs against the mesh
// harness (zone alpha of one node whose storage local keeps snippets, VDC
// red with a network there): a member types a cloud-config that is not
// YAML into the VM wizard's user-data editor (its size counted live, one
// over 64 KiB refused before it is sent), sees the API's refusal on the
// field with the line it names, fixes it and creates the VM. Checked here
// through Proxmox afterwards: the guest's cloud-init user-data
// (cloudinit/dump, the snippet its cicustom names) holds the tenant's
// cloud-config as typed, merged with flexplane's user.
func TestBrowserUserData(t *testing.T) {
	t.Parallel()
	root, public := browserPrerequisites(t)
	h, issuer := redVMMesh(t, public, meshtest.ClusterSpec{Name: "alpha", Nodes: 1, Snippets: true})

	const userData = "#cloud-config\nwrite_files:\n  - path: /etc/motd\n    content: typed in the portal\nruncmd:\n  - echo portal-user-data-ran\n"
	artifacts := filepath.Join(root, "test-artifacts", "user-data")
	start := browsertest.Run(t, root, 4*time.Minute, redEnv(h, issuer, artifacts,
		"PORTAL_ZONE=alpha", "PORTAL_VM_NAME=cloudy", "PORTAL_USER_DATA="+userData), "tests/user-data.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "vm-wizard-user-data-refused", "vm-wizard-user-data", "vm-wizard-user-data-created")

	var vms []struct{ Name string }
	h.GraphQL(t, "alice", "red", `{ vms(first: 10) { name } }`, nil).OK(t).Into(t, "vms", &vms)
	if len(vms) != 1 {
		t.Fatalf("want the one VM cloudy in red (the refused creates made none): %+v", vms)
	}
	c, g, cfg := redGuest(t, h, "cloudy")
	if cc, want := cfg.Str("cicustom"), fmt.Sprintf("user=local:snippets/fp-%d-user.yaml", g.VMID); cc != want {
		t.Errorf("the guest's cicustom %q, want %q", cc, want)
	}
	var dump string
	if err := c.Get(t.Context(), fmt.Sprintf("/nodes/%s/qemu/%d/cloudinit/dump?type=user", g.Node, g.VMID), &dump); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{userData, "Merge-Type: list(append)", "user: ops", "hostname: cloudy"} {
		if !strings.Contains(dump, want) {
			t.Errorf("the guest's user-data lacks %q:\n%s", want, dump)
		}
	}
}
