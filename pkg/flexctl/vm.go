package flexctl

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/spf13/cobra"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// pageSize is how many items a list asks for per page: the API's default,
// within its query complexity limit.
const pageSize = 50

func vmTable(vms []api.VMFields) func() Table {
	return func() Table {
		t := Table{Header: []string{"ID", "NAME", "STATUS", "ZONE", "HOST", "VCPUS", "MEMORY", "DISK", "ADDRESSES"}}
		for _, v := range vms {
			host := ""
			if v.Host != nil {
				host = v.Host.Name
			}
			t.Rows = append(t.Rows, []string{v.Id, v.Name, string(v.Status), v.Zone.Name, host,
				strconv.Itoa(v.Vcpus), strconv.Itoa(v.MemoryMiB) + " MiB", strconv.Itoa(v.DiskGiB) + " GiB",
				strings.Join(v.IpAddresses, ",")})
		}
		return t
	}
}

func opTable(ops []api.OperationFields) func() Table {
	return func() Table {
		t := Table{Header: []string{"OPERATION", "KIND", "STATE", "STEP", "VM", "ERROR"}}
		for _, o := range ops {
			t.Rows = append(t.Rows, []string{o.Id, string(o.Kind), string(o.State), o.Step, str(o.VmId), str(o.Error)})
		}
		return t
	}
}

func (a *app) vmCommand() *cobra.Command {
	vm := group("vm", "VMs of the VDC: list, get, create, delete, start, stop, resize, console-url")

	list := listCommand(a, "List the VDC's VMs", "list VMs",
		func(ctx context.Context, c graphql.Client, after *string) ([]api.VMFields, pageInfo, error) {
			r, err := api.ListVMs(ctx, c, pageSize, after)
			if err != nil {
				return nil, nil, err
			}
			var out []api.VMFields
			for _, n := range r.VmsConnection.Nodes {
				out = append(out, n.VMFields)
			}
			return out, &r.VmsConnection.PageInfo, nil
		}, vmTable)
	get := getCommand(a, "Show a VM", "ID", a.getVM, vmTable)

	var in api.CreateVMInput
	var nics []string
	var image, iso string
	var wait bool
	create := &cobra.Command{Use: "create NAME", Short: "Create a VM (with --wait, until it runs)", Args: args(1, "the VM's name"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			in.Name = argv[0]
			in.Image, in.Iso = optional(image), optional(iso)
			if image == "" && iso == "" {
				return fmt.Errorf("create VM: give --image, --iso or both")
			}
			in.Nics = nil
			for _, n := range nics {
				network, addr, hasAddr := strings.Cut(n, "=")
				nic := api.NICInput{Network: network}
				if hasAddr {
					nic.Address = &addr
				}
				in.Nics = append(in.Nics, nic)
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.CreateVM(cmd.Context(), c, in)
			if err != nil {
				return AsAPIError("create VM", err)
			}
			op := r.CreateVM.Operation.OperationFields
			if !wait {
				if r.CreateVM.Vm != nil {
					return Write(cmd.OutOrStdout(), a.output, r.CreateVM.Vm.VMFields, vmTable([]api.VMFields{r.CreateVM.Vm.VMFields}))
				}
				return Write(cmd.OutOrStdout(), a.output, op, opTable([]api.OperationFields{op}))
			}
			return a.writeCreatedVM(cmd, c, op, "create VM")
		})}
	cf := create.Flags()
	cf.StringVar(&in.Zone, "zone", "", "the zone")
	cf.StringVar(&image, "image", "", "an image of the catalog (flexctl image list) the disk is cloned from")
	cf.StringVar(&iso, "iso", "", "an ISO image of the VDC for the CD-ROM drive, booted first (alone: a blank disk)")
	cf.StringVar(&in.ComputeProfile, "compute-profile", "", "the compute profile (vCPUs and memory)")
	cf.StringVar(&in.StorageProfile, "storage-profile", "", "the storage profile (disk tier)")
	cf.IntVar(&in.DiskGiB, "disk-gib", 0, "disk size in GiB (at least the image's)")
	cf.StringVar(&in.User, "user", "", "the cloud-init user to create")
	cf.StringArrayVar(&nics, "nic", nil, "a NIC: NETWORK-ID, or NETWORK-ID=ADDRESS for a static address (repeatable, 1 to 4)")
	cf.StringArrayVar(&in.SshKeys, "ssh-key", nil, "an OpenSSH public key for the user (repeatable)")
	cf.BoolVar(&wait, "wait", false, "follow the create to its end, with a progress line on stderr")
	required(cf, "zone", "compute-profile", "storage-profile", "disk-gib", "user", "nic")

	vm.AddCommand(list, get, create,
		a.vmAction("start", "Start a stopped VM", func(ctx context.Context, c graphql.Client, id string) (api.OperationFields, error) {
			r, err := api.StartVM(ctx, c, id)
			if err != nil {
				return api.OperationFields{}, err
			}
			return r.StartVM.OperationFields, nil
		}),
		a.vmAction("stop", "Power a VM off at once", func(ctx context.Context, c graphql.Client, id string) (api.OperationFields, error) {
			r, err := api.StopVM(ctx, c, id)
			if err != nil {
				return api.OperationFields{}, err
			}
			return r.StopVM.OperationFields, nil
		}),
		a.vmAction("delete", "Delete a VM with its disks and addresses", func(ctx context.Context, c graphql.Client, id string) (api.OperationFields, error) {
			r, err := api.DeleteVM(ctx, c, id, nil)
			if err != nil {
				return api.OperationFields{}, err
			}
			return r.DeleteVM.OperationFields, nil
		}),
		a.consoleURLCommand(), a.detachISOCommand(), a.vmResizeCommand())
	return vm
}

