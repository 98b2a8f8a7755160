//go:build !race

// The mesh harness embeds Headscale, whose own data races fail any -race
// run (see the Makefile): the tests of this file run in the plain run only.

package portal_test

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
)

// TestBrowserMaintenance: tests/maintenance.test.mjs puts the host of a
// running VM in maintenance from the Hosts page, follows the drain until
// the host is in maintenance with the VM moved, and ends the maintenance;
// checked here through GraphQL: the VM running on the other host, the
// host back in placement. Then, on the same zone of two hosts,
// tests/placement.test.mjs makes a SPREAD placement group and a VM in it
// as a member, pins a second VM of it as the platform admin (the first
// VM's host refused), makes and revokes an enrollment key and stages an
// image; checked here: the two VMs in the group on distinct hosts, the
// key revoked, the image staged.
func TestBrowserMaintenance(t *testing.T) {
	t.Parallel()
	root, public := browserPrerequisites(t)
	h, issuer := portalMesh(t, public, slog.DiscardHandler, meshtest.WithAPI(meshtest.APISpec{Users: redUsers()}),
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2}))
	h.WaitOnline(t, 30*time.Second)
	vmID := createRedVM(t, h, "drained")
	// An image of the catalog not staged in alpha: the admin stages it.
	image, sum := vmtest.ImageServer(t, 1<<20)
	h.GraphQL(t, "admin", "", `mutation($u: String!, $c: String!) { createImage(input: {name: "extra", version: "1", url: $u, checksum: $c, cloudInit: true}) { name } }`,
		map[string]any{"u": image, "c": sum}).OK(t)
	type vmState struct {
		Status string
		Host   struct{ Name string }
	}
	var before vmState
	h.GraphQL(t, "alice", "red", `query($id: ID!) { vm(id: $id) { status host { name } } }`, map[string]any{"id": vmID}).
		OK(t).Into(t, "vm", &before)

	artifacts := filepath.Join(root, "test-artifacts", "maintenance")
	start := runBrowserTests(t, root, redEnv(h, issuer, artifacts,
		"PORTAL_MAINT_HOST=alpha/"+before.Host.Name, "PORTAL_MAINT_VM=drained", "PORTAL_ZONE=alpha", "PORTAL_STAGE_IMAGE=extra"),
		"tests/maintenance.test.mjs", "tests/placement.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "host-maintenance-drained", "host-maintenance-ended",
		"placement-vms", "placement-groups-conflict", "placement-pin-refused", "enrollment-keys", "image-staging")
	checkPlacement(t, h, artifacts)

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

// checkPlacement checks through GraphQL what tests/placement.test.mjs did
// (artifacts/placement.json): spread-a and spread-b in red's group web on
// the hosts the browser saw, distinct; the enrollment key revoked; image
// extra staged in alpha.
func checkPlacement(t *testing.T, h *meshtest.Harness, artifacts string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(artifacts, "placement.json"))
	if err != nil {
		t.Fatalf("the browser test did not finish: %v", err)
	}
	var seen struct{ First, Second, Key string }
	if err := json.Unmarshal(b, &seen); err != nil {
		t.Fatal(err)
	}
	var vms []struct {
		Name           string
		Host           struct{ Name string }
		PlacementGroup *struct{ Name string }
	}
	h.GraphQL(t, "alice", "red", `{ vms(first: 50) { name host { name } placementGroup { name } } }`, nil).OK(t).Into(t, "vms", &vms)
	want := map[string]string{"spread-a": seen.First, "spread-b": seen.Second}
	for _, v := range vms {
		host, ok := want[v.Name]
		if !ok {
			continue
		}
		delete(want, v.Name)
		if v.Host.Name != host || v.PlacementGroup == nil || v.PlacementGroup.Name != "web" {
			t.Errorf("%s on %q in %+v, want on %q in web", v.Name, v.Host.Name, v.PlacementGroup, host)
		}
	}
	if len(want) > 0 || seen.First == seen.Second {
		t.Errorf("VMs missing: %v; hosts %q and %q", want, seen.First, seen.Second)
	}
	type key struct {
		ID      string
		Expired bool
	}
	var keys []key
	h.GraphQL(t, "admin", "", `{ enrollmentKeys { id expired } }`, nil).OK(t).Into(t, "enrollmentKeys", &keys)
	if !slices.Contains(keys, key{ID: seen.Key, Expired: true}) {
		t.Errorf("enrollment key %q not revoked: %+v", seen.Key, keys)
	}
	type image struct {
		Name  string
		Zones []struct{ State string }
	}
	var images []image
	h.GraphQL(t, "admin", "", `{ images { name zones(zone: "alpha") { state } } }`, nil).OK(t).Into(t, "images", &images)
	if i := slices.IndexFunc(images, func(x image) bool { return x.Name == "extra" }); i < 0 || len(images[i].Zones) != 1 || images[i].Zones[0].State != "STAGED" {
		t.Errorf("image extra in alpha: %+v", images)
	}
}
