package compute_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// BenchmarkPlacement creates 60 VMs in a zone of three nodes with
// placement, and 60 in a zone alike without it (every VM cloned on the
// template's node), in rounds that alternate the two, 6 creates at a time.
// It reports the VMs and the configured memory per host (max over min:
// at most 1.25) and the mean create latency (the call to the operation's
// end) with placement over without (at most 1.1).
func BenchmarkPlacement(b *testing.B) {
	const (
		vms      = 60
		rounds   = 6
		parallel = 6
	)
	for b.Loop() {
		e := newEnvOf(b, 3, bigQuota, "placed", "unplaced")
		placed, unplaced := e.zones[0], e.zones[1]
		bare := e.newService(e.cfg)
		bare.DisablePlacementForTest()
		e.stage(placed)
		e.stage(unplaced)
		var with, without []time.Duration
		for r := range rounds {
			with = append(with, e.timedCreates(e.svc, placed, fmt.Sprintf("p%d", r), vms/rounds, parallel)...)
			without = append(without, e.timedCreates(bare, unplaced, fmt.Sprintf("u%d", r), vms/rounds, parallel)...)
		}
		count, mem := e.perHost(placed)
		vmRatio, memRatio := spread(count), spread(mem)
		latency := mean(with).Seconds() / mean(without).Seconds()
		b.ReportMetric(vmRatio, "vms-max/min")
		b.ReportMetric(memRatio, "mem-max/min")
		b.ReportMetric(latency, "latency-with/without")
		b.ReportMetric(float64(mean(with).Milliseconds()), "ms/create-placed")
		b.ReportMetric(float64(mean(without).Milliseconds()), "ms/create-unplaced")
		b.Logf("VMs per host %v, memory per host (MiB) %v; mean create %v placed, %v unplaced", count, mem, mean(with), mean(without))
		if vmRatio > 1.25 || memRatio > 1.25 {
			b.Errorf("spread: VMs per host max/min %.2f, memory %.2f; want at most 1.25", vmRatio, memRatio)
		}
		if latency > 1.1 {
			b.Errorf("create latency with placement over without %.3f, want at most 1.1", latency)
		}
	}
}

// timedCreates creates n VMs named prefix-i in zone z through svc, par at
// a time, and returns each one's latency until its operation ended.
func (e *env) timedCreates(svc *compute.Service, z *vmtest.Zone, prefix string, n, par int) []time.Duration {
	e.t.Helper()
	ctx := vmtest.Ctx(e.t)
	out := make([]time.Duration, n)
	errs := make([]error, n)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			start := time.Now()
			_, op, err := svc.CreateVM(ctx, e.input(z.Name, fmt.Sprintf("%s-%d", prefix, i)))
			if err != nil {
				errs[i] = err
				return
			}
			ch, err := svc.Watch(ctx, "blue", op.ID)
			if err != nil {
				errs[i] = err
				return
			}
			var last compute.Operation
			for o := range ch {
				last = o
			}
			out[i] = time.Since(start)
			if last.State != compute.OpSucceeded {
				errs[i] = fmt.Errorf("create %s-%d: %+v", prefix, i, last)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

// perHost is the VMs of VDC blue on each node of z and their configured
// memory in MiB (every node counted, those without VMs as 0).
func (e *env) perHost(z *vmtest.Zone) (count, memMiB map[string]float64) {
	e.t.Helper()
	count, memMiB = map[string]float64{}, map[string]float64{}
	for _, n := range z.Sim.NodeNames() {
		count[n], memMiB[n] = 0, 0
	}
	gs, err := pveapi.Guests(vmtest.Ctx(e.t), z.Client)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, g := range gs {
		if g.Template == 0 && g.HasTag(tenancy.VDCTag("blue")) {
			count[g.Node]++
			memMiB[g.Node] += float64(g.MaxMem >> 20)
		}
	}
	return count, memMiB
}

// spread is the largest of m over its smallest (+Inf when that is 0).
func spread(m map[string]float64) float64 {
	var vs []float64
	for _, v := range m {
		vs = append(vs, v)
	}
	return slices.Max(vs) / slices.Min(vs)
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}
