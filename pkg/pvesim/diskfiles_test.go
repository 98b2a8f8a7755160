package pvesim_test

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

// volumePath is the path Proxmox names for volid on node.
func volumePath(t testing.TB, c *pvesim.Cluster, node, volid string) string {
	t.Helper()
	storage, _, _ := strings.Cut(volid, ":")
	r := call(t, c, testToken, http.MethodGet, "/nodes/"+node+"/storage/"+storage+"/content/"+volid, nil)
	if r.status != http.StatusOK {
		t.Fatalf("volume %s: %s", volid, r.reason)
	}
	return r.data.(map[string]any)["path"].(string)
}

func fileSum(t *testing.T, path string) ([32]byte, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil)), n
}

// TestDiskBytes: with DiskDir, a disk's bytes live in a sparse file its
// volume's path names; a full clone starts with the same bytes, a resize
// grows the file, a migration to another node keeps them, and a delete
// removes the file.
func TestDiskBytes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "c", Nodes: 2, DiskDir: t.TempDir()})
	ctx := testCtx(t)
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"100"}, "scsi0": {"local-lvm:1"}, "memory": {"512"}})
	if r.status != http.StatusOK {
		t.Fatalf("create: %s", r.reason)
	}
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	path := volumePath(t, c, "pve1", "local-lvm:vm-100-disk-0")
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("the disk's path: %v", err)
	}
	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	for _, off := range []int64{0, 700 << 20} {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	sum, size := fileSum(t, path)
	if size != 1<<30 {
		t.Fatalf("disk file of %d bytes, want 1 GiB", size)
	}

	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/clone", url.Values{"newid": {"101"}, "full": {"1"}})
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	clone := volumePath(t, c, "pve1", "local-lvm:vm-101-disk-0")
	if got, _ := fileSum(t, clone); got != sum || clone == path {
		t.Errorf("the clone's disk %s differs from %s", clone, path)
	}

	r = call(t, c, testToken, http.MethodPut, "/nodes/pve1/qemu/101/resize", url.Values{"disk": {"scsi0"}, "size": {"+1G"}})
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	if _, n := fileSum(t, clone); n != 2<<30 {
		t.Errorf("resized disk file of %d bytes, want 2 GiB", n)
	}

	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/migrate", url.Values{"target": {"pve2"}, "with-local-disks": {"1"}})
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	moved := volumePath(t, c, "pve2", "local-lvm:vm-100-disk-0")
	if got, _ := fileSum(t, moved); got != sum {
		t.Errorf("the migrated disk differs")
	}

	r = call(t, c, testToken, http.MethodDelete, "/nodes/pve1/qemu/101", nil)
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	if _, err := os.Stat(clone); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted VM's disk file: %v", err)
	}
}
