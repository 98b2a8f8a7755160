package pvesim_test

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

// taskLog is the log of task upid on node, one line each.
func taskLog(t *testing.T, c *pvesim.Cluster, node, upid string) string {
	t.Helper()
	r := call(t, c, testToken, http.MethodGet, "/nodes/"+node+"/tasks/"+upid+"/log", url.Values{"limit": {"1000"}})
	var lines []string
	for _, l := range r.data.([]any) {
		lines = append(lines, l.(map[string]any)["t"].(string))
	}
	return strings.Join(lines, "\n")
}

// TestBackupAndRestore: vzdump writes an archive volume with its notes
// and the task log vzdump writes, locked "backup" meanwhile; a restore
// makes a new guest with the archived configuration, new MACs, the
// request's settings over it and the backed-up disk's bytes; a protected
// archive cannot be deleted.
func TestBackupAndRestore(t *testing.T) {
	t.Parallel()
	// A backup of the 256 MiB disk takes a second: its lock is seen.
	c := startCluster(t, pvesim.Config{Cluster: "c", Nodes: 1, DiskDir: t.TempDir(), Timing: pvesim.Timing{PerGiB: 4 * time.Second}})
	ctx := testCtx(t)
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"100"}, "name": {"web"},
		"scsi0": {"local-lvm:0.25"}, "memory": {"512"}, "net0": {"virtio,bridge=vmbr0"}, "description": {"the original"}})
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	sum := writeRandom(t, volumePath(t, c, "pve1", "local-lvm:vm-100-disk-0"), 2<<20, 100<<20)

	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/vzdump", url.Values{"vmid": {"100"}, "storage": {"local"},
		"mode": {"snapshot"}, "compress": {"zstd"}, "notes-template": {`fp {{guestname}} {{vmid}}\nsecond`}, "protected": {"1"}})
	if r.status != http.StatusOK {
		t.Fatalf("vzdump: %s", r.reason)
	}
	upid := r.data.(string)
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", nil); r.data.(map[string]any)["lock"] != "backup" {
		t.Errorf("during the backup the guest's lock is %v, want backup", r.data.(map[string]any)["lock"])
	}
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(upid), cl), nil)
	log := taskLog(t, c, "pve1", upid)
	for _, want := range []string{"INFO: Starting Backup of VM 100 (qemu)", "INFO: include disk 'scsi0' 'local-lvm:vm-100-disk-0' 256M",
		"INFO: adding notes to backup", "INFO: Backup job finished successfully", "TASK OK"} {
		if !strings.Contains(log, want) {
			t.Errorf("task log lacks %q:\n%s", want, log)
		}
	}
	r = call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/local/content", url.Values{"content": {"backup"}})
	list := r.data.([]any)
	if len(list) != 1 {
		t.Fatalf("%d backups listed, want 1", len(list))
	}
	b := list[0].(map[string]any)
	volid := b["volid"].(string)
	if !strings.HasPrefix(volid, "local:backup/vzdump-qemu-100-") || !strings.HasSuffix(volid, ".vma.zst") ||
		b["notes"] != "fp web 100\nsecond" || b["protected"] != float64(1) || b["vmid"] != float64(100) {
		t.Errorf("backup listed as %v", b)
	}
	r = call(t, c, testToken, http.MethodGet, "/nodes/pve1/vzdump/extractconfig", url.Values{"volume": {volid}})
	if conf, _ := r.data.(string); !strings.Contains(conf, "#the original\n") || !strings.Contains(conf, "name: web\n") {
		t.Errorf("extractconfig: %v %q", r.reason, conf)
	}

	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"101"}, "archive": {volid},
		"scsi0": {"local-lvm:1"}})
	if r.status != http.StatusBadRequest {
		t.Errorf("a restore with a disk: %s, want 400", r.reason)
	}
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"101"}, "archive": {volid},
		"storage": {"local-lvm"}, "unique": {"1"}, "name": {"copy"}, "description": {"restored"}})
	if r.status != http.StatusOK {
		t.Fatalf("restore: %s", r.reason)
	}
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	orig := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", nil).data.(map[string]any)
	got := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/101/config", nil).data.(map[string]any)
	if got["name"] != "copy" || got["description"] != "restored" || got["memory"] != orig["memory"] || got["lock"] != nil {
		t.Errorf("restored config %v", got)
	}
	if got["net0"] == orig["net0"] || !strings.Contains(got["net0"].(string), "bridge=vmbr0") {
		t.Errorf("restored NIC %v, original %v: want a new MAC on the same bridge", got["net0"], orig["net0"])
	}
	if s, _ := fileSum(t, volumePath(t, c, "pve1", "local-lvm:vm-101-disk-0")); s != sum {
		t.Error("the restored disk does not have the backed-up bytes")
	}

	r = call(t, c, testToken, http.MethodDelete, "/nodes/pve1/storage/local/content/"+volid, nil)
	if r.status == http.StatusOK {
		t.Error("a protected backup was deleted")
	}
	call(t, c, testToken, http.MethodPut, "/nodes/pve1/storage/local/content/"+volid, url.Values{"protected": {"0"}})
	r = call(t, c, testToken, http.MethodDelete, "/nodes/pve1/storage/local/content/"+volid, nil)
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	if n := len(call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/local/content", url.Values{"content": {"backup"}}).data.([]any)); n != 0 {
		t.Errorf("%d backups after the delete", n)
	}
}

