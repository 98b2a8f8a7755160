package images_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute/images"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

func TestStageMakesOneTemplatePerNode(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "alpha", 2)
	img := tinyImage(t, "tiny")
	s := images.New(nil)
	tgt := images.Target{Zone: z.Name, Client: z.Client, Storages: []string{"local-lvm"}}
	ctx := vmtest.Ctx(t)

	st, err := s.Status(ctx, tgt, img)
	if err != nil || st.State != images.StateAbsent {
		t.Fatalf("before: %+v, %v; want ABSENT", st, err)
	}
	st, err = s.Stage(ctx, tgt, img)
	if err != nil || st.State != images.StateStaging || st.UPID == "" {
		t.Fatalf("stage: %+v, %v; want STAGING with a task", st, err)
	}
	// Concurrent Ensure calls share the run and yield one template.
	tpls := make(chan images.Template, 4)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			tpl, err := s.Ensure(ctx, tgt, img)
			tpls <- tpl
			errs <- err
		}()
	}
	var first images.Template
	for i := range 4 {
		tpl := <-tpls
		if err := <-errs; err != nil {
			t.Fatalf("ensure: %v", err)
		}
		if i == 0 {
			first = tpl
		} else if tpl != first {
			t.Fatalf("templates differ: %+v vs %+v", tpl, first)
		}
	}
	st, err = s.Status(ctx, tgt, img)
	if err != nil || st.State != images.StateStaged || st.Template != first {
		t.Fatalf("after: %+v, %v; want STAGED %+v", st, err, first)
	}
	if first.DiskBytes < 3<<20 {
		t.Errorf("template disk %d bytes, smaller than the image", first.DiskBytes)
	}
	guests, err := pveapi.Guests(ctx, z.Client)
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	for _, g := range guests {
		if g.HasTag(images.Tag(img)) {
			perNode[g.Node]++
			if g.Template != 1 || !g.HasTag("flexplane") {
				t.Errorf("template guest %+v not a tagged template", g)
			}
		}
	}
	// Local storage: a template on each node that may host a VM.
	if len(perNode) != 2 || perNode["pve1"] != 1 || perNode["pve2"] != 1 {
		t.Errorf("template guests per node %v, want one on each", perNode)
	}
}

func TestStageWrongChecksumFails(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "beta", 1)
	url, _ := vmtest.ImageServer(t, 1<<20)
	img := &catalog.Image{ObjectMeta: catalog.ObjectMeta{Name: "bad"}, ImageSpec: catalog.ImageSpec{URL: url, Checksum: "sha256:" + strings.Repeat("ab", 32)}}
	s := images.New(nil)
	tgt := images.Target{Zone: z.Name, Client: z.Client, Storages: []string{"local-lvm"}}
	ctx := vmtest.Ctx(t)
	if _, err := s.Ensure(ctx, tgt, img); err == nil {
		t.Fatal("ensure with a wrong checksum succeeded")
	}
	st, err := s.Status(ctx, tgt, img)
	if err != nil || st.State != images.StateFailed || !strings.Contains(st.Reason, "checksum mismatch") {
		t.Fatalf("status %+v, %v; want FAILED with the checksum mismatch", st, err)
	}
	// Staging again retries the download (and fails the same way).
	st, err = s.Stage(ctx, tgt, img)
	if err != nil || st.State != images.StateStaging {
		t.Fatalf("restage: %+v, %v", st, err)
	}
}

// TestStageOnOneNode: a target with a node stages there only, and finds
// that node's template; on shared storage one template serves the zone.
func TestStageOnOneNode(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "gamma", 3)
	img := tinyImage(t, "tiny")
	s := images.New(nil)
	ctx := vmtest.Ctx(t)
	tgt := images.Target{Zone: z.Name, Client: z.Client, Storages: []string{"local-lvm"}, Node: "pve2"}
	tpl, err := s.Ensure(ctx, tgt, img)
	if err != nil || tpl.Node != "pve2" {
		t.Fatalf("ensure on pve2: %+v, %v", tpl, err)
	}
	for node, want := range map[string]images.State{"pve1": images.StateAbsent, "pve2": images.StateStaged, "pve3": images.StateAbsent} {
		tgt.Node = node
		if st, err := s.Status(ctx, tgt, img); err != nil || st.State != want {
			t.Errorf("%s: %+v, %v; want %s", node, st, err, want)
		}
	}
	shared := tinyImage(t, "shared")
	if _, err := s.Ensure(ctx, images.Target{Zone: z.Name, Client: z.Client, Storages: []string{"shared"}}, shared); err != nil {
		t.Fatalf("ensure on shared storage: %v", err)
	}
	guests, err := pveapi.Guests(ctx, z.Client)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range guests {
		if g.HasTag(images.Tag(shared)) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d templates of an image on shared storage, want 1", n)
	}
}

