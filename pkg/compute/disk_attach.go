package compute

import (
	"context"
	"fmt"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// Disks is the disks of a Service's VMs (Service.Disks).
type Disks struct{ d *deps }

// Disks returns the disks of the service's VMs.
func (s *Service) Disks() *Disks { return &Disks{d: s.d} }

// Attach adds a disk of in.SizeGiB to VM in.VM of vdc in the next free
// scsi slot, on the storage of in.StorageProfile in the VM's zone (the
// boot disk's profile when empty), with that profile's limits. Proxmox
// hot-plugs it into a running VM. Its storage is reserved against the
// VDC's quota first. It returns the VM's zone and the new disk.
func (s *Disks) Attach(ctx context.Context, vdc string, in AttachDiskInput) (Zone, Disk, error) {
	sc := &attachScope{deps: s.d, ch: diskChange{d: s.d, vdc: vdc}, vdc: vdc, in: in}
	defer sc.ch.release()
	if err := runPhases(ctx, s.d.eng, "", "", attachPhases(), sc); err != nil {
		return Zone{}, Disk{}, cause(err)
	}
	return sc.vm.z, sc.disk, nil
}

// attachScope is what the phases of attaching a disk work on.
type attachScope struct {
	*deps
	ch  diskChange
	vdc string
	in  AttachDiskInput
	// vm, storage, profile and slot: the VM, the Proxmox storage and
	// profile of the disk, and its slot (check).
	vm      diskVM
	storage string
	profile *catalog.StorageProfile
	slot    string
	disk    Disk // the disk attached (request)
}

// attachPhases are the phases of attaching a disk, in order: check (the
// input, the VM: created, not locked; the profile's storage in its zone;
// a free slot), reserve (the disk's storage against the VDC's quota),
// request (the config write that allocates the disk, conditional on the
// digest check read; Proxmox hot-plugs it). The reservation is released
// once the write has ended: the pool counts the disk.
func attachPhases() []phase[attachScope] {
	return []phase[attachScope]{
		step("check", (*attachScope).check),
		step("reserve", (*attachScope).reserve),
		step("request", (*attachScope).request),
	}
}

// check checks the input, the VM, the storage profile and the slot.
func (sc *attachScope) check(ctx context.Context) error {
	if err := validDiskSize("sizeGiB", sc.in.SizeGiB); err != nil {
		return err
	}
	vm, err := findDiskVM(ctx, sc.deps, sc.vdc, sc.in.VM)
	if err != nil {
		return err
	}
	sc.vm = vm
	if sc.storage, sc.profile, err = sc.storageOf(ctx); err != nil {
		return err
	}
	if sc.slot = nextSCSISlot(vm.cfg); sc.slot == "" {
		return badInput("sizeGiB", "the VM has %d scsi disks, the most Proxmox allows", MaxSCSIDisks)
	}
	return nil
}

// storageOf resolves the storage profile of the input (the boot disk's
// when it names none) to its storage in the VM's zone.
func (sc *attachScope) storageOf(ctx context.Context) (string, *catalog.StorageProfile, error) {
	zone := sc.vm.z.Name
	if name := sc.in.StorageProfile; name != "" {
		sp, err := catalog.Get[*catalog.StorageProfile](ctx, sc.cfg.Catalog, name)
		if err != nil {
			return "", nil, catalogInput("storageProfile", "storage profile", name, err)
		}
		if sp.IsBackup() {
			return "", nil, badInput("storageProfile", "storage profile %s holds backups, not disks", name)
		}
		pool, ok := sp.PoolFor(zone)
		if !ok {
			return "", nil, badInput("storageProfile", "storage profile %s has no pool in zone %s", name, zone)
		}
		return pool, sp, nil
	}
	var boot *Disk
	for _, d := range ParseHardware(sc.vm.cfg).Disks {
		if d.Boot {
			boot = &d
		}
	}
	if boot == nil {
		return "", nil, badInput("storageProfile", "the VM has no boot disk to take the storage profile of: name one")
	}
	profiles, err := catalog.List[*catalog.StorageProfile](ctx, sc.cfg.Catalog)
	if err != nil {
		return "", nil, internal("reading the catalog failed", err)
	}
	sp := catalog.ProfileOfStorage(profiles, zone, boot.Storage, boot.ReadMBps, boot.WriteMBps)
	if sp == nil {
		return "", nil, badInput("storageProfile", "no storage profile offers the boot disk's storage %s in zone %s: name one", boot.Storage, zone)
	}
	return boot.Storage, sp, nil
}

// reserve reserves the disk's storage against the VDC's quota.
func (sc *attachScope) reserve(ctx context.Context) error {
	return sc.ch.reserve(ctx, sc.vm.z.ID, "disk "+sc.slot, sc.in.SizeGiB)
}

// request writes the new disk into the VM's configuration.
func (sc *attachScope) request(ctx context.Context) error {
	vol := fmt.Sprintf("%s:%d", sc.storage, sc.in.SizeGiB)
	vol = setProp(setProp(vol, "mbps_rd", sc.profile.ReadMBps), "mbps_wr", sc.profile.WriteMBps)
	_, err := pveapi.Run(ctx, sc.vm.z.Client, "POST", sc.vm.path()+"/config", map[string]any{
		sc.slot: vol, "digest": sc.vm.cfg.Digest()})
	if err != nil {
		return diskWriteError(err)
	}
	sc.disk, err = sc.vm.reread(ctx, sc.slot)
	return err
}

// diskWriteError maps a refused change of a VM's disks: a concurrent
// change of its configuration or a Proxmox refusal is CONFLICT.
func diskWriteError(err error) error {
	if retryable(err) {
		return &Error{Kind: KindConflict, Message: "the VM's configuration changed meanwhile; try again", Cause: err}
	}
	if _, ok := pveapi.AsTaskError(err); ok {
		return internal("Proxmox failed to change the VM's disks: "+publicError(err), err)
	}
	return conflict(err)
}
