package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/flexplane/flexplane/pkg/flexctl"
	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// Default timeouts of a VM's operations (the timeouts block overrides them).
const (
	vmCreateTimeout = 15 * time.Minute
	vmUpdateTimeout = 10 * time.Minute
	vmDeleteTimeout = 10 * time.Minute
)

// vmResource is flexplane_vm: createVM, followed to its end. In place it
// changes its compute profile (resizeVM, rebooting it when the new size
// needs a reboot), grows its boot disk (resizeDisk) and changes its
// security groups (setVMSecurityGroups); a smaller disk is refused at plan
// time; keep_backups only says what its delete does; any other change
// replaces it.
type vmResource struct{ base }

type vmModel struct {
	ID             types.String   `tfsdk:"id"`
	Name           types.String   `tfsdk:"name"`
	Zone           types.String   `tfsdk:"zone"`
	Image          types.String   `tfsdk:"image"`
	ISO            types.String   `tfsdk:"iso"`
	ComputeProfile types.String   `tfsdk:"compute_profile"`
	StorageProfile types.String   `tfsdk:"storage_profile"`
	DiskGiB        types.Int64    `tfsdk:"disk_gib"`
	NICs           []nicModel     `tfsdk:"nics"`
	SSHKeys        types.List     `tfsdk:"ssh_keys"`
	SSHKeyNames    types.List     `tfsdk:"ssh_key_names"`
	User           types.String   `tfsdk:"user"`
	SecurityGroups types.List     `tfsdk:"security_groups"`
	UserData       types.String   `tfsdk:"user_data"`
	Host           types.String   `tfsdk:"host"`
	PlacementGroup types.String   `tfsdk:"placement_group"`
	Status         types.String   `tfsdk:"status"`
	IPAddresses    types.List     `tfsdk:"ip_addresses"`
	KeepBackups    types.Bool     `tfsdk:"keep_backups"`
	Timeouts       timeouts.Value `tfsdk:"timeouts"`
}

type nicModel struct {
	Network types.String `tfsdk:"network"`
	Address types.String `tfsdk:"address"`
}

func (r *vmResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_vm"
}

func (r *vmResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replaceList := []planmodifier.List{listplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "A VM of the VDC (createVM, followed until it runs). image, iso, storage_profile, user, " +
			"ssh_keys, ssh_key_names, user_data and the NICs replace it when changed; compute_profile (resizeVM, " +
			"rebooting when needed), a larger disk_gib (resizeDisk) and security_groups change in place; a smaller " +
			"disk_gib is refused.",
		Attributes: map[string]schema.Attribute{
			"id":              idAttribute(),
			"name":            replacing("A DNS name, the guest's hostname (not unique)."),
			"zone":            replacing("The zone's name."),
			"image":           optionalReplacing("An image of the catalog the disk is cloned from; image, iso or both."),
			"iso":             optionalReplacing("An ISO image of the VDC in the VM's CD-ROM drive, booted first; alone, the VM gets a blank disk."),
			"compute_profile": schema.StringAttribute{Required: true, Description: "A compute profile (vCPUs and memory); changed in place with resizeVM."},
			"storage_profile": replacing("A storage profile with a pool in the zone."),
			"disk_gib":        schema.Int64Attribute{Required: true, Description: "Boot disk size in GiB; at least the image's size. Grown in place with resizeDisk; it never shrinks.", PlanModifiers: []planmodifier.Int64{diskOnlyGrows{}}},
			"user":            replacing("The cloud-init user to create."),
			"ssh_keys":        schema.ListAttribute{ElementType: types.StringType, Optional: true, Sensitive: true, Description: "OpenSSH public keys for the cloud-init user.", PlanModifiers: replaceList},
			"ssh_key_names":   schema.ListAttribute{ElementType: types.StringType, Optional: true, Description: "Names of the caller's SSH keys for the cloud-init user too.", PlanModifiers: replaceList},
			"user_data":       schema.StringAttribute{Optional: true, Sensitive: true, Description: "The guest's own cloud-init user-data (never read back).", PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
			"placement_group": optionalReplacing("A placement group of the VDC in the zone that the VM joins."),
			"host":            computedDefault("Pins the VM to a host of the zone (ADMIN only); read back as the host it runs on."),
			"security_groups": schema.ListAttribute{ElementType: types.StringType, Optional: true, Computed: true, Description: "The VDC's security groups it is in; unset: the VDC's default group. Changed in place.", PlanModifiers: []planmodifier.List{listplanmodifier.UseStateForUnknown()}},
			"status":          readOnly("Its power state: CREATING, RUNNING, STOPPED, PAUSED or UNKNOWN."),
			"ip_addresses":    schema.ListAttribute{ElementType: types.StringType, Computed: true, Description: "Addresses the Proxmox IPAM holds for it."},
			"keep_backups": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				Description: "Whether the VM's backups stay when it is destroyed (deleteVM's keepBackups); false deletes them after it. Changing it calls no API."},
			"timeouts": timeouts.Attributes(ctx, timeouts.Opts{Create: true, Update: true, Delete: true}),
			"nics": schema.ListNestedAttribute{Required: true, Description: "1 to 4 NICs on networks of the VDC in the VM's zone.",
				PlanModifiers: []planmodifier.List{listplanmodifier.RequiresReplaceIf(nicCountChanged, "a VM's NICs are fixed", "a VM's NICs are fixed")},
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"network": replacing("The id of a network of the VDC in the VM's zone."),
					"address": computedDefault("A static address inside the network's subnet; unset takes the first free address."),
				}}},
		},
	}
}

