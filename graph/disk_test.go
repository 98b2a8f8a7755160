package graph_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// createBlueVM creates VM name of small and image tiny with a 4 GiB disk
// in tn's blue VDC, in zone alpha, as bob, and waits for it.
func createBlueVM(t *testing.T, h *meshtest.Harness, tn tenant, name string) string {
	t.Helper()
	var created struct{ Operation gqlOp }
	h.GraphQL(t, tn.bob, tn.blue, createVM, map[string]any{"in": map[string]any{"name": name, "zone": "alpha", "image": "tiny",
		"computeProfile": "small", "storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": tn.net}},
		"sshKeys": []string{sshKey}, "user": "bob"}}).OK(t).Into(t, "createVM", &created)
	return awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)
}

// storageUsage is the storage tn's blue VDC uses as its quota counts it.
func storageUsage(t *testing.T, h *meshtest.Harness, tn tenant) int {
	t.Helper()
	var v struct{ Usage struct{ StorageGiB int } }
	h.GraphQL(t, tn.bob, tn.blue, `query($n: String!) { vdc(name: $n) { usage { storageGiB } } }`, map[string]any{"n": tn.blue}).OK(t).Into(t, "vdc", &v)
	return v.Usage.StorageGiB
}

// diskFile is the file holding the bytes of disk slot of VM id, as the
// simulated node's storage names it (its volume's path).
func diskFile(t *testing.T, h *meshtest.Harness, id, slot string) string {
	t.Helper()
	ref, err := tenancy.ParseVMID(id)
	if err != nil {
		t.Fatal(err)
	}
	c := h.Clusters[0].Proxmox(t)
	g, ok, err := pveapi.FindGuest(context.Background(), c, ref.VMID)
	if err != nil || !ok {
		t.Fatalf("guest %d: %v, %v", ref.VMID, ok, err)
	}
	cfg, err := pveapi.GuestConfig(context.Background(), c, g.Node, g.VMID)
	if err != nil {
		t.Fatal(err)
	}
	vol, _, _ := strings.Cut(cfg.Str(slot), ",")
	storage, _, _ := strings.Cut(vol, ":")
	var info struct{ Path string }
	if err := c.Get(context.Background(), "/nodes/"+g.Node+"/storage/"+storage+"/content/"+vol, &info); err != nil || info.Path == "" {
		t.Fatalf("the path of %s: %q, %v", vol, info.Path, err)
	}
	return info.Path
}

type gqlDisk struct {
	Slot           string
	Boot           bool
	SizeGiB        float64
	StorageProfile *struct{ Name string }
}

