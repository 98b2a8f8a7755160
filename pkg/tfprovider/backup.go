package tfprovider

import (
	"context"
	"fmt"

	"github.com/Khan/genqlient/graphql"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	dsschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/float64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/flexplane/flexplane/pkg/flexctl"
	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// backupResource is flexplane_backup: createBackup, followed until the
// archive is written, and deleteBackup. A backup is never changed: every
// change of its arguments takes a new one (and deletes the old archive).
// It outlives its VM: its vm argument stays what the configuration gave.
type backupResource struct {
	base
	replaceOnly
}

type backupModel struct {
	ID             types.String  `tfsdk:"id"`
	VM             types.String  `tfsdk:"vm"`
	Description    types.String  `tfsdk:"description"`
	StorageProfile types.String  `tfsdk:"storage_profile"`
	VMName         types.String  `tfsdk:"vm_name"`
	Zone           types.String  `tfsdk:"zone"`
	CreatedAt      types.String  `tfsdk:"created_at"`
	SizeGiB        types.Float64 `tfsdk:"size_gib"`
	Status         types.String  `tfsdk:"status"`
	Message        types.String  `tfsdk:"message"`
}

func (r *backupResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_backup"
}

// kept is a computed string that is the same for the backup's whole life.
func kept(desc string) schema.StringAttribute {
	return schema.StringAttribute{Computed: true, Description: desc,
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}}
}

func (r *backupResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A backup of a VM (createBackup): a vzdump archive of every disk on the zone's backup storage, " +
			"kept when the VM is deleted. Every change of an argument takes a new backup and deletes the old one.",
		Attributes: map[string]schema.Attribute{
			"id":              idAttribute(),
			"vm":              replacing("The id of the VM to back up."),
			"description":     optionalReplacing("Free text kept with the backup, at most 1024 bytes."),
			"storage_profile": optionalReplacing("A storage profile of kind BACKUP; absent takes the VM's zone's only one."),
			"vm_name":         kept("The VM's name when it was taken."),
			"zone":            kept("The zone it is kept in."),
			"created_at":      kept("When it was taken (RFC 3339)."),
			"size_gib": schema.Float64Attribute{Computed: true, Description: "The archive's size in GiB.",
				PlanModifiers: []planmodifier.Float64{float64planmodifier.UseStateForUnknown()}},
			"status":  kept("RUNNING, SUCCEEDED or FAILED."),
			"message": kept("Why it failed, when it did."),
		},
	}
}

func setBackup(m *backupModel, b *api.BackupFields) {
	m.ID, m.VMName, m.Zone = types.StringValue(b.Id), types.StringValue(b.VmName), types.StringValue(b.Zone.Name)
	m.CreatedAt, m.SizeGiB, m.Status = types.StringValue(b.CreatedAt), types.Float64Value(b.SizeGiB), types.StringValue(string(b.Status))
	m.Message, m.Description = stringOf(b.Message), stringOf(b.Description)
	if m.VM.IsNull() && b.Vm != nil { // an import: the VM it was taken of
		m.VM = types.StringValue(b.Vm.Id)
	}
}

func (r *backupResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	createWith(ctx, req, resp, "create backup", func(ctx context.Context, m *backupModel) error {
		vm := m.VM.ValueString()
		before, err := flexctl.VMBackups(ctx, r.c, vm)
		if err != nil {
			return err
		}
		in := api.CreateBackupInput{Description: optString(m.Description), StorageProfile: optString(m.StorageProfile)}
		out, err := api.CreateBackup(ctx, r.c, vm, &in)
		if err != nil {
			return err
		}
		op := out.CreateBackup.OperationFields.Id
		if _, err := waitOperation(ctx, r.c, op); err != nil {
			return err
		}
		after, err := flexctl.VMBackups(ctx, r.c, vm)
		if err != nil {
			return err
		}
		b, ok := flexctl.NewBackup(before, after, in.Description)
		if !ok {
			return fmt.Errorf("operation %s ended without a new backup of VM %s", op, vm)
		}
		setBackup(m, &b)
		return nil
	})
}

