package devstack_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/devstack"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// walkUserData is the cloud-config of the image walk's first VM: a file
// written with its permissions and a command whose output is its trace.
const walkUserData = `#cloud-config
write_files:
  - path: /etc/walk-file.txt
    content: written from an uploaded image
    permissions: '0640'
runcmd:
  - echo walk-runcmd-ran > etc/walk-runcmd.txt
`

// tinyQCOW2 is a valid, empty QCOW2 (version 2) image of size bytes:
// its header, one cluster each for the refcount table and its block, and
// an L1 table, all of 64 KiB clusters.
func tinyQCOW2(size uint64) []byte {
	const bits = 16
	const cluster = 1 << bits
	l2Cover := uint64(cluster) / 8 * cluster
	l1Size := uint32((size + l2Cover - 1) / l2Cover)
	img := make([]byte, 4*cluster)
	h := img[:72]
	copy(h, "QFI\xfb")
	binary.BigEndian.PutUint32(h[4:], 2)                 // version
	binary.BigEndian.PutUint32(h[20:], bits)             // cluster_bits
	binary.BigEndian.PutUint64(h[24:], size)             // size
	binary.BigEndian.PutUint32(h[36:], l1Size)           // l1_size
	binary.BigEndian.PutUint64(h[40:], 3*cluster)        // l1_table_offset
	binary.BigEndian.PutUint64(h[48:], cluster)          // refcount_table_offset
	binary.BigEndian.PutUint32(h[56:], 1)                // refcount_table_clusters
	binary.BigEndian.PutUint64(img[cluster:], 2*cluster) // the refcount block
	for i := range 4 {                                   // every cluster used once
		binary.BigEndian.PutUint16(img[2*cluster+2*i:], 1)
	}
	return img
}

