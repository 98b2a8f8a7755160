package tfprovider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/flexplane/flexplane/pkg/flexctl"
	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// diskResource is flexplane_disk: a data disk of a VM (attachDisk), grown
// in place (resizeDisk) and removed with detachDisk. Its id is the VM's
// id and the disk's slot, VM-ID/SLOT.
type diskResource struct {
	base
}

type diskModel struct {
	ID             types.String `tfsdk:"id"`
	VM             types.String `tfsdk:"vm"`
	SizeGiB        types.Int64  `tfsdk:"size_gib"`
	StorageProfile types.String `tfsdk:"storage_profile"`
	KeepOnDestroy  types.Bool   `tfsdk:"keep_on_destroy"`
	Slot           types.String `tfsdk:"slot"`
	Storage        types.String `tfsdk:"storage"`
}

func (r *diskResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_disk"
}

func (r *diskResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A data disk of a VM (attachDisk), hot-plugged into a running one. A larger size_gib grows it in place " +
			"(resizeDisk); it never shrinks. Its id is VM-ID/SLOT.",
		Attributes: map[string]schema.Attribute{
			"id": idAttribute(),
			"vm": replacing("The id of the VM."),
			"size_gib": schema.Int64Attribute{Required: true, Description: "Its size in GiB, 1 to 65536; grown in place, never shrunk.",
				PlanModifiers: []planmodifier.Int64{diskOnlyGrows{}}},
			"storage_profile": computedDefault("The storage profile of its storage in the VM's zone; absent takes the boot disk's."),
			"keep_on_destroy": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				Description: "On destroy, keep the volume as an unused disk of the VM (still counted in the storage quota) instead of deleting it."},
			"slot":    kept("Its Proxmox slot, e.g. scsi1."),
			"storage": kept("The Proxmox storage holding it."),
		},
	}
}

// diskID is a disk's resource id.
func diskID(vm, slot string) string { return vm + "/" + slot }

// splitDiskID is the VM and the slot of a disk's resource id.
func splitDiskID(id string) (vm, slot string, err error) {
	vm, slot, ok := strings.Cut(id, "/")
	if !ok || vm == "" || slot == "" {
		return "", "", fmt.Errorf("a disk's id is VM-ID/SLOT, e.g. vm-1/scsi1: got %q", id)
	}
	return vm, slot, nil
}

func setDisk(m *diskModel, vm string, d *api.DiskFields) {
	m.ID, m.VM, m.Slot, m.Storage = types.StringValue(diskID(vm, d.Slot)), types.StringValue(vm), types.StringValue(d.Slot), types.StringValue(d.Storage)
	m.SizeGiB = types.Int64Value(int64(d.SizeGiB))
	if d.StorageProfile != nil {
		m.StorageProfile = types.StringValue(d.StorageProfile.Name)
	} else if m.StorageProfile.IsUnknown() {
		m.StorageProfile = types.StringNull()
	}
	if m.KeepOnDestroy.IsNull() || m.KeepOnDestroy.IsUnknown() {
		m.KeepOnDestroy = types.BoolValue(false)
	}
}

func (r *diskResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	createWith(ctx, req, resp, "attach disk", func(ctx context.Context, m *diskModel) error {
		vm := m.VM.ValueString()
		var d api.DiskFields
		err := retryConflict(ctx, func() error {
			out, err := api.AttachDisk(ctx, r.c, api.AttachDiskInput{Vm: vm, SizeGiB: int(m.SizeGiB.ValueInt64()),
				StorageProfile: optString(m.StorageProfile)})
			if err == nil {
				d = out.AttachDisk.DiskFields
			}
			return err
		})
		if err != nil {
			return err
		}
		setDisk(m, vm, &d)
		return nil
	})
}

func (r *diskResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readInto(ctx, req, resp, "read disk", func(ctx context.Context, m *diskModel) (bool, error) {
		vm, slot, err := splitDiskID(m.ID.ValueString())
		if err != nil {
			return false, err
		}
		disks, err := flexctl.VMDisks(ctx, r.c, vm)
		if err != nil {
			return false, err
		}
		for _, d := range disks {
			if d.Slot == slot && !d.Boot {
				setDisk(m, vm, &d)
				return true, nil
			}
		}
		return false, nil
	})
}

func (r *diskResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m, state diskModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	vm, slot := state.VM.ValueString(), state.Slot.ValueString()
	if m.SizeGiB.ValueInt64() != state.SizeGiB.ValueInt64() {
		var d api.DiskFields
		err := retryConflict(ctx, func() error {
			out, err := api.ResizeDisk(ctx, r.c, api.ResizeDiskInput{Vm: vm, Disk: slot, SizeGiB: int(m.SizeGiB.ValueInt64())})
			if err == nil {
				d = out.ResizeDisk.DiskFields
			}
			return err
		})
		if err != nil {
			addAPIError(&resp.Diagnostics, "resize disk", err)
			return
		}
		setDisk(&m, vm, &d)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *diskResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m diskModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	keep := m.KeepOnDestroy.ValueBool()
	err := retryConflict(ctx, func() error {
		_, err := api.DetachDisk(ctx, r.c, api.DetachDiskInput{Vm: m.VM.ValueString(), Disk: m.Slot.ValueString(), Keep: &keep})
		return err
	})
	if err != nil && !isNotFound(err) {
		addAPIError(&resp.Diagnostics, "detach disk", err)
	}
}

func (r *diskResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if _, _, err := splitDiskID(req.ID); err != nil {
		resp.Diagnostics.AddError("import disk", err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
}
