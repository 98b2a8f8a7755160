package graph_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

const uploadImage = `mutation($in: UploadImageInput!) { uploadImage(input: $in) {
  name format url checksum version sizeBytes cloudInit vdc { name } } }`

// upload sends uploadImage for user in vdc with file as the file.
func upload(t *testing.T, h *meshtest.Harness, user, vdc string, in map[string]any, file io.Reader) (*gqltest.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in["file"] = nil
	return gqltest.Post(ctx, nil, h.GraphQLURL(), gqltest.Request{Query: uploadImage, Variables: map[string]any{"in": in},
		Authorization: "Bearer " + h.Token(t, user), VDC: vdc, File: file, FileVariable: "in.file"})
}

// cutReader gives n bytes of a file, then fails: a client that went away.
type cutReader struct{ n int }

func (c *cutReader) Read(p []byte) (int, error) {
	if c.n == 0 {
		return 0, errors.New("connection lost")
	}
	k := min(len(p), c.n)
	c.n -= k
	return k, nil
}

// TestVDCImagesUpload: a member uploads an image file into the VDC through
// the multipart request spec; it is listed for the VDC only, with its
// SHA-256 as computed on the way, and a VM of the VDC is created from it,
// while another VDC neither lists it, nor reads it, nor creates a VM from
// it (NOT_FOUND); a name the VDC or the platform uses is CONFLICT; a
// viewer may not upload; an upload cut off, and one over the VDC's
// imageGiB quota, leave no image and no file on the node; deleting the
// image removes its template.
func TestVDCImagesUpload(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "vdcimages")
	px := h.Clusters[0].Proxmox(t)
	ctx := vmtest.Ctx(t)
	leftovers := func() []string {
		t.Helper()
		var vols []struct{ VolID string }
		if err := px.Get(ctx, "/nodes/pve1/storage/local/content?content=import", &vols); err != nil {
			t.Fatal(err)
		}
		var guests []struct {
			Name     string
			Template int
		}
		if err := px.Get(ctx, "/cluster/resources?type=vm", &guests); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range vols {
			if strings.Contains(v.VolID, "fp-upload-") {
				out = append(out, v.VolID)
			}
		}
		for _, g := range guests {
			if strings.HasPrefix(g.Name, "fp-template-"+tn.blue+".") || strings.HasPrefix(g.Name, "fp-template-"+tn.red+".") {
				out = append(out, g.Name)
			}
		}
		return out
	}

	file := make([]byte, 3<<20+12345)
	for i := range file {
		file[i] = byte(i * 13)
	}
	sum := sha256.Sum256(file)
	want := hex.EncodeToString(sum[:])
	in := func(name string) map[string]any {
		return map[string]any{"name": name, "format": "QCOW2", "description": "ours", "cloudInit": true}
	}

	// Cut off after 1 MiB and a bit: no image, nothing left on the node.
	if r, err := upload(t, h, tn.bob, tn.blue, in("cut"), &cutReader{n: 1<<20 + 77}); err == nil && r.Code(t) == "" {
		t.Fatalf("a cut-off upload succeeded: %s", r.Raw)
	}
	// Over red's quota of 0 GiB: QUOTA_EXCEEDED, nothing kept.
	h.GraphQL(t, "admin", "", `mutation($n: String!) { updateVDC(input: {name: $n, quotas: {vcpus: 64, memoryMiB: 131072, storageGiB: 2000, vms: 20, imageGiB: 0}}) { name } }`,
		map[string]any{"n": tn.red}).OK(t)
	r, err := upload(t, h, tn.alice, tn.red, in("big"), strings.NewReader(string(file)))
	if err != nil || r.Code(t) != "QUOTA_EXCEEDED" {
		t.Fatalf("an upload over the quota: %v %v", err, r)
	}
	if r, err := upload(t, h, tn.vera, tn.red, in("viewed"), strings.NewReader("x")); err != nil || r.Code(t) != "FORBIDDEN" {
		t.Fatalf("a viewer's upload: %v %v", err, r)
	}
	if got := leftovers(); len(got) != 0 {
		t.Fatalf("refused uploads left %v", got)
	}
	var imgs []struct{ Name string }
	h.GraphQL(t, tn.bob, tn.blue, `{ images { name } }`, nil).OK(t).Into(t, "images", &imgs)
	for _, i := range imgs {
		if i.Name != "tiny" {
			t.Fatalf("refused uploads left image %q", i.Name)
		}
	}

	type image struct {
		Name, Format, URL, Checksum, Version string
		SizeBytes                            float64
		CloudInit                            bool
		VDC                                  *struct{ Name string }
	}
	var img image
	r, err = upload(t, h, tn.bob, tn.blue, in("app"), strings.NewReader(string(file)))
	if err != nil {
		t.Fatal(err)
	}
	r.OK(t).Into(t, "uploadImage", &img)
	if img.Name != "app" || img.Format != "QCOW2" || img.URL != "upload:"+want || img.Checksum != "sha256:"+want ||
		img.SizeBytes != float64(len(file)) || img.VDC == nil || img.VDC.Name != tn.blue || !img.CloudInit || img.Version == "" {
		t.Fatalf("uploadImage: %+v, want app of %s with sha256 %s", img, tn.blue, want)
	}
	for _, c := range []struct{ name, code string }{{"app", "CONFLICT"}, {"tiny", "CONFLICT"}, {"Bad_Name", "BAD_USER_INPUT"}} {
		if r, err := upload(t, h, tn.bob, tn.blue, in(c.name), strings.NewReader("x")); err != nil || r.Code(t) != c.code {
			t.Errorf("upload of %q: %v %v, want %s", c.name, err, r, c.code)
		}
	}
	h.GraphQL(t, tn.bob, tn.blue, `{ images { name } }`, nil).OK(t).Into(t, "images", &imgs)
	if len(imgs) != 2 || imgs[0].Name != "app" || imgs[1].Name != "tiny" {
		t.Fatalf("blue's images: %+v, want app and tiny", imgs)
	}
	// Red: never listed, NOT_FOUND to read, to create from and to delete.
	h.GraphQL(t, tn.alice, tn.red, `{ images { name } }`, nil).OK(t).Into(t, "images", &imgs)
	h.GraphQL(t, "admin", "", `{ images { name } }`, nil).OK(t).Into(t, "images", &imgs)
	for _, i := range imgs {
		if i.Name != "tiny" {
			t.Errorf("listed without blue's header: %q", i.Name)
		}
	}
	for _, q := range []string{`{ image(name: "app") { name } }`, `{ image(name: "` + tn.blue + `.app") { name } }`, `mutation { deleteVDCImage(name: "app") { name } }`} {
		if got := h.GraphQL(t, tn.alice, tn.red, q, nil).Code(t); got != "NOT_FOUND" {
			t.Errorf("red's %s: %s, want NOT_FOUND", q, got)
		}
	}
	vmIn := func(name, net, user string) map[string]any {
		return map[string]any{"in": map[string]any{"name": name, "zone": "alpha", "image": "app", "computeProfile": "small", "storageProfile": "ssd",
			"diskGiB": 4, "nics": []any{map[string]any{"network": net}}, "sshKeys": []string{sshKey}, "user": user}}
	}
	redNet := createNetworks(t, h, tn.alice, tn.red, "alpha")["alpha"]
	if r := h.GraphQL(t, tn.alice, tn.red, createVM, vmIn("thief", redNet, "alice")); r.Code(t) != "NOT_FOUND" || fieldOf(t, r) != "input.image" {
		t.Errorf("red creates a VM of blue's image: %s", r.Raw)
	}

	// Blue creates a VM from it, then deletes the VM and the image.
	var created struct{ Operation gqlOp }
	h.GraphQL(t, tn.bob, tn.blue, createVM, vmIn("from-upload", tn.net, "bob")).OK(t).Into(t, "createVM", &created)
	vm := awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { deleteVM(id: $id) { id } }`, map[string]any{"id": vm}).OK(t)
	var gone struct{ Name string }
	h.GraphQL(t, tn.bob, tn.blue, `mutation { deleteVDCImage(name: "app") { name } }`, nil).OK(t).Into(t, "deleteVDCImage", &gone)
	if gone.Name != "app" {
		t.Errorf("deleteVDCImage: %+v", gone)
	}
	if got := leftovers(); len(got) != 0 {
		t.Errorf("the deleted image left %v", got)
	}
	if got := h.GraphQL(t, tn.bob, tn.blue, `{ image(name: "app") { name } }`, nil).Code(t); got != "NOT_FOUND" {
		t.Errorf("the deleted image: %s, want NOT_FOUND", got)
	}
}

// TestVDCImageFromVM: a member makes an image of a stopped VM (CONFLICT
// while it runs): the operation ends once the template is ready, the image
// is listed with its origin, the template holds no network device, key or
// cicustom of the VM, the VM's configuration is unchanged, and a VM of the
// VDC is created from the image; another VDC's VM is NOT_FOUND.
func TestVDCImageFromVM(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "vmimages")
	px := h.Clusters[0].Proxmox(t)
	ctx := vmtest.Ctx(t)
	const fromVM = `mutation($in: CreateImageFromVMInput!) { createImageFromVM(input: $in) { id kind state } }`
	vmIn := func(name, image string) map[string]any {
		return map[string]any{"in": map[string]any{"name": name, "zone": "alpha", "image": image, "computeProfile": "small", "storageProfile": "ssd",
			"diskGiB": 4, "nics": []any{map[string]any{"network": tn.net}}, "sshKeys": []string{sshKey}, "user": "bob",
			"userData": "#cloud-config\nruncmd:\n  - echo hi\n"}}
	}
	var created struct{ Operation gqlOp }
	h.GraphQL(t, tn.bob, tn.blue, createVM, vmIn("src", "tiny")).OK(t).Into(t, "createVM", &created)
	src := awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)
	in := map[string]any{"in": map[string]any{"vm": src, "name": "golden", "description": "from src"}}
	if r := h.GraphQL(t, tn.bob, tn.blue, fromVM, in); r.Code(t) != "CONFLICT" || fieldOf(t, r) != "input.vm" {
		t.Fatalf("an image of a running VM: %s", r.Raw)
	}
	if r := h.GraphQL(t, tn.alice, tn.red, fromVM, in); r.Code(t) != "NOT_FOUND" {
		t.Fatalf("red makes an image of blue's VM: %s", r.Raw)
	}
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { stopVM(id: $id) { id } }`, map[string]any{"id": src}).OK(t)
	poll.True(t, 20*time.Second, "the VM stopped", func() bool {
		var vm gqlVM
		h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { vm(id: $id) { status } }`, map[string]any{"id": src}).OK(t).Into(t, "vm", &vm)
		return vm.Status == "STOPPED"
	})
	ref, err := tenancy.ParseVMID(src)
	if err != nil {
		t.Fatal(err)
	}
	config := func(vmid int) map[string]any {
		t.Helper()
		var cfg map[string]any
		if err := px.Get(ctx, fmt.Sprintf("/nodes/pve1/qemu/%d/config", vmid), &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	before := config(ref.VMID)

	// Another replica (a service of its own, sharing nothing with the
	// API's but Proxmox and the catalog) answers for the operation too.
	other, err := compute.New(compute.Config{Catalog: h.Orchestrator.Catalog(), Zones: orchestrator.NewComputeZones(h.Orchestrator.Zones()),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Shutdown(context.Background()) })
	var op gqlOp
	h.GraphQL(t, tn.bob, tn.blue, fromVM, in).OK(t).Into(t, "createImageFromVM", &op)
	if op.Kind != "CREATE_IMAGE" || op.State != "RUNNING" {
		t.Fatalf("createImageFromVM: %+v", op)
	}
	if o, err := other.Operation(ctx, tn.blue, op.ID); err != nil || o.Kind != compute.OpCreateImage || o.VMID != src || (o.State != compute.OpRunning && o.State != compute.OpSucceeded) {
		t.Fatalf("the other replica's operation: %+v %v", o, err)
	}
	if _, err := other.Operation(ctx, tn.red, op.ID); !compute.IsKind(err, compute.KindNotFound) {
		t.Errorf("red's view of blue's operation on the other replica: %v, want NOT_FOUND", err)
	}
	poll.True(t, 60*time.Second, "the image made", func() bool {
		h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { operation(id: $id) { state step error } }`, map[string]any{"id": op.ID}).OK(t).Into(t, "operation", &op)
		if op.State == "FAILED" {
			t.Fatalf("createImageFromVM failed at %s: %v", op.Step, *op.Error)
		}
		return op.State == "SUCCEEDED"
	})
	if o, err := other.Operation(ctx, tn.blue, op.ID); err != nil || o.State != compute.OpSucceeded {
		t.Errorf("the other replica's operation once the image is made: %+v %v", o, err)
	}
	var img struct {
		Name, URL, Format, Description string
		VDC                            struct{ Name string }
	}
	h.GraphQL(t, tn.bob, tn.blue, `{ image(name: "golden") { name url format description vdc { name } } }`, nil).OK(t).Into(t, "image", &img)
	if img.Name != "golden" || img.URL != "vm:"+src || img.VDC.Name != tn.blue || img.Description != "from src" {
		t.Fatalf("the image: %+v", img)
	}
	if r := h.GraphQL(t, tn.alice, tn.red, `{ image(name: "golden") { name } }`, nil); r.Code(t) != "NOT_FOUND" {
		t.Errorf("red reads blue's image: %s", r.Raw)
	}
	after := config(ref.VMID)
	delete(before, "digest")
	delete(after, "digest")
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("the VM changed:\n%v\n%v", before, after)
	}
	var guests []struct {
		VMID     int
		Name     string
		Template int
	}
	if err := px.Get(ctx, "/cluster/resources?type=vm", &guests); err != nil {
		t.Fatal(err)
	}
	tpl := 0
	for _, g := range guests {
		if g.Name == "fp-template-"+tn.blue+".golden" && g.Template == 1 {
			tpl = g.VMID
		}
	}
	if tpl == 0 {
		t.Fatalf("no template of golden among %+v", guests)
	}
	for k, v := range config(tpl) {
		if strings.HasPrefix(k, "net") || strings.HasPrefix(k, "ipconfig") || k == "cicustom" || k == "sshkeys" || k == "ciuser" {
			t.Errorf("the template keeps the VM's %s=%v", k, v)
		}
	}
	h.GraphQL(t, tn.bob, tn.blue, createVM, vmIn("copy", "golden")).OK(t).Into(t, "createVM", &created)
	awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)
}

