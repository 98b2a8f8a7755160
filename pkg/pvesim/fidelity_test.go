package pvesim_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

// These tests hold the simulator to what a client written against real Proxmox VE
// expects (issue 18): each deviation found by driving an independent client against it.

func TestVolumeDeleteTaskIsPollable(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	download(t, cl, "pve1", "local", "iso", "alpine.iso", 4<<10)
	node, err := cl.Node(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := node.Storage(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	task, err := st.DeleteContent(ctx, "local:iso/alpine.iso")
	waitOK(t, ctx, task, err)
	if task.Type != "imgdel" || task.ID != "local" || !upidRE.MatchString(string(task.UPID)) {
		t.Fatalf("delete task %s: type %q id %q, want imgdel on id local", task.UPID, task.Type, task.ID)
	}
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/local/content", nil); len(r.data.([]any)) != 0 {
		t.Fatalf("content after delete: %s", r.body)
	}
	// A guest's volume: the id is VMID@storage.
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/storage/local-lvm/content", url.Values{"vmid": {"100"}, "filename": {"vm-100-disk-0"}, "size": {"1G"}}); r.status != http.StatusOK {
		t.Fatalf("alloc: %s", r.reason)
	}
	lvm, err := node.Storage(ctx, "local-lvm")
	if err != nil {
		t.Fatal(err)
	}
	task, err = lvm.DeleteContent(ctx, "local-lvm:vm-100-disk-0")
	waitOK(t, ctx, task, err)
	if task.ID != "100@local-lvm" {
		t.Fatalf("guest volume delete task id %q, want 100@local-lvm", task.ID)
	}
}

func TestStorageListTypeFilter(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	for typ, want := range map[string]string{"dir": "local", "lvmthin": "local-lvm", "nfs": "shared", "zfspool": "", "": "local,local-lvm,shared"} {
		r := call(t, c, testToken, http.MethodGet, "/storage", url.Values{"type": {typ}})
		if typ == "" {
			r = call(t, c, testToken, http.MethodGet, "/storage", nil)
		}
		var got []string
		for _, e := range r.data.([]any) {
			got = append(got, e.(map[string]any)["storage"].(string))
		}
		if strings.Join(got, ",") != want {
			t.Errorf("GET /storage?type=%s: %v, want %s", typ, got, want)
		}
	}
	// A type the schema does not know is refused.
	if r := call(t, c, testToken, http.MethodGet, "/storage", url.Values{"type": {"floppy"}}); r.status != http.StatusBadRequest || r.errors["type"] == "" {
		t.Fatalf("unknown type: %s %s", r.reason, r.body)
	}
}

func TestCloneNICModelFirst(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	src := newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "net1", Value: "e1000,bridge=vmbr1,tag=20,firewall=1"})
	_, task, err := src.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 101, Full: proxmox.IntOrBool(true)})
	waitOK(t, ctx, task, err)
	conf := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/101/config", nil).data.(map[string]any)
	srcConf := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", nil).data.(map[string]any)
	for key, model := range map[string]string{"net0": "virtio", "net1": "e1000"} {
		v := conf[key].(string)
		first, rest, _ := strings.Cut(v, ",")
		k, mac, _ := strings.Cut(first, "=")
		if k != model || !strings.HasPrefix(mac, "BC:24:11:") {
			t.Fatalf("clone %s = %q, want %s=MAC first", key, v, model)
		}
		if _, srcRest, _ := strings.Cut(srcConf[key].(string), ","); rest != srcRest {
			t.Fatalf("clone %s options %q, source %q", key, rest, srcRest)
		}
		if strings.Contains(srcConf[key].(string), mac) {
			t.Fatalf("clone %s kept the source's MAC", key)
		}
	}
}

