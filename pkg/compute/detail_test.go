package compute_test

import (
	"fmt"
	"testing"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

func TestParseHardware(t *testing.T) {
	t.Parallel()
	hw := compute.ParseHardware(pveapi.Config{
		"net1":    "e1000=BC:24:11:00:00:02,bridge=vnet2,firewall=1",
		"net0":    "virtio=BC:24:11:00:00:01,bridge=vnet1",
		"scsi10":  "nvme-pool:vm-101-disk-2,size=512M,iops_rd=500,iops_wr=400",
		"scsi0":   "local-lvm:vm-101-disk-0,size=10G,mbps_rd=200,mbps_wr=100",
		"scsi2":   "local-lvm:vm-101-disk-1,size=1T",
		"ide2":    "local-lvm:vm-101-cloudinit,media=cdrom",
		"ide0":    "none,media=cdrom",
		"sata0":   "/dev/sdb",
		"scsihw":  "virtio-scsi-pci",
		"netboot": "1",
		"memory":  2048.0,
	})
	if got, want := fmt.Sprint(hw.NICs), "[{0 virtio BC:24:11:00:00:01 vnet1} {1 e1000 BC:24:11:00:00:02 vnet2}]"; got != want {
		t.Errorf("NICs %s, want %s", got, want)
	}
	want := []compute.Disk{
		{Slot: "scsi0", Storage: "local-lvm", SizeBytes: 10 << 30, ReadMBps: 200, WriteMBps: 100, Boot: true},
		{Slot: "scsi2", Storage: "local-lvm", SizeBytes: 1 << 40},
		{Slot: "scsi10", Storage: "nvme-pool", SizeBytes: 512 << 20, ReadIops: 500, WriteIops: 400},
	}
	if fmt.Sprint(hw.Disks) != fmt.Sprint(want) {
		t.Errorf("disks %+v, want %+v", hw.Disks, want)
	}
	// The boot disk is the first disk of the boot order; unused volumes
	// are no disks of the VM.
	hw = compute.ParseHardware(pveapi.Config{"scsi0": "local-lvm:vm-1-disk-0,size=1G", "scsi1": "local-lvm:vm-1-disk-1,size=2G",
		"boot": "order=ide2;scsi1;scsi0;net0", "ide2": "local-lvm:vm-1-cloudinit,media=cdrom", "unused0": "local-lvm:vm-1-disk-2"})
	if len(hw.Disks) != 2 || hw.Disks[0].Boot || !hw.Disks[1].Boot {
		t.Errorf("disks with a boot order: %+v", hw.Disks)
	}
	if hw := compute.ParseHardware(pveapi.Config{}); len(hw.NICs) != 0 || len(hw.Disks) != 0 {
		t.Errorf("empty config: %+v", hw)
	}
}