// nicCountChanged replaces a VM whose number of NICs changes (a change of
// one NIC replaces it through the NIC's own attributes).
func nicCountChanged(_ context.Context, req planmodifier.ListRequest, resp *listplanmodifier.RequiresReplaceIfFuncResponse) {
	resp.RequiresReplace = !req.StateValue.IsNull() && !req.PlanValue.IsUnknown() && len(req.PlanValue.Elements()) != len(req.StateValue.Elements())
}

// diskOnlyGrows refuses, at plan time and on its attribute (a VM's
// disk_gib, a disk's size_gib), a disk smaller than the one the state
// holds: resizeDisk only grows a disk, and a replacement would destroy
// its data.
type diskOnlyGrows struct{}

func (diskOnlyGrows) Description(context.Context) string {
	return "a disk only grows: a smaller size is refused"
}

func (d diskOnlyGrows) MarkdownDescription(ctx context.Context) string { return d.Description(ctx) }

func (diskOnlyGrows) PlanModifyInt64(_ context.Context, req planmodifier.Int64Request, resp *planmodifier.Int64Response) {
	if req.StateValue.IsNull() || req.StateValue.IsUnknown() || req.PlanValue.IsNull() || req.PlanValue.IsUnknown() {
		return
	}
	if was, now := req.StateValue.ValueInt64(), req.PlanValue.ValueInt64(); now < was {
		resp.Diagnostics.AddAttributeError(req.Path, req.Path.String()+" cannot shrink",
			fmt.Sprintf("%s: a disk only grows: %d GiB is less than its %d GiB (replacing it would destroy its data)", req.Path, now, was))
	}
}