// TestDisksEndToEnd attaches, grows and detaches a disk of a running VM
// and resizes the VM through the API, the mesh and the agent's allowlist
// to simulated Proxmox: the VM's disks show each change (the boot disk
// flagged), the VDC's storage usage counts every disk, the unused one
// kept by a detach too, a grown disk's file (the simulator's data plane)
// is the new size with its bytes kept, and the refusals (a shrink, a missing slot, the
// boot disk, a reboot not allowed, another VDC's VM, a viewer) name their
// code and field.
func TestDisksEndToEnd(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "disks")
	h.GraphQL(t, "admin", "", `mutation { createComputeProfile(input: {name: "disks-medium", vcpus: 2, memoryMiB: 1024}) { name } }`, nil).OK(t)
	vm := createBlueVM(t, h, tn, "disky")
	usage := func() int { return storageUsage(t, h, tn) }
	disks := func() []gqlDisk {
		var v struct{ Disks []gqlDisk }
		h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { vm(id: $id) { disks { slot boot sizeGiB storageProfile { name } } } }`,
			map[string]any{"id": vm}).OK(t).Into(t, "vm", &v)
		return v.Disks
	}
	base := usage()

	const attach = `mutation($in: AttachDiskInput!) { attachDisk(input: $in) { slot boot sizeGiB storageProfile { name } } }`
	const grow = `mutation($in: ResizeDiskInput!) { resizeDisk(input: $in) { slot boot sizeGiB } }`
	const detach = `mutation($in: DetachDiskInput!) { detachDisk(input: $in) { id disks { slot } } }`
	const resize = `mutation($in: ResizeVMInput!) { resizeVM(input: $in) { id kind state vmId step } }`
	var d gqlDisk
	h.GraphQL(t, tn.bob, tn.blue, attach, map[string]any{"in": map[string]any{"vm": vm, "sizeGiB": 2}}).OK(t).Into(t, "attachDisk", &d)
	if d.Slot != "scsi1" || d.Boot || d.SizeGiB != 2 || d.StorageProfile == nil || d.StorageProfile.Name != "ssd" {
		t.Fatalf("attached: %+v", d)
	}
	if ds := disks(); len(ds) != 2 || !ds[0].Boot || ds[0].Slot != "scsi0" || ds[1].Slot != "scsi1" || ds[1].Boot {
		t.Fatalf("disks: %+v", ds)
	}
	poll.True(t, 20*time.Second, "the usage to count the new disk", func() bool { return usage() == base+2 })

	for _, c := range []struct {
		user, vdc, query string
		in               map[string]any
		code, field      string
	}{
		{tn.bob, tn.blue, grow, map[string]any{"vm": vm, "disk": "scsi1", "sizeGiB": 1}, "BAD_USER_INPUT", "input.sizeGiB"},
		{tn.bob, tn.blue, grow, map[string]any{"vm": vm, "disk": "scsi5", "sizeGiB": 8}, "NOT_FOUND", "input.disk"},
		{tn.bob, tn.blue, attach, map[string]any{"vm": vm, "sizeGiB": 1, "storageProfile": "nope"}, "BAD_USER_INPUT", "input.storageProfile"},
		{tn.bob, tn.blue, attach, map[string]any{"vm": vm, "sizeGiB": 70000}, "BAD_USER_INPUT", "input.sizeGiB"},
		{tn.bob, tn.blue, detach, map[string]any{"vm": vm, "disk": "scsi0"}, "CONFLICT", "input.disk"},
		{tn.bob, tn.blue, resize, map[string]any{"id": vm, "computeProfile": "disks-medium"}, "CONFLICT", "input.reboot"},
		{tn.bob, tn.blue, resize, map[string]any{"id": vm, "computeProfile": "nope", "reboot": true}, "BAD_USER_INPUT", "input.computeProfile"},
		{tn.alice, tn.red, attach, map[string]any{"vm": vm, "sizeGiB": 1}, "NOT_FOUND", ""},
		{tn.alice, tn.red, grow, map[string]any{"vm": vm, "disk": "scsi1", "sizeGiB": 8}, "NOT_FOUND", ""},
		{tn.alice, tn.red, detach, map[string]any{"vm": vm, "disk": "scsi1"}, "NOT_FOUND", ""},
		{tn.alice, tn.red, resize, map[string]any{"id": vm, "computeProfile": "disks-medium", "reboot": true}, "NOT_FOUND", ""},
		{tn.vera, tn.red, attach, map[string]any{"vm": vm, "sizeGiB": 1}, "FORBIDDEN", ""},
		{tn.vera, tn.blue, attach, map[string]any{"vm": vm, "sizeGiB": 1}, "NOT_FOUND", ""},
	} {
		r := h.GraphQL(t, c.user, c.vdc, c.query, map[string]any{"in": c.in})
		if r.Code(t) != c.code || fieldOf(t, r) != c.field {
			t.Errorf("%s in %s: %s %v: %s, want %s %s", c.user, c.vdc, c.query, c.in, r.Raw, c.code, c.field)
		}
	}
	if ds := disks(); len(ds) != 2 || ds[1].SizeGiB != 2 {
		t.Fatalf("refusals changed the disks: %+v", ds)
	}

	// The data plane: what the guest wrote on the disk stays when it grows.
	file := diskFile(t, h, vm, "scsi1")
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	h.GraphQL(t, tn.bob, tn.blue, grow, map[string]any{"in": map[string]any{"vm": vm, "disk": "scsi1", "sizeGiB": 6}}).OK(t).Into(t, "resizeDisk", &d)
	if d.Slot != "scsi1" || d.SizeGiB != 6 {
		t.Fatalf("grown: %+v", d)
	}
	if fi, err := os.Stat(file); err != nil || fi.Size() != 6<<30 {
		t.Fatalf("the grown disk's file: %v, %v", fi, err)
	}
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got[:len(data)], data) {
		t.Fatalf("the grown disk lost its bytes (%v)", err)
	}
	poll.True(t, 20*time.Second, "the usage to count the grown disk", func() bool { return usage() == base+6 })

	var after struct{ Disks []struct{ Slot string } }
	h.GraphQL(t, tn.bob, tn.blue, detach, map[string]any{"in": map[string]any{"vm": vm, "disk": "scsi1", "keep": true}}).OK(t).Into(t, "detachDisk", &after)
	if len(after.Disks) != 1 || after.Disks[0].Slot != "scsi0" {
		t.Fatalf("after the detach: %+v", after)
	}
	if u := usage(); u != base+6 {
		t.Fatalf("usage %d GiB with the kept disk, want %d", u, base+6)
	}

	var op gqlOp
	h.GraphQL(t, tn.bob, tn.blue, resize, map[string]any{"in": map[string]any{"id": vm, "computeProfile": "disks-medium", "reboot": true}}).OK(t).Into(t, "resizeVM", &op)
	if op.Kind != "RESIZE_VM" || op.VMID == nil || *op.VMID != vm {
		t.Fatalf("resizeVM: %+v", op)
	}
	awaitOp(t, h, tn.bob, tn.blue, &op, "the resize")
	var sized struct {
		Status    string
		Vcpus     int
		MemoryMiB int
	}
	poll.True(t, 20*time.Second, "the VM running with 2 vCPUs and 1 GiB", func() bool {
		h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { vm(id: $id) { status vcpus memoryMiB } }`, map[string]any{"id": vm}).OK(t).Into(t, "vm", &sized)
		return sized.Status == "RUNNING" && sized.Vcpus == 2 && sized.MemoryMiB == 1024
	})
}