func TestLinkedCloneNeedsBaseVolumes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	// Flagged by a config PUT only: the disk stays vm-9101-disk-0, as on real Proxmox.
	newVM(t, cl, "pve1", 9101)
	if r := call(t, c, testToken, http.MethodPut, "/nodes/pve1/qemu/9101/config", url.Values{"template": {"1"}}); r.status != http.StatusOK {
		t.Fatal(r.reason)
	}
	conf := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/9101/config", nil).data.(map[string]any)
	if !strings.HasPrefix(conf["scsi0"].(string), "local-lvm:vm-9101-disk-0,") {
		t.Fatalf("scsi0 after template=1 = %v", conf["scsi0"])
	}
	r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/9101/clone", url.Values{"newid": {"9105"}, "full": {"0"}})
	if r.status != http.StatusInternalServerError || r.reason != "500 Linked clone feature is not supported for 'local-lvm:vm-9101-disk-0' (scsi0)" {
		t.Fatalf("linked clone of a non-base volume: %s", r.reason)
	}
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/9105/config", nil); r.status != http.StatusInternalServerError {
		t.Fatalf("refused clone left VM 9105: %s", r.body)
	}
	// A full clone of it works.
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/9101/clone", url.Values{"newid": {"9106"}, "full": {"1"}}); r.status != http.StatusOK {
		t.Fatalf("full clone: %s", r.reason)
	}

	// Converted through POST .../template: the disk becomes base-9102-disk-0 and clones linked.
	vm := newVM(t, cl, "pve1", 9102)
	task, err := vm.ConvertToTemplate(ctx)
	waitOK(t, ctx, task, err)
	conf = call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/9102/config", nil).data.(map[string]any)
	if !strings.HasPrefix(conf["scsi0"].(string), "local-lvm:base-9102-disk-0,") || conf["template"] != float64(1) {
		t.Fatalf("after template conversion: %v", conf)
	}
	content := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/local-lvm/content", url.Values{"vmid": {"9102"}}).data.([]any)
	if len(content) != 1 || content[0].(map[string]any)["volid"] != "local-lvm:base-9102-disk-0" {
		t.Fatalf("template volumes: %v", content)
	}
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	_, task, err = vm.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 9107})
	waitOK(t, ctx, task, err)
	config := func(vmid int) map[string]any {
		return call(t, c, testToken, http.MethodGet, fmt.Sprintf("/nodes/pve1/qemu/%d/config", vmid), nil).data.(map[string]any)
	}
	clone := config(9107)
	if !strings.HasPrefix(clone["scsi0"].(string), "local-lvm:base-9102-disk-0/vm-9107-disk-0,") {
		t.Fatalf("linked clone scsi0 = %v", clone["scsi0"])
	}
	// A linked clone turned template: on a thin pool its base is a plain LV again.
	n, err := cl.Node(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	child, err := n.VirtualMachine(ctx, 9107)
	if err != nil {
		t.Fatal(err)
	}
	task, err = child.ConvertToTemplate(ctx)
	waitOK(t, ctx, task, err)
	if got := config(9107)["scsi0"].(string); !strings.HasPrefix(got, "local-lvm:base-9107-disk-0,") {
		t.Fatalf("linked clone turned template: scsi0 = %s", got)
	}
}

func TestTagsCanonical(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	vm := newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "tags", Value: "web,Prod;web prod"})
	tags := func() any {
		return call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", nil).data.(map[string]any)["tags"]
	}
	if got := tags(); got != "prod;web" {
		t.Fatalf("tags after create = %v, want prod;web", got)
	}
	if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "tags", Value: "vdc-2;Tenant-A,vdc-2"}); err != nil {
		t.Fatal(err)
	}
	if got := tags(); got != "tenant-a;vdc-2" {
		t.Fatalf("tags after update = %v, want tenant-a;vdc-2", got)
	}
	list := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu", nil).data.([]any)
	if got := list[0].(map[string]any)["tags"]; got != "tenant-a;vdc-2" {
		t.Fatalf("qemu list tags = %v", got)
	}
}

