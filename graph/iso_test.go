package graph_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// isoFile is an ISO 9660 image as far as its signature goes: "CD001" at
// byte 32769, the standard identifier of its first volume descriptor.
func isoFile() []byte {
	b := bytes.Repeat([]byte{0}, 40<<10)
	copy(b[32769:], "CD001")
	return b
}

// TestISOsEndToEnd: a member uploads an ISO (a file without the ISO 9660
// signature is BAD_USER_INPUT and leaves nothing); it is listed as format
// ISO and kept as a file of the zone's shared storage; a VM of the ISO
// alone gets a blank disk, the ISO in ide2 and boots from it first, and
// reads it back as VM.iso; a VM of an image and the ISO keeps its
// cloud-init drive (moved to ide0); an ISO given as image, a disk image
// given as iso, and another VDC's ISO are refused naming the field;
// deleteVDCImage is CONFLICT while a VM holds the ISO; detachISO ejects it
// and boots the VM from its disk; then the ISO deletes with its file.
func TestISOsEndToEnd(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "isos")
	px := h.Clusters[0].Proxmox(t)
	ctx := vmtest.Ctx(t)
	isoVol := "shared:iso/fp-iso-" + tn.blue + ".installer.iso"
	files := func() []string {
		t.Helper()
		var vols []struct{ VolID string }
		if err := px.Get(ctx, "/nodes/pve1/storage/shared/content?content=iso", &vols); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range vols {
			if strings.Contains(v.VolID, tn.blue) {
				out = append(out, v.VolID)
			}
		}
		return out
	}
	isoIn := func(name string) map[string]any {
		return map[string]any{"name": name, "format": "ISO", "cloudInit": true}
	}

	notISO := bytes.Repeat([]byte("x"), 40<<10)
	if r, err := upload(t, h, tn.bob, tn.blue, isoIn("fake"), bytes.NewReader(notISO)); err != nil || r.Code(t) != "BAD_USER_INPUT" || fieldOf(t, r) != "input.file" {
		t.Fatalf("an upload of a file that is no ISO: %v %v", err, r)
	}
	if got := files(); len(got) != 0 {
		t.Fatalf("a refused ISO left %v", got)
	}
	var img struct {
		Name, Format string
		SizeBytes    float64
		CloudInit    bool
		VDC          *struct{ Name string }
	}
	r, err := upload(t, h, tn.bob, tn.blue, isoIn("installer"), bytes.NewReader(isoFile()))
	if err != nil {
		t.Fatal(err)
	}
	r.OK(t).Into(t, "uploadImage", &img)
	if img.Name != "installer" || img.Format != "ISO" || img.SizeBytes != 40<<10 || img.CloudInit || img.VDC == nil || img.VDC.Name != tn.blue {
		t.Fatalf("uploadImage of an ISO: %+v", img)
	}
	if got := files(); len(got) != 1 || got[0] != isoVol {
		t.Fatalf("the ISO's file: %v, want %s", got, isoVol)
	}
	var imgs []struct{ Name, Format string }
	h.GraphQL(t, tn.bob, tn.blue, `{ images { name format } }`, nil).OK(t).Into(t, "images", &imgs)
	if fmt.Sprint(imgs) != "[{installer ISO} {tiny QCOW2}]" {
		t.Fatalf("blue's images: %v", imgs)
	}

	vmIn := func(name, net string, in map[string]any) map[string]any {
		base := map[string]any{"name": name, "zone": "alpha", "computeProfile": "small", "storageProfile": "ssd",
			"diskGiB": 4, "nics": []any{map[string]any{"network": net}}, "user": "bob"}
		for k, v := range in {
			base[k] = v
		}
		return map[string]any{"in": base}
	}
	redNet := createNetworks(t, h, tn.alice, tn.red, "alpha")["alpha"]
	for _, c := range []struct {
		user, vdc, net string
		in             map[string]any
		code, field    string
	}{
		{tn.bob, tn.blue, tn.net, map[string]any{"image": "installer"}, "BAD_USER_INPUT", "input.image"},
		{tn.bob, tn.blue, tn.net, map[string]any{"iso": "tiny"}, "BAD_USER_INPUT", "input.iso"},
		{tn.bob, tn.blue, tn.net, map[string]any{}, "BAD_USER_INPUT", "input.image"},
		{tn.bob, tn.blue, tn.net, map[string]any{"iso": "installer", "sshKeys": []string{sshKey}}, "BAD_USER_INPUT", "input.sshKeys"},
		{tn.alice, tn.red, redNet, map[string]any{"iso": "installer"}, "NOT_FOUND", "input.iso"},
	} {
		if r := h.GraphQL(t, c.user, c.vdc, createVM, vmIn("bad", c.net, c.in)); r.Code(t) != c.code || fieldOf(t, r) != c.field {
			t.Errorf("createVM with %v in %s: %s, want %s on %s", c.in, c.vdc, r.Raw, c.code, c.field)
		}
	}

	var created struct{ Operation gqlOp }
	h.GraphQL(t, tn.bob, tn.blue, createVM, vmIn("installing", tn.net, map[string]any{"iso": "installer"})).OK(t).Into(t, "createVM", &created)
	vm := awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)
	h.GraphQL(t, tn.bob, tn.blue, createVM, vmIn("rescue", tn.net, map[string]any{"image": "tiny", "iso": "installer", "sshKeys": []string{sshKey}})).OK(t).Into(t, "createVM", &created)
	rescue := awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)
	config := func(id string) map[string]any {
		t.Helper()
		ref, err := tenancy.ParseVMID(id)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := px.Get(ctx, fmt.Sprintf("/nodes/pve1/qemu/%d/config", ref.VMID), &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := config(vm)
	if cfg["ide2"] != isoVol+",media=cdrom" || cfg["boot"] != "order=ide2;scsi0" || !strings.Contains(fmt.Sprint(cfg["scsi0"]), "size=4G") {
		t.Fatalf("the VM of the ISO: ide2=%v boot=%v scsi0=%v", cfg["ide2"], cfg["boot"], cfg["scsi0"])
	}
	cfg = config(rescue)
	if cfg["ide2"] != isoVol+",media=cdrom" || cfg["boot"] != "order=ide2;scsi0" || !strings.Contains(fmt.Sprint(cfg["ide0"]), "cloudinit") {
		t.Fatalf("the VM of an image and the ISO: ide0=%v ide2=%v boot=%v", cfg["ide0"], cfg["ide2"], cfg["boot"])
	}
	const readISO = `query($id: ID!) { vm(id: $id) { iso { name format } } }`
	var got struct {
		ISO *struct{ Name, Format string }
	}
	h.GraphQL(t, tn.bob, tn.blue, readISO, map[string]any{"id": vm}).OK(t).Into(t, "vm", &got)
	if got.ISO == nil || got.ISO.Name != "installer" || got.ISO.Format != "ISO" {
		t.Fatalf("VM.iso: %+v", got.ISO)
	}

	const deleteISO = `mutation { deleteVDCImage(name: "installer") { name } }`
	if r := h.GraphQL(t, tn.bob, tn.blue, deleteISO, nil); r.Code(t) != "CONFLICT" {
		t.Fatalf("deleting an ISO a VM holds: %s", r.Raw)
	}
	const detach = `mutation($id: ID!) { detachISO(vm: $id) { id iso { name } } }`
	if r := h.GraphQL(t, tn.alice, tn.red, detach, map[string]any{"id": vm}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("red detaches blue's ISO: %s", r.Raw)
	}
	for _, id := range []string{vm, rescue} {
		got.ISO = &struct{ Name, Format string }{}
		h.GraphQL(t, tn.bob, tn.blue, detach, map[string]any{"id": id}).OK(t).Into(t, "detachISO", &got)
		if got.ISO != nil {
			t.Errorf("VM.iso after detachISO: %+v", got.ISO)
		}
		if cfg := config(id); cfg["ide2"] != "none,media=cdrom" || cfg["boot"] != "order=scsi0" {
			t.Errorf("after detachISO: ide2=%v boot=%v", cfg["ide2"], cfg["boot"])
		}
	}
	h.GraphQL(t, tn.bob, tn.blue, deleteISO, nil).OK(t)
	if got := files(); len(got) != 0 {
		t.Errorf("the deleted ISO left %v", got)
	}
	if r := h.GraphQL(t, tn.bob, tn.blue, `{ image(name: "installer") { name } }`, nil); r.Code(t) != "NOT_FOUND" {
		t.Errorf("the deleted ISO: %s", r.Raw)
	}
}
