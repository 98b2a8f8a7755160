//go:build !race

// The mesh harness embeds Headscale, whose own data races fail any -race
// run (see the Makefile): the tests of this file run in the plain run only.

package portal_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// conventionVMs is how many VMs the member's VDC has: five pages of 50.
const conventionVMs = 250

// TestBrowserConventions runs tests/conventions.test.mjs against the mesh
// harness (zone alpha with 2 nodes, real agents) whose VDC red holds 250
// guests, 3 of them running, and whose provider gives the portal's
// sessions 45 s tokens (so they renew every 15 s): the VM list pages
// through all 250 by cursors, a VM's, a host's and a zone's graphs have
// data, a session renews twice keeping a wizard's input, every page passes
// axe-core without serious or critical violations and fits a 390 px phone,
// and the first page's JavaScript stays within 350 KB gzipped. Then
// tests/keyboard.test.mjs uses every page with the keyboard only: the main
// actions reached with Tab (showing the focus ring) and pressed with Enter
// or Space, dialogs keeping the focus, closing on Escape and giving it
// back, the hosts paged one by one by cursors.
func TestBrowserConventions(t *testing.T) {
	t.Parallel()
	root, public := browserPrerequisites(t)
	begin := time.Now()
	vdcs := meshtest.DefaultVDCs()
	vdcs[0].Quotas.VMs = conventionVMs + 10
	h, issuer := portalMesh(t, public, slog.DiscardHandler,
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2}),
		meshtest.WithAPI(meshtest.APISpec{VDCs: vdcs, SessionTokenLifetime: 45 * time.Second}),
	)
	h.WaitOnline(t, 30*time.Second)
	seedGuests(t, h.Clusters[0].Proxmox(t), "red", conventionVMs, 3)
	t.Logf("harness up and %d guests seeded in %s", conventionVMs, time.Since(begin).Round(time.Millisecond))

	artifacts := filepath.Join(root, "test-artifacts", "conventions")
	start := browsertest.Run(t, root, 8*time.Minute, []string{
		"PORTAL_URL=" + h.Orchestrator.URL(),
		"OIDC_ISSUER=" + issuer,
		"PORTAL_ADMIN_USER=admin", "PORTAL_ADMIN_PASSWORD=admin-pw",
		"PORTAL_MEMBER_USER=alice", "PORTAL_MEMBER_PASSWORD=alice-pw",
		"PORTAL_MEMBER_VDCS=red",
		"PORTAL_VM_COUNT=" + strconv.Itoa(conventionVMs),
		"PORTAL_ARTIFACTS=" + artifacts,
	}, "tests/conventions.test.mjs", "tests/keyboard.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "vms-paged", "vm-graphs", "renewed", "zone-graphs", "host-graphs",
		"keyboard-vm", "keyboard-phone", "keyboard-admin")
}

// seedGuests creates n guests of vdc through the cluster's Proxmox API
// (tagged and pooled as flexplane's creates leave them), spread over its
// two nodes, and starts the first running of them.
func seedGuests(t *testing.T, c *proxmox.Client, vdc string, n, running int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Post(ctx, "/pools", map[string]any{"poolid": tenancy.PoolID(vdc)}, nil); err != nil {
		t.Fatalf("pool: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				params := map[string]any{"vmid": 1000 + i, "name": fmt.Sprintf("vm-%03d", i), "cores": 2, "memory": 2048,
					"tags": tenancy.GuestTags(vdc), "pool": tenancy.PoolID(vdc)}
				if i < running {
					params["start"] = 1
				}
				var upid proxmox.UPID
				if err := c.Post(ctx, fmt.Sprintf("/nodes/pve%d/qemu", i%2+1), params, &upid); err != nil {
					errs <- fmt.Errorf("guest %d: %w", i, err)
					continue
				}
				task := proxmox.NewTask(upid, c)
				if err := task.Wait(ctx, 20*time.Millisecond, time.Minute); err != nil || task.IsFailed {
					errs <- fmt.Errorf("guest %d: %v %s", i, err, task.ExitStatus)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