func TestSSHKeysValidated(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	newVM(t, cl, "pve1", 100)
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@example"
	before := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", nil).data.(map[string]any)["digest"]
	for _, bad := range []string{"not a key", key + "\nssh-rsa AAAA-truncated"} {
		r := call(t, c, testToken, http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"sshkeys": {pveEscape(bad)}})
		if r.status != http.StatusInternalServerError || r.reason != "500 SSH public key validation error" {
			t.Fatalf("sshkeys %q: %s", bad, r.reason)
		}
	}
	if after := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", nil).data.(map[string]any)["digest"]; after != before {
		t.Fatal("a refused sshkeys changed the config")
	}
	// Two keys and a blank line are fine.
	if r := call(t, c, testToken, http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"sshkeys": {pveEscape(key + "\n\n" + key + "\n")}}); r.status != http.StatusOK {
		t.Fatalf("valid sshkeys: %s", r.reason)
	}
	r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"101"}, "sshkeys": {"garbage"}})
	if r.reason != "500 SSH public key validation error" {
		t.Fatalf("create with bad sshkeys: %s", r.reason)
	}
}

// pveEscape URL-encodes s as Proxmox's GUI encodes sshkeys (spaces as %20).
func pveEscape(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }

// multipartBody is a multipart/form-data body with the given fields and one file part.
func multipartBody(t *testing.T, fields map[string]string, filename string, content []byte) (string, *bytes.Buffer) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for k, v := range fields {
		if err := w.WriteField(k, v); err != nil {
			t.Fatal(err)
		}
	}
	if filename != "" {
		fw, err := w.CreateFormFile("filename", filename)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(content)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.FormDataContentType(), &b
}