// testImageWalk is a tenant's walk through images in the dev stack in dir
// (alice in dev, fra1): it uploads a QCOW2 through the multipart request,
// creates a VM of it with a cloud-config whose file and command show in
// the guest's root on the data plane (as root), stops it, makes an image
// of it, and creates a second VM of that image which runs; it deletes
// what it made.
func testImageWalk(t *testing.T, alice *devstack.Client, dir string) {
	ctx := t.Context()
	var img struct{ Name, Format string }
	r, err := gqltest.Post(ctx, nil, alice.URL, gqltest.Request{
		Query:         `mutation($in: UploadImageInput!) { uploadImage(input: $in) { name format } }`,
		Variables:     map[string]any{"in": map[string]any{"name": "walk-upload", "format": "QCOW2", "cloudInit": true, "zone": "fra1", "file": nil}},
		Authorization: "Bearer " + alice.Token, VDC: "dev", File: bytes.NewReader(tinyQCOW2(1 << 30)), FileVariable: "in.file"})
	if err == nil {
		if err = r.Err(); err == nil {
			err = r.Decode(&struct {
				UploadImage any `json:"uploadImage"`
			}{&img})
		}
	}
	if err != nil || img.Name != "walk-upload" || img.Format != "QCOW2" {
		t.Fatalf("uploadImage: %+v, %v", img, err)
	}
	// The stack's agents serve data listeners: the bytes took one, not
	// the mesh.
	poll.True(t, 10*time.Second, "an agent's log of the upload by its data listener", func() bool {
		logs, _ := filepath.Glob(filepath.Join(dir, "logs", devstack.AgentPrefix+"*.log"))
		for _, name := range logs {
			b, _ := os.ReadFile(name)
			for line := range bytes.Lines(b) {
				if bytes.Contains(line, []byte(`msg="agent: uploaded"`)) && bytes.Contains(line, []byte(`via="data listener"`)) {
					return true
				}
			}
		}
		return false
	})
	var nets struct{ Networks []struct{ ID string } }
	if err := alice.Do(ctx, "dev", `{ networks(zone: "fra1") { id } }`, nil, &nets); err != nil || len(nets.Networks) != 1 {
		t.Fatalf("network of dev in fra1: %v %v", nets.Networks, err)
	}
	spec := devstack.VMSpec{Name: "walk-1", Zone: "fra1", Image: "walk-upload", ComputeProfile: "small",
		StorageProfile: "ssd-standard", DiskGiB: 10, Network: nets.Networks[0].ID, UserData: walkUserData}
	first := awaitVM(t, alice, spec)

	if os.Geteuid() == 0 {
		root := guestRoot(t, alice, dir, first)
		want := map[string]struct {
			content string
			mode    os.FileMode
		}{"etc/walk-file.txt": {"written from an uploaded image", 0o640}, "etc/walk-runcmd.txt": {"walk-runcmd-ran\n", 0}}
		for file, w := range want {
			poll.Until(t, time.Minute, "the first boot to write "+file, func() error {
				p := filepath.Join(root, file)
				got, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				if string(got) != w.content {
					return fmt.Errorf("%s holds %q, want %q", file, got, w.content)
				}
				if fi, err := os.Stat(p); err != nil || (w.mode != 0 && fi.Mode().Perm() != w.mode) {
					return fmt.Errorf("%s: mode %v (%v), want %v", file, fi.Mode(), err, w.mode)
				}
				return nil
			})
		}
	} else {
		t.Log("not root: the stack runs no data plane, so nothing runs the user-data")
	}

	if err := alice.Do(ctx, "dev", `mutation($id: ID!) { stopVM(id: $id) { __typename } }`, map[string]any{"id": first}, nil); err != nil {
		t.Fatalf("stopVM: %v", err)
	}
	poll.Until(t, time.Minute, "walk-1 STOPPED", func() error { return vmStatus(ctx, alice, first, "STOPPED") })
	var op struct{ ID string }
	if err := alice.Do(ctx, "dev", `mutation($in: CreateImageFromVMInput!) { createImageFromVM(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"vm": first, "name": "walk-golden"}}, &struct {
			Op any `json:"createImageFromVM"`
		}{&op}); err != nil {
		t.Fatalf("createImageFromVM: %v", err)
	}
	awaitOperation(t, alice, op.ID, "the image of walk-1")

	spec.Name, spec.Image, spec.UserData = "walk-2", "walk-golden", ""
	second := awaitVM(t, alice, spec)
	for _, id := range []string{first, second} {
		if err := alice.Do(ctx, "dev", `mutation($id: ID!) { deleteVM(id: $id) { __typename } }`, map[string]any{"id": id}, nil); err != nil {
			t.Errorf("deleteVM %s: %v", id, err)
		}
	}
	poll.Until(t, time.Minute, "the walk's VMs gone", func() error {
		vms, err := vmsOf(ctx, alice, "dev")
		for _, v := range vms {
			if v.ID == first || v.ID == second {
				return fmt.Errorf("%s still listed", v.Name)
			}
		}
		return err
	})
	for _, name := range []string{"walk-golden", "walk-upload"} {
		if err := alice.Do(ctx, "dev", `mutation($n: String!) { deleteVDCImage(name: $n) { __typename } }`, map[string]any{"n": name}, nil); err != nil {
			t.Errorf("deleteVDCImage %s: %v", name, err)
		}
	}
}

// awaitVM creates the VM of spec in dev and returns its id once it runs
// with an address; a failed create fails t.
func awaitVM(t *testing.T, c *devstack.Client, spec devstack.VMSpec) string {
	t.Helper()
	op, err := devstack.CreateVM(t.Context(), c, "dev", spec)
	if err != nil {
		t.Fatalf("create %s: %v", spec.Name, err)
	}
	awaitOperation(t, c, op, "the create of "+spec.Name)
	var id string
	poll.Until(t, time.Minute, spec.Name+" RUNNING with an address", func() error {
		vms, err := vmsOf(t.Context(), c, "dev")
		if err != nil {
			return err
		}
		for _, v := range vms {
			if v.Name == spec.Name {
				if v.Status != "RUNNING" || len(v.IPAddresses) == 0 {
					return fmt.Errorf("%s with %v", v.Status, v.IPAddresses)
				}
				id = v.ID
				return nil
			}
		}
		return errors.New("not listed")
	})
	return id
}

// awaitOperation polls operation id of dev until it SUCCEEDED; FAILED
// fails t at once.
func awaitOperation(t *testing.T, c *devstack.Client, id, what string) {
	t.Helper()
	poll.Until(t, 3*time.Minute, what+" SUCCEEDED", func() error {
		o, err := devstack.GetOperation(t.Context(), c, "dev", id)
		switch {
		case err != nil:
			return err
		case o.State == "FAILED":
			msg := "(no error given)"
			if o.Error != nil {
				msg = *o.Error
			}
			t.Fatalf("%s failed at step %s: %s", what, o.Step, msg)
		case o.State != "SUCCEEDED":
			return fmt.Errorf("%s at step %s", o.State, o.Step)
		}
		return nil
	})
}

// vmStatus is nil when the VM id of dev has status want.
func vmStatus(ctx context.Context, c *devstack.Client, id, want string) error {
	vms, err := vmsOf(ctx, c, "dev")
	if err != nil {
		return err
	}
	for _, v := range vms {
		if v.ID == id {
			if v.Status != want {
				return fmt.Errorf("status %s", v.Status)
			}
			return nil
		}
	}
	return errors.New("not listed")
}

// guestRoot is the directory the data plane of the dev stack in dir runs
// the VM id of dev in as its root file system.
func guestRoot(t *testing.T, c *devstack.Client, dir, id string) string {
	t.Helper()
	node, vmid := vmNode(t, c, dir, id)
	return filepath.Join(node, "guests", fmt.Sprint(vmid), "rootfs")
}

// vmNode is the file system of the simulated Proxmox node the VM id of
// dev runs on in the dev stack in dir (Dir/pve/<zone>-files/<host>), and
// its VMID.
func vmNode(t *testing.T, c *devstack.Client, dir, id string) (string, int) {
	t.Helper()
	var d struct {
		VM struct {
			Zone struct{ Name string }
			Host *struct{ Name string }
		} `json:"vm"`
	}
	if err := c.Do(t.Context(), "dev", `query($id: ID!) { vm(id: $id) { zone { name } host { name } } }`, map[string]any{"id": id}, &d); err != nil || d.VM.Host == nil {
		t.Fatalf("the VM's host: %+v, %v", d.VM, err)
	}
	ref, err := tenancy.ParseVMID(id)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "pve", d.VM.Zone.Name+"-files", d.VM.Host.Name), ref.VMID
}
