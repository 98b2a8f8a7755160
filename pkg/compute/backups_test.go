package compute_test

import (
	"context"
	"sync"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestCrashDuringRestore: a restore whose runner dies right after the
// restore task (as when the orchestrator dies) is finished by a fresh
// service's Recover: one VM of that name, running, with its one address
// (not the backed-up VM's), and no reservation left.
func TestCrashDuringRestore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	e.stage(e.zones[0])
	ctx := vmtest.Ctx(t)
	e.backupProfile("alpha", "local")
	src := e.create(e.svc, e.input("alpha", "origin"))
	op, err := e.svc.Disks().Backups().Create(ctx, "blue", src.ID, compute.BackupInput{Description: "nightly"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitTask(op)
	backups, err := e.svc.Disks().Backups().List(ctx, "blue", src.ID)
	if err != nil || len(backups) != 1 || backups[0].Status != compute.BackupSucceeded {
		t.Fatalf("backups: %+v, %v", backups, err)
	}

	crashed := make(chan struct{})
	var once sync.Once
	var dying *compute.Service
	cfg := e.cfg
	cfg.AfterStep = func(ctx context.Context, _ string, step string) {
		if step != "clone" {
			return
		}
		once.Do(func() {
			go func() {
				_ = dying.Shutdown(context.Background())
				close(crashed)
			}()
		})
		<-ctx.Done() // the process dies here
	}
	dying = e.newService(cfg)
	if _, _, err := dying.Disks().Backups().Restore(ctx, "blue", compute.RestoreInput{Backup: backups[0].ID, Name: "copy"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-crashed:
	case <-ctx.Done():
		t.Fatal("the runner did not stop")
	}

	fresh := e.newService(e.cfg)
	if err := fresh.Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	guests, err := pveapi.Guests(ctx, e.zones[0].Client)
	if err != nil {
		t.Fatal(err)
	}
	var copies []pveapi.Resource
	for _, g := range guests {
		if g.Name == "copy" {
			copies = append(copies, g)
		}
	}
	if len(copies) != 1 {
		t.Fatalf("%d guests named copy, want 1", len(copies))
	}
	got, err := fresh.VM(ctx, "blue", tenancy.VMRef{ZoneID: src.Ref.ZoneID, VMID: copies[0].VMID}.ID())
	if err != nil || got.Status != compute.StatusRunning || len(got.Addresses) != 1 || got.Addresses[0] == src.Addresses[0] {
		t.Fatalf("restored VM after recovery: %+v, %v (source %+v)", got, err, src)
	}
	if s := e.snapshot(); s.reserved != 0 {
		t.Errorf("%d reservations left", s.reserved)
	}
}

// backupProfile makes the BACKUP profile "backup", mapping zone to pool.
func (e *env) backupProfile(zone, pool string) {
	e.t.Helper()
	bp := &catalog.StorageProfile{}
	bp.Name, bp.Tier, bp.StorageProfileSpec.Kind = "backup", "backup", catalog.StorageBackup
	bp.Pools = []catalog.ZonePool{{Zone: zone, Pool: pool}}
	if _, err := catalog.Create(vmtest.Ctx(e.t), e.store, bp); err != nil {
		e.t.Fatal(err)
	}
}
