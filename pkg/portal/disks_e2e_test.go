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
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
)

// TestBrowserDisks: tests/disks.test.mjs attaches, grows and detaches a
// disk of a running VM on its page and resizes the VM, each refusal read
// next to its field, then backs the VM up, sets and removes its backup
// schedule, restores the backup into a new VM and deletes the backup, then
// makes an image of the VM once stopped, uploads a file and an ISO as
// images, stages the upload (made in zone alpha) to zone beta, deletes the
// VM's image, creates a VM from the upload with the ISO and detaches the
// ISO on the VM's page; checked here through GraphQL afterwards: one disk
// left, the VM stopped with the new profile's size and no backup schedule,
// the restored VM running, no backup left, the upload (RAW, 2 MiB) and the
// ISO (40 KiB) the VDC's images, the upload STAGED in both zones, the VM
// made from them running without its ISO.
func TestBrowserDisks(t *testing.T) {
	t.Parallel()
	root, public := browserPrerequisites(t)
	h, issuer := portalMesh(t, public, slog.DiscardHandler, meshtest.WithAPI(meshtest.APISpec{Users: redUsers()}),
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}, meshtest.ClusterSpec{Name: "beta", Nodes: 1}))
	h.WaitOnline(t, 30*time.Second)
	vmID := createRedVM(t, h, "disky")
	h.GraphQL(t, "admin", "", `mutation { createStorageProfile(input: {name: "backups", tier: "backup", kind: BACKUP,
	  pools: [{zone: "alpha", pool: "local"}]}) { name }
	  updateStorageProfile(input: {name: "ssd", pools: [{zone: "alpha", pool: "local-lvm"}, {zone: "beta", pool: "local-lvm"}]}) { name } }`, nil).OK(t)

	artifacts := filepath.Join(root, "test-artifacts", "disks")
	start := runBrowserTests(t, root, redEnv(h, issuer, artifacts,
		"PORTAL_VM_PATH=/vms/"+url.PathEscape(vmID), "PORTAL_VM_NAME=disky", "PORTAL_RESIZE_TO=medium", "PORTAL_RESTORE_AS=disky-copy",
		"PORTAL_IMAGE_FROM_VM=disky-img", "PORTAL_IMAGE_UPLOADED=upl", "PORTAL_VM_FROM_UPLOAD=fromupl", "PORTAL_ISO=setup-cd",
		"PORTAL_IMAGE_ZONE=alpha", "PORTAL_STAGE_ZONE=beta"), "tests/disks.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "vm-disk-attached", "vm-disk-grown", "vm-resize-refused", "vm-resized",
		"vm-backup-taken", "backup-restored", "vm-image-refused", "vdc-images")

	var vm struct {
		Status         string
		Vcpus          int
		MemoryMiB      int
		Disks          []struct{ Slot string }
		BackupSchedule *struct{ State string }
	}
	poll.True(t, 30*time.Second, "the VM stopped, resized, with its one disk and no backup schedule", func() bool {
		h.GraphQL(t, "alice", "red", `query($id: ID!) { vm(id: $id) { status vcpus memoryMiB disks { slot } backupSchedule { state } } }`, map[string]any{"id": vmID}).
			OK(t).Into(t, "vm", &vm)
		return vm.Status == "STOPPED" && vm.Vcpus == 2 && vm.MemoryMiB == 1024 && len(vm.Disks) == 1 && vm.Disks[0].Slot == "scsi0" && vm.BackupSchedule == nil
	})

	// The restore made a running VM of the backed-up size; the backup is gone.
	var backups struct{ TotalCount int }
	var restored struct {
		Nodes []struct {
			Status string
			Vcpus  int
		}
	}
	poll.True(t, 30*time.Second, "disky-copy running with 2 vCPUs and no backup left", func() bool {
		r := h.GraphQL(t, "alice", "red", `{ backups { totalCount } vmsConnection(filter: {name: "disky-copy"}) { nodes { status vcpus } } }`, nil).OK(t)
		r.Into(t, "backups", &backups)
		r.Into(t, "vmsConnection", &restored)
		return backups.TotalCount == 0 && len(restored.Nodes) == 1 && restored.Nodes[0].Status == "RUNNING" && restored.Nodes[0].Vcpus == 2
	})

	// The VDC's images: the upload listed as red's, the VM's image
	// deleted; the VM made from the upload runs; another VDC sees none.
	var images []struct {
		Name, Format string
		SizeBytes    *float64
		VDC          *struct{ Name string }
	}
	h.GraphQL(t, "alice", "red", `{ images { name format sizeBytes vdc { name } } }`, nil).OK(t).Into(t, "images", &images)
	var own []string
	for _, i := range images {
		if i.VDC != nil {
			own = append(own, i.Name)
			if i.Name == "setup-cd" && i.Format == "ISO" && i.SizeBytes != nil && *i.SizeBytes == 40<<10 {
				continue
			}
			if i.Name != "upl" || i.VDC.Name != "red" || i.Format != "RAW" || i.SizeBytes == nil || *i.SizeBytes != 2<<20 {
				t.Errorf("VDC image %+v, want upl of red, RAW, 2 MiB, and the ISO setup-cd of 40 KiB", i)
			}
		}
	}
	if len(own) != 2 {
		t.Errorf("red's images %v, want [setup-cd upl]", own)
	}
	// Staged to beta in the portal, the upload is ready in both zones.
	var upl struct {
		VDCZones []struct{ Zone, State string }
	}
	h.GraphQL(t, "alice", "red", `{ image(name: "upl") { vdcZones { zone state } } }`, nil).OK(t).Into(t, "image", &upl)
	zones := map[string]string{}
	for _, z := range upl.VDCZones {
		zones[z.Zone] = z.State
	}
	if len(zones) != 2 || zones["alpha"] != "STAGED" || zones["beta"] != "STAGED" {
		t.Errorf("upl's zones %+v, want STAGED in alpha and beta", upl.VDCZones)
	}
	var vms struct {
		Nodes []struct {
			Name, Status string
			ISO          *struct{ Name string }
		}
	}
	h.GraphQL(t, "alice", "red", `{ vmsConnection(first: 10) { nodes { name status iso { name } } } }`, nil).OK(t).Into(t, "vmsConnection", &vms)
	found := false
	for _, v := range vms.Nodes {
		// Its ISO was detached in the portal.
		found = found || (v.Name == "fromupl" && v.Status == "RUNNING" && v.ISO == nil)
	}
	if !found {
		t.Errorf("VMs of red %+v, want fromupl RUNNING without its ISO", vms.Nodes)
	}
}

