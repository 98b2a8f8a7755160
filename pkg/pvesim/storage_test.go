package pvesim_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

func TestDownloadURL(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Nodes: 2})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	src, sum := imageServer(t, "alpine.iso", 1<<20)
	node, err := cl.Node(ctx, "pve2")
	if err != nil {
		t.Fatal(err)
	}
	st, err := node.Storage(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}

	// A wrong checksum fails the task and stores nothing.
	bad := strings.Repeat("0", 64)
	task, err := st.DownloadURLWithHash(ctx, "iso", "alpine.iso", src, bad, "sha256")
	exit := waitFailed(t, ctx, task, err)
	if !strings.Contains(exit, "checksum mismatch: got '"+sum+"' != expect '"+bad+"'") {
		t.Fatalf("exit status %q", exit)
	}
	if _, err := st.ISO(ctx, "alpine.iso"); err == nil {
		t.Fatal("volume stored despite the checksum mismatch")
	}
	// A URL that answers 404 fails the task.
	task, err = st.DownloadURL(ctx, "iso", "missing.iso", strings.Replace(src, "alpine.iso", "missing.iso", 1))
	exit = waitFailed(t, ctx, task, err)
	if !strings.Contains(exit, "404") {
		t.Fatalf("exit status %q", exit)
	}

	// The right checksum stores the volume with the downloaded size.
	task, err = st.DownloadURLWithHash(ctx, "iso", "alpine.iso", src, strings.ToUpper(sum), "sha256")
	waitOK(t, ctx, task, err)
	if task.Type != "download" || task.Node != "pve2" {
		t.Fatalf("task %+v", task)
	}
	content, err := st.GetContent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(content) != 1 || content[0].Volid != "local:iso/alpine.iso" || content[0].Size != 1<<20 || content[0].Format != "iso" {
		t.Fatalf("content = %+v", content)
	}
	log, err := task.Log(ctx, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) == 0 || log[len(log)-1] != "TASK OK" {
		t.Fatalf("log = %v", log)
	}
	// local storage is per node: pve1 does not see it.
	r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/local/content", nil)
	if r.status != http.StatusOK || len(r.data.([]any)) != 0 {
		t.Fatalf("pve1 local content: %s", r.body)
	}
	// Bad input is refused before any task starts.
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve2/storage/local-lvm/download-url", url.Values{
		"content": {"iso"}, "filename": {"x.iso"}, "url": {src},
	})
	if r.status != http.StatusBadRequest || r.errors["content"] == "" {
		t.Fatalf("iso on local-lvm: %d %s", r.status, r.body)
	}
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve2/storage/local/download-url", url.Values{
		"content": {"iso"}, "filename": {"x.txt"}, "url": {src},
	})
	if r.status != http.StatusBadRequest || r.errors["filename"] == "" {
		t.Fatalf("bad extension: %d %s", r.status, r.body)
	}
}

// TestISOInCDROM: an ISO uploaded with content iso is listed as
// STORAGE:iso/NAME.iso of format iso; a VM takes it as ide2 cdrom media
// (on create and set), boots from it first, and ejects it (`none`); a boot
// order naming a device the VM does not have, or one the same request
// deletes, is refused as qemu-server refuses it; deleting the ISO while a
// VM's configuration names it is allowed, as Proxmox allows it.
func TestISOInCDROM(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	ct, body := multipartBody(t, map[string]string{"content": "iso"}, "inst.iso", []byte("an installer"))
	if resp := postRaw(t, c, "/nodes/pve1/storage/shared/upload", ct, body); resp.StatusCode != http.StatusOK {
		t.Fatalf("upload: %s", resp.Status)
	}
	var vols []map[string]any
	poll.True(t, 10*time.Second, "the ISO listed", func() bool {
		r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/shared/content", url.Values{"content": {"iso"}})
		vols = nil
		for _, v := range r.data.([]any) {
			vols = append(vols, v.(map[string]any))
		}
		return len(vols) == 1
	})
	if vols[0]["volid"] != "shared:iso/inst.iso" || vols[0]["format"] != "iso" || vols[0]["content"] != "iso" {
		t.Fatalf("ISO content: %v", vols)
	}
	vm := newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "ide2", Value: "shared:iso/inst.iso,media=cdrom"},
		proxmox.VirtualMachineOption{Name: "boot", Value: "order=ide2;scsi0"})
	conf := func() map[string]any {
		return call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", nil).data.(map[string]any)
	}
	if got := conf(); got["ide2"] != "shared:iso/inst.iso,media=cdrom" || got["boot"] != "order=ide2;scsi0" {
		t.Fatalf("config with the ISO: %v", got)
	}
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"boot": {"order=ide3;scsi0"}}, "500 invalid bootorder: device 'ide3' does not exist'"},
		{url.Values{"boot": {"order=ide2"}, "delete": {"ide2"}}, "500 invalid bootorder: device 'ide2' does not exist'"},
		{url.Values{"ide2": {"shared:iso/none.iso,media=cdrom"}}, "500 volume 'shared:iso/none.iso' does not exist"},
	} {
		if r := call(t, c, testToken, http.MethodPut, "/nodes/pve1/qemu/100/config", tc.form); r.reason != tc.want {
			t.Errorf("PUT %v: %s, want %s", tc.form, r.reason, tc.want)
		}
	}
	if r := call(t, c, testToken, http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"ide2": {"none,media=cdrom"}, "boot": {"order=scsi0"}}); r.status != http.StatusOK {
		t.Fatalf("ejecting the ISO: %s", r.reason)
	}
	if got := conf(); got["ide2"] != "none,media=cdrom" || got["boot"] != "order=scsi0" {
		t.Fatalf("config after the eject: %v", got)
	}
	if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "ide2", Value: "shared:iso/inst.iso,media=cdrom"}); err != nil {
		t.Fatal(err)
	}
	r := call(t, c, testToken, http.MethodDelete, "/nodes/pve1/storage/shared/content/shared:iso/inst.iso", nil)
	if r.status != http.StatusOK {
		t.Fatalf("deleting an ISO a VM names: %s", r.reason)
	}
}