// TestVDCImageUploadThroughTheHelper: with the agent run as the shipped
// units run it (unprivileged, its privileged helper writing its files),
// an uploadImage through the orchestrator is written into the storage's
// import directory by the helper (not POSTed to Proxmox), with the
// checksum of the bytes sent, leaves nothing in that directory once its
// template is made, and a VM is created from the image.
func TestVDCImageUploadThroughTheHelper(t *testing.T) {
	t.Parallel()
	rec := meshtest.NewLogRecorder()
	h := meshtest.New(t, meshtest.WithLogHandler(rec),
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1, Helpers: true, DataListen: "127.0.0.1:0"}),
		meshtest.WithAPI(meshtest.APISpec{}))
	h.WaitOnline(t, 30*time.Second)
	seedCatalog(t, h, "alpha")
	file := make([]byte, 2<<20+333)
	for i := range file {
		file[i] = byte(i * 7)
	}
	sum := sha256.Sum256(file)
	var img struct{ Checksum string }
	r, err := upload(t, h, "bob", "blue", map[string]any{"name": "app", "format": "RAW", "cloudInit": true}, bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	r.OK(t).Into(t, "uploadImage", &img)
	if img.Checksum != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("uploadImage: checksum %s", img.Checksum)
	}
	var line string
	for l := range strings.Lines(string(rec.Bytes())) {
		if strings.Contains(l, "agent: uploaded") {
			line = l
		}
	}
	if !strings.Contains(line, "by=helper") || !strings.Contains(line, `upid=""`) || !strings.Contains(string(rec.Bytes()), "privhelper: upload written") {
		t.Fatalf("the upload was not written by the helper: %q", line)
	}
	// The template is made from the file, which is then deleted: nothing
	// is left in the directory, no temporary file either.
	imports := filepath.Join(h.Clusters[0].Sim.NodeRoot("pve1"), "var", "lib", "vz", "import")
	if ents, err := os.ReadDir(imports); err != nil || len(ents) != 0 {
		t.Fatalf("the import directory holds %v (%v), want nothing", ents, err)
	}
	net := createNetworks(t, h, "bob", "blue", "alpha")["alpha"]
	var created struct{ Operation gqlOp }
	h.GraphQL(t, "bob", "blue", createVM, map[string]any{"in": map[string]any{"name": "from-upload", "zone": "alpha", "image": "app",
		"computeProfile": "small", "storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": net}}, "sshKeys": []string{sshKey}, "user": "bob"}}).
		OK(t).Into(t, "createVM", &created)
	awaitCreate(t, h, "bob", "blue", created.Operation.ID)
}