func postRaw(t *testing.T, c *pvesim.Cluster, path, ctype string, body io.Reader) *http.Response {
	t.Helper()
	resp := postBody(t, c, path, ctype, body)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// postBody posts body to path and returns the response, its body unread
// (the caller's to close).
func postBody(t *testing.T, c *pvesim.Cluster, path, ctype string, body io.Reader) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, c.URL()+"/api2/json"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Authorization", "PVEAPIToken="+testToken)
	resp, err := sharedClient(t, c).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestMultipartOnlyOnUpload(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	ct, body := multipartBody(t, map[string]string{"content": "iso", "poolid": "p1"}, "a.iso", []byte("x"))
	// pveproxy reads a body by its content type before it looks for a handler: outside
	// uploads a multipart body answers 506, on a known path or not.
	for _, path := range []string{"/pools", "/nodes/pve1/storage/local/no-such"} {
		resp := postRaw(t, c, path, ct, bytes.NewReader(body.Bytes()))
		if want := "506 upload 'Content-Type '" + ct + "' not implemented"; resp.Status != want {
			t.Fatalf("multipart to %s: %s, want %s", path, resp.Status, want)
		}
	}
	if r := call(t, c, testToken, http.MethodGet, "/pools", nil); len(r.data.([]any)) != 0 {
		t.Fatalf("pools after the refused multipart: %s", r.body)
	}
	// An unknown path answers 501 to a form body, as to none.
	if resp := postRaw(t, c, "/nodes/pve1/storage/local/no-such", "application/x-www-form-urlencoded", strings.NewReader("a=b")); resp.StatusCode != http.StatusNotImplemented {
		t.Fatalf("form body to an unknown path: %s", resp.Status)
	}
	// Other bodies are limited to 64 KiB, as pveproxy's $limit_max_post.
	if resp := postRaw(t, c, "/pools", "application/x-www-form-urlencoded", strings.NewReader("poolid=p2&comment="+strings.Repeat("x", 64<<10))); resp.Status != "501 for data too large" {
		t.Fatalf("a 64 KiB form body: %s", resp.Status)
	}
	// Upload takes only multipart.
	resp := postRaw(t, c, "/nodes/pve1/storage/local/upload", "application/x-www-form-urlencoded", strings.NewReader("content=iso&filename=a.iso"))
	if resp.Status != "500 upload 'Content-Type 'application/x-www-form-urlencoded' not implemented" {
		t.Fatalf("urlencoded upload: %s", resp.Status)
	}
}

func TestUpload(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Nodes: 2})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	node, err := cl.Node(ctx, "pve2")
	if err != nil {
		t.Fatal(err)
	}
	st, err := node.Storage(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	iso := bytes.Repeat([]byte("ISO9660 "), 4096)
	task, err := st.UploadString("iso", "tiny.iso", string(iso))
	waitOK(t, ctx, task, err)
	if task.Type != "imgcopy" || task.Node != "pve2" {
		t.Fatalf("upload task %+v", task)
	}
	sum := sha256.Sum256(iso)
	tmpl := []byte("a container template")
	tmplSum := sha256.Sum256(tmpl)
	name := "debian-13-standard_13.1-1_amd64.tar.zst"
	task, err = st.UploadString("vztmpl", name, string(tmpl))
	waitOK(t, ctx, task, err)
	content, err := st.GetContent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range content {
		got[v.Volid] = fmt.Sprintf("%s/%d", v.Format, v.Size)
	}
	if got["local:iso/tiny.iso"] != fmt.Sprintf("iso/%d", len(iso)) || got["local:vztmpl/"+name] != fmt.Sprintf("tzst/%d", len(tmpl)) || len(got) != 2 {
		t.Fatalf("content after uploads: %v", got)
	}
	if v, err := st.ISO(ctx, "tiny.iso"); err != nil || uint64(v.Size) != uint64(len(iso)) {
		t.Fatalf("ISO: %+v %v", v, err)
	}
	// The content is kept: its checksum is what was sent.
	if h := c.VolumeSHA256ForTest("pve2", "local:iso/tiny.iso"); h != hex.EncodeToString(sum[:]) {
		t.Fatalf("stored ISO sha256 %s", h)
	}
	if h := c.VolumeSHA256ForTest("pve2", "local:vztmpl/"+name); h != hex.EncodeToString(tmplSum[:]) {
		t.Fatalf("stored template sha256 %s", h)
	}

	// A wrong checksum fails the task and stores nothing; a right one stores the file.
	f := t.TempDir() + "/other.iso"
	if err := os.WriteFile(f, iso, 0o600); err != nil {
		t.Fatal(err)
	}
	other := "other.iso"
	task, err = st.UploadWithHash("iso", f, &other, strings.Repeat("0", 64), "sha256")
	if exit := waitFailed(t, ctx, task, err); !strings.Contains(exit, "checksum mismatch") {
		t.Fatalf("wrong checksum: %q", exit)
	}
	if _, err := st.ISO(ctx, "other.iso"); err == nil {
		t.Fatal("stored despite a checksum mismatch")
	}
	task, err = st.UploadWithHash("iso", f, &other, hex.EncodeToString(sum[:]), "sha256")
	waitOK(t, ctx, task, err)

	// Bad input is refused before any task: wrong extension, storage without files or
	// without that content.
	for _, tc := range []struct{ storage, content, file, want string }{
		{"local", "iso", "x.txt", "400 Parameter verification failed."},
		{"local-lvm", "iso", "x.iso", "500 can't upload to storage type 'lvmthin'"},
		{"shared", "vztmpl", "x.tar.gz", "500 storage 'shared' does not support 'vztmpl' content"},
	} {
		ct, body := multipartBody(t, map[string]string{"content": tc.content}, tc.file, []byte("x"))
		resp := postRaw(t, c, "/nodes/pve2/storage/"+tc.storage+"/upload", ct, body)
		if resp.Status != tc.want {
			t.Errorf("upload %s to %s: %s, want %s", tc.file, tc.storage, resp.Status, tc.want)
		}
	}
}

