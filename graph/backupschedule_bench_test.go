package graph_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/graph/server"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// scheduledVMs is how many VMs BenchmarkScheduledBackups schedules at
// one time.
const scheduledVMs = 100

// BenchmarkScheduledBackups sets a backup schedule at one time (02:00) on
// 100 VMs of a zone of two hosts through the API, runs the orchestrator
// as a process of cmd/orchestrator, moves Proxmox's clock (the
// simulator's) past 02:00 and waits, asking Proxmox directly, until every
// VM has been backed up: each exactly once, none twice. It reports the
// orchestrator process's CPU time (user and system) from the clock's move
// to the last backup's end, which must stay under 1 s: Proxmox runs the
// schedules, not the orchestrator.
func BenchmarkScheduledBackups(b *testing.B) {
	bin := meshtest.BuildProgram(b, b.TempDir(), "orchestrator", "github.com/flexplane/flexplane/cmd/orchestrator", "")
	// Each backup of a VM's 1 GiB disk takes Proxmox 0.1 s, one at a
	// time on each host (vzdump's node lock): the run lasts about 5 s.
	h := meshtest.New(b, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2, Timing: pvesim.Timing{PerGiB: 100 * time.Millisecond}}),
		meshtest.WithAPI(meshtest.APISpec{RateLimits: server.RateLimits{MutationRate: -1, MutationBurst: -1}}))
	h.WaitOnline(b, 60*time.Second)
	ctx := b.Context()
	h.GraphQL(b, "admin", "", `mutation { createStorageProfile(input: {name: "backups", tier: "backup", kind: BACKUP,
	  pools: [{zone: "alpha", pool: "local"}]}) { name } }`, nil).OK(b)
	pve := h.Clusters[0].Proxmox(b)
	if err := pve.Post(ctx, "/pools", map[string]any{"poolid": tenancy.PoolID("blue")}, nil); err != nil {
		b.Fatal(err)
	}
	// The VMs, made directly in Proxmox as creates leave them (tags, pool
	// and intent), half on each host.
	zone := h.Zone(b, h.Clusters[0]).ID
	var ids []string
	for i := range scheduledVMs {
		vmid, node := 1000+i, fmt.Sprintf("pve%d", 1+i%2)
		in := compute.Intent{Op: fmt.Sprintf("seed-%d", i), Created: time.Now(), VDC: "blue", Name: fmt.Sprintf("s%03d", i)}
		var upid proxmox.UPID
		if err := pve.Post(ctx, "/nodes/"+node+"/qemu", map[string]any{"vmid": vmid, "name": in.Name, "tags": tenancy.GuestTags("blue"),
			"pool": tenancy.PoolID("blue"), "scsi0": "local-lvm:1", "description": in.Description()}, &upid); err != nil {
			b.Fatal(err)
		}
		if err := proxmox.NewTask(upid, pve).Wait(ctx, 10*time.Millisecond, 30*time.Second); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, tenancy.VMRef{ZoneID: zone, VMID: vmid}.ID())
	}
	for _, id := range ids {
		h.GraphQL(b, "bob", "blue", `mutation($id: ID!) { setBackupSchedule(input: {vm: $id, schedule: "02:00", keepLast: 2}) { id } }`,
			map[string]any{"id": id}).OK(b)
	}
	jobs, err := pveapi.BackupJobs(ctx, pve)
	if err != nil || len(jobs) != scheduledVMs {
		b.Fatalf("%d backup jobs (%v), want %d", len(jobs), err, scheduledVMs)
	}
	next := jobs[0].NextRun

	p := h.ReplaceOrchestratorWithProcess(b, bin)
	token := "Bearer " + h.Token(b, "admin")
	poll.Until(b, 2*time.Minute, "the orchestrator process with its hosts online", func() error {
		r, err := gqltest.Post(ctx, nil, h.GraphQLURL(), gqltest.Request{Query: `{ hosts { status } }`, Authorization: token})
		if err != nil {
			return err
		}
		var d struct{ Hosts []struct{ Status string } }
		if err := r.Decode(&d); err != nil {
			return err
		}
		for _, host := range d.Hosts {
			if host.Status != "ONLINE" {
				return fmt.Errorf("hosts %+v", d.Hosts)
			}
		}
		if len(d.Hosts) != 2 {
			return fmt.Errorf("hosts %+v", d.Hosts)
		}
		return nil
	})
	sim := h.Clusters[0].Sim
	for b.Loop() {
		cpu0 := processCPU(b, p.Pid())
		start := time.Now()
		sim.AdvanceClockForTest(next.Add(time.Minute).Sub(sim.ClockForTest()))
		var tasks []pveapi.TaskEntry
		poll.Until(b, 5*time.Minute, "every scheduled backup", func() error {
			all, err := pveapi.ClusterTasks(ctx, pve)
			if err != nil {
				return err
			}
			tasks = tasks[:0]
			for _, t := range all {
				if t.Type != "vzdump" {
					continue
				}
				if t.Running {
					return fmt.Errorf("task %s runs", t.UPID)
				}
				tasks = append(tasks, t)
			}
			if len(tasks) < scheduledVMs {
				return fmt.Errorf("%d of %d backups", len(tasks), scheduledVMs)
			}
			return nil
		})
		wall, cpu := time.Since(start), processCPU(b, p.Pid())-cpu0
		// All done, none twice: one task and one archive per VM.
		per := map[string]int{}
		for _, t := range tasks {
			if t.ExitStatus != "OK" {
				b.Errorf("backup %s: %s", t.UPID, t.ExitStatus)
			}
			per[t.ID]++
		}
		archives := 0
		for _, node := range []string{"pve1", "pve2"} {
			vols, err := pveapi.BackupVolumes(ctx, pve, node, "local")
			if err != nil {
				b.Fatal(err)
			}
			archives += len(vols)
		}
		for i := range scheduledVMs {
			if n := per[strconv.Itoa(1000+i)]; n != 1 {
				b.Errorf("VM %d backed up %d times, want once", 1000+i, n)
			}
		}
		if len(tasks) != scheduledVMs || archives != scheduledVMs {
			b.Errorf("%d backup tasks and %d archives for %d VMs, want one each", len(tasks), archives, scheduledVMs)
		}
		b.ReportMetric(cpu.Seconds(), "orchestrator-cpu-s")
		b.ReportMetric(wall.Seconds(), "s/run")
		b.Logf("%d VMs backed up on their schedule in %v; the orchestrator process's CPU meanwhile: %v", scheduledVMs, wall.Round(time.Millisecond), cpu)
		if cpu >= time.Second {
			b.Errorf("the orchestrator used %v of CPU during the scheduled run, want under 1s", cpu)
		}
	}
}

// processCPU is process pid's CPU time so far, user and system
// (/proc/PID/stat, in clock ticks of 1/100 s).
func processCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's closing parenthesis: state is the
	// first, utime the 12th and stime the 13th.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