func (r *backupResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readInto(ctx, req, resp, "read backup", func(ctx context.Context, m *backupModel) (bool, error) {
		all, err := flexctl.AllBackups(ctx, r.c)
		if err != nil {
			return false, err
		}
		for _, b := range all {
			if b.Id == m.ID.ValueString() {
				setBackup(m, &b)
				return true, nil
			}
		}
		return false, nil
	})
}

func (r *backupResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteByID(ctx, req, resp, "delete backup", r.c, api.DeleteBackup)
}

// backupScheduleResource is flexplane_backup_schedule: a VM's backup
// schedule and retention (setBackupSchedule, removeBackupSchedule), a
// backup job that Proxmox runs. Its id is the VM's id; it changes in
// place.
type backupScheduleResource struct {
	base
}

type backupScheduleModel struct {
	ID             types.String `tfsdk:"id"`
	VM             types.String `tfsdk:"vm"`
	Schedule       types.String `tfsdk:"schedule"`
	KeepLast       types.Int64  `tfsdk:"keep_last"`
	KeepDaily      types.Int64  `tfsdk:"keep_daily"`
	KeepWeekly     types.Int64  `tfsdk:"keep_weekly"`
	StorageProfile types.String `tfsdk:"storage_profile"`
	State          types.String `tfsdk:"state"`
	Message        types.String `tfsdk:"message"`
}

func (r *backupScheduleResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_backup_schedule"
}

func (r *backupScheduleResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	keep := func(what string) schema.Int64Attribute {
		return schema.Int64Attribute{Optional: true, Description: "Keep the newest archive of each of this many last " + what + " (1 to 1000)."}
	}
	resp.Schema = schema.Schema{
		Description: "A VM's backup schedule and retention (setBackupSchedule): a backup job of the VM's zone that " +
			"Proxmox runs, whether or not an orchestrator is up. Its id is the VM's id; changes apply in place.",
		Attributes: map[string]schema.Attribute{
			"id":       idAttribute(),
			"vm":       replacing("The id of the VM."),
			"schedule": schema.StringAttribute{Required: true, Description: "When to back it up: a calendar event in Proxmox's syntax (daily, sat 03:30, mon..fri 02:00)."},
			"keep_last": schema.Int64Attribute{Optional: true,
				Description: "Keep the newest this many archives (1 to 1000). Without keep options every archive is kept."},
			"keep_daily":      keep("days"),
			"keep_weekly":     keep("weeks"),
			"storage_profile": schema.StringAttribute{Optional: true, Description: "A storage profile of kind BACKUP; absent takes the VM's zone's only one."},
			"state":           readOnly("ACTIVE, or PAUSED while the VDC's backups have reached its backupGiB quota."),
			"message":         readOnly("Why it is paused, when it is."),
		},
	}
}

func setSchedule(m *backupScheduleModel, vm string, s *api.BackupScheduleFields) {
	m.ID, m.VM, m.Schedule = types.StringValue(vm), types.StringValue(vm), types.StringValue(s.Schedule)
	m.KeepLast, m.KeepDaily, m.KeepWeekly = intOf(s.KeepLast), intOf(s.KeepDaily), intOf(s.KeepWeekly)
	m.State, m.Message = types.StringValue(string(s.State)), stringOf(s.Message)
}

// set sets the schedule of the plan m and fills m from the API's answer.
func (r *backupScheduleResource) set(ctx context.Context, m *backupScheduleModel) error {
	out, err := api.SetBackupSchedule(ctx, r.c, api.SetBackupScheduleInput{Vm: m.VM.ValueString(), Schedule: m.Schedule.ValueString(),
		KeepLast: optInt(m.KeepLast), KeepDaily: optInt(m.KeepDaily), KeepWeekly: optInt(m.KeepWeekly),
		StorageProfile: optString(m.StorageProfile)})
	if err != nil {
		return err
	}
	s := out.SetBackupSchedule.BackupSchedule
	if s == nil {
		return fmt.Errorf("VM %s has no schedule after it was set", m.VM.ValueString())
	}
	setSchedule(m, out.SetBackupSchedule.Id, &s.BackupScheduleFields)
	return nil
}

