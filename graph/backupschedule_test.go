package graph_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

type gqlSchedule struct {
	Schedule                        string
	KeepLast, KeepDaily, KeepWeekly *int
	State                           string
	Message                         *string
}

const scheduleFields = `schedule keepLast keepDaily keepWeekly state message`

// TestBackupSchedules: a VM's backup schedule is a Proxmox backup job
// that runs by Proxmox's clock (the simulator's, moved on) and whose
// archives are the VM's backups; bad input and another VDC's VM change
// nothing; the VDC's backupGiB quota refuses createBackup past it and
// pauses the schedule once the backups reach it (the orchestrator's pass),
// resuming it below; removeBackupSchedule and deleteVM remove the job,
// and the pass removes a job left behind for a guest that is gone.
func TestBackupSchedules(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "bsched")
	vm := createBlueVM(t, h, tn, "nightly")
	ref, err := tenancy.ParseVMID(vm)
	if err != nil {
		t.Fatal(err)
	}
	pve := h.Clusters[0].Proxmox(t)
	jobID := fmt.Sprintf("flexplane-vm-%d", ref.VMID)
	job := func() *pveapi.BackupJob {
		t.Helper()
		jobs, err := pveapi.BackupJobs(context.Background(), pve)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(jobs, func(j pveapi.BackupJob) bool { return j.ID == jobID }); i >= 0 {
			return &jobs[i]
		}
		return nil
	}
	schedule := func(user, vdc string) *gqlSchedule {
		t.Helper()
		var v struct{ BackupSchedule *gqlSchedule }
		h.GraphQL(t, user, vdc, `query($id: ID!) { vm(id: $id) { backupSchedule { `+scheduleFields+` } } }`,
			map[string]any{"id": vm}).OK(t).Into(t, "vm", &v)
		return v.BackupSchedule
	}
	const set = `mutation($in: SetBackupScheduleInput!) { setBackupSchedule(input: $in) { id backupSchedule { ` + scheduleFields + ` } } }`
	const remove = `mutation($vm: ID!) { removeBackupSchedule(vm: $vm) { id backupSchedule { state } } }`

	// Bad input and another VDC's VM: refused, and no job.
	for _, c := range []struct {
		user, vdc, query string
		vars             map[string]any
		code, field      string
	}{
		{tn.bob, tn.blue, set, map[string]any{"in": map[string]any{"vm": vm, "schedule": "02:61"}}, "BAD_USER_INPUT", "input.schedule"},
		{tn.bob, tn.blue, set, map[string]any{"in": map[string]any{"vm": vm, "schedule": " "}}, "BAD_USER_INPUT", "input.schedule"},
		{tn.bob, tn.blue, set, map[string]any{"in": map[string]any{"vm": vm, "schedule": "daily", "keepLast": 0}}, "BAD_USER_INPUT", "input.keepLast"},
		{tn.alice, tn.red, set, map[string]any{"in": map[string]any{"vm": vm, "schedule": "daily"}}, "NOT_FOUND", ""},
		{tn.alice, tn.red, remove, map[string]any{"vm": vm}, "NOT_FOUND", ""},
	} {
		r := h.GraphQL(t, c.user, c.vdc, c.query, c.vars)
		if r.Code(t) != c.code || fieldOf(t, r) != c.field {
			t.Errorf("%s in %s: %v: %s, want %s %s", c.user, c.vdc, c.vars, r.Raw, c.code, c.field)
		}
	}
	if j := job(); j != nil {
		t.Fatalf("refused schedules left a job: %+v", j)
	}

	var got struct {
		ID             string
		BackupSchedule *gqlSchedule
	}
	h.GraphQL(t, tn.bob, tn.blue, set, map[string]any{"in": map[string]any{"vm": vm, "schedule": "02:00", "keepLast": 1, "keepDaily": 1}}).
		OK(t).Into(t, "setBackupSchedule", &got)
	s := got.BackupSchedule
	if got.ID != vm || s == nil || s.Schedule != "02:00" || s.KeepLast == nil || *s.KeepLast != 1 || s.KeepDaily == nil || *s.KeepDaily != 1 ||
		s.KeepWeekly != nil || s.State != "ACTIVE" || s.Message != nil {
		t.Fatalf("setBackupSchedule answered %+v %+v", got, s)
	}
	j := job()
	if j == nil || !j.Enabled || j.Schedule != "02:00" || j.VMIDs != fmt.Sprint(ref.VMID) || j.Keep["keep-last"] != 1 || j.NextRun.IsZero() {
		t.Fatalf("the Proxmox job: %+v", j)
	}

	// Proxmox runs it at 02:00 (the simulator's clock moved there): the
	// VM has its backup.
	sim := h.Clusters[0].Sim
	sim.AdvanceClockForTest(j.NextRun.Add(time.Minute).Sub(sim.ClockForTest()))
	var onVM struct{ Backups []gqlBackup }
	poll.Until(t, 30*time.Second, "the scheduled backup", func() error {
		h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { vm(id: $id) { backups { `+backupFields+` } } }`, map[string]any{"id": vm}).OK(t).Into(t, "vm", &onVM)
		if len(onVM.Backups) != 1 || onVM.Backups[0].Status != "SUCCEEDED" {
			return fmt.Errorf("the VM's backups are %+v", onVM.Backups)
		}
		return nil
	})
	if b := onVM.Backups[0]; b.VM == nil || b.VM.ID != vm || b.VMName != "nightly" {
		t.Fatalf("the scheduled backup: %+v", b)
	}

	// The backupGiB quota: at 0 the backups have reached it: no backup is
	// taken, and the schedule pauses; below it, it resumes.
	quotas := func(backupGiB any) {
		t.Helper()
		h.GraphQL(t, "admin", "", `mutation($n: String!, $b: Int) { updateVDC(input: {name: $n, quotas: {vcpus: 64, memoryMiB: 131072, storageGiB: 2000, vms: 20, backupGiB: $b}}) { name } }`,
			map[string]any{"n": tn.blue, "b": backupGiB}).OK(t)
	}
	quotas(0)
	if r := h.GraphQL(t, tn.bob, tn.blue, `mutation($vm: ID!) { createBackup(vm: $vm) { id } }`, map[string]any{"vm": vm}); r.Code(t) != "QUOTA_EXCEEDED" {
		t.Errorf("createBackup past backupGiB: %s", r.Raw)
	}
	state := func(want string) *gqlSchedule {
		t.Helper()
		var s *gqlSchedule
		poll.Until(t, 30*time.Second, "the schedule "+want, func() error {
			if s = schedule(tn.bob, tn.blue); s == nil || s.State != want {
				return fmt.Errorf("the schedule is %+v", s)
			}
			return nil
		})
		return s
	}
	if s := state("PAUSED"); s.Message == nil || *s.Message == "" {
		t.Errorf("a paused schedule without its reason: %+v", s)
	}
	var usage struct{ Usage struct{ BackupGiB float64 } }
	h.GraphQL(t, tn.bob, tn.blue, `{ currentVDC { usage { backupGiB } } }`, nil).OK(t).Into(t, "currentVDC", &usage)
	if usage.Usage.BackupGiB <= 0 {
		t.Errorf("the VDC's backupGiB usage is %v with a backup", usage.Usage.BackupGiB)
	}
	quotas(100)
	state("ACTIVE")
	quotas(nil)

	// Removed: no schedule, no job; the backup stays.
	var removed struct{ BackupSchedule *gqlSchedule }
	h.GraphQL(t, tn.bob, tn.blue, remove, map[string]any{"vm": vm}).OK(t).Into(t, "removeBackupSchedule", &removed)
	if removed.BackupSchedule != nil || job() != nil {
		t.Fatalf("after removeBackupSchedule: %+v, job %+v", removed.BackupSchedule, job())
	}
	// Set again, then the VM is deleted: its job goes with it.
	h.GraphQL(t, tn.bob, tn.blue, set, map[string]any{"in": map[string]any{"vm": vm, "schedule": "sat 03:30"}}).OK(t)
	if j := job(); j == nil || len(j.Keep) != 0 {
		t.Fatalf("a schedule without keep options: job %+v, want one keeping every archive", j)
	}
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { deleteVM(id: $id, keepBackups: false) { state } }`, map[string]any{"id": vm}).OK(t)
	if j := job(); j != nil {
		t.Fatalf("the deleted VM's job is left: %+v", j)
	}
	// A job left behind for a guest that is gone (a delete that could
	// not remove it) is removed by the orchestrator's pass before its
	// VMID can be another VM's.
	if err := pve.Post(context.Background(), "/cluster/backup", map[string]any{"id": jobID, "schedule": "daily", "vmid": fmt.Sprint(ref.VMID),
		"storage": "local", "comment": fmt.Sprintf("flexplane-schedule vdc=%s vm=%s", tn.blue, vm)}, nil); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 30*time.Second, "the orphan job removed", func() bool { return job() == nil })
}