// createRedVM sets up zone alpha's profiles ("small", "medium", "ssd"),
// the image "tiny" and red's network "lan", creates VM name of red there
// as alice, waits for it to run and returns its id.
func createRedVM(t *testing.T, h *meshtest.Harness, name string) string {
	t.Helper()
	image, sum := vmtest.ImageServer(t, 3<<20)
	h.GraphQL(t, "admin", "", `mutation($u: String!, $c: String!) {
	  createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name }
	  other: createComputeProfile(input: {name: "medium", vcpus: 2, memoryMiB: 1024}) { name }
	  createStorageProfile(input: {name: "ssd", tier: "ssd", pools: [{zone: "alpha", pool: "local-lvm"}]}) { name }
	  createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name } }`,
		map[string]any{"u": image, "c": sum}).OK(t)
	var net struct{ ID string }
	h.GraphQL(t, "alice", "red", `mutation { createNetwork(input: {name: "lan", zone: "alpha", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`, nil).
		OK(t).Into(t, "createNetwork", &net)
	return createVM(t, h, name, net.ID)
}

// createVM creates VM name of red in zone alpha on network (image tiny,
// compute profile small, storage profile ssd, 4 GiB) through GraphQL as
// alice, waits until its create succeeds and returns its id.
func createVM(t *testing.T, h *meshtest.Harness, name, network string) string {
	t.Helper()
	var created struct{ Operation struct{ ID string } }
	h.GraphQL(t, "alice", "red", `mutation($in: CreateVMInput!) { createVM(input: $in) { operation { id } } }`,
		map[string]any{"in": map[string]any{"name": name, "zone": "alpha", "image": "tiny", "computeProfile": "small",
			"storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": network}}, "user": "alice"}}).
		OK(t).Into(t, "createVM", &created)
	var vmID string
	poll.True(t, 60*time.Second, "VM "+name+" created", func() bool {
		var op struct {
			State string
			VMID  *string `json:"vmId"`
		}
		h.GraphQL(t, "alice", "red", `query($id: ID!) { operation(id: $id) { state vmId } }`, map[string]any{"id": created.Operation.ID}).
			OK(t).Into(t, "operation", &op)
		if op.State == "FAILED" {
			t.Fatalf("create failed: %+v", op)
		}
		if op.VMID != nil {
			vmID = *op.VMID
		}
		return op.State == "SUCCEEDED"
	})
	return vmID
}
