package compute

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/support/calendar"
)

// Backup schedules. A VM's schedule is a Proxmox backup job
// (/cluster/backup) of its zone and nothing else: Proxmox's scheduler
// runs it, with or without an orchestrator, and prunes the VM's archives
// by its keep options after each run. The job's id is scheduleJobID of
// the guest; its comment names the VDC and the VM (scheduleComment), and a
// job whose comment does not name the caller's VDC and VM is none of
// theirs: it is neither shown nor changed. Its archives carry the notes a
// createBackup's do, so they are listed as the VM's backups. The job goes
// with its guest: deleting the VM removes it, a move across zones
// recreates it in the new zone (moveSchedule).

// BackupSchedule is a VM's schedule of backups.
type BackupSchedule struct {
	// Schedule is the calendar event it runs on (Proxmox's syntax:
	// "daily", "mon..fri 02:00").
	Schedule string
	// KeepLast, KeepDaily and KeepWeekly are its retention; nil keeps no
	// archive by that rule (all nil keeps every archive).
	KeepLast, KeepDaily, KeepWeekly *int
	// Paused is true while the job does not run; Message says why.
	Paused  bool
	Message string
}

// ScheduleInput sets a VM's backup schedule.
type ScheduleInput struct {
	// VM is the VM's id.
	VM string
	// Schedule is a calendar event in Proxmox's syntax.
	Schedule string
	// KeepLast, KeepDaily and KeepWeekly are the retention, each 1 to
	// MaxKeep when set.
	KeepLast, KeepDaily, KeepWeekly *int
	// StorageProfile is a storage profile of kind BACKUP with a storage
	// in the VM's zone; "" takes the zone's only one.
	StorageProfile string
}

// MaxKeep bounds each keep option of a schedule.
const MaxKeep = 1000

// scheduleHeader starts a schedule's job comment.
const scheduleHeader = "flexplane-schedule"

// quotaPausedMark ends the comment of a job the backup quota paused.
const quotaPausedMark = "paused=backup-quota"

// QuotaPausedMessage is a schedule's message while the VDC's backupGiB
// quota pauses it.
const QuotaPausedMessage = "paused: the VDC's backups have reached its backupGiB quota; the schedule resumes once they are below it"

// scheduleJobID is the id of the backup job of guest vmid.
func scheduleJobID(vmid int) string { return fmt.Sprintf("flexplane-vm-%d", vmid) }

// scheduleComment is the comment of the job of VM id of vdc.
func scheduleComment(vdc, id string, paused bool) string {
	s := fmt.Sprintf("%s vdc=%s vm=%s", scheduleHeader, vdc, id)
	if paused {
		s += " " + quotaPausedMark
	}
	return s
}

// scheduleMeta is what a job's comment says.
type scheduleMeta struct {
	vdc, vm     string
	quotaPaused bool
}

// parseScheduleComment reads a job's comment; ok is false for a job that
// is not a flexplane schedule.
func parseScheduleComment(c string) (scheduleMeta, bool) {
	f := strings.Fields(c)
	if len(f) < 3 || f[0] != scheduleHeader {
		return scheduleMeta{}, false
	}
	var m scheduleMeta
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "vdc":
			m.vdc = v
		case k == "vm":
			m.vm = v
		case kv == quotaPausedMark:
			m.quotaPaused = true
		}
	}
	return m, m.vdc != "" && m.vm != ""
}

// scheduleOf is the schedule job j says, if it is VM id's of vdc.
func scheduleOf(j pveapi.BackupJob, vdc, id string) (*BackupSchedule, bool) {
	m, ok := parseScheduleComment(j.Comment)
	if !ok || m.vdc != vdc || m.vm != id {
		return nil, false
	}
	s := &BackupSchedule{Schedule: j.Schedule, Paused: !j.Enabled}
	keep := func(k string) *int {
		if n, ok := j.Keep[k]; ok {
			return &n
		}
		return nil
	}
	s.KeepLast, s.KeepDaily, s.KeepWeekly = keep("keep-last"), keep("keep-daily"), keep("keep-weekly")
	switch {
	case s.Paused && m.quotaPaused:
		s.Message = QuotaPausedMessage
	case s.Paused:
		s.Message = "paused: the backup job is disabled in Proxmox"
	}
	return s, true
}