// TestUploadStreams: an upload's file part streams to the storage's file
// (spooled beside the disks, never held whole in memory), so a file larger
// than any buffer (here 264 MiB, past the 256 MiB the simulator once held
// in memory) is stored whole, its checksum (given after the file part)
// verified; one larger than the storage's free space fails its task,
// stores nothing and leaves no spooled file.
func TestUploadStreams(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := startCluster(t, pvesim.Config{DiskDir: dir, StorageSize: 320 << 20})
	ctx := testCtx(t)
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	upload := func(name string, size int64) *proxmox.Task {
		t.Helper()
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		go func() {
			h := sha256.New()
			err := mw.WriteField("content", "import")
			var fw io.Writer
			if err == nil {
				fw, err = mw.CreateFormFile("filename", name)
			}
			chunk := make([]byte, 1<<20)
			for off := int64(0); err == nil && off < size; off += int64(len(chunk)) {
				for i := range chunk {
					chunk[i] = byte(off>>20) ^ byte(i)
				}
				h.Write(chunk)
				_, err = fw.Write(chunk)
			}
			for k, v := range map[string]string{"checksum-algorithm": "sha256", "checksum": hex.EncodeToString(h.Sum(nil))} {
				if err == nil {
					err = mw.WriteField(k, v)
				}
			}
			if err == nil {
				err = mw.Close()
			}
			pw.CloseWithError(err)
		}()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL()+"/api2/json/nodes/pve1/storage/local/upload", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", mw.FormDataContentType())
		req.Header.Set("Authorization", "PVEAPIToken="+testToken)
		resp, err := sharedClient(t, c).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Data string }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("upload of %d bytes: %s %v", size, resp.Status, err)
		}
		return proxmox.NewTask(proxmox.UPID(out.Data), cl)
	}
	const size = 264 << 20
	task := upload("big.qcow2", size)
	waitOK(t, ctx, task, nil)
	var vol struct {
		Size   int64
		Format string
	}
	if err := cl.Get(ctx, "/nodes/pve1/storage/local/content/local:import/big.qcow2", &vol); err != nil || vol.Size != size || vol.Format != "qcow2" {
		t.Fatalf("the stored file: %+v %v", vol, err)
	}
	// Past the free space (320 MiB less the 264 stored): the task fails, nothing is kept.
	task = upload("bigger.qcow2", 64<<20)
	if exit := waitFailed(t, ctx, task, nil); !strings.Contains(exit, "No space left on device") {
		t.Fatalf("an upload past the free space: %q", exit)
	}
	if err := cl.Get(ctx, "/nodes/pve1/storage/local/content/local:import/bigger.qcow2", &vol); err == nil {
		t.Fatal("stored past the free space")
	}
	spooled, _ := filepath.Glob(filepath.Join(dir, "upload", "pveupload-*"))
	if len(spooled) != 1 { // the stored file's
		t.Fatalf("spooled files left: %v", spooled)
	}
}

func TestProtection(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	vm := newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "protection", Value: 1}, proxmox.VirtualMachineOption{Name: "scsi1", Value: "local-lvm:1"})
	if _, err := vm.Delete(ctx, nil); err == nil || !strings.Contains(err.Error(), "can't remove VM 100 - protection mode enabled") {
		t.Fatalf("delete of a protected VM: %v", err)
	}
	r := call(t, c, testToken, http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"delete": {"scsi1"}})
	if r.reason != "500 can't remove drive 'scsi1' - protection mode enabled" {
		t.Fatalf("removing a disk of a protected VM: %s", r.reason)
	}
	r = call(t, c, testToken, http.MethodPut, "/nodes/pve1/qemu/100/unlink", url.Values{"idlist": {"scsi1"}, "force": {"1"}})
	if r.reason != "500 can't remove drive 'scsi1' - protection mode enabled" {
		t.Fatalf("unlinking a disk of a protected VM: %s", r.reason)
	}
	conf := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", nil).data.(map[string]any)
	if conf["scsi1"] == nil {
		t.Fatal("the protected disk is gone")
	}
	// Other changes are allowed; without protection the delete goes through.
	if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "protection", Value: 0}); err != nil {
		t.Fatal(err)
	}
	task, err := vm.Delete(ctx, nil)
	waitOK(t, ctx, task, err)
}

