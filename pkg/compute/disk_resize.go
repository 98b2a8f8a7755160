package compute

import (
	"context"
	"fmt"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// Resize grows disk in.Disk of VM in.VM of vdc to in.SizeGiB (Proxmox
// grows a running VM's disk live; the guest's file system is the guest's
// to grow). A smaller size is BAD_USER_INPUT (disks only grow), the same
// size changes nothing. What it grows by is reserved against the VDC's
// storage quota first. It returns the VM's zone and the disk.
func (s *Disks) Resize(ctx context.Context, vdc string, in ResizeDiskInput) (Zone, Disk, error) {
	sc := &diskResizeScope{deps: s.d, ch: diskChange{d: s.d, vdc: vdc}, vdc: vdc, in: in}
	defer sc.ch.release()
	if err := runPhases(ctx, s.d.eng, "", "", diskResizePhases(), sc); err != nil {
		return Zone{}, Disk{}, cause(err)
	}
	return sc.vm.z, sc.disk, nil
}

// diskResizeScope is what the phases of growing a disk work on.
type diskResizeScope struct {
	*deps
	ch   diskChange
	vdc  string
	in   ResizeDiskInput
	vm   diskVM // the VM (check)
	disk Disk   // the disk: as found (check), as grown (request)
}

// diskResizePhases are the phases of growing a disk, in order: check (the
// input, the VM: created, not locked, with that disk, smaller than the new
// size), reserve (the growth against the VDC's storage quota), request
// (Proxmox's resize, conditional on the digest check read, waited for).
// The reservation is released once the resize has ended.
func diskResizePhases() []phase[diskResizeScope] {
	return []phase[diskResizeScope]{
		step("check", (*diskResizeScope).check),
		step("reserve", (*diskResizeScope).reserve),
		step("request", (*diskResizeScope).request),
	}
}

// check checks the input, the VM and its disk; a disk already of the size
// ends the operation.
func (sc *diskResizeScope) check(ctx context.Context) error {
	if err := validDiskSize("sizeGiB", sc.in.SizeGiB); err != nil {
		return err
	}
	vm, err := findDiskVM(ctx, sc.deps, sc.vdc, sc.in.VM)
	if err != nil {
		return err
	}
	sc.vm = vm
	if sc.disk, err = vm.disk(sc.in.Disk, "disk"); err != nil {
		return err
	}
	want := int64(sc.in.SizeGiB) << 30
	switch {
	case want < sc.disk.SizeBytes:
		return badInput("sizeGiB", "disk %s is %d GiB: disks only grow, to at least their size", sc.disk.Slot, diskGiB(sc.disk.SizeBytes))
	case want == sc.disk.SizeBytes:
		return errDone
	}
	return nil
}

// reserve reserves the growth against the VDC's storage quota.
func (sc *diskResizeScope) reserve(ctx context.Context) error {
	return sc.ch.reserve(ctx, sc.vm.z.ID, "disk "+sc.disk.Slot, sc.in.SizeGiB-int(sc.disk.SizeBytes>>30))
}

// request asks Proxmox to grow the disk and waits for its task.
func (sc *diskResizeScope) request(ctx context.Context) error {
	_, err := pveapi.Run(ctx, sc.vm.z.Client, "PUT", sc.vm.path()+"/resize", map[string]any{
		"disk": sc.disk.Slot, "size": fmt.Sprintf("%dG", sc.in.SizeGiB), "digest": sc.vm.cfg.Digest()})
	if err != nil {
		return diskWriteError(err)
	}
	sc.disk, err = sc.vm.reread(ctx, sc.disk.Slot)
	return err
}