// TestFileStorageFiles: with Config.FileRoot, a file storage's import
// and iso content are the files of its import/ and template/iso/
// directories, as on a Proxmox node: a file written there (by the agent)
// is listed with its size and the format its name says (hidden and
// foreign files are not), a disk imports it (import-from, its bytes
// copied) and a VM takes an ISO as its cdrom; deleting the volume removes
// the file; the upload endpoint stores its file there too, and refuses
// an existing one, which it leaves as it was.
func TestFileStorageFiles(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{FileRoot: t.TempDir(), DiskDir: t.TempDir()})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	base := filepath.Join(c.NodeRoot("pve1"), "var", "lib", "vz")
	importDir, isoDir := filepath.Join(base, "import"), filepath.Join(base, "template", "iso")
	image := []byte(strings.Repeat("qcow2 image bytes ", 1000))
	for path, b := range map[string][]byte{
		filepath.Join(importDir, "a.qcow2"):           image,
		filepath.Join(importDir, "b.raw"):             []byte("raw"),
		filepath.Join(importDir, ".fp-upload-1.part"): []byte("partial"),
		filepath.Join(importDir, "notes.txt"):         []byte("not an import"),
		filepath.Join(isoDir, "inst.iso"):             []byte("an installer"),
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	list := func(content string) map[string]string {
		t.Helper()
		r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/local/content", url.Values{"content": {content}})
		out := map[string]string{}
		for _, v := range r.data.([]any) {
			m := v.(map[string]any)
			out[m["volid"].(string)] = fmt.Sprintf("%v %v", m["format"], m["size"])
		}
		return out
	}
	if got, want := list("import"), map[string]string{"local:import/a.qcow2": fmt.Sprintf("qcow2 %d", len(image)), "local:import/b.raw": "raw 3"}; !maps.Equal(got, want) {
		t.Fatalf("import content %v, want %v", got, want)
	}
	if got, want := list("iso"), map[string]string{"local:iso/inst.iso": "iso 12"}; !maps.Equal(got, want) {
		t.Fatalf("iso content %v, want %v", got, want)
	}
	newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "scsi1", Value: "local-lvm:0,import-from=local:import/a.qcow2"},
		proxmox.VirtualMachineOption{Name: "ide2", Value: "local:iso/inst.iso,media=cdrom"})
	conf := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", nil).data.(map[string]any)
	if conf["ide2"] != "local:iso/inst.iso,media=cdrom" {
		t.Fatalf("config: %v", conf)
	}
	disk, _, _ := strings.Cut(conf["scsi1"].(string), ",")
	vol := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/local-lvm/content/"+disk, nil).data.(map[string]any)
	if b, err := os.ReadFile(vol["path"].(string)); err != nil || !bytes.HasPrefix(b, image) {
		t.Fatalf("the imported disk %s: %d bytes, %v", disk, len(b), err)
	}
	task := func(r response) string {
		t.Helper()
		upid, _ := r.data.(string)
		if r.status != http.StatusOK || upid == "" {
			t.Fatalf("no task: %s", r.reason)
		}
		var exit string
		poll.True(t, 10*time.Second, "task "+upid+" ended", func() bool {
			st := call(t, c, testToken, http.MethodGet, "/nodes/pve1/tasks/"+url.PathEscape(upid)+"/status", nil).data.(map[string]any)
			exit, _ = st["exitstatus"].(string)
			return st["status"] == "stopped"
		})
		return exit
	}
	if exit := task(call(t, c, testToken, http.MethodDelete, "/nodes/pve1/storage/local/content/local:import/b.raw", nil)); exit != "OK" {
		t.Fatalf("delete: %s", exit)
	}
	if _, err := os.Stat(filepath.Join(importDir, "b.raw")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the deleted volume's file: %v", err)
	}
	upload := func(name string, b []byte) string {
		t.Helper()
		ct, body := multipartBody(t, map[string]string{"content": "import"}, name, b)
		resp := postBody(t, c, "/nodes/pve1/storage/local/upload", ct, body)
		defer resp.Body.Close()
		var out struct{ Data string }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("upload: %s %v", resp.Status, err)
		}
		return task(response{status: http.StatusOK, data: out.Data})
	}
	if exit := upload("c.qcow2", image); exit != "OK" {
		t.Fatalf("upload: %s", exit)
	}
	if b, err := os.ReadFile(filepath.Join(importDir, "c.qcow2")); err != nil || !bytes.Equal(b, image) {
		t.Fatalf("the uploaded file: %d bytes, %v", len(b), err)
	}
	if exit := upload("a.qcow2", []byte("other")); !strings.Contains(exit, "refusing to override existing file") {
		t.Fatalf("an upload over an existing file: %s", exit)
	}
	if b, err := os.ReadFile(filepath.Join(importDir, "a.qcow2")); err != nil || !bytes.Equal(b, image) {
		t.Fatalf("the existing file changed: %d bytes, %v", len(b), err)
	}
	if got := list("import"); len(got) != 2 || got["local:import/c.qcow2"] != fmt.Sprintf("qcow2 %d", len(image)) {
		t.Fatalf("import content after the uploads: %v", got)
	}
}
