package flexctl

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// scheduleTable is the table of VM vm's backup schedule s (nil: none).
func scheduleTable(vm string, s *api.BackupScheduleFields) func() Table {
	return func() Table {
		t := Table{Header: []string{"VM-ID", "SCHEDULE", "KEEP-LAST", "KEEP-DAILY", "KEEP-WEEKLY", "STATE", "MESSAGE"}}
		if s == nil {
			t.Rows = append(t.Rows, []string{vm, "(none)", "", "", "", "", ""})
			return t
		}
		t.Rows = append(t.Rows, []string{vm, s.Schedule, intStr(s.KeepLast), intStr(s.KeepDaily), intStr(s.KeepWeekly),
			string(s.State), str(s.Message)})
		return t
	}
}

// intStr is *p in decimal, or "" for nil.
func intStr(p *int) string {
	if p == nil {
		return ""
	}
	return strconv.Itoa(*p)
}

// backupScheduleCommand is "backup schedule set|show|remove".
func (a *app) backupScheduleCommand() *cobra.Command {
	sched := group("schedule", "A VM's schedule of backups, which Proxmox runs: set, show, remove")
	sched.AddCommand(a.backupScheduleSetCommand(), a.backupScheduleShowCommand(), a.backupScheduleRemoveCommand())
	return sched
}

func (a *app) backupScheduleSetCommand() *cobra.Command {
	var schedule, profile string
	var keepLast, keepDaily, keepWeekly int
	cmd := &cobra.Command{Use: "set VM-ID", Short: "Set (or replace) a VM's backup schedule and keep options", Args: args(1, "the VM's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			in := api.SetBackupScheduleInput{Vm: argv[0], Schedule: schedule}
			f := cmd.Flags()
			if f.Changed("keep-last") {
				in.KeepLast = &keepLast
			}
			if f.Changed("keep-daily") {
				in.KeepDaily = &keepDaily
			}
			if f.Changed("keep-weekly") {
				in.KeepWeekly = &keepWeekly
			}
			if f.Changed("storage-profile") {
				in.StorageProfile = &profile
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.SetBackupSchedule(cmd.Context(), c, in)
			if err != nil {
				return AsAPIError("set backup schedule", err)
			}
			s := r.SetBackupSchedule.BackupSchedule
			var fields *api.BackupScheduleFields
			if s != nil {
				fields = &s.BackupScheduleFields
			}
			return Write(cmd.OutOrStdout(), a.output, fields, scheduleTable(r.SetBackupSchedule.Id, fields))
		})}
	f := cmd.Flags()
	f.StringVar(&schedule, "schedule", "", "when to back it up: a calendar event in Proxmox's syntax (daily, sat 03:30, mon..fri 02:00)")
	f.IntVar(&keepLast, "keep-last", 0, "keep the newest this many archives (1 to 1000)")
	f.IntVar(&keepDaily, "keep-daily", 0, "keep the newest archive of each of this many last days (1 to 1000)")
	f.IntVar(&keepWeekly, "keep-weekly", 0, "keep the newest archive of each of this many last weeks (1 to 1000)")
	f.StringVar(&profile, "storage-profile", "", "a storage profile of kind BACKUP (default: the zone's only one)")
	_ = cmd.MarkFlagRequired("schedule")
	return cmd
}

func (a *app) backupScheduleShowCommand() *cobra.Command {
	return &cobra.Command{Use: "show VM-ID", Short: "Show a VM's backup schedule: its keep options, state and message", Args: args(1, "the VM's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.GetBackupSchedule(cmd.Context(), c, argv[0])
			if err != nil {
				return AsAPIError("show backup schedule", err)
			}
			if r.Vm == nil {
				return &APIError{Message: "show backup schedule: no VM " + argv[0], Code: "NOT_FOUND"}
			}
			var fields *api.BackupScheduleFields
			if r.Vm.BackupSchedule != nil {
				fields = &r.Vm.BackupSchedule.BackupScheduleFields
			}
			return Write(cmd.OutOrStdout(), a.output, fields, scheduleTable(r.Vm.Id, fields))
		})}
}

func (a *app) backupScheduleRemoveCommand() *cobra.Command {
	return &cobra.Command{Use: "remove VM-ID", Short: "Remove a VM's backup schedule (its backups stay)", Args: args(1, "the VM's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.RemoveBackupSchedule(cmd.Context(), c, argv[0])
			if err != nil {
				return AsAPIError("remove backup schedule", err)
			}
			return Write(cmd.OutOrStdout(), a.output, (*api.BackupScheduleFields)(nil), scheduleTable(r.RemoveBackupSchedule.Id, nil))
		})}
}
