package compute

import (
	"context"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// Detach removes disk in.Disk from VM in.VM of vdc (Proxmox unplugs
// it from a running VM) and deletes its volume, or, with in.Keep, leaves
// the volume an unused disk of the VM (counted against the storage quota
// until the VM is deleted). The boot disk is CONFLICT.
func (s *Disks) Detach(ctx context.Context, vdc string, in DetachDiskInput) error {
	sc := &detachScope{deps: s.d, vdc: vdc, in: in}
	if err := runPhases(ctx, s.d.eng, "", "", detachPhases(), sc); err != nil {
		return cause(err)
	}
	return nil
}

// detachScope is what the phases of detaching a disk work on.
type detachScope struct {
	*deps
	vdc string
	in  DetachDiskInput
	vm  diskVM // the VM (check)
}

// detachPhases are the phases of detaching a disk, in order: check (the
// VM: created, not locked, with that disk, not its boot disk), request
// (one config write, conditional on the digest check read: the drive
// removed and, unless kept, its volume deleted with it).
func detachPhases() []phase[detachScope] {
	return []phase[detachScope]{
		step("check", (*detachScope).check),
		step("request", (*detachScope).request),
	}
}

// check finds the VM and its disk.
func (sc *detachScope) check(ctx context.Context) error {
	vm, err := findDiskVM(ctx, sc.deps, sc.vdc, sc.in.VM)
	if err != nil {
		return err
	}
	sc.vm = vm
	d, err := vm.disk(sc.in.Disk, "disk")
	if err != nil {
		return err
	}
	if d.Boot {
		return &Error{Kind: KindConflict, Field: "disk", Message: "disk " + d.Slot + " is the VM's boot disk: it cannot be detached"}
	}
	return nil
}

// request removes the drive; force deletes its volume rather than keeping
// it as unusedN.
func (sc *detachScope) request(ctx context.Context) error {
	params := map[string]any{"delete": sc.in.Disk, "digest": sc.vm.cfg.Digest()}
	if !sc.in.Keep {
		params["force"] = 1
	}
	if _, err := pveapi.Run(ctx, sc.vm.z.Client, "POST", sc.vm.path()+"/config", params); err != nil {
		return diskWriteError(err)
	}
	return nil
}