func TestLxcListEmpty(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Nodes: 3})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	for _, name := range []string{"pve1", "pve2", "pve3"} {
		n, err := cl.Node(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cts, err := n.Containers(ctx)
		if err != nil || len(cts) != 0 {
			t.Fatalf("containers on %s: %v %v", name, cts, err)
		}
		if r := call(t, c, testToken, http.MethodGet, "/nodes/"+name+"/lxc", nil); string(r.body) != `{"data":[]}` {
			t.Fatalf("GET /nodes/%s/lxc: %s", name, r.body)
		}
	}
	// Creating containers is not simulated: 501, on purpose.
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/lxc", url.Values{"vmid": {"200"}}); r.status != http.StatusNotImplemented {
		t.Fatalf("container create: %s", r.reason)
	}
}

func TestMoveDiskAndUnlink(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	vm := newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "scsi1", Value: "local-lvm:2"})
	config := func(vmid int) map[string]any {
		return call(t, c, testToken, http.MethodGet, fmt.Sprintf("/nodes/pve1/qemu/%d/config", vmid), nil).data.(map[string]any)
	}
	// Move to shared (qcow2); the source stays as unused0.
	task, err := vm.MoveDisk(ctx, "scsi0", &proxmox.VirtualMachineMoveDiskOptions{Storage: "shared"})
	waitOK(t, ctx, task, err)
	conf := config(100)
	if !strings.HasPrefix(conf["scsi0"].(string), "shared:100/vm-100-disk-0.qcow2,") || conf["unused0"] != "local-lvm:vm-100-disk-0" {
		t.Fatalf("after move: scsi0 %v unused0 %v", conf["scsi0"], conf["unused0"])
	}
	if task.Type != "qmmove" {
		t.Fatalf("move task type %q", task.Type)
	}
	// Move back deleting the source.
	task, err = vm.MoveDisk(ctx, "scsi0", &proxmox.VirtualMachineMoveDiskOptions{Storage: "local-lvm", Delete: proxmox.IntOrBool(true)})
	waitOK(t, ctx, task, err)
	conf = config(100)
	if !strings.HasPrefix(conf["scsi0"].(string), "local-lvm:vm-100-disk-2,") || conf["unused1"] != nil {
		t.Fatalf("after move back: %v", conf)
	}
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/shared/content", nil); len(r.data.([]any)) != 0 {
		t.Fatalf("moved-away source kept: %s", r.body)
	}
	// Same storage, same format: refused.
	r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/move_disk", url.Values{"disk": {"scsi1"}, "storage": {"local-lvm"}})
	if r.reason != "500 you can't move to the same storage with same format" {
		t.Fatalf("same storage: %s", r.reason)
	}
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/move_disk", url.Values{"disk": {"scsi1"}, "storage": {"shared"}, "format": {"raw"}, "delete": {"1"}}); r.status != http.StatusOK {
		t.Fatalf("move to raw on shared: %s", r.reason)
	} else {
		waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	}
	if got := config(100)["scsi1"].(string); !strings.HasPrefix(got, "shared:100/vm-100-disk-0.raw,") {
		t.Fatalf("scsi1 moved as raw: %s", got)
	}
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/move_disk", url.Values{"disk": {"scsi1"}, "storage": {"local-lvm"}, "format": {"qcow2"}}); r.reason != "500 unsupported format 'qcow2'" {
		t.Fatalf("qcow2 on a thin pool: %s", r.reason)
	}
	// A raw file cannot be snapshotted.
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/snapshot", url.Values{"snapname": {"s1"}}); r.reason != "500 snapshot feature is not available" {
		t.Fatalf("snapshot with a raw file disk: %s", r.reason)
	}
	// Reassign scsi1 to VM 101.
	newVM(t, cl, "pve1", 101)
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/move_disk", url.Values{"disk": {"scsi1"}, "target-vmid": {"101"}, "target-disk": {"scsi5"}})
	if r.status != http.StatusOK {
		t.Fatalf("reassign: %s", r.reason)
	}
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	if conf := config(100); conf["scsi1"] != nil {
		t.Fatalf("source still has scsi1: %v", conf["scsi1"])
	}
	if got := config(101)["scsi5"].(string); !strings.HasPrefix(got, "shared:101/vm-101-disk-0.raw,") {
		t.Fatalf("target scsi5 = %s", got)
	}

	// unlink: without force the disk becomes unusedN, with force its volume is removed.
	if _, err := vm.UnlinkDisk(ctx, "unused0", false); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.UnlinkDisk(ctx, "scsi0", false); err != nil {
		t.Fatal(err)
	}
	conf = config(100)
	if conf["scsi0"] != nil || conf["unused0"] != "local-lvm:vm-100-disk-2" {
		t.Fatalf("after unlink: %v", conf)
	}
	if _, err := vm.UnlinkDisk(ctx, "unused0", true); err != nil {
		t.Fatal(err)
	}
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/local-lvm/content", url.Values{"vmid": {"100"}}); len(r.data.([]any)) != 0 {
		t.Fatalf("volumes of VM 100 after unlinking all: %s", r.body)
	}
}