// tinyImage is an image called name of 3 MiB, served until t ends.
func tinyImage(t *testing.T, name string) *catalog.Image {
	t.Helper()
	url, sum := vmtest.ImageServer(t, 3<<20)
	return &catalog.Image{ObjectMeta: catalog.ObjectMeta{Name: name}, ImageSpec: catalog.ImageSpec{URL: url, Checksum: sum}}
}

// TestTemplateFromVolumePrefersSharedStorage: an uploaded file's template
// goes to a storage every node shares when one of the target's storages
// is (the first, local one would pin it to the upload's node), so that a
// VM of it clones onto another node, which Proxmox refuses from a
// template on local storage.
// TestTemplateFromDisksPrefersSharedStorage: a template made from a VM's
// disks on a node's local storage (createImageFromVM) is put on the
// storage every node shares, so a VM of it can be cloned onto another
// node, as Proxmox refuses for a template on local storage.
func TestTemplateFromDisksPrefersSharedStorage(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "fromvm", 2)
	ctx := vmtest.Ctx(t)
	if _, err := pveapi.Run(ctx, z.Client, "POST", "/nodes/pve1/qemu", map[string]any{
		"vmid": 120, "name": "source", "scsi0": "local-lvm:1"}); err != nil {
		t.Fatal(err)
	}
	var src map[string]any
	if err := z.Client.Get(ctx, "/nodes/pve1/qemu/120/config", &src); err != nil {
		t.Fatal(err)
	}
	vol, _, _ := strings.Cut(src["scsi0"].(string), ",")
	img := tinyImage(t, "from-vm")
	tgt := images.Target{Zone: z.Name, Client: z.Client, Storages: []string{"local-lvm", "shared"}, Node: "pve1"}
	tpl, err := images.New(nil).TemplateFromDisks(ctx, tgt, img, "pve1", []images.DiskSource{{Storage: "local-lvm", Volume: vol}})
	if err != nil {
		t.Fatal(err)
	}
	clonesOntoAnotherNode(t, z, tpl, 901)
	if err := z.Client.Get(ctx, "/nodes/pve1/qemu/120/config", &src); err != nil || !strings.HasPrefix(src["scsi0"].(string), vol) {
		t.Errorf("the source VM's disk changed: %v %v", src["scsi0"], err)
	}
}

// clonesOntoAnotherNode checks that tpl, on node pve1 of z, has its disk
// on the shared storage and clones onto pve2 as VMID newid.
func clonesOntoAnotherNode(t *testing.T, z *vmtest.Zone, tpl images.Template, newid int) {
	t.Helper()
	ctx := vmtest.Ctx(t)
	var cfg map[string]any
	if err := z.Client.Get(ctx, fmt.Sprintf("/nodes/pve1/qemu/%d/config", tpl.VMID), &cfg); err != nil {
		t.Fatal(err)
	}
	if disk, _ := cfg["scsi0"].(string); !strings.HasPrefix(disk, "shared:") {
		t.Fatalf("the template's disk is %q, want it on the shared storage", disk)
	}
	if _, err := pveapi.Run(ctx, z.Client, "POST", fmt.Sprintf("/nodes/pve1/qemu/%d/clone", tpl.VMID), map[string]any{
		"newid": newid, "name": "on-pve2", "target": "pve2", "full": 1, "storage": "local-lvm"}); err != nil {
		t.Fatalf("a clone of the template onto the other node: %v", err)
	}
}

func TestTemplateFromVolumePrefersSharedStorage(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "upl", 2)
	img := tinyImage(t, "uploaded")
	ctx := vmtest.Ctx(t)
	algo, sum, _ := strings.Cut(img.Checksum, ":")
	upid, err := pveapi.Run(ctx, z.Client, "POST", "/nodes/pve1/storage/local/download-url", map[string]any{
		"url": img.URL, "content": "import", "filename": "fp-upload-test.qcow2", "checksum": sum, "checksum-algorithm": algo})
	if err != nil || upid == "" {
		t.Fatalf("download: %q %v", upid, err)
	}
	tgt := images.Target{Zone: z.Name, Client: z.Client, Storages: []string{"local-lvm", "shared"}}
	tpl, err := images.New(nil).TemplateFromVolume(ctx, tgt, img, "pve1", "local:import/fp-upload-test.qcow2")
	if err != nil {
		t.Fatal(err)
	}
	clonesOntoAnotherNode(t, z, tpl, 900)
}
