package graph_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// BenchmarkVMs measures the vms query over three zones (25 VMs of the VDC
// in each, among as many of another VDC) through the whole stack (HTTP,
// token check, fan-out over the mesh to the agents' proxies) against
// asking each simulated Proxmox directly in parallel for the same guests,
// in the same run.
func BenchmarkVMs(b *testing.B) {
	h := meshtest.New(b, meshtest.WithAPI(meshtest.APISpec{}), meshtest.WithClusters(
		meshtest.ClusterSpec{Name: "alpha", Nodes: 2},
		meshtest.ClusterSpec{Name: "beta", Nodes: 1},
		meshtest.ClusterSpec{Name: "gamma", Nodes: 1}))
	h.WaitOnline(b, 60*time.Second)
	ctx := b.Context()
	var direct []*proxmox.Client
	for _, c := range h.Clusters {
		pc := c.Proxmox(b)
		direct = append(direct, pc)
		for i := range 50 {
			vdc := []string{"red", "blue"}[i%2]
			var upid proxmox.UPID
			if err := pc.Post(ctx, "/nodes/pve1/qemu", map[string]any{"vmid": 100 + i, "name": "vm" + vdc, "tags": tenancy.GuestTags(vdc)}, &upid); err != nil {
				b.Fatal(err)
			}
			if err := proxmox.NewTask(upid, pc).Wait(ctx, 10*time.Millisecond, 10*time.Second); err != nil {
				b.Fatal(err)
			}
		}
	}
	token := h.Token(b, "alice")
	const query = `{ vms(first: 100) { id name status zone { name } host { name } } }`
	viaAPI := func() {
		r := meshtest.PostGraphQL(b, h.GraphQLURL(), "Bearer "+token, "red", query, nil).OK(b)
		var vms []struct{ ID string }
		r.Into(b, "vms", &vms)
		if len(vms) != 75 {
			b.Fatalf("vms: %d, want 75", len(vms))
		}
	}
	viaProxmox := func() {
		var wg sync.WaitGroup
		counts := make([]int, len(direct))
		for i, pc := range direct {
			wg.Go(func() {
				rs, err := pveapi.Resources(ctx, pc, "vm")
				if err != nil {
					b.Error(err)
					return
				}
				for _, r := range rs {
					if v, ok := tenancy.VDCOf(r.Tags()); ok && v == "red" {
						counts[i]++
					}
				}
			})
		}
		wg.Wait()
		if n := counts[0] + counts[1] + counts[2]; n != 75 {
			b.Fatalf("direct: %d, want 75", n)
		}
	}
	timed := func(f func()) time.Duration {
		s := time.Now()
		f()
		return time.Since(s)
	}
	for range 10 { // warm up connections
		viaAPI()
		viaProxmox()
	}
	var apiD, pveD []time.Duration
	for b.Loop() {
		apiD = append(apiD, timed(viaAPI))
		pveD = append(pveD, timed(viaProxmox))
	}
	p50 := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds())
	}
	b.ReportMetric(p50(apiD), "graphql-p50-µs")
	b.ReportMetric(p50(pveD), "direct-p50-µs")
	b.ReportMetric(p50(apiD)/max(p50(pveD), 1), "graphql/direct-p50")
}
