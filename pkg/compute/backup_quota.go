package compute

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// The backupGiB quota. What a VDC's backups use is counted from the
// backup storages' content: the sizes of its archives (those whose notes
// name it) in every zone, nothing kept elsewhere. createBackup estimates
// a new archive at the full size of the VM's disks (an upper bound: an
// archive is compressed and skips the disks' holes) and refuses one that
// would take the VDC past its quota. Proxmox runs scheduled jobs on its
// own, so the leader's periodic pass (backupQuotaPass) disables a VDC's
// schedules once its usage reaches the quota, marking them paused by it,
// and enables them again once the usage is below it.

// backupQuota is vdc's backupGiB quota in bytes; ok is false when none
// bounds it.
func backupQuota(ctx context.Context, d *deps, vdc string) (int64, bool, error) {
	v, err := catalog.Get[*catalog.VDC](ctx, d.cfg.Catalog, vdc)
	if err != nil {
		return 0, false, internal("reading the VDC failed", err)
	}
	if v.Quotas.BackupGiB == nil {
		return 0, false, nil
	}
	return int64(*v.Quotas.BackupGiB) << 30, true, nil
}

// backupBytes is the total size of vdc's archives in every zone; a zone
// that does not answer is left out, its error returned with the sum of
// the others.
func backupBytes(ctx context.Context, d *deps, vdc string) (int64, error) {
	sums, errs := eachZone(ctx, d.find.timeout, d.cfg.Zones.Zones(ctx), func(ctx context.Context, z Zone) (int64, error) {
		arcs, err := archives(ctx, d, z, vdc)
		var n int64
		for _, a := range arcs {
			n += a.vol.Size
		}
		return n, err
	})
	var total int64
	for _, n := range sums {
		total += n
	}
	return total, errors.Join(errs...)
}

// UsedBytes is what the backups of vdc use of its backupGiB quota: the
// size of its archives in every zone. A zone that does not answer is left
// out, its error returned with the others' sum.
func (b *Backups) UsedBytes(ctx context.Context, vdc string) (int64, error) {
	return backupBytes(ctx, b.d, vdc)
}

// backupQuotaReached reports whether vdc's backups use all of its
// backupGiB quota (false without one).
func backupQuotaReached(ctx context.Context, d *deps, vdc string) (bool, error) {
	limit, ok, err := backupQuota(ctx, d, vdc)
	if err != nil || !ok {
		return false, err
	}
	used, err := backupBytes(ctx, d, vdc)
	if err != nil {
		return false, err
	}
	return used >= limit, nil
}

// checkBackupQuota refuses a backup of guest g (zone z) of vdc that would
// take the VDC past its backupGiB quota, estimated at the size of the
// VM's disks.
func checkBackupQuota(ctx context.Context, d *deps, vdc string, z Zone, g pveapi.Resource) error {
	limit, ok, err := backupQuota(ctx, d, vdc)
	if err != nil || !ok {
		return err
	}
	used, err := backupBytes(ctx, d, vdc)
	if err != nil {
		return err
	}
	diskGiB, err := quota.GuestDiskGiB(ctx, z.Client, g)
	if err != nil {
		return zoneDown(z.Name, err)
	}
	if need := int64(diskGiB) << 30; used+need > limit {
		return &Error{Kind: KindQuotaExceeded, Message: fmt.Sprintf(
			"the backup (up to %d GiB, the VM's disks) would exceed the backupGiB quota of VDC %s: %.1f of %d GiB used",
			diskGiB, vdc, float64(used)/(1<<30), limit>>30)}
	}
	return nil
}

// scheduledJob is a flexplane schedule's job found in a zone.
type scheduledJob struct {
	z    Zone
	job  pveapi.BackupJob
	meta scheduleMeta
}

