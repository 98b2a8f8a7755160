package compute_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
)

// refusal is the code and field a client sees for err of an operation
// whose arguments are at the top level.
func refusal(err error) (apierr.Code, string) {
	if err == nil {
		return "", ""
	}
	ae := apierr.From(err, "")
	return ae.Code, ae.Field
}

// runningVM creates a VM of blue in zone alpha of e and waits for it.
func runningVM(t *testing.T, e *env) *compute.VM {
	t.Helper()
	e.stage(e.zones[0])
	_, op, err := e.svc.CreateVM(vmtest.Ctx(t), e.input("alpha", "snappy"))
	if err != nil {
		t.Fatal(err)
	}
	fin := e.wait(e.svc, "blue", op.ID)
	if fin.State != compute.OpSucceeded {
		t.Fatalf("create: %+v", fin)
	}
	vm, err := e.svc.VM(vmtest.Ctx(t), "blue", fin.VMID)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// storageUsed is the storage blue's quota counts.
func storageUsed(t *testing.T, e *env) int {
	t.Helper()
	v, err := catalog.Get[*catalog.VDC](vmtest.Ctx(t), e.store, "blue")
	if err != nil {
		t.Fatal(err)
	}
	u, err := e.svc.Quota().Usage(vmtest.Ctx(t), v)
	if err != nil {
		t.Fatal(err)
	}
	return u.StorageGiB
}

// waitStorage waits until blue's quota counts want GiB of storage.
func waitStorage(t *testing.T, e *env, want int) {
	t.Helper()
	poll.Until(t, 20*time.Second, fmt.Sprintf("blue's storage used at %d GiB", want), func() error {
		if got := storageUsed(t, e); got != want {
			return fmt.Errorf("%d GiB", got)
		}
		return nil
	})
}

// TestSnapshotRoundTrip takes a snapshot without and one with RAM, rolls
// back to each, deletes one, and checks what each step did to the VM, its
// snapshot list, its operations and the VDC's storage usage.
func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	ctx := vmtest.Ctx(t)
	vm := runningVM(t, e)
	base := storageUsed(t, e)

	take := func(in compute.SnapshotInput) {
		t.Helper()
		op, err := e.svc.CreateSnapshot(ctx, "blue", vm.ID, in)
		if err != nil {
			t.Fatalf("snapshot %s: %v", in.Name, err)
		}
		if op.Kind != compute.OpCreateSnapshot || op.Step != "qmsnapshot" || op.VMID != vm.ID {
			t.Fatalf("snapshot %s: operation %+v", in.Name, op)
		}
		if fin := e.wait(e.svc, "blue", op.ID); fin.State != compute.OpSucceeded {
			t.Fatalf("snapshot %s: %+v", in.Name, fin)
		}
	}
	take(compute.SnapshotInput{Name: "before-upgrade", Description: "clean install"})
	take(compute.SnapshotInput{Name: "with_ram", WithRAM: true})
	snaps, err := e.svc.Snapshots(ctx, "blue", vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 2 || snaps[0].Name != "before-upgrade" || snaps[0].Description != "clean install" || snaps[0].WithRAM ||
		snaps[0].Current || snaps[0].Taken.IsZero() || snaps[1].Name != "with_ram" || !snaps[1].WithRAM || !snaps[1].Current ||
		snaps[1].Parent != "before-upgrade" || snaps[0].StorageGiB != 4 || snaps[1].StorageGiB != 5 {
		t.Fatalf("snapshots %+v", snaps)
	}
	// A 4 GiB disk with 512 MiB of RAM: 4 GiB, then 4 + 1 (counted twice
	// until the snapshot's reservation is released after its task).
	waitStorage(t, e, base+9)

	refused := []struct {
		name  string
		in    compute.SnapshotInput
		code  apierr.Code
		field string
	}{
		{"reserved", compute.SnapshotInput{Name: "current"}, apierr.BadUserInput, "name"},
		{"digit first", compute.SnapshotInput{Name: "1st"}, apierr.BadUserInput, "name"},
		{"too long", compute.SnapshotInput{Name: "a" + strings.Repeat("b", 40)}, apierr.BadUserInput, "name"},
		{"dot", compute.SnapshotInput{Name: "v1.2"}, apierr.BadUserInput, "name"},
		{"description", compute.SnapshotInput{Name: "ok", Description: strings.Repeat("x", 1025)}, apierr.BadUserInput, "description"},
		{"taken", compute.SnapshotInput{Name: "with_ram"}, apierr.Conflict, "name"},
	}
	for _, c := range refused {
		_, err := e.svc.CreateSnapshot(ctx, "blue", vm.ID, c.in)
		if code, field := refusal(err); code != c.code || field != c.field {
			t.Errorf("%s: %v (%s %s), want %s %s", c.name, err, code, field, c.code, c.field)
		}
	}

	rollback := func(name string, start bool, want compute.Status) {
		t.Helper()
		op, err := e.svc.RollbackSnapshot(ctx, "blue", vm.ID, name, start)
		if err != nil {
			t.Fatalf("rollback %s: %v", name, err)
		}
		if fin := e.wait(e.svc, "blue", op.ID); fin.State != compute.OpSucceeded || fin.Kind != compute.OpRollbackSnapshot {
			t.Fatalf("rollback %s: %+v", name, fin)
		}
		got, err := e.svc.VM(ctx, "blue", vm.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != want {
			t.Errorf("after rolling back to %s (start %v): %s, want %s", name, start, got.Status, want)
		}
	}
	rollback("before-upgrade", false, compute.StatusStopped) // no RAM: the VM stays stopped

	if _, err := e.svc.CreateSnapshot(ctx, "blue", vm.ID, compute.SnapshotInput{Name: "stopped", WithRAM: true}); !fieldIs(err, apierr.BadUserInput, "withRAM") {
		t.Errorf("RAM of a stopped VM: %v", err)
	}
	rollback("with_ram", false, compute.StatusRunning) // its RAM: running again
	rollback("before-upgrade", true, compute.StatusRunning)
	if _, err := e.svc.RollbackSnapshot(ctx, "blue", vm.ID, "nope", false); !fieldIs(err, apierr.NotFound, "name") {
		t.Errorf("rollback to an unknown snapshot: %v", err)
	}

	op, err := e.svc.DeleteSnapshot(ctx, "blue", vm.ID, "before-upgrade")
	if err != nil {
		t.Fatal(err)
	}
	if fin := e.wait(e.svc, "blue", op.ID); fin.State != compute.OpSucceeded || fin.Kind != compute.OpDeleteSnapshot {
		t.Fatalf("delete: %+v", fin)
	}
	snaps, err = e.svc.Snapshots(ctx, "blue", vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 1 || snaps[0].Name != "with_ram" || snaps[0].Parent != "" {
		t.Errorf("after the delete: %+v", snaps)
	}
	waitStorage(t, e, base+5)
	if _, err := e.svc.DeleteSnapshot(ctx, "blue", vm.ID, "before-upgrade"); !fieldIs(err, apierr.NotFound, "name") {
		t.Errorf("deleting a deleted snapshot: %v", err)
	}

	// Each operation is in the VM's history and answers Operation.
	hist, err := e.svc.History(ctx, "blue", vm.ID, 20)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[compute.OpKind]int{}
	for _, op := range hist {
		kinds[op.Kind]++
		if _, err := e.svc.Operation(ctx, "blue", op.ID); err != nil {
			t.Errorf("operation %+v: %v", op, err)
		}
	}
	if kinds[compute.OpCreateSnapshot] != 2 || kinds[compute.OpRollbackSnapshot] != 3 || kinds[compute.OpDeleteSnapshot] != 1 {
		t.Errorf("history %v", kinds)
	}
}

func fieldIs(err error, c apierr.Code, field string) bool {
	code, f := refusal(err)
	return code == c && f == field
}

// TestSnapshotIsolationAndQuota: another VDC finds neither the VM nor its
// snapshots (NOT_FOUND, nothing changed), and a snapshot that would take
// the VDC over its storage quota is refused and changes nothing.
func TestSnapshotIsolationAndQuota(t *testing.T) {
	t.Parallel()
	q := bigQuota
	q.StorageGiB = 6 // the VM's 4 GiB; a snapshot would count 4 more
	e := newEnv(t, q, "alpha")
	ctx := vmtest.Ctx(t)
	vm := runningVM(t, e)
	before := e.snapshot()
	calls := map[string]func() error{
		"list": func() error { _, err := e.svc.Snapshots(ctx, "red", vm.ID); return err },
		"create": func() error {
			_, err := e.svc.CreateSnapshot(ctx, "red", vm.ID, compute.SnapshotInput{Name: "s1"})
			return err
		},
		"rollback": func() error { _, err := e.svc.RollbackSnapshot(ctx, "red", vm.ID, "s1", false); return err },
		"delete":   func() error { _, err := e.svc.DeleteSnapshot(ctx, "red", vm.ID, "s1"); return err },
	}
	for name, call := range calls {
		if err := call(); !isCode(err, apierr.NotFound) {
			t.Errorf("%s from red: %v, want NOT_FOUND", name, err)
		}
	}
	_, err := e.svc.CreateSnapshot(ctx, "blue", vm.ID, compute.SnapshotInput{Name: "s1"})
	if !isCode(err, apierr.QuotaExceeded) || !strings.Contains(err.Error(), "storageGiB") {
		t.Errorf("a snapshot over the storage quota: %v", err)
	}
	if after := e.snapshot(); !before.equal(after) {
		t.Errorf("state changed:\n%+v\n%+v", before, after)
	}
	if snaps, err := e.svc.Snapshots(ctx, "blue", vm.ID); err != nil || len(snaps) != 0 {
		t.Errorf("snapshots after the refusals: %+v %v", snaps, err)
	}
}