// detachISOCommand ejects the ISO of a VM (detachISO).
func (a *app) detachISOCommand() *cobra.Command {
	return &cobra.Command{Use: "detach-iso ID", Short: "Eject the ISO from a VM's CD-ROM drive and boot it from its disk", Args: args(1, "the VM's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.DetachISO(cmd.Context(), c, argv[0])
			if err != nil {
				return AsAPIError("detach ISO", err)
			}
			return Write(cmd.OutOrStdout(), a.output, r.DetachISO.VMFields, vmTable([]api.VMFields{r.DetachISO.VMFields}))
		})}
}

// optional is s, or nil when it is empty.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// vmAction is a command that runs one VM operation, with --wait.
func (a *app) vmAction(name, short string, call func(context.Context, graphql.Client, string) (api.OperationFields, error)) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{Use: name + " ID", Short: short + " (with --wait, until the operation ends)", Args: args(1, "the VM's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			op, err := call(cmd.Context(), c, argv[0])
			if err != nil {
				return AsAPIError(name+" VM", err)
			}
			if wait {
				if op, err = a.wait(cmd, c, op); err != nil {
					return err
				}
			}
			return Write(cmd.OutOrStdout(), a.output, op, opTable([]api.OperationFields{op}))
		})}
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the operation to its end, with a progress line on stderr")
	return cmd
}

// writeCreatedVM follows op, a VM's create, to its end (wait) and prints
// the VM it made.
func (a *app) writeCreatedVM(cmd *cobra.Command, c graphql.Client, op api.OperationFields, what string) error {
	op, err := a.wait(cmd, c, op)
	if err != nil {
		return err
	}
	if op.VmId == nil {
		return fmt.Errorf("%s: operation %s ended without a VM", what, op.Id)
	}
	v, err := a.getVM(cmd.Context(), c, *op.VmId)
	if err != nil {
		return err
	}
	return Write(cmd.OutOrStdout(), a.output, v, vmTable([]api.VMFields{v}))
}

func (a *app) getVM(ctx context.Context, c graphql.Client, id string) (api.VMFields, error) {
	r, err := api.GetVM(ctx, c, id)
	if err != nil {
		return api.VMFields{}, AsAPIError("get VM", err)
	}
	if r.Vm == nil {
		return api.VMFields{}, &APIError{Message: "no VM " + id, Code: "NOT_FOUND"}
	}
	return r.Vm.VMFields, nil
}

// wait polls op until it has ended, printing a line on stderr whenever its
// state or step changes; a FAILED operation is an error.
func (a *app) wait(cmd *cobra.Command, c graphql.Client, op api.OperationFields) (api.OperationFields, error) {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	last := ""
	start := time.Now()
	for {
		line := fmt.Sprintf("%s %s: %s", strings.ToLower(string(op.Kind)), op.State, op.Step)
		if line != last {
			fmt.Fprintf(stderr, "%s (%s)\n", line, time.Since(start).Round(100*time.Millisecond))
			last = line
		}
		switch op.State {
		case api.OperationStateSucceeded:
			return op, nil
		case api.OperationStateFailed:
			return op, fmt.Errorf("operation %s failed at step %s: %s", op.Id, op.Step, str(op.Error))
		}
		// poll:own-loop: the operation is polled at a fixed pace until it ends.
		select {
		case <-ctx.Done():
			return op, fmt.Errorf("wait for operation %s: %w", op.Id, ctx.Err())
		case <-time.After(a.env.PollInterval):
		}
		r, err := api.GetOperation(ctx, c, op.Id)
		if err != nil {
			return op, AsAPIError("wait for operation "+op.Id, err)
		}
		if r.Operation == nil {
			return op, &APIError{Message: "no operation " + op.Id, Code: "NOT_FOUND"}
		}
		op = r.Operation.OperationFields
	}
}

func (a *app) consoleURLCommand() *cobra.Command {
	return &cobra.Command{Use: "console-url ID", Short: "Open a console session and print its websocket URL (one use)", Args: args(1, "the VM's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.OpenConsole(cmd.Context(), c, argv[0])
			if err != nil {
				return AsAPIError("open console", err)
			}
			s, err := a.settings()
			if err != nil {
				return err
			}
			u, err := url.Parse(s.Endpoint)
			if err != nil {
				return fmt.Errorf("console url: %w", err)
			}
			scheme := "ws"
			if u.Scheme == "https" {
				scheme = "wss"
			}
			ws := scheme + "://" + u.Host + r.OpenConsole.Path
			out := struct {
				URL       string `json:"url"`
				ExpiresAt string `json:"expiresAt"`
			}{ws, r.OpenConsole.ExpiresAt}
			return Write(cmd.OutOrStdout(), a.output, out, func() Table {
				return Table{Header: []string{"URL", "EXPIRES"}, Rows: [][]string{{out.URL, out.ExpiresAt}}}
			})
		})}
}
