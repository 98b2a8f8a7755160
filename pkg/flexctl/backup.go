package flexctl

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/Khan/genqlient/graphql"
	"github.com/spf13/cobra"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

func backupTable(backups []api.BackupFields) func() Table {
	return func() Table {
		t := Table{Header: []string{"ID", "VM", "VM-ID", "ZONE", "CREATED", "SIZE", "STATUS", "DESCRIPTION"}}
		for _, b := range backups {
			vm := ""
			if b.Vm != nil {
				vm = b.Vm.Id
			}
			status := string(b.Status)
			if b.Message != nil {
				status += ": " + *b.Message
			}
			t.Rows = append(t.Rows, []string{b.Id, b.VmName, vm, b.Zone.Name, b.CreatedAt,
				strconv.FormatFloat(b.SizeGiB, 'f', 2, 64) + " GiB", status, str(b.Description)})
		}
		return t
	}
}

func (a *app) backupCommand() *cobra.Command {
	backup := group("backup", "Backups of the VDC's VMs: list, create, delete, restore, schedule")

	var vmOf string
	list := listCommand(a, "List the VDC's backups, newest first (--vm: one VM's)", "list backups",
		func(ctx context.Context, c graphql.Client, after *string) ([]api.BackupFields, pageInfo, error) {
			if vmOf != "" {
				out, err := VMBackups(ctx, c, vmOf)
				return out, nil, err
			}
			r, err := api.ListBackups(ctx, c, pageSize, after)
			if err != nil {
				return nil, nil, err
			}
			var out []api.BackupFields
			for _, n := range r.Backups.Nodes {
				out = append(out, n.BackupFields)
			}
			return out, &r.Backups.PageInfo, nil
		}, backupTable)
	list.Flags().StringVar(&vmOf, "vm", "", "only the backups of this VM (its id)")

	backup.AddCommand(list, a.backupCreateCommand(),
		deleteCommand(a, "Delete a backup (its archive)", "delete backup", func(ctx context.Context, c graphql.Client, id string) (string, error) {
			r, err := api.DeleteBackup(ctx, c, id)
			if err != nil {
				return "", err
			}
			return r.DeleteBackup.Id, nil
		}),
		a.backupRestoreCommand(), a.backupScheduleCommand())
	return backup
}

// VMBackups are the backups of VM vm, newest first (NOT_FOUND when the
// VDC has no such VM).
func VMBackups(ctx context.Context, c graphql.Client, vm string) ([]api.BackupFields, error) {
	r, err := api.ListVMBackups(ctx, c, vm)
	if err != nil {
		return nil, err
	}
	if r.Vm == nil {
		return nil, &APIError{Message: "no VM " + vm, Code: "NOT_FOUND"}
	}
	out := []api.BackupFields{}
	for _, b := range r.Vm.Backups {
		out = append(out, b.BackupFields)
	}
	return out, nil
}

// AllBackups are every backup of the VDC, newest first, read page by page.
func AllBackups(ctx context.Context, c graphql.Client) ([]api.BackupFields, error) {
	out := []api.BackupFields{}
	var after *string
	for {
		r, err := api.ListBackups(ctx, c, pageSize, after)
		if err != nil {
			return nil, err
		}
		for _, n := range r.Backups.Nodes {
			out = append(out, n.BackupFields)
		}
		if !r.Backups.PageInfo.HasNextPage || r.Backups.PageInfo.EndCursor == nil {
			return out, nil
		}
		after = r.Backups.PageInfo.EndCursor
	}
}

// NewBackup is the backup of after that before does not hold and whose
// description is description (nil: none), the one a create wrote: a
// scheduled run at the same time writes one without it, or with the
// schedule's notes.
func NewBackup(before, after []api.BackupFields, description *string) (api.BackupFields, bool) {
	for _, b := range after {
		if slices.ContainsFunc(before, func(o api.BackupFields) bool { return o.Id == b.Id }) {
			continue
		}
		if str(b.Description) == str(description) {
			return b, true
		}
	}
	return api.BackupFields{}, false
}

func (a *app) backupCreateCommand() *cobra.Command {
	var description, profile string
	var wait bool
	cmd := &cobra.Command{Use: "create VM-ID", Short: "Back a VM up (with --wait, until the backup is written)", Args: args(1, "the VM's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			ctx := cmd.Context()
			var in api.CreateBackupInput
			if cmd.Flags().Changed("description") {
				in.Description = &description
			}
			if cmd.Flags().Changed("storage-profile") {
				in.StorageProfile = &profile
			}
			c, err := a.client(ctx)
			if err != nil {
				return err
			}
			// The backups the VM had before: the one this create writes is
			// the one that was not there.
			var before []api.BackupFields
			if wait {
				if before, err = VMBackups(ctx, c, argv[0]); err != nil {
					return AsAPIError("create backup", err)
				}
			}
			r, err := api.CreateBackup(ctx, c, argv[0], &in)
			if err != nil {
				return AsAPIError("create backup", err)
			}
			op := r.CreateBackup.OperationFields
			if !wait {
				return Write(cmd.OutOrStdout(), a.output, op, opTable([]api.OperationFields{op}))
			}
			if op, err = a.wait(cmd, c, op); err != nil {
				return err
			}
			after, err := VMBackups(ctx, c, argv[0])
			if err != nil {
				return AsAPIError("create backup", err)
			}
			if b, ok := NewBackup(before, after, in.Description); ok {
				return Write(cmd.OutOrStdout(), a.output, b, backupTable([]api.BackupFields{b}))
			}
			return fmt.Errorf("create backup: operation %s ended without a new backup of VM %s", op.Id, argv[0])
		})}
	f := cmd.Flags()
	f.StringVar(&description, "description", "", "free text kept with the backup (at most 1024 bytes)")
	f.StringVar(&profile, "storage-profile", "", "a storage profile of kind BACKUP (default: the zone's only one)")
	f.BoolVar(&wait, "wait", false, "follow the backup to its end, with a progress line on stderr, and print the backup")
	return cmd
}

func (a *app) backupRestoreCommand() *cobra.Command {
	var host string
	var wait bool
	cmd := &cobra.Command{Use: "restore BACKUP-ID NAME", Short: "Restore a backup into a new VM NAME (with --wait, until it runs)",
		Args: args(2, "the backup's id and the new VM's name"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			in := api.RestoreBackupInput{Backup: argv[0], Name: argv[1]}
			if cmd.Flags().Changed("host") {
				in.Host = &host
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.RestoreBackup(cmd.Context(), c, in)
			if err != nil {
				return AsAPIError("restore backup", err)
			}
			op := r.RestoreBackup.OperationFields
			if !wait {
				return Write(cmd.OutOrStdout(), a.output, op, opTable([]api.OperationFields{op}))
			}
			return a.writeCreatedVM(cmd, c, op, "restore backup")
		})}
	cmd.Flags().StringVar(&host, "host", "", "the host to put the VM on (an ADMIN's choice)")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the restore to its end, with a progress line on stderr, and print the new VM")
	return cmd
}