// guestJob is the backup job of guest vmid in zone z, if any.
func guestJob(ctx context.Context, z Zone, vmid int) (*pveapi.BackupJob, error) {
	jobs, err := pveapi.BackupJobs(ctx, z.Client)
	if err != nil {
		return nil, zoneDown(z.Name, err)
	}
	i := slices.IndexFunc(jobs, func(j pveapi.BackupJob) bool { return j.ID == scheduleJobID(vmid) })
	if i < 0 {
		return nil, nil
	}
	return &jobs[i], nil
}

// Schedule is the backup schedule of VM id of vdc; nil for none.
func (b *Backups) Schedule(ctx context.Context, vdc, id string) (*BackupSchedule, error) {
	z, g, _, err := b.d.find.lookup(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	j, err := guestJob(ctx, z, g.VMID)
	if err != nil || j == nil {
		return nil, err
	}
	s, _ := scheduleOf(*j, vdc, id)
	return s, nil
}

// checkSchedule checks a schedule's input; fields are relative to it.
func checkSchedule(in ScheduleInput) error {
	if strings.TrimSpace(in.Schedule) == "" {
		return badInput("schedule", "a schedule is a calendar event such as daily or mon..fri 02:00")
	}
	if _, err := calendar.Parse(in.Schedule); err != nil {
		var se *calendar.SyntaxError
		if errors.As(err, &se) {
			return badInput("schedule", "the schedule %q does not parse: %s", in.Schedule, se.Reason)
		}
		return badInput("schedule", "the schedule %q does not parse", in.Schedule)
	}
	for _, k := range []struct {
		field string
		n     *int
	}{{"keepLast", in.KeepLast}, {"keepDaily", in.KeepDaily}, {"keepWeekly", in.KeepWeekly}} {
		if k.n != nil && (*k.n < 1 || *k.n > MaxKeep) {
			return badInput(k.field, "%s is 1 to %d (absent keeps the archives regardless of it)", k.field, MaxKeep)
		}
	}
	return nil
}

// pruneOption is the prune-backups value of a schedule's keep options.
func pruneOption(last, daily, weekly *int) string {
	var parts []string
	for _, k := range []struct {
		key string
		n   *int
	}{{"keep-last", last}, {"keep-daily", daily}, {"keep-weekly", weekly}} {
		if k.n != nil {
			parts = append(parts, k.key+"="+strconv.Itoa(*k.n))
		}
	}
	if len(parts) == 0 {
		return "keep-all=1"
	}
	return strings.Join(parts, ",")
}

// SetSchedule sets the backup schedule of VM in.VM of vdc: Proxmox's
// backup job of the VM, created or changed. A VDC whose backups have
// reached its backupGiB quota gets it paused.
func (b *Backups) SetSchedule(ctx context.Context, vdc string, in ScheduleInput) error {
	d := b.d
	if err := checkSchedule(in); err != nil {
		return err
	}
	z, g, _, err := d.find.lookup(ctx, vdc, in.VM)
	if err != nil {
		return err
	}
	store, err := pickBackupStore(ctx, d, z, in.StorageProfile)
	if err != nil {
		return err
	}
	storage, err := vdcStore(ctx, z, store, vdc)
	if err != nil {
		return err
	}
	full, err := backupQuotaReached(ctx, d, vdc)
	if err != nil {
		return err
	}
	return writeJob(ctx, z, g.VMID, jobParams(vdc, in.VM, g.Name, g.VMID, storage, in.Schedule,
		pruneOption(in.KeepLast, in.KeepDaily, in.KeepWeekly), !full, full))
}

// jobParams are the options of the backup job of VM id (named name, its
// guest vmid) of vdc: a snapshot-mode vzdump to storage on schedule,
// pruned by prune, with the notes of the VDC's backups; paused marks a job
// the backupGiB quota disabled.
func jobParams(vdc, id, name string, vmid int, storage, schedule, prune string, enabled, paused bool) map[string]any {
	return map[string]any{
		"schedule": schedule, "vmid": strconv.Itoa(vmid), "storage": storage, "mode": "snapshot", "compress": "zstd",
		"enabled": boolInt(enabled), "remove": 1, "prune-backups": prune,
		"notes-template": backupNotes(vdc, id, name, ""), "comment": scheduleComment(vdc, id, paused),
	}
}

// writeJob creates or changes the backup job of guest vmid in zone z.
func writeJob(ctx context.Context, z Zone, vmid int, params map[string]any) error {
	id := scheduleJobID(vmid)
	j, err := guestJob(ctx, z, vmid)
	if err != nil {
		return err
	}
	if j == nil {
		create := map[string]any{"id": id}
		for k, v := range params {
			create[k] = v
		}
		err = z.Client.Post(ctx, "/cluster/backup", create, nil)
		if err == nil || !pveapi.IsAlreadyExists(err) {
			return schedErr(z, err)
		}
		// Another request made it meanwhile: this one's settings win.
	}
	return schedErr(z, z.Client.Put(ctx, "/cluster/backup/"+url.PathEscape(id), params, nil))
}

// schedErr maps an error writing a backup job.
func schedErr(z Zone, err error) error {
	if err == nil {
		return nil
	}
	if retryable(err) {
		return zoneDown(z.Name, err)
	}
	return internal("writing the backup job failed", err)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// RemoveSchedule removes the backup schedule of VM id of vdc (none is
// no error); its archives stay.
func (b *Backups) RemoveSchedule(ctx context.Context, vdc, id string) error {
	z, g, _, err := b.d.find.lookup(ctx, vdc, id)
	if err != nil {
		return err
	}
	j, err := guestJob(ctx, z, g.VMID)
	if err != nil || j == nil {
		return err
	}
	if _, ok := scheduleOf(*j, vdc, id); !ok {
		return nil // another guest's that had the VMID once: not this VM's
	}
	return dropJob(ctx, z, g.VMID)
}

// dropJob deletes the backup job of guest vmid in zone z, if any.
func dropJob(ctx context.Context, z Zone, vmid int) error {
	return dropJobID(ctx, z, scheduleJobID(vmid))
}

// dropJobID deletes backup job id of zone z, if it exists.
func dropJobID(ctx context.Context, z Zone, id string) error {
	err := z.Client.Delete(ctx, "/cluster/backup/"+url.PathEscape(id), nil)
	if err != nil && !pveapi.IsNotFound(err) {
		return schedErr(z, err)
	}
	return nil
}

// moveSchedule recreates the backup job of guest from (in zone src) for
// guest to in zone dst, the VM (id of vdc, named name) having moved
// there, on dst's only backup storage; the job in src goes with the
// source guest. Without a job, or without a backup storage in dst (the
// schedule is dropped, which is logged), it does nothing.
func moveSchedule(ctx context.Context, d *deps, vdc, id, name string, src Zone, from int, dst Zone, to int) error {
	j, err := guestJob(ctx, src, from)
	if err != nil || j == nil {
		return err
	}
	s, ok := scheduleOf(*j, vdc, id)
	if !ok {
		return nil
	}
	store, err := pickBackupStore(ctx, d, dst, "")
	if err != nil {
		d.log.Warn("backup schedule: the VM's new zone has no single backup storage: its schedule is dropped", "vm", id, "zone", dst.Name, "err", err)
		return nil
	}
	storage, err := vdcStore(ctx, dst, store, vdc)
	if err != nil {
		return err
	}
	m, _ := parseScheduleComment(j.Comment)
	return writeJob(ctx, dst, to, jobParams(vdc, id, name, to, storage, s.Schedule, pruneOption(s.KeepLast, s.KeepDaily, s.KeepWeekly),
		j.Enabled, m.quotaPaused))
}
