package flexctl

import (
	"context"
	"strconv"

	"github.com/Khan/genqlient/graphql"
	"github.com/spf13/cobra"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// diskTable is the table of a VM's disks.
func diskTable(disks []api.DiskFields) func() Table {
	return func() Table {
		t := Table{Header: []string{"SLOT", "BOOT", "SIZE", "STORAGE", "STORAGE-PROFILE", "READ-MBPS", "WRITE-MBPS"}}
		for _, d := range disks {
			profile := ""
			if d.StorageProfile != nil {
				profile = d.StorageProfile.Name
			}
			t.Rows = append(t.Rows, []string{d.Slot, strconv.FormatBool(d.Boot), strconv.FormatFloat(d.SizeGiB, 'f', -1, 64) + " GiB",
				d.Storage, profile, intStr(d.ReadMBps), intStr(d.WriteMBps)})
		}
		return t
	}
}

// VMDisks are the disks of VM vm (NOT_FOUND when the VDC has no such VM).
func VMDisks(ctx context.Context, c graphql.Client, vm string) ([]api.DiskFields, error) {
	r, err := api.ListVMDisks(ctx, c, vm)
	if err != nil {
		return nil, err
	}
	if r.Vm == nil {
		return nil, &APIError{Message: "no VM " + vm, Code: "NOT_FOUND"}
	}
	out := []api.DiskFields{}
	for _, d := range r.Vm.Disks {
		out = append(out, d.DiskFields)
	}
	return out, nil
}

// diskCommand is "disk list|attach|resize|detach": a VM's disks.
func (a *app) diskCommand() *cobra.Command {
	disk := group("disk", "Disks of a VM: list, attach, resize, detach")
	disk.AddCommand(a.diskCall("list VM-ID", "List a VM's disks", "the VM's id", 1, "list disks", nil,
		func(ctx context.Context, c graphql.Client, argv []string) ([]api.DiskFields, error) {
			return VMDisks(ctx, c, argv[0])
		}),
		a.diskAttachCommand(), a.diskResizeCommand(), a.diskDetachCommand())
	return disk
}

// diskCall is a disk command of n arguments that calls the API with call
// and prints the disks it answers; flags adds its flags.
func (a *app) diskCall(use, short, names string, n int, op string, flags func(*cobra.Command),
	call func(context.Context, graphql.Client, []string) ([]api.DiskFields, error)) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: args(n, names),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			disks, err := call(cmd.Context(), c, argv)
			if err != nil {
				return AsAPIError(op, err)
			}
			return Write(cmd.OutOrStdout(), a.output, disks, diskTable(disks))
		})}
	if flags != nil {
		flags(cmd)
	}
	return cmd
}

func (a *app) diskAttachCommand() *cobra.Command {
	var size int
	var profile string
	return a.diskCall("attach VM-ID", "Add a new empty disk to a VM (hot-plugged into a running one)", "the VM's id", 1, "attach disk",
		func(cmd *cobra.Command) {
			cmd.Flags().IntVar(&size, "size-gib", 0, "its size in GiB (1 to 65536)")
			cmd.Flags().StringVar(&profile, "storage-profile", "", "its storage profile (default: the boot disk's)")
			required(cmd.Flags(), "size-gib")
		},
		func(ctx context.Context, c graphql.Client, argv []string) ([]api.DiskFields, error) {
			r, err := api.AttachDisk(ctx, c, api.AttachDiskInput{Vm: argv[0], SizeGiB: size, StorageProfile: optional(profile)})
			if err != nil {
				return nil, err
			}
			return []api.DiskFields{r.AttachDisk.DiskFields}, nil
		})
}

func (a *app) diskResizeCommand() *cobra.Command {
	var size int
	return a.diskCall("resize VM-ID SLOT", "Grow a VM's disk (live on a running VM; disks only grow)", "the VM's id and the disk's slot", 2, "resize disk",
		func(cmd *cobra.Command) {
			cmd.Flags().IntVar(&size, "size-gib", 0, "its new size in GiB (at least its size)")
			required(cmd.Flags(), "size-gib")
		},
		func(ctx context.Context, c graphql.Client, argv []string) ([]api.DiskFields, error) {
			r, err := api.ResizeDisk(ctx, c, api.ResizeDiskInput{Vm: argv[0], Disk: argv[1], SizeGiB: size})
			if err != nil {
				return nil, err
			}
			return []api.DiskFields{r.ResizeDisk.DiskFields}, nil
		})
}

func (a *app) diskDetachCommand() *cobra.Command {
	var keep bool
	return a.diskCall("detach VM-ID SLOT", "Remove a disk from a VM and delete its volume (--keep: keep it as an unused disk); prints the disks left",
		"the VM's id and the disk's slot", 2, "detach disk",
		func(cmd *cobra.Command) {
			cmd.Flags().BoolVar(&keep, "keep", false, "keep the volume as an unused disk of the VM (still counted in the storage quota)")
		},
		func(ctx context.Context, c graphql.Client, argv []string) ([]api.DiskFields, error) {
			r, err := api.DetachDisk(ctx, c, api.DetachDiskInput{Vm: argv[0], Disk: argv[1], Keep: &keep})
			if err != nil {
				return nil, err
			}
			out := []api.DiskFields{}
			for _, d := range r.DetachDisk.Disks {
				out = append(out, d.DiskFields)
			}
			return out, nil
		})
}

// vmResizeCommand is "vm resize": resizeVM, with --wait.
func (a *app) vmResizeCommand() *cobra.Command {
	var profile string
	var reboot bool
	cmd := a.vmAction("resize", "Give a VM the vCPUs and memory of another compute profile (--reboot allows the reboot a running VM may need)",
		func(ctx context.Context, c graphql.Client, id string) (api.OperationFields, error) {
			r, err := api.ResizeVM(ctx, c, api.ResizeVMInput{Id: id, ComputeProfile: profile, Reboot: &reboot})
			if err != nil {
				return api.OperationFields{}, err
			}
			return r.ResizeVM.OperationFields, nil
		})
	cmd.Flags().StringVar(&profile, "compute-profile", "", "the compute profile whose vCPUs and memory the VM takes")
	cmd.Flags().BoolVar(&reboot, "reboot", false, "allow the reboot a running VM needs when it cannot take the change live")
	required(cmd.Flags(), "compute-profile")
	return cmd
}
