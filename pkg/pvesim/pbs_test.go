package pvesim_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

// TestPBSNamespaces: entries of type pbs on one datastore keep the
// archives of each namespace apart (an entry on another namespace never
// lists, restores or deletes them; one on the same namespace sees them);
// vzdump writes to one as PBS names snapshots (listing the notes' first
// line, as PBS does), and its restore has the
// backed-up disk's bytes (data plane); bad entries are refused.
func TestPBSNamespaces(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "c", Nodes: 1, DiskDir: t.TempDir()})
	ctx := testCtx(t)
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	fp := strings.TrimSuffix(strings.Repeat("ab:", 32), ":")
	add := func(id, ns string) {
		t.Helper()
		form := url.Values{"storage": {id}, "type": {"pbs"}, "server": {"pbs.example"}, "datastore": {"tank"},
			"username": {"pve@pbs!fp"}, "password": {"secret"}, "fingerprint": {fp}, "content": {"backup"}}
		if ns != "" {
			form.Set("namespace", ns)
		}
		if r := call(t, c, testToken, http.MethodPost, "/storage", form); r.status != http.StatusOK {
			t.Fatalf("adding %s: %s", id, r.reason)
		}
	}
	add("pbs", "")
	add("pbs-a", "tenants/a")
	add("pbs-b", "tenants/b")
	add("pbs-a2", "tenants/a")
	for _, bad := range []url.Values{
		{"storage": {"pbs-x"}, "type": {"pbs"}, "server": {"pbs.example"}},                                  // no datastore
		{"storage": {"pbs-a"}, "type": {"pbs"}, "server": {"pbs.example"}, "datastore": {"tank"}},           // taken
		{"storage": {"pbs-y"}, "type": {"pbs"}, "server": {"s"}, "datastore": {"d"}, "content": {"images"}}, // no disks on PBS
		{"storage": {"pbs-z"}, "type": {"pbs"}, "server": {"s"}, "datastore": {"d"}, "path": {"/srv"}},      // not a PBS option
	} {
		if r := call(t, c, testToken, http.MethodPost, "/storage", bad); r.status == http.StatusOK {
			t.Errorf("POST /storage %v was accepted", bad)
		}
	}
	got := call(t, c, testToken, http.MethodGet, "/storage/pbs-a", nil).data.(map[string]any)
	if got["type"] != "pbs" || got["namespace"] != "tenants/a" || got["datastore"] != "tank" || got["password"] != nil || got["content"] != "backup" {
		t.Errorf("GET /storage/pbs-a: %v", got)
	}

	r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"100"}, "name": {"web"}, "scsi0": {"local-lvm:0.125"}})
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	sum := writeRandom(t, volumePath(t, c, "pve1", "local-lvm:vm-100-disk-0"), 1<<20, 64<<20)

	// b's archive is of another guest: a's name is never one of b's.
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"103"}, "name": {"db"}, "scsi0": {"local-lvm:0.125"}})
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	backup := func(storage, vmid string) string {
		t.Helper()
		r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/vzdump", url.Values{"vmid": {vmid}, "storage": {storage},
			"notes-template": {"of " + storage + `\nmore`}})
		if r.status != http.StatusOK {
			t.Fatalf("vzdump to %s: %s", storage, r.reason)
		}
		waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
		list := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/"+storage+"/content", url.Values{"content": {"backup"}}).data.([]any)
		if len(list) != 1 {
			t.Fatalf("%s lists %d archives, want its one: %v", storage, len(list), list)
		}
		b := list[0].(map[string]any)
		if v := b["volid"].(string); !strings.HasPrefix(v, storage+":backup/vm/"+vmid+"/") || b["format"] != "pbs-vm" || b["notes"] != "of "+storage {
			t.Errorf("%s lists %v", storage, b)
		}
		// PBS lists the notes' first line; the volume's own GET has them all.
		full := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/"+storage+"/content/"+b["volid"].(string), nil).data.(map[string]any)
		if full["notes"] != "of "+storage+"\nmore" || b["subtype"] != "qemu" {
			t.Errorf("%s's archive: notes %q, listed %v", storage, full["notes"], b)
		}
		return b["volid"].(string)
	}
	va := backup("pbs-a", "100")
	vb := backup("pbs-b", "103")
	if n := len(call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/pbs/content", nil).data.([]any)); n != 0 {
		t.Errorf("the datastore's root namespace lists %d archives of its namespaces", n)
	}
	same := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/pbs-a2/content", nil).data.([]any)
	if _, name, _ := strings.Cut(va, ":"); len(same) != 1 || same[0].(map[string]any)["volid"] != "pbs-a2:"+name {
		t.Errorf("an entry on the same namespace lists %v, want %s through it", same, name)
	}

	// Through b's entry, a's archive does not exist.
	_, nameA, _ := strings.Cut(va, ":")
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/vzdump/extractconfig", url.Values{"volume": {"pbs-b:" + nameA}}); r.status == http.StatusOK {
		t.Error("b's entry reads a's archive")
	}
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"102"}, "archive": {"pbs-b:" + nameA}, "storage": {"local-lvm"}}); r.status == http.StatusOK {
		t.Error("b's entry restores a's archive")
	}
	if r := call(t, c, testToken, http.MethodDelete, "/nodes/pve1/storage/pbs-b/content/pbs-b:"+nameA, nil); r.status == http.StatusOK {
		t.Error("b's entry deletes a's archive")
	}

	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"101"}, "archive": {va}, "storage": {"local-lvm"}, "unique": {"1"}})
	if r.status != http.StatusOK {
		t.Fatalf("restore: %s", r.reason)
	}
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	if s, _ := fileSum(t, volumePath(t, c, "pve1", "local-lvm:vm-101-disk-0")); s != sum {
		t.Error("the disk restored from PBS does not have the backed-up bytes")
	}

	r = call(t, c, testToken, http.MethodDelete, "/nodes/pve1/storage/pbs-a/content/"+va, nil)
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	if n := len(call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/pbs-a/content", nil).data.([]any)); n != 0 {
		t.Errorf("a lists %d archives after its delete", n)
	}
	if l := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/pbs-b/content", nil).data.([]any); len(l) != 1 || l[0].(map[string]any)["volid"] != vb {
		t.Errorf("b lists %v after a's delete, want %s", l, vb)
	}
	if r := call(t, c, testToken, http.MethodDelete, "/storage/pbs-b", nil); r.status != http.StatusOK {
		t.Fatalf("removing pbs-b: %s", r.reason)
	}
	add("pbs-b", "tenants/b")
	if l := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/pbs-b/content", nil).data.([]any); len(l) != 1 {
		t.Errorf("an entry added again on namespace b lists %v, want the archive that stayed on the server", l)
	}
}
