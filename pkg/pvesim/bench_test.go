package pvesim_test

import (
	"fmt"
	"io"
	"net/http"
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