func (r *backupScheduleResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	createWith(ctx, req, resp, "set backup schedule", r.set)
}

func (r *backupScheduleResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m backupScheduleModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.set(ctx, &m); err != nil {
		addAPIError(&resp.Diagnostics, "set backup schedule", err)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *backupScheduleResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readInto(ctx, req, resp, "read backup schedule", func(ctx context.Context, m *backupScheduleModel) (bool, error) {
		out, err := api.GetBackupSchedule(ctx, r.c, m.ID.ValueString())
		if err != nil || out.Vm == nil || out.Vm.BackupSchedule == nil {
			return false, err
		}
		setSchedule(m, out.Vm.Id, &out.Vm.BackupSchedule.BackupScheduleFields)
		return true, nil
	})
}

func (r *backupScheduleResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteByID(ctx, req, resp, "remove backup schedule", r.c, api.RemoveBackupSchedule)
}

// backupsDataSource is flexplane_backups: the VDC's backups, newest
// first, or one VM's.
type backupsDataSource struct{ dsBase }

type backupsModel struct {
	VM      types.String       `tfsdk:"vm"`
	Backups []backupEntryModel `tfsdk:"backups"`
}

type backupEntryModel struct {
	ID          types.String  `tfsdk:"id"`
	VM          types.String  `tfsdk:"vm"`
	VMName      types.String  `tfsdk:"vm_name"`
	Zone        types.String  `tfsdk:"zone"`
	CreatedAt   types.String  `tfsdk:"created_at"`
	SizeGiB     types.Float64 `tfsdk:"size_gib"`
	Status      types.String  `tfsdk:"status"`
	Message     types.String  `tfsdk:"message"`
	Description types.String  `tfsdk:"description"`
}

func (d *backupsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_backups"
}

func (d *backupsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = dsschema.Schema{
		Description: "The VDC's backups, newest first; with vm, that VM's only.",
		Attributes: map[string]dsschema.Attribute{
			"vm": dsschema.StringAttribute{Optional: true, Description: "Only the backups of this VM (its id)."},
			"backups": dsschema.ListNestedAttribute{Computed: true, Description: "The backups.",
				NestedObject: dsschema.NestedAttributeObject{Attributes: map[string]dsschema.Attribute{
					"id":          computedString("The backup's id."),
					"vm":          computedString("The VM it was taken of (null once the VM is gone)."),
					"vm_name":     computedString("The VM's name when it was taken."),
					"zone":        computedString("The zone it is kept in."),
					"created_at":  computedString("When it was taken (RFC 3339)."),
					"size_gib":    dsschema.Float64Attribute{Computed: true, Description: "The archive's size in GiB."},
					"status":      computedString("RUNNING, SUCCEEDED or FAILED."),
					"message":     computedString("Why it failed, when it did."),
					"description": computedString("Its description."),
				}}},
		},
	}
}

func (d *backupsDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m backupsModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	list, err := backupsOf(ctx, d.c, optString(m.VM))
	if err != nil {
		addAPIError(&resp.Diagnostics, "read backups", err)
		return
	}
	m.Backups = []backupEntryModel{}
	for _, b := range list {
		e := backupEntryModel{ID: types.StringValue(b.Id), VM: types.StringNull(), VMName: types.StringValue(b.VmName),
			Zone: types.StringValue(b.Zone.Name), CreatedAt: types.StringValue(b.CreatedAt), SizeGiB: types.Float64Value(b.SizeGiB),
			Status: types.StringValue(string(b.Status)), Message: stringOf(b.Message), Description: stringOf(b.Description)}
		if b.Vm != nil {
			e.VM = types.StringValue(b.Vm.Id)
		}
		m.Backups = append(m.Backups, e)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// backupsOf are the VDC's backups, or VM vm's when vm is not nil.
func backupsOf(ctx context.Context, c graphql.Client, vm *string) ([]api.BackupFields, error) {
	if vm != nil {
		return flexctl.VMBackups(ctx, c, *vm)
	}
	return flexctl.AllBackups(ctx, c)
}
