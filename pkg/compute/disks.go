package compute

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// MaxSCSIDisks is the most scsi disks a VM may have: Proxmox's slots
// scsi0 to scsi30. attachDisk takes the next free one.
const MaxSCSIDisks = 31

// AttachDiskInput is what attachDisk asks for.
type AttachDiskInput struct {
	// VM is the VM's id.
	VM string
	// SizeGiB is the new disk's size (1 to MaxDiskGiB).
	SizeGiB int
	// StorageProfile is the storage profile of the disk; "" takes the
	// boot disk's.
	StorageProfile string
}

// ResizeDiskInput is what resizeDisk asks for.
type ResizeDiskInput struct {
	// VM is the VM's id; Disk the disk's slot (Disk.Slot, e.g. scsi1).
	VM, Disk string
	// SizeGiB is the new size: at least the current one (disks only grow),
	// at most MaxDiskGiB.
	SizeGiB int
}

// DetachDiskInput is what detachDisk asks for.
type DetachDiskInput struct {
	// VM is the VM's id; Disk the disk's slot (not the boot disk's).
	VM, Disk string
	// Keep leaves the volume as an unused disk of the VM (still counted
	// against the storage quota) instead of deleting it.
	Keep bool
}

// diskVM is the VM a disk operation works on, as its check phase finds
// it: its zone, guest and configuration (whose digest the write carries).
type diskVM struct {
	z   Zone
	g   pveapi.Resource
	cfg pveapi.Config
}

// path is the guest's API path.
func (v diskVM) path() string { return fmt.Sprintf("/nodes/%s/qemu/%d", v.g.Node, v.g.VMID) }

// findDiskVM looks VM id of vdc up for a change of its disks or size:
// one still being created, or one Proxmox holds locked, is CONFLICT.
func findDiskVM(ctx context.Context, d *deps, vdc, id string) (diskVM, error) {
	z, g, _, cfg, err := d.find.lookupConfig(ctx, vdc, id)
	if err != nil {
		return diskVM{}, err
	}
	if isCreating(g) {
		return diskVM{}, newError(KindConflict, "the VM is still being created")
	}
	if g.Lock != "" {
		return diskVM{}, newError(KindConflict, "the VM is busy (Proxmox holds it locked: %s)", g.Lock)
	}
	return diskVM{z: z, g: g, cfg: cfg}, nil
}

// disk returns the disk of the VM in slot, NOT_FOUND (naming field) when
// it has none.
func (v diskVM) disk(slot, field string) (Disk, error) {
	for _, d := range ParseHardware(v.cfg).Disks {
		if d.Slot == slot {
			return d, nil
		}
	}
	return Disk{}, &Error{Kind: KindNotFound, Field: field, Message: fmt.Sprintf("the VM has no disk %q", slot)}
}

// reread reads the VM's configuration again after a change and returns
// its disk in slot.
func (v *diskVM) reread(ctx context.Context, slot string) (Disk, error) {
	cfg, err := pveapi.GuestConfig(ctx, v.z.Client, v.g.Node, v.g.VMID)
	if err != nil {
		return Disk{}, zoneDown(v.z.Name, err)
	}
	v.cfg = cfg
	d, err := v.disk(slot, "")
	if err != nil {
		return Disk{}, internal("the disk is not in the VM's configuration after the change", err)
	}
	return d, nil
}

// validDiskSize checks a disk size in GiB of field.
func validDiskSize(field string, gib int) error {
	if gib < 1 || gib > MaxDiskGiB {
		return badInput(field, "%s must be between 1 and %d", field, MaxDiskGiB)
	}
	return nil
}

// diskGiB is a size in bytes in whole GiB, rounded up.
func diskGiB(bytes int64) int { return int((bytes + 1<<30 - 1) >> 30) }

// diskChange is a quota reservation of what a disk operation adds to its
// VM, released once Proxmox reports the change (the VDC's pool counts it
// from then on).
type diskChange struct {
	d     *deps
	vdc   string
	resID string
}

// reserve reserves gib of storage for what in zone zoneID.
func (c *diskChange) reserve(ctx context.Context, zoneID, what string, gib int) error {
	c.resID = "disk-" + newOpID()
	if err := c.d.quota.ReserveStorage(ctx, c.vdc, c.resID, zoneID, what, gib); err != nil {
		c.resID = ""
		return quotaError(c.vdc, err)
	}
	return nil
}

// release drops the reservation (if any), logging a failure (the
// reservation then expires).
func (c *diskChange) release() {
	if c.resID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.d.quota.Release(ctx, c.vdc, c.resID); err != nil {
		c.d.log.Warn("releasing quota", "vdc", c.vdc, "reservation", c.resID, "err", err)
	}
	c.resID = ""
}

// nextSCSISlot is the first scsiN the configuration does not use (as a
// drive, CD-ROM or pending change), "" when all MaxSCSIDisks are taken.
func nextSCSISlot(cfg pveapi.Config) string {
	for n := range MaxSCSIDisks {
		slot := "scsi" + strconv.Itoa(n)
		if _, used := cfg[slot]; !used {
			return slot
		}
	}
	return ""
}