// TestBackupStorageFull: an archive that does not fit fails the task with
// vzdump's message and leaves no archive listed.
func TestBackupStorageFull(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "c", Nodes: 1, StorageSize: 1 << 30})
	ctx := testCtx(t)
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"100"}, "scsi0": {"local-lvm:16"}})
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/vzdump", url.Values{"vmid": {"100"}, "storage": {"local"}})
	upid := r.data.(string)
	if exit := waitFailed(t, ctx, proxmox.NewTask(proxmox.UPID(upid), cl), nil); exit != "job errors" {
		t.Errorf("exit status %q, want job errors", exit)
	}
	if log := taskLog(t, c, "pve1", upid); !strings.Contains(log, "ERROR: Backup of VM 100 failed - vma_queue_write: write error - No space left on device") {
		t.Errorf("task log:\n%s", log)
	}
	if n := len(call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/local/content", url.Values{"content": {"backup"}}).data.([]any)); n != 0 {
		t.Errorf("%d backups listed after a failed backup", n)
	}
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", nil); r.data.(map[string]any)["lock"] != nil {
		t.Errorf("the guest is still locked: %v", r.data.(map[string]any)["lock"])
	}
}

// TestBackupArchiveSurvivesRestart: an archive keeps its configuration in
// the state file, so a restarted simulator still restores it; an added
// PBS entry and its namespace's archives are kept too.
func TestBackupArchiveSurvivesRestart(t *testing.T) {
	t.Parallel()
	cfg := pvesim.Config{Cluster: "lab", Nodes: 1, StateFile: filepath.Join(t.TempDir(), "state.json")}
	c := startCluster(t, cfg)
	ctx := testCtx(t)
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"100"}, "name": {"web"}, "scsi0": {"local-lvm:1"}})
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/vzdump", url.Values{"vmid": {"100"}, "storage": {"local"}})
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	list := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/local/content", url.Values{"content": {"backup"}}).data.([]any)
	volid := list[0].(map[string]any)["volid"].(string)
	// And on a PBS entry, which survives too.
	if r := call(t, c, testToken, http.MethodPost, "/storage", url.Values{"storage": {"pbs-a"}, "type": {"pbs"}, "server": {"pbs.example"},
		"datastore": {"tank"}, "namespace": {"a"}}); r.status != http.StatusOK {
		t.Fatalf("adding a pbs entry: %s", r.reason)
	}
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/vzdump", url.Values{"vmid": {"100"}, "storage": {"pbs-a"}})
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	pbsVol := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/pbs-a/content", nil).data.([]any)[0].(map[string]any)["volid"].(string)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := startCluster(t, cfg)
	cl2 := pveClient(t, c2, testTokenID, testTokenSecret)
	if r := call(t, c2, testToken, http.MethodGet, "/nodes/pve1/vzdump/extractconfig", url.Values{"volume": {volid}}); !strings.Contains(fmt.Sprint(r.data), "name: web") {
		t.Fatalf("extractconfig after the restart: %s %v", r.reason, r.data)
	}
	r = call(t, c2, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"101"}, "archive": {volid}})
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl2), nil)
	if got := call(t, c2, testToken, http.MethodGet, "/storage/pbs-a", nil).data; fmt.Sprint(got.(map[string]any)["namespace"]) != "a" {
		t.Errorf("the pbs entry after the restart: %v", got)
	}
	if r := call(t, c2, testToken, http.MethodGet, "/nodes/pve1/vzdump/extractconfig", url.Values{"volume": {pbsVol}}); !strings.Contains(fmt.Sprint(r.data), "name: web") {
		t.Errorf("the PBS archive after the restart: %s %v", r.reason, r.data)
	}
}

// writeRandom writes n random bytes at off into the file at path (a
// guest's disk image) and returns the file's sum then.
func writeRandom(t *testing.T, path string, n int, off int64) [32]byte {
	t.Helper()
	data := make([]byte, n)
	_, _ = rand.Read(data)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	sum, _ := fileSum(t, path)
	return sum
}
