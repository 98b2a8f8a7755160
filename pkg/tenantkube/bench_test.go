package tenantkube_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/tenantkube"
)

// BenchmarkWorkers0To10 measures a node pool scaled 0 → 10 until its ten
// worker VMs run (Cluster API's controllers and the provider), against a
// baseline in the same run: ten createVMs straight through compute in the
// same zone, waited for in turn. Reported: pool-s, direct-s and their
// ratio.
func BenchmarkWorkers0To10(b *testing.B) {
	for b.Loop() {
		e := newEnv(b, quotas, true)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		// The baseline first: it also stages the image.
		start := time.Now()
		var ids []string
		for i := range 10 {
			_, op, err := e.comp.CreateVM(ctx, compute.CreateInput{VDC: "red", Name: fmt.Sprintf("base-%d", i), Zone: "alpha",
				Image: "tiny", ComputeProfile: "small", StorageProfile: "ssd", DiskGiB: 4,
				NICs: []compute.NICInput{{Network: e.red}}, User: "kube"})
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, op.ID)
		}
		for _, id := range ids {
			ch, err := e.comp.Watch(ctx, "red", id)
			if err != nil {
				b.Fatal(err)
			}
			for range ch {
			}
		}
		direct := time.Since(start)
		c, err := e.svc.CreateKubernetesCluster(ctx, tenantkube.CreateClusterInput{VDC: "blue", Name: "bench", Zone: "alpha", Network: e.blue, Version: "v1.37.2"})
		if err != nil {
			b.Fatal(err)
		}
		p, err := e.svc.CreateNodePool(ctx, tenantkube.NodePoolInput{VDC: "blue", Cluster: c.ID, Name: "w", ComputeProfile: "small", StorageProfile: "ssd"})
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if _, err := e.svc.ScaleNodePool(ctx, "blue", p.ID, 10); err != nil {
			b.Fatal(err)
		}
		waitFor(b, 8*time.Minute, "10 workers", func() (bool, string) {
			got, err := e.svc.NodePool(ctx, "blue", p.ID)
			if err != nil {
				return false, err.Error()
			}
			return got.Ready == 10, fmt.Sprintf("%d ready", got.Ready)
		})
		pool := time.Since(start)
		cancel()
		b.ReportMetric(pool.Seconds(), "pool-s")
		b.ReportMetric(direct.Seconds(), "direct-s")
		b.ReportMetric(pool.Seconds()/direct.Seconds(), "pool/direct")
	}
}