func (r *vmResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m vmModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := m.Timeouts.Create(ctx, vmCreateTimeout)
	resp.Diagnostics.Append(d...)
	in := api.CreateVMInput{Name: m.Name.ValueString(), Zone: m.Zone.ValueString(), Image: optString(m.Image), Iso: optString(m.ISO),
		ComputeProfile: m.ComputeProfile.ValueString(), StorageProfile: m.StorageProfile.ValueString(),
		DiskGiB: int(m.DiskGiB.ValueInt64()), User: m.User.ValueString(), UserData: optString(m.UserData),
		Host: optString(m.Host), PlacementGroup: optString(m.PlacementGroup),
		SshKeys:        stringsOf(ctx, m.SSHKeys, &resp.Diagnostics),
		SshKeyNames:    stringsOf(ctx, m.SSHKeyNames, &resp.Diagnostics),
		SecurityGroups: stringsOf(ctx, m.SecurityGroups, &resp.Diagnostics)}
	for _, n := range m.NICs {
		in.Nics = append(in.Nics, api.NICInput{Network: n.Network.ValueString(), Address: optString(n.Address)})
	}
	if resp.Diagnostics.HasError() {
		return
	}
	out, err := api.CreateVM(ctx, r.c, in)
	if err != nil {
		addAPIError(&resp.Diagnostics, "create VM", err)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	id, werr := waitOperation(wctx, r.c, out.CreateVM.Operation.Id)
	if id == "" && out.CreateVM.Vm != nil {
		id = out.CreateVM.Vm.Id
	}
	if id == "" {
		resp.Diagnostics.AddError("create VM", "the create ended without a VM: "+errText(werr))
		return
	}
	m.ID = types.StringValue(id)
	if _, err := r.read(ctx, &m); err != nil {
		addAPIError(&resp.Diagnostics, "read VM", err)
	}
	// A VM that exists is kept in the state even when its create failed, so
	// that it is tainted and replaced rather than forgotten.
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	if werr != nil {
		resp.Diagnostics.AddError("create VM", werr.Error())
	}
}

func errText(err error) string {
	if err == nil {
		return "no error reported"
	}
	return err.Error()
}

// read fills m from the API; found is false when the VM is gone.
func (r *vmResource) read(ctx context.Context, m *vmModel) (found bool, err error) {
	out, err := api.GetVMResource(ctx, r.c, m.ID.ValueString())
	if isNotFound(err) || (err == nil && out.Vm == nil) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	v := out.Vm
	m.Name, m.Zone, m.Status = types.StringValue(v.Name), types.StringValue(v.Zone.Name), types.StringValue(string(v.Status))
	if v.Host != nil {
		m.Host = types.StringValue(v.Host.Name)
	} else if m.Host.IsUnknown() {
		m.Host = types.StringNull()
	}
	if m.DiskGiB.IsNull() || m.DiskGiB.IsUnknown() {
		m.DiskGiB = types.Int64Value(int64(v.DiskGiB))
	}
	m.IPAddresses = listOf(v.IpAddresses)
	if m.KeepBackups.IsNull() || m.KeepBackups.IsUnknown() { // an import: the default
		m.KeepBackups = types.BoolValue(true)
	}
	m.SecurityGroups = listOf(v.SecurityGroups)
	if v.PlacementGroup != nil {
		m.PlacementGroup = types.StringValue(v.PlacementGroup.Name)
	} else {
		m.PlacementGroup = types.StringNull()
	}
	nics := v.Nics
	sort.Slice(nics, func(i, j int) bool { return nics[i].Index < nics[j].Index })
	m.NICs = m.NICs[:0:0]
	for _, n := range nics {
		nm := nicModel{Network: types.StringNull(), Address: types.StringNull()}
		if n.Network != nil {
			nm.Network = types.StringValue(n.Network.Id)
		}
		if len(n.IpAddresses) > 0 {
			nm.Address = types.StringValue(n.IpAddresses[0])
		}
		m.NICs = append(m.NICs, nm)
	}
	return true, nil
}

func (r *vmResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readInto(ctx, req, resp, "read VM", r.read)
}

func (r *vmResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state vmModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := plan.Timeouts.Update(ctx, vmUpdateTimeout)
	resp.Diagnostics.Append(d...)
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	id := state.ID.ValueString()
	if !plan.ComputeProfile.Equal(state.ComputeProfile) {
		op, err := r.resize(wctx, id, plan.ComputeProfile.ValueString())
		if err != nil {
			addAPIError(&resp.Diagnostics, "resize VM", err)
			return
		}
		if _, err := waitOperation(wctx, r.c, op); err != nil {
			resp.Diagnostics.AddError("resize VM", err.Error())
			return
		}
	}
	if plan.DiskGiB.ValueInt64() > state.DiskGiB.ValueInt64() {
		if err := r.growBootDisk(wctx, id, int(plan.DiskGiB.ValueInt64())); err != nil {
			addAPIError(&resp.Diagnostics, "resize disk", err)
			return
		}
	}
	if !plan.SecurityGroups.IsUnknown() && !plan.SecurityGroups.Equal(state.SecurityGroups) {
		groups := stringsOf(ctx, plan.SecurityGroups, &resp.Diagnostics)
		if groups == nil {
			groups = []string{}
		}
		if _, err := api.SetVMSecurityGroups(wctx, r.c, api.SetVMSecurityGroupsInput{Vm: id, SecurityGroups: groups}); err != nil {
			addAPIError(&resp.Diagnostics, "set VM security groups", err)
			return
		}
	}
	plan.ID = state.ID
	found, err := r.read(ctx, &plan)
	switch {
	case err != nil:
		addAPIError(&resp.Diagnostics, "read VM", err)
	case !found:
		resp.Diagnostics.AddError("update VM", "the VM "+id+" is gone")
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func ptr[T any](v T) *T { return &v }

// resizeRetries is how often a resize refused as CONFLICT is tried again:
// the API refuses a resize whose read of the VM's configuration another
// write (a security group's firewall, a power action) overtook.
const resizeRetries = 5

// resize asks resizeVM for the VM's new compute profile, rebooting it when
// needed, and returns the operation's id.
func (r *vmResource) resize(ctx context.Context, id, profile string) (string, error) {
	var op string
	err := retryConflict(ctx, func() error {
		out, err := api.ResizeVM(ctx, r.c, api.ResizeVMInput{Id: id, ComputeProfile: profile, Reboot: ptr(true)})
		if err == nil {
			op = out.ResizeVM.Id
		}
		return err
	})
	return op, err
}

// growBootDisk grows the VM's boot disk (the slot VMDisk.boot names) to
// gib with resizeDisk.
func (r *vmResource) growBootDisk(ctx context.Context, id string, gib int) error {
	out, err := api.GetVMResource(ctx, r.c, id)
	if err != nil {
		return err
	}
	slot := ""
	if out.Vm != nil {
		for _, d := range out.Vm.Disks {
			if d.Boot {
				slot = d.Slot
			}
		}
	}
	if slot == "" {
		return fmt.Errorf("the VM %s has no boot disk", id)
	}
	return retryConflict(ctx, func() error {
		_, err := api.ResizeDisk(ctx, r.c, api.ResizeDiskInput{Vm: id, Disk: slot, SizeGiB: gib})
		return err
	})
}

// retryConflict calls f until it returns anything but CONFLICT, at most
// resizeRetries times more, backing off between the calls.
func retryConflict(ctx context.Context, f func() error) error {
	for i := 0; ; i++ {
		err := f()
		if err == nil {
			return nil
		}
		var ae *flexctl.APIError
		if i == resizeRetries || !errors.As(flexctl.AsAPIError("", err), &ae) || ae.Code != "CONFLICT" {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(i+1) * 250 * time.Millisecond):
		}
	}
}

func (r *vmResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m vmModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := m.Timeouts.Delete(ctx, vmDeleteTimeout)
	resp.Diagnostics.Append(d...)
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := api.DeleteVM(wctx, r.c, m.ID.ValueString(), ptr(m.KeepBackups.ValueBool()))
	if isNotFound(err) {
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "delete VM", err)
		return
	}
	if _, err := waitOperation(wctx, r.c, out.DeleteVM.Id); err != nil {
		resp.Diagnostics.AddError("delete VM", err.Error())
	}
}