// backupQuotaPass pauses the schedules of each VDC whose backups have
// reached its backupGiB quota and resumes those it paused of a VDC below
// it, and removes the jobs whose guest is gone or is no longer a VM of
// the job's VDC (a delete that could not remove its job: a job must never
// back up a guest that has its VMID since). It counts only the VDCs with
// schedules (their archives in every zone, each VDC's own storage on a
// Proxmox Backup Server); while a zone does not answer, nothing is paused
// or resumed.
func (d *deps) backupQuotaPass(ctx context.Context) error {
	zones := d.cfg.Zones.Zones(ctx)
	byVDC := map[string][]scheduledJob{}
	var errs []error
	for _, z := range zones {
		jobs, err := pveapi.BackupJobs(ctx, z.Client)
		if err != nil {
			errs = append(errs, fmt.Errorf("zone %s: %w", z.Name, err))
			continue
		}
		var ours []scheduledJob
		for _, j := range jobs {
			if m, ok := parseScheduleComment(j.Comment); ok {
				ours = append(ours, scheduledJob{z: z, job: j, meta: m})
			}
		}
		if len(ours) == 0 {
			continue
		}
		live, err := d.dropOrphanJobs(ctx, z, ours)
		if err != nil {
			errs = append(errs, fmt.Errorf("zone %s: %w", z.Name, err))
		}
		for _, sj := range live {
			byVDC[sj.meta.vdc] = append(byVDC[sj.meta.vdc], sj)
		}
	}
	if len(byVDC) == 0 || len(errs) > 0 {
		return errors.Join(errs...)
	}
	used := map[string]int64{}
	for vdc := range byVDC {
		for _, z := range zones {
			arcs, err := archives(ctx, d, z, vdc)
			if err != nil {
				return fmt.Errorf("zone %s: %w", z.Name, err)
			}
			for _, a := range arcs {
				used[vdc] += a.vol.Size
			}
		}
	}
	for vdc, jobs := range byVDC {
		limit, bounded, err := backupQuota(ctx, d, vdc)
		if err != nil {
			if !errors.Is(err, catalog.ErrNotFound) {
				errs = append(errs, fmt.Errorf("vdc %s: %w", vdc, err))
			}
			continue
		}
		full := bounded && used[vdc] >= limit
		for _, sj := range jobs {
			var change map[string]any
			switch {
			case full && sj.job.Enabled:
				change = map[string]any{"enabled": 0, "comment": scheduleComment(sj.meta.vdc, sj.meta.vm, true)}
			case !full && !sj.job.Enabled && sj.meta.quotaPaused:
				change = map[string]any{"enabled": 1, "comment": scheduleComment(sj.meta.vdc, sj.meta.vm, false)}
			default:
				continue
			}
			if err := sj.z.Client.Put(ctx, "/cluster/backup/"+url.PathEscape(sj.job.ID), change, nil); err != nil {
				errs = append(errs, fmt.Errorf("zone %s: job %s: %w", sj.z.Name, sj.job.ID, err))
				continue
			}
			d.log.Info("backup schedule paused or resumed by the backupGiB quota", "vdc", vdc, "vm", sj.meta.vm, "paused", full)
		}
	}
	return errors.Join(errs...)
}

// dropOrphanJobs deletes, of the schedules' jobs of zone z, those whose
// guest is gone or is not a guest of the job's VDC, and returns the
// others.
func (d *deps) dropOrphanJobs(ctx context.Context, z Zone, jobs []scheduledJob) ([]scheduledJob, error) {
	guests, err := pveapi.Resources(ctx, z.Client, "vm")
	if err != nil {
		return nil, err
	}
	vdcOf := map[int]string{}
	for _, g := range guests {
		if v, ok := tenancy.VDCOf(g.Tags()); ok {
			vdcOf[g.VMID] = v
		}
	}
	var live []scheduledJob
	var errs []error
	for _, sj := range jobs {
		vmid, err := strconv.Atoi(sj.job.VMIDs)
		if err == nil && sj.job.ID == scheduleJobID(vmid) && vdcOf[vmid] == sj.meta.vdc {
			live = append(live, sj)
			continue
		}
		if err := dropJobID(ctx, z, sj.job.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		d.log.Warn("backup schedule: removed a job whose VM is gone", "zone", z.Name, "job", sj.job.ID, "vdc", sj.meta.vdc, "vm", sj.meta.vm)
	}
	return live, errors.Join(errs...)
}
