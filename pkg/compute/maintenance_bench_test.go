package compute_test

import (
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// BenchmarkDrain puts 20 running VMs on one host of a zone of three
// (migrations taking 150 ms per GiB of local disk, as the simulator
// times them), moves them one after another to a second host with
// migrateVM, then drains that host (the default DrainParallel). It
// reports the drain's time over the serial migrations' (at most 0.5) and
// the VMs stopped (0).
func BenchmarkDrain(b *testing.B) {
	const vms = 20
	for b.Loop() {
		e := newEnvTimed(b, 3, pvesim.Timing{PerGiB: 150 * time.Millisecond}, bigQuota, "alpha")
		z := e.zones[0]
		e.stage(z)
		e.createOn(z, "pve1", "b", vms)
		ctx := vmtest.Ctx(b)

		start := time.Now()
		for _, g := range guestsOf(b, z) {
			op, err := e.svc.MigrateVM(ctx, compute.MigrateInput{VDC: "blue", ID: tenancy.VMRef{ZoneID: z.Name, VMID: g.VMID}.ID(), Host: "pve2"})
			if err != nil {
				b.Fatal(err)
			}
			if last := e.waitQuiet(op.ID); last.State != compute.OpSucceeded {
				b.Fatalf("migrate %s: %+v", g.Name, last)
			}
		}
		serial := time.Since(start)

		runService(b, e.svc)
		pve2 := tenancy.HostRef{ZoneID: z.Name, Node: "pve2"}.ID()
		start = time.Now()
		if _, err := e.svc.Hosts().SetMaintenance(ctx, pve2, true); err != nil {
			b.Fatal(err)
		}
		waitState(b, e.svc, pve2, compute.MaintenanceDone)
		drain := time.Since(start)

		stopped := 0
		for _, g := range guestsOf(b, z) {
			if g.Status != "running" || g.Node == "pve2" {
				stopped++
			}
		}
		for _, n := range z.Sim.NodeNames() {
			for _, typ := range []string{"qmstop", "qmshutdown"} {
				ts, err := pveapi.NodeTasksOfType(ctx, z.Client, n, typ, 1000)
				if err != nil {
					b.Fatal(err)
				}
				stopped += len(ts)
			}
		}
		ratio := drain.Seconds() / serial.Seconds()
		b.ReportMetric(ratio, "drain/serial")
		b.ReportMetric(float64(stopped), "stopped")
		b.Logf("20 serial migrations %v, drain %v", serial, drain)
		if ratio > 0.5 || stopped != 0 {
			b.Errorf("drain over serial %.2f (want at most 0.5), %d VMs stopped or left (want 0)", ratio, stopped)
		}
	}
}
