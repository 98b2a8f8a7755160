package compute_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// guestConfig reads the config of vm's guest.
func guestConfig(t *testing.T, e *env, vm *compute.VM) pveapi.Config {
	t.Helper()
	g, ok, err := pveapi.FindGuest(vmtest.Ctx(t), e.zones[0].Client, vm.Ref.VMID)
	if err != nil || !ok {
		t.Fatalf("guest %d: %v, %v", vm.Ref.VMID, ok, err)
	}
	cfg, err := pveapi.GuestConfig(vmtest.Ctx(t), e.zones[0].Client, g.Node, g.VMID)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// inputRefusal is the code and field a client sees for err of an
// operation whose arguments are an input object named input.
func inputRefusal(err error) (apierr.Code, string) {
	if err == nil {
		return "", ""
	}
	ae := apierr.From(err, "input")
	return ae.Code, ae.Field
}

// TestDisksAttachGrowDetach attaches a disk to a running VM (hot-plugged,
// in the next scsi slot, of the boot disk's profile), grows it, detaches it
// keeping its volume and then one without, and checks the VM's disks and
// the storage the VDC's quota counts (every disk, the unused one included)
// after each step, and the refusals of bad input, which change nothing.
func TestDisksAttachGrowDetach(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	ctx := vmtest.Ctx(t)
	vm := runningVM(t, e)
	base := storageUsed(t, e)

	z, d, err := e.svc.Disks().Attach(ctx, "blue", compute.AttachDiskInput{VM: vm.ID, SizeGiB: 2})
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if z.Name != "alpha" || d.Slot != "scsi1" || d.SizeBytes != 2<<30 || d.Boot || d.Storage != e.zones[0].Storage || d.ReadMBps != 200 || d.WriteMBps != 100 {
		t.Fatalf("attached disk %+v in zone %s", d, z.Name)
	}
	cfg := guestConfig(t, e, vm)
	if cfg.Str("scsi1") == "" {
		t.Fatalf("the running VM's config has no scsi1 (not hot-plugged): %v", cfg)
	}
	waitStorage(t, e, base+2)

	_, hw, err := e.svc.Hardware(ctx, "blue", vm.ID)
	if err != nil || len(hw.Disks) != 2 || !hw.Disks[0].Boot || hw.Disks[0].Slot != "scsi0" || hw.Disks[1].Boot {
		t.Fatalf("hardware: %+v, %v", hw.Disks, err)
	}

	before := e.snapshot()
	for _, c := range []struct {
		name  string
		err   error
		code  apierr.Code
		field string
	}{
		{"attach 0 GiB", second(e.svc.Disks().Attach(ctx, "blue", compute.AttachDiskInput{VM: vm.ID, SizeGiB: 0})), apierr.BadUserInput, "input.sizeGiB"},
		{"attach over the bound", second(e.svc.Disks().Attach(ctx, "blue", compute.AttachDiskInput{VM: vm.ID, SizeGiB: compute.MaxDiskGiB + 1})), apierr.BadUserInput, "input.sizeGiB"},
		{"attach of no profile", second(e.svc.Disks().Attach(ctx, "blue", compute.AttachDiskInput{VM: vm.ID, SizeGiB: 1, StorageProfile: "nope"})), apierr.BadUserInput, "input.storageProfile"},
		{"attach to another VDC's VM", second(e.svc.Disks().Attach(ctx, "red", compute.AttachDiskInput{VM: vm.ID, SizeGiB: 1})), apierr.NotFound, ""},
		{"shrink", second(e.svc.Disks().Resize(ctx, "blue", compute.ResizeDiskInput{VM: vm.ID, Disk: "scsi1", SizeGiB: 1})), apierr.BadUserInput, "input.sizeGiB"},
		{"grow no disk", second(e.svc.Disks().Resize(ctx, "blue", compute.ResizeDiskInput{VM: vm.ID, Disk: "scsi7", SizeGiB: 9})), apierr.NotFound, "input.disk"},
		{"grow another VDC's disk", second(e.svc.Disks().Resize(ctx, "red", compute.ResizeDiskInput{VM: vm.ID, Disk: "scsi1", SizeGiB: 9})), apierr.NotFound, ""},
		{"detach the boot disk", e.svc.Disks().Detach(ctx, "blue", compute.DetachDiskInput{VM: vm.ID, Disk: "scsi0"}), apierr.Conflict, "input.disk"},
		{"detach no disk", e.svc.Disks().Detach(ctx, "blue", compute.DetachDiskInput{VM: vm.ID, Disk: "ide2"}), apierr.NotFound, "input.disk"},
		{"detach another VDC's disk", e.svc.Disks().Detach(ctx, "red", compute.DetachDiskInput{VM: vm.ID, Disk: "scsi1"}), apierr.NotFound, ""},
	} {
		if code, field := inputRefusal(c.err); code != c.code || field != c.field {
			t.Errorf("%s: %s (%s), want %s (%s): %v", c.name, code, field, c.code, c.field, c.err)
		}
	}
	if after := e.snapshot(); !before.equal(after) {
		t.Fatalf("refused requests changed things:\n%+v\n%+v", before, after)
	}
	if got := guestConfig(t, e, vm); got.Digest() != cfg.Digest() {
		t.Fatalf("refused requests changed the VM's config")
	}

	_, d, err = e.svc.Disks().Resize(ctx, "blue", compute.ResizeDiskInput{VM: vm.ID, Disk: "scsi1", SizeGiB: 5})
	if err != nil || d.SizeBytes != 5<<30 || d.Slot != "scsi1" {
		t.Fatalf("grow: %+v, %v", d, err)
	}
	waitStorage(t, e, base+5)

	if err := e.svc.Disks().Detach(ctx, "blue", compute.DetachDiskInput{VM: vm.ID, Disk: "scsi1", Keep: true}); err != nil {
		t.Fatalf("detach keeping: %v", err)
	}
	cfg = guestConfig(t, e, vm)
	if cfg.Str("scsi1") != "" || cfg.Str("unused0") == "" {
		t.Fatalf("after detaching with keep: scsi1 %q, unused0 %q", cfg.Str("scsi1"), cfg.Str("unused0"))
	}
	// The unused disk is still the VDC's storage.
	waitStorage(t, e, base+5)

	_, d, err = e.svc.Disks().Attach(ctx, "blue", compute.AttachDiskInput{VM: vm.ID, SizeGiB: 1, StorageProfile: "ssd"})
	if err != nil || d.Slot != "scsi1" {
		t.Fatalf("attach again: %+v, %v", d, err)
	}
	waitStorage(t, e, base+6)
	if err := e.svc.Disks().Detach(ctx, "blue", compute.DetachDiskInput{VM: vm.ID, Disk: "scsi1"}); err != nil {
		t.Fatalf("detach: %v", err)
	}
	cfg = guestConfig(t, e, vm)
	if cfg.Str("scsi1") != "" || cfg.Str("unused1") != "" {
		t.Fatalf("after detaching: scsi1 %q, unused1 %q (the volume must be deleted)", cfg.Str("scsi1"), cfg.Str("unused1"))
	}
	waitStorage(t, e, base+5)
	if rs, err := e.svc.Quota().Reservations(ctx, "blue"); err != nil || len(rs) != 0 {
		t.Fatalf("reservations left: %+v, %v", rs, err)
	}
}

// TestAttachDiskOverQuota: a disk that would take the VDC over its storage
// quota is QUOTA_EXCEEDED and changes nothing.
func TestAttachDiskOverQuota(t *testing.T) {
	t.Parallel()
	q := bigQuota
	q.StorageGiB = 6
	e := newEnv(t, q, "alpha")
	ctx := vmtest.Ctx(t)
	vm := runningVM(t, e)
	before := e.snapshot()
	_, _, err := e.svc.Disks().Attach(ctx, "blue", compute.AttachDiskInput{VM: vm.ID, SizeGiB: 3})
	if code, _ := inputRefusal(err); code != apierr.QuotaExceeded {
		t.Fatalf("attach over quota: %s, %v", code, err)
	}
	if after := e.snapshot(); !before.equal(after) {
		t.Fatalf("a refused attach changed things")
	}
	if _, _, err := e.svc.Disks().Attach(ctx, "blue", compute.AttachDiskInput{VM: vm.ID, SizeGiB: 2}); err != nil {
		t.Fatalf("attach within quota: %v", err)
	}
	_, _, err = e.svc.Disks().Resize(ctx, "blue", compute.ResizeDiskInput{VM: vm.ID, Disk: "scsi1", SizeGiB: 3})
	if code, _ := inputRefusal(err); code != apierr.QuotaExceeded {
		t.Fatalf("grow over quota: %s, %v", code, err)
	}
}

func second[A, B any](_ A, _ B, err error) error { return err }

// setHotplug gives vm's guest (stopped first, started again) the config
// that lets CPU and memory be hot-plugged, with cores vCPU slots.
func setHotplug(t *testing.T, e *env, vm *compute.VM, cores int) {
	t.Helper()
	ctx := vmtest.Ctx(t)
	op, err := e.svc.StopVM(ctx, "blue", vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.waitTask(op)
	g, _, _ := pveapi.FindGuest(ctx, e.zones[0].Client, vm.Ref.VMID)
	path := fmt.Sprintf("/nodes/%s/qemu/%d", g.Node, g.VMID)
	if _, err := pveapi.Run(ctx, e.zones[0].Client, "POST", path+"/config", map[string]any{
		"hotplug": "network,disk,usb,cpu,memory", "numa": 1, "cores": cores, "vcpus": vm.VCPUs}); err != nil {
		t.Fatal(err)
	}
	op, err = e.svc.StartVM(ctx, "blue", vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.waitTask(op)
}

// waitTask waits for a task's operation to succeed.
func (e *env) waitTask(op *compute.Operation) {
	e.t.Helper()
	if fin := e.wait(e.svc, "blue", op.ID); fin.State != compute.OpSucceeded {
		e.t.Fatalf("%s: %+v", op.Kind, fin)
	}
}

// TestResizeVM resizes a running VM: refused (CONFLICT saying why) when
// its config cannot take the change live and no reboot is allowed, done
// with a reboot when allowed, and live (no reboot, nothing pending) once
// its config allows CPU and memory hotplug; the intent records the
// profile; bad input and another VDC's VM are refused.
func TestResizeVM(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	ctx := vmtest.Ctx(t)
	vm := runningVM(t, e)

	before := e.snapshot()
	for _, c := range []struct {
		name  string
		in    compute.ResizeVMInput
		vdc   string
		code  apierr.Code
		field string
	}{
		{"a reboot not allowed", compute.ResizeVMInput{ID: vm.ID, ComputeProfile: "medium"}, "blue", apierr.Conflict, "input.reboot"},
		{"no profile", compute.ResizeVMInput{ID: vm.ID, ComputeProfile: "huge", Reboot: true}, "blue", apierr.BadUserInput, "input.computeProfile"},
		{"another VDC's VM", compute.ResizeVMInput{ID: vm.ID, ComputeProfile: "medium", Reboot: true}, "red", apierr.NotFound, ""},
	} {
		_, err := e.svc.ResizeVM(ctx, c.vdc, c.in)
		if code, field := inputRefusal(err); code != c.code || field != c.field {
			t.Errorf("%s: %s (%s), want %s (%s): %v", c.name, code, field, c.code, c.field, err)
		}
	}
	if after := e.snapshot(); !before.equal(after) {
		t.Fatalf("refused resizes changed things")
	}

	op, err := e.svc.ResizeVM(ctx, "blue", compute.ResizeVMInput{ID: vm.ID, ComputeProfile: "medium", Reboot: true})
	if err != nil {
		t.Fatalf("resize with reboot: %v", err)
	}
	if op.Kind != compute.OpResize || op.Step != "qmreboot" {
		t.Fatalf("operation %+v", op)
	}
	if fin := e.wait(e.svc, "blue", op.ID); fin.State != compute.OpSucceeded {
		t.Fatalf("resize: %+v", fin)
	}
	waitResized(t, e, vm, 2, 2048, "medium")

	setHotplug(t, e, vm, 4)
	op, err = e.svc.ResizeVM(ctx, "blue", compute.ResizeVMInput{ID: vm.ID, ComputeProfile: "small"})
	if err != nil {
		t.Fatalf("hot resize: %v", err)
	}
	if op.Step != "qmconfig" {
		t.Fatalf("hot resize follows %s, want the config write", op.Step)
	}
	waitResized(t, e, vm, 1, 512, "small")
	cfg := guestConfig(t, e, vm)
	if cfg.Int("vcpus") != 1 || cfg.Int("cores") != 4 {
		t.Fatalf("hot resize config: vcpus %d cores %d", cfg.Int("vcpus"), cfg.Int("cores"))
	}
	// A stopped VM takes a new size at once, without a reboot.
	stop, err := e.svc.StopVM(ctx, "blue", vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.waitTask(stop)
	if op, err = e.svc.ResizeVM(ctx, "blue", compute.ResizeVMInput{ID: vm.ID, ComputeProfile: "medium"}); err != nil {
		t.Fatalf("resize of a stopped VM: %v", err)
	}
	e.waitTask(op)
	cfg = guestConfig(t, e, vm)
	if cfg.Int("cores") != 2 || cfg.Str("vcpus") != "" || cfg.Int("memory") != 2048 {
		t.Fatalf("stopped VM's config after the resize: cores %d vcpus %q memory %d", cfg.Int("cores"), cfg.Str("vcpus"), cfg.Int("memory"))
	}
	poll.Until(t, 20*time.Second, "the resizes' reservations released", func() error {
		if rs, err := e.svc.Quota().Reservations(ctx, "blue"); err != nil || len(rs) != 0 {
			return fmt.Errorf("%+v, %v", rs, err)
		}
		return nil
	})
}

// waitResized waits until vm runs with vcpus and memMiB, nothing of its
// size pending, and its intent records profile without a resize marker.
func waitResized(t *testing.T, e *env, vm *compute.VM, vcpus, memMiB int, profile string) {
	t.Helper()
	poll.Until(t, 20*time.Second, fmt.Sprintf("the VM resized to %d vCPUs and %d MiB", vcpus, memMiB), func() error {
		got, err := e.svc.VM(vmtest.Ctx(t), "blue", vm.ID)
		if err != nil {
			return err
		}
		if got.Status != compute.StatusRunning || got.VCPUs != vcpus || got.MemoryMiB != memMiB {
			return fmt.Errorf("%s with %d vCPUs and %d MiB", got.Status, got.VCPUs, got.MemoryMiB)
		}
		in, _ := compute.ParseIntent(guestConfig(t, e, vm).Str("description"))
		if in == nil || in.ComputeProfile != profile || in.VCPUs != vcpus || in.MemoryMiB != memMiB || in.Resize != nil {
			return fmt.Errorf("intent %+v", in)
		}
		return nil
	})
}

// TestResizeRecovered: an orchestrator that dies after a resize wrote the
// new size (pending a reboot) and before the reboot leaves the VM marked;
// a fresh one's Recover reboots it, which applies the size, and clears
// the marker.
func TestResizeRecovered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	vm := runningVM(t, e)
	cfg := e.cfg
	ctx, cancel := context.WithCancel(vmtest.Ctx(t))
	cfg.AfterStep = func(_ context.Context, _ string, step string) {
		if step == "apply" {
			cancel() // the process dies here
		}
	}
	dying := e.newService(cfg)
	if _, err := dying.ResizeVM(ctx, "blue", compute.ResizeVMInput{ID: vm.ID, ComputeProfile: "medium", Reboot: true}); err == nil {
		t.Fatal("the dying resize went on after its process died")
	}
	in, _ := compute.ParseIntent(guestConfig(t, e, vm).Str("description"))
	if in == nil || in.Resize == nil {
		t.Fatalf("intent after the crash: %+v", in)
	}
	got, err := e.svc.VM(vmtest.Ctx(t), "blue", vm.ID)
	if err != nil || got.VCPUs != 1 {
		t.Fatalf("before recovery the VM has %+v, %v", got, err)
	}
	fresh := e.newService(e.cfg)
	if err := fresh.Recover(vmtest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	waitResized(t, e, vm, 2, 2048, "medium")
}

// TestAttachDiskSlotsRunOut: a VM has at most Proxmox's 31 scsi slots; an
// attach beyond them is BAD_USER_INPUT and changes nothing.
func TestAttachDiskSlotsRunOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	ctx := vmtest.Ctx(t)
	vm := runningVM(t, e)
	for n := 1; n < compute.MaxSCSIDisks; n++ {
		if _, d, err := e.svc.Disks().Attach(ctx, "blue", compute.AttachDiskInput{VM: vm.ID, SizeGiB: 1}); err != nil || d.Slot != fmt.Sprintf("scsi%d", n) {
			t.Fatalf("attach %d: %+v, %v", n, d, err)
		}
	}
	before := e.snapshot()
	_, _, err := e.svc.Disks().Attach(ctx, "blue", compute.AttachDiskInput{VM: vm.ID, SizeGiB: 1})
	if code, field := inputRefusal(err); code != apierr.BadUserInput || field != "input.sizeGiB" {
		t.Fatalf("attach beyond the slots: %s (%s), %v", code, field, err)
	}
	if after := e.snapshot(); !before.equal(after) {
		t.Fatalf("a refused attach changed things")
	}
}