func TestAccessReads(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	c.AddToken("ops@pve!audit=s3cret", map[string][]string{"/access/groups": {"Sys.Audit"}})
	c.AddToken("dev@pve!ci=s3cret", map[string][]string{"/vms": {"VM.Audit"}})
	ctx := testCtx(t)
	users := func(tokenID, secret string) []string {
		cl := pveClient(t, c, tokenID, secret)
		list, err := cl.Users(ctx)
		if err != nil {
			t.Fatalf("users as %s: %v", tokenID, err)
		}
		var out []string
		for _, u := range list {
			out = append(out, u.UserID)
		}
		return out
	}
	all := "dev@pve,ops@pve,root@pam"
	if got := strings.Join(users(testTokenID, testTokenSecret), ","); got != all {
		t.Fatalf("users as root: %s", got)
	}
	if got := strings.Join(users("ops@pve!audit", "s3cret"), ","); got != all {
		t.Fatalf("users with Sys.Audit on /access/groups: %s", got)
	}
	if got := strings.Join(users("dev@pve!ci", "s3cret"), ","); got != "dev@pve" {
		t.Fatalf("users without privileges: %s, want only the caller", got)
	}
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	groups, err := cl.Groups(ctx)
	if err != nil || len(groups) != 0 {
		t.Fatalf("groups: %v %v", groups, err)
	}
	domains, err := cl.Domains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var realms []string
	for _, d := range domains {
		realms = append(realms, d.Realm+"/"+d.Type)
	}
	if strings.Join(realms, ",") != "pam/pam,pve/pve" {
		t.Fatalf("domains: %v", realms)
	}
	// The realm list needs no token (the login box shows it); the users list does.
	if r := call(t, c, "", http.MethodGet, "/access/domains", nil); r.status != http.StatusOK || len(r.data.([]any)) != 2 {
		t.Fatalf("domains without a token: %s %s", r.reason, r.body)
	}
	if r := call(t, c, "", http.MethodGet, "/access/users", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("users without a token: %s", r.reason)
	}
	r := call(t, c, testToken, http.MethodGet, "/access/users", url.Values{"full": {"1"}})
	root := r.data.([]any)[2].(map[string]any)
	if tokens := root["tokens"].([]any); len(tokens) != 1 || tokens[0].(map[string]any)["tokenid"] != "test" {
		t.Fatalf("root's tokens: %v", root)
	}
	// Writes to /access stay unimplemented.
	if r := call(t, c, testToken, http.MethodPost, "/access/users", url.Values{"userid": {"x@pve"}}); r.status != http.StatusNotImplemented {
		t.Fatalf("user create: %s", r.reason)
	}
}

