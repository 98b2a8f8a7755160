package pvesim_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

// imageServer serves one random image on 127.0.0.1 and returns its URL and SHA-256.
func imageServer(t testing.TB, name string, size int) (string, string) {
	t.Helper()
	img := make([]byte, size)
	_, _ = rand.Read(img)
	sum := sha256.Sum256(img)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/"+name {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(img)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/" + name, hex.EncodeToString(sum[:])
}

// download serves a random image on 127.0.0.1 and downloads it to node's storage
// with its checksum verified.
func download(t *testing.T, cl *proxmox.Client, node, storage, content, name string, size int) {
	t.Helper()
	ctx := testCtx(t)
	url, sum := imageServer(t, name, size)
	n, err := cl.Node(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	st, err := n.Storage(ctx, storage)
	if err != nil {
		t.Fatal(err)
	}
	task, err := st.DownloadURLWithHash(ctx, content, name, url, sum, "sha256")
	waitOK(t, ctx, task, err)
}

// makeTemplate downloads an image to shared storage, creates VM vmid from it with a
// cloud-init drive, and converts it to a template.
func makeTemplate(t *testing.T, cl *proxmox.Client, vmid int) {
	t.Helper()
	ctx := testCtx(t)
	download(t, cl, "pve1", "shared", "import", "noble.qcow2", 3<<20)
	node, err := cl.Node(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	task, err := node.NewVirtualMachine(ctx, vmid,
		proxmox.VirtualMachineOption{Name: "name", Value: "noble-template"},
		proxmox.VirtualMachineOption{Name: "memory", Value: 2048},
		proxmox.VirtualMachineOption{Name: "cores", Value: 2},
		proxmox.VirtualMachineOption{Name: "ostype", Value: "l26"},
		proxmox.VirtualMachineOption{Name: "scsihw", Value: "virtio-scsi-single"},
		proxmox.VirtualMachineOption{Name: "scsi0", Value: "shared:0,import-from=shared:import/noble.qcow2,discard=on"},
		proxmox.VirtualMachineOption{Name: "ide2", Value: "shared:cloudinit"},
		proxmox.VirtualMachineOption{Name: "net0", Value: "virtio,bridge=vmbr0"},
		proxmox.VirtualMachineOption{Name: "agent", Value: "1"},
		proxmox.VirtualMachineOption{Name: "boot", Value: "order=scsi0"},
	)
	waitOK(t, ctx, task, err)
	vm, err := node.VirtualMachine(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	task, err = vm.ConvertToTemplate(ctx)
	waitOK(t, ctx, task, err)
}

func diskSize(t *testing.T, v string) string {
	t.Helper()
	for _, part := range strings.Split(v, ",") {
		if s, ok := strings.CutPrefix(part, "size="); ok {
			return s
		}
	}
	t.Fatalf("no size in %q", v)
	return ""
}

// TestLifecycle drives a whole VM lifecycle through go-proxmox: clone from a template
// with cloud-init and disk limits, start, migrate, resize, stop, delete.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 3})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)

	makeTemplate(t, cl, 9000)
	if err := cl.NewPool(ctx, "tenant-a", "tenant A"); err != nil {
		t.Fatal(err)
	}

	node1, err := cl.Node(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := node1.VirtualMachine(ctx, 9000)
	if err != nil {
		t.Fatal(err)
	}
	if !bool(tmpl.Template) || !bool(tmpl.VirtualMachineConfig.Template) {
		t.Fatalf("VM 9000 is not a template: %+v", tmpl.VirtualMachineConfig)
	}
	if got := tmpl.VirtualMachineConfig.SCSIs["scsi0"]; !strings.HasPrefix(got, "shared:9000/base-9000-disk-0.qcow2,") {
		t.Fatalf("template disk = %q, want a base volume", got)
	}

	// Full clone to another node onto its local storage, into a pool.
	newid, task, err := tmpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{
		Name: "web1", Full: true, Target: "pve2", Storage: "local-lvm", Pool: "tenant-a",
	})
	if newid != 100 {
		t.Fatalf("clone got VMID %d, want 100 from /cluster/nextid", newid)
	}
	waitOK(t, ctx, task, err)
	if task.Type != "qmclone" || task.ID != "9000" || task.Node != "pve1" || task.User != testTokenID {
		t.Fatalf("clone UPID fields: %+v", task)
	}

	node2, err := cl.Node(ctx, "pve2")
	if err != nil {
		t.Fatal(err)
	}
	vm, err := node2.VirtualMachine(ctx, newid)
	if err != nil {
		t.Fatal(err)
	}
	cfg := vm.VirtualMachineConfig
	if cfg.Name != "web1" || cfg.Lock != "" || bool(cfg.Template) {
		t.Fatalf("clone config: name %q lock %q template %v", cfg.Name, cfg.Lock, cfg.Template)
	}
	if got := cfg.SCSIs["scsi0"]; !strings.HasPrefix(got, "local-lvm:vm-100-disk-0,") || diskSize(t, got) != "3M" {
		t.Fatalf("clone disk = %q", got)
	}
	if got := cfg.IDEs["ide2"]; got != "local-lvm:vm-100-cloudinit,media=cdrom" {
		t.Fatalf("clone cloud-init drive = %q", got)
	}
	if cfg.Nets["net0"] == tmpl.VirtualMachineConfig.Nets["net0"] {
		t.Fatalf("clone kept the template's MAC address: %q", cfg.Nets["net0"])
	}

	// Cloud-init and disk limits, conditional on the digest just read.
	disk := strings.Split(cfg.SCSIs["scsi0"], ",")[0]
	sshKey := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq8s0Z1Qh7Y6m0vRk3bN6ZrW2cQk8m3o5uXxYtF9a1b ops@flexplane"
	task, err = vm.Config(ctx,
		proxmox.VirtualMachineOption{Name: "ciuser", Value: "ubuntu"},
		proxmox.VirtualMachineOption{Name: "sshkeys", Value: proxmox.EncodeSSHKeys(sshKey)},
		proxmox.VirtualMachineOption{Name: "ipconfig0", Value: "ip=10.20.0.5/24,gw=10.20.0.1"},
		proxmox.VirtualMachineOption{Name: "scsi0", Value: disk + ",mbps_rd=100,mbps_wr=50,iops=500"},
		proxmox.VirtualMachineOption{Name: "tags", Value: "tenant-a;vdc-1"},
		proxmox.VirtualMachineOption{Name: "digest", Value: cfg.Digest},
	)
	waitOK(t, ctx, task, err)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	cfg = vm.VirtualMachineConfig
	if cfg.CIUser != "ubuntu" || cfg.SSHKeys != proxmox.EncodeSSHKeys(sshKey) || cfg.IPConfigs["ipconfig0"] != "ip=10.20.0.5/24,gw=10.20.0.1" || cfg.Tags != "tenant-a;vdc-1" {
		t.Fatalf("cloud-init config not applied: %+v", cfg)
	}
	if got, want := cfg.SCSIs["scsi0"], disk+",iops=500,mbps_rd=100,mbps_wr=50,size=3M"; got != want {
		t.Fatalf("scsi0 = %q, want %q", got, want)
	}

	// Start: running, with metrics that move.
	task, err = vm.Start(ctx)
	waitOK(t, ctx, task, err)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if vm.Status != "running" || vm.PID == 0 || vm.MaxMem != 2048<<20 || vm.CPUs != 2 {
		t.Fatalf("after start: status %q pid %d maxmem %d cpus %d", vm.Status, vm.PID, vm.MaxMem, vm.CPUs)
	}
	netin := vm.NetIn
	poll.True(t, 10*time.Second, "netin to grow", func() bool {
		if err := vm.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		return vm.NetIn > netin && vm.Mem > 0 && vm.CPU > 0
	})

	// Online migration with local disks to pve3.
	task, err = vm.Migrate(ctx, &proxmox.VirtualMachineMigrateOptions{Target: "pve3", Online: true, WithLocalDisks: true})
	waitOK(t, ctx, task, err)
	node3, err := cl.Node(ctx, "pve3")
	if err != nil {
		t.Fatal(err)
	}
	vm, err = node3.VirtualMachine(ctx, newid)
	if err != nil {
		t.Fatalf("VM not on pve3 after migration: %v", err)
	}
	if vm.Status != "running" {
		t.Fatalf("after online migration: status %q", vm.Status)
	}
	if _, err := node2.VirtualMachine(ctx, newid); err == nil {
		t.Fatal("VM still answers on pve2 after migration")
	}
	st3, err := node3.Storage(ctx, "local-lvm")
	if err != nil {
		t.Fatal(err)
	}
	content, err := st3.GetContent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range content {
		found = found || v.Volid == disk
	}
	if !found {
		t.Fatalf("disk %s not on pve3's local-lvm after migration: %+v", disk, content)
	}

	// Grow the disk by 2G.
	task, err = vm.ResizeDisk(ctx, "scsi0", "+2G")
	waitOK(t, ctx, task, err)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if got := diskSize(t, vm.VirtualMachineConfig.SCSIs["scsi0"]); got != fmt.Sprintf("%dM", 2048+3) {
		t.Fatalf("size after resize = %s", got)
	}

	// Stop and delete with purge.
	task, err = vm.Stop(ctx)
	waitOK(t, ctx, task, err)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if vm.Status != "stopped" {
		t.Fatalf("after stop: status %q", vm.Status)
	}
	task, err = vm.Delete(ctx, &proxmox.VirtualMachineDeleteOptions{Purge: true})
	waitOK(t, ctx, task, err)
	if _, err := node3.VirtualMachine(ctx, newid); err == nil {
		t.Fatal("VM still exists after delete")
	}
	pool, err := cl.Pool(ctx, "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(pool.Members) != 0 {
		t.Fatalf("pool still has members: %+v", pool.Members)
	}
	content, err = st3.GetContent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range content {
		if v.VMID == uint64(newid) {
			t.Fatalf("volume %s left after delete", v.Volid)
		}
	}
}
