package compute_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// TestPBSBackupsPerVDC: in a zone whose BACKUP profile is the operator's
// entry on a Proxmox Backup Server, each VDC's first backup adds the VDC's
// own entry (its namespace below the operator's), the backups of two VDCs
// land in their own namespaces, each VDC lists only its own, and the
// other's backup is NOT_FOUND to restore or delete, while its own
// restores; a scheduled job, run by Proxmox, writes into its VDC's
// namespace.
func TestPBSBackupsPerVDC(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	z := e.zones[0]
	e.stage(z)
	ctx := vmtest.Ctx(t)
	// The operator's entry.
	var out any
	if err := z.Client.Post(ctx, "/storage", map[string]any{"storage": "pbs", "type": "pbs", "server": "pbs.example",
		"datastore": "tank", "namespace": "flexplane", "username": "pve@pbs!fp", "content": "backup"}, &out); err != nil {
		t.Fatal(err)
	}
	e.backupProfile("alpha", "pbs")
	backups := e.svc.Disks().Backups()
	backUp := func(vdc string, in compute.CreateInput) *compute.Backup {
		t.Helper()
		_, op, err := e.svc.CreateVM(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		fin := e.wait(e.svc, vdc, op.ID)
		if fin.State != compute.OpSucceeded {
			t.Fatalf("create: %+v", fin)
		}
		bop, err := backups.Create(ctx, vdc, fin.VMID, compute.BackupInput{Description: "of " + vdc + "\nsecond line"})
		if err != nil {
			t.Fatal(err)
		}
		if fin := e.wait(e.svc, vdc, bop.ID); fin.State != compute.OpSucceeded {
			t.Fatalf("backup: %+v", fin)
		}
		list, err := backups.List(ctx, vdc, "")
		if err != nil || len(list) != 1 || list[0].Status != compute.BackupSucceeded || list[0].Description != "of "+vdc+"\nsecond line" {
			t.Fatalf("%s's backups: %+v, %v", vdc, list, err)
		}
		return list[0]
	}
	// Before its first backup a VDC has no entry, and no backups.
	if list, err := backups.List(ctx, "red", ""); err != nil || len(list) != 0 {
		t.Fatalf("red's backups before any: %+v, %v", list, err)
	}
	blue := backUp("blue", e.input("alpha", "web"))
	in := e.input("alpha", "db")
	in.VDC, in.NICs = "red", []compute.NICInput{{Network: e.red["alpha"]}}
	red := backUp("red", in)

	// Each VDC's archive is in its own namespace, through its own entry.
	for vdc, b := range map[string]*compute.Backup{"blue": blue, "red": red} {
		var cfg struct {
			Type, Namespace, Datastore string
		}
		entry := compute.PBSEntry("pbs", vdc)
		if err := z.Client.Get(ctx, "/storage/"+entry, &cfg); err != nil || cfg.Type != "pbs" || cfg.Datastore != "tank" ||
			cfg.Namespace != compute.PBSNamespace("flexplane", vdc) {
			t.Errorf("%s's entry %s: %+v, %v", vdc, entry, cfg, err)
		}
		vols, err := pveapi.BackupVolumes(ctx, z.Client, z.Sim.NodeNames()[0], entry)
		if err != nil || len(vols) != 1 || !strings.HasPrefix(vols[0].VolID, entry+":backup/vm/") || vols[0].VMID == 0 {
			t.Errorf("%s's namespace holds %+v, %v: want its one archive", vdc, vols, err)
		}
		if b.VDC != vdc {
			t.Errorf("%s's backup %+v", vdc, b)
		}
	}
	if vols, err := pveapi.BackupVolumes(ctx, z.Client, z.Sim.NodeNames()[0], "pbs"); err != nil || len(vols) != 0 {
		t.Errorf("the operator's namespace holds %+v, %v: want none", vols, err)
	}

	// The other VDC's backup does not exist for red.
	if _, _, err := backups.Restore(ctx, "red", compute.RestoreInput{Backup: blue.ID, Name: "stolen"}); !compute.IsKind(err, compute.KindNotFound) {
		t.Errorf("red restores blue's backup: %v, want NOT_FOUND", err)
	}
	if err := backups.Delete(ctx, "red", blue.ID); !compute.IsKind(err, compute.KindNotFound) {
		t.Errorf("red deletes blue's backup: %v, want NOT_FOUND", err)
	}
	if list, err := backups.List(ctx, "blue", ""); err != nil || len(list) != 1 || list[0].ID != blue.ID {
		t.Errorf("blue's backups after red's tries: %+v, %v", list, err)
	}
	// Blue restores its own from its namespace.
	_, rop, err := backups.Restore(ctx, "blue", compute.RestoreInput{Backup: blue.ID, Name: "web-copy"})
	if err != nil {
		t.Fatal(err)
	}
	if fin := e.wait(e.svc, "blue", rop.ID); fin.State != compute.OpSucceeded {
		t.Fatalf("restore from PBS: %+v", fin)
	}
	if err := backups.Delete(ctx, "blue", blue.ID); err != nil {
		t.Errorf("blue deletes its backup: %v", err)
	}
	if list, err := backups.List(ctx, "red", ""); err != nil || len(list) != 1 || list[0].ID != red.ID {
		t.Errorf("red's backups after blue's delete: %+v, %v", list, err)
	}

	// A schedule's job, which Proxmox runs on its own, writes through the
	// VDC's own entry too: red's scheduled archive lands in red's
	// namespace, is listed as red's and never as blue's.
	if err := backups.SetSchedule(ctx, "red", compute.ScheduleInput{VM: red.VM, Schedule: "02:00"}); err != nil {
		t.Fatal(err)
	}
	z.Sim.AdvanceClockForTest(25 * time.Hour)
	poll.Until(t, time.Minute, "red's scheduled backup", func() error {
		list, err := backups.List(ctx, "red", "")
		if err != nil || len(list) != 2 || list[0].Status != compute.BackupSucceeded || list[1].Status != compute.BackupSucceeded {
			return fmt.Errorf("red's backups: %+v, %v", list, err)
		}
		return nil
	})
	entry := compute.PBSEntry("pbs", "red")
	if vols, err := pveapi.BackupVolumes(ctx, z.Client, z.Sim.NodeNames()[0], entry); err != nil || len(vols) != 2 {
		t.Errorf("red's namespace after the scheduled run holds %+v, %v: want two archives", vols, err)
	}
	for _, other := range []string{compute.PBSEntry("pbs", "blue"), "pbs"} {
		if vols, err := pveapi.BackupVolumes(ctx, z.Client, z.Sim.NodeNames()[0], other); err != nil || len(vols) != 0 {
			t.Errorf("%s after red's scheduled run holds %+v, %v: want none", other, vols, err)
		}
	}
	if list, err := backups.List(ctx, "blue", ""); err != nil || len(list) != 0 {
		t.Errorf("blue's backups after red's scheduled run: %+v, %v", list, err)
	}
}
