//go:build !race

// The mesh harness embeds Headscale, whose own data races fail any -race
// run (see the Makefile): the tests of this file run in the plain run only.

package portal_test

import (
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/catalogtest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
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
	h, issuer := redVMMesh(t, public, meshtest.ClusterSpec{Name: "alpha", Nodes: 1})

	key := `no-pty,from="10.0.0.0/8" ` + catalogtest.SSHKey(7, "e2e@portal")
	artifacts := filepath.Join(root, "test-artifacts", "ssh-keys")
	start := browsertest.Run(t, root, 4*time.Minute, redEnv(h, issuer, artifacts,
		"PORTAL_SSH_KEY="+key, "PORTAL_ZONE=alpha", "PORTAL_VM_NAME=keyed"), "tests/ssh-keys.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "ssh-keys-invalid", "ssh-keys", "vm-wizard-keys", "ssh-keys-deleted")

	_, _, cfg := redGuest(t, h, "keyed")
	if keys, err := url.QueryUnescape(cfg.Str("sshkeys")); err != nil || !slices.Contains(strings.Split(keys, "\n"), key) {
		t.Errorf("the guest's sshkeys %q (%v), want %q among them", keys, err, key)
	}
	var me struct{ SSHKeys []struct{ Name string } }
	h.GraphQL(t, "alice", "", `{ me { sshKeys { name } } }`, nil).OK(t).Into(t, "me", &me)
	if len(me.SSHKeys) != 0 {
		t.Errorf("alice's keys after the browser deleted hers: %+v", me.SSHKeys)
	}
}
