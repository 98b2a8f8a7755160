package pvesim_test

import (
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

// BenchmarkClusterResources measures GET /cluster/resources on a cluster of 4 nodes with
// 1,000 guests (a quarter running), through HTTPS with go-proxmox and parallel callers,
// so later benchmarks can tell the simulator is not their bottleneck.
func BenchmarkClusterResources(b *testing.B) {
	c := startCluster(b, pvesim.Config{Cluster: "bench", Nodes: 4})
	cl := pveClient(b, c, testTokenID, testTokenSecret)
	ctx := testCtx(b)
	nodes := c.NodeNames()
	const guests = 1000
	jobs := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, guests)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				node, err := cl.Node(ctx, nodes[i%len(nodes)])
				if err == nil {
					// The VMID is claimed when the call returns; the task need not be awaited.
					_, err = node.NewVirtualMachine(ctx, 1000+i,
						proxmox.VirtualMachineOption{Name: "name", Value: fmt.Sprintf("guest-%d", i)},
						proxmox.VirtualMachineOption{Name: "memory", Value: 2048},
						proxmox.VirtualMachineOption{Name: "cores", Value: 2},
						proxmox.VirtualMachineOption{Name: "scsi0", Value: "local-lvm:16"},
						proxmox.VirtualMachineOption{Name: "net0", Value: "virtio,bridge=vmbr0"},
						proxmox.VirtualMachineOption{Name: "tags", Value: "tenant-a;vdc-1"},
						proxmox.VirtualMachineOption{Name: "start", Value: i%4 == 0},
					)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range guests {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("create guest: %v", err)
	}
	cluster := (&proxmox.Cluster{}).New(cl)
	poll.True(b, 30*time.Second, "all guests created", func() bool {
		rs, err := cluster.Resources(ctx, "vm")
		return err == nil && len(rs) == guests
	})

	// Through go-proxmox: what a caller of the simulator sees, JSON decoding included.
	b.Run("go-proxmox", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rs, err := cluster.Resources(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if len(rs) < guests {
					b.Errorf("%d resources, want at least %d", len(rs), guests)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	})
	// Raw HTTPS, body read and discarded: the simulator's own capacity.
	hc := httpClient(b, c)
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.URL()+"/api2/json/cluster/resources", nil)
				req.Header.Set("Authorization", "PVEAPIToken="+testToken)
				resp, err := hc.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || n < guests*100 {
					b.Errorf("status %d, %d bytes", resp.StatusCode, n)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	})
}

// backupBenchBytes is the size of the disk BenchmarkBackupRestore backs up
// and restores, all of it data (no holes).
const backupBenchBytes = 4 << 30

// BenchmarkBackupRestore backs a VM's disk of 4 GiB of data up (vzdump to
// the node's "local" directory storage) and restores it into a new VM
// (its disk on "local-lvm"), each awaited to its task's end, and reports
// that time over a raw copy of the same bytes between the same storages,
// there and back (at most 1.5). Both run with the simulator's task times
// at zero, so what is measured is the copying of the bytes.
func BenchmarkBackupRestore(b *testing.B) {
	for b.Loop() {
		dir := b.TempDir()
		c := startCluster(b, pvesim.Config{Cluster: "bench", Nodes: 1, DiskDir: dir, StorageSize: 64 << 30})
		cl := pveClient(b, c, testTokenID, testTokenSecret)
		ctx := testCtx(b)
		await := func(r response) {
			b.Helper()
			if r.status != http.StatusOK {
				b.Fatalf("%s", r.reason)
			}
			waitOK(b, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
		}
		await(call(b, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"100"},
			"scsi0": {fmt.Sprintf("local-lvm:%d", backupBenchBytes>>30)}}))
		disk := volumePath(b, c, "pve1", "local-lvm:vm-100-disk-0")
		fillRandom(b, disk, backupBenchBytes)

		start := time.Now()
		await(call(b, c, testToken, http.MethodPost, "/nodes/pve1/vzdump", url.Values{"vmid": {"100"}, "storage": {"local"}}))
		list := call(b, c, testToken, http.MethodGet, "/nodes/pve1/storage/local/content", url.Values{"content": {"backup"}}).data.([]any)
		volid := list[0].(map[string]any)["volid"].(string)
		await(call(b, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"101"}, "archive": {volid}, "storage": {"local-lvm"}}))
		backup := time.Since(start)
		await(call(b, c, testToken, http.MethodDelete, "/nodes/pve1/qemu/101", nil))
		await(call(b, c, testToken, http.MethodDelete, "/nodes/pve1/storage/local/content/"+volid, nil))

		// The raw copy: the disk's file to the backup storage's directory
		// and back to the disk storage's, as cp would.
		start = time.Now()
		there := filepath.Join(dir, "local", "raw-copy")
		copyFile(b, disk, there)
		copyFile(b, there, filepath.Join(dir, "local-lvm", "raw-copy"))
		raw := time.Since(start)

		ratio := backup.Seconds() / raw.Seconds()
		b.ReportMetric(ratio, "backup+restore/raw-copy")
		b.ReportMetric(backup.Seconds(), "s/backup+restore")
		b.ReportMetric(raw.Seconds(), "s/raw-copy")
		b.Logf("backup and restore of %d GiB: %v; raw copy there and back: %v", backupBenchBytes>>30, backup, raw)
		if ratio > 1.5 {
			b.Errorf("backup and restore took %.2f times a raw copy, want at most 1.5", ratio)
		}
	}
}

// fillRandom writes n bytes of pseudo-random data over the file at path.
func fillRandom(b *testing.B, path string, n int64) {
	b.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r := mrand.NewChaCha8([32]byte{1})
	if _, err := io.CopyN(f, r, n); err != nil {
		b.Fatal(err)
	}
}

// copyFile copies the file from to a new file to.
func copyFile(b *testing.B, from, to string) {
	b.Helper()
	src, err := os.Open(from)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		b.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		b.Fatal(err)
	}
}