func TestSnapshots(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	vm := newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "cores", Value: 2})
	config := func() map[string]any {
		return call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", nil).data.(map[string]any)
	}
	snap := func(name, desc string) {
		r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/snapshot", url.Values{"snapname": {name}, "description": {desc}})
		if r.status != http.StatusOK {
			t.Fatalf("snapshot %s: %s", name, r.reason)
		}
		waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	}
	task, err := vm.NewSnapshot(ctx, "before-upgrade")
	waitOK(t, ctx, task, err)
	if task.Type != "qmsnapshot" {
		t.Fatalf("snapshot task type %q", task.Type)
	}
	if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "cores", Value: 4}); err != nil {
		t.Fatal(err)
	}
	snap("after-upgrade", "cores 4")
	snaps, err := vm.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var tree []string
	for _, s := range snaps {
		tree = append(tree, s.Name+"<"+s.Parent)
	}
	if strings.Join(tree, " ") != "after-upgrade<before-upgrade before-upgrade< current<after-upgrade" {
		t.Fatalf("snapshot tree: %v", tree)
	}
	if conf := config(); conf["parent"] != "after-upgrade" || conf["cores"] != float64(4) {
		t.Fatalf("config after snapshots: %v", conf)
	}
	old, err := vm.Snapshot("before-upgrade").Config(ctx)
	if err != nil || old["cores"] != float64(2) {
		t.Fatalf("snapshot config: %v %v", old, err)
	}
	// Refused: reserved and taken names, unknown snapshots.
	for name, want := range map[string]string{
		"current":        "500 unable to use snapshot name 'current' (reserved name)",
		"before-upgrade": "500 snapshot name 'before-upgrade' already used",
	} {
		if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/snapshot", url.Values{"snapname": {name}}); r.reason != want {
			t.Errorf("snapshot %s: %s, want %s", name, r.reason, want)
		}
	}
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/snapshot/nope/rollback", nil); r.reason != "500 snapshot 'nope' does not exist" {
		t.Errorf("rollback to an unknown snapshot: %s", r.reason)
	}

	// Rollback on a running VM stops it and restores the config; start=1 boots it again.
	task, err = vm.Start(ctx)
	waitOK(t, ctx, task, err)
	r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/snapshot/before-upgrade/rollback", nil)
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	if conf := config(); conf["cores"] != float64(2) || conf["parent"] != "before-upgrade" {
		t.Fatalf("config after rollback: %v", conf)
	}
	if s := vmStatus(t, c, "pve1", 100); s != "stopped" {
		t.Fatalf("after rollback the VM is %s", s)
	}
	task, err = vm.Snapshot("after-upgrade").Rollback(ctx)
	waitOK(t, ctx, task, err)
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/snapshot/before-upgrade/rollback", url.Values{"start": {"1"}})
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	if s := vmStatus(t, c, "pve1", 100); s != "running" {
		t.Fatalf("after rollback with start=1 the VM is %s", s)
	}

	// A clone of a snapshot takes the config the snapshot holds.
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/clone", url.Values{"newid": {"101"}, "snapname": {"after-upgrade"}})
	if r.status != http.StatusOK {
		t.Fatalf("clone of a snapshot: %s", r.reason)
	}
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	if conf := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/101/config", nil).data.(map[string]any); conf["cores"] != float64(4) || conf["parent"] != nil {
		t.Fatalf("clone of after-upgrade: %v", conf)
	}
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/clone", url.Values{"newid": {"102"}, "snapname": {"nope"}}); r.reason != "500 snapshot 'nope' does not exist" {
		t.Fatalf("clone of an unknown snapshot: %s", r.reason)
	}

	// Description updates; deleting a snapshot re-parents its children.
	if err := vm.Snapshot("after-upgrade").UpdateConfig(ctx, &proxmox.VirtualMachineSnapshotUpdateOptions{Description: "4 cores"}); err != nil {
		t.Fatal(err)
	}
	task, err = vm.Snapshot("before-upgrade").Delete(ctx)
	waitOK(t, ctx, task, err)
	snaps, err = vm.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 2 || snaps[0].Name != "after-upgrade" || snaps[0].Parent != "" || snaps[0].Description != "4 cores" || snaps[1].Parent != "" {
		t.Fatalf("after deleting before-upgrade: %+v %+v", snaps[0], snaps[1])
	}
	if _, ok := config()["parent"]; ok {
		t.Fatal("current still names the deleted snapshot as parent")
	}
}
