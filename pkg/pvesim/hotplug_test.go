package pvesim_test

import (
	"testing"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

// TestHotplugFollowsTheOption: a running guest takes vcpus and memory at
// once only when its hotplug option names cpu and memory (memory with
// numa=1, vcpus within cores × sockets), as qemu-server hot-plugs them;
// disks are hot-plugged only when it names disk (the default does), else
// they wait for the next boot like everything else.
func TestHotplugFollowsTheOption(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	pending := func(vm *proxmox.VirtualMachine) map[string]any {
		t.Helper()
		ps, err := vm.Pending(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]any{}
		for _, p := range *ps {
			if p.Pending != nil {
				got[p.Key] = p.Pending
			}
		}
		return got
	}
	set := func(vm *proxmox.VirtualMachine, opts ...proxmox.VirtualMachineOption) {
		t.Helper()
		if err := vm.ConfigSync(ctx, opts...); err != nil {
			t.Fatal(err)
		}
	}

	hot := newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "cores", Value: 4},
		proxmox.VirtualMachineOption{Name: "vcpus", Value: 2},
		proxmox.VirtualMachineOption{Name: "numa", Value: 1},
		proxmox.VirtualMachineOption{Name: "hotplug", Value: "network,disk,usb,cpu,memory"})
	task, err := hot.Start(ctx)
	waitOK(t, ctx, task, err)
	set(hot, proxmox.VirtualMachineOption{Name: "vcpus", Value: 3}, proxmox.VirtualMachineOption{Name: "memory", Value: 2048})
	if got := pending(hot); len(got) != 0 {
		t.Fatalf("hot-pluggable guest has pending %v", got)
	}
	if err := hot.Ping(ctx); err != nil || hot.CPUs != 3 || hot.MaxMem != 2048<<20 {
		t.Fatalf("hot-plugged guest: cpus %d maxmem %d, %v", hot.CPUs, hot.MaxMem, err)
	}
	// More vCPUs than cores × sockets wait for a reboot.
	set(hot, proxmox.VirtualMachineOption{Name: "vcpus", Value: 6}, proxmox.VirtualMachineOption{Name: "cores", Value: 6})
	if got := pending(hot); got["vcpus"] == nil || got["cores"] == nil {
		t.Fatalf("vcpus over the topology: pending %v", got)
	}

	cold := newVM(t, cl, "pve1", 101, proxmox.VirtualMachineOption{Name: "cores", Value: 2},
		proxmox.VirtualMachineOption{Name: "hotplug", Value: "cpu,memory"})
	task, err = cold.Start(ctx)
	waitOK(t, ctx, task, err)
	// Memory without NUMA and a disk without disk hotplug wait.
	set(cold, proxmox.VirtualMachineOption{Name: "vcpus", Value: 1}, proxmox.VirtualMachineOption{Name: "memory", Value: 2048},
		proxmox.VirtualMachineOption{Name: "scsi1", Value: "local-lvm:1"})
	got := pending(cold)
	if got["vcpus"] != nil || got["memory"] == nil || got["scsi1"] == nil {
		t.Fatalf("guest without numa and disk hotplug: pending %v", got)
	}
}
