package tfprovider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// networkResource is flexplane_network: createNetwork. The API changes no
// network in place, so every change replaces it.
type networkResource struct {
	base
	replaceOnly
}

type networkModel struct {
	ID      types.String `tfsdk:"id"`
	Name    types.String `tfsdk:"name"`
	Zone    types.String `tfsdk:"zone"`
	CIDR    types.String `tfsdk:"cidr"`
	Gateway types.String `tfsdk:"gateway"`
	VNet    types.String `tfsdk:"vnet"`
}

func (r *networkResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_network"
}

// idAttribute is every resource's computed id.
func idAttribute() schema.StringAttribute {
	return schema.StringAttribute{Computed: true, Description: "The object's id.",
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}}
}

// replacing is a required string the API cannot change in place.
func replacing(desc string) schema.StringAttribute {
	return schema.StringAttribute{Required: true, Description: desc,
		PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}}
}

// optionalReplacing is an optional string the API cannot change in place.
func optionalReplacing(desc string) schema.StringAttribute {
	return schema.StringAttribute{Optional: true, Description: desc,
		PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}}
}

// computedDefault is an optional string the API fills in when null, and
// cannot change in place.
func computedDefault(desc string) schema.StringAttribute {
	return schema.StringAttribute{Optional: true, Computed: true, Description: desc,
		PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplaceIfConfigured(), stringplanmodifier.UseStateForUnknown()}}
}

// readOnly is a string only the API sets.
func readOnly(desc string) schema.StringAttribute {
	return schema.StringAttribute{Computed: true, Description: desc}
}

func (r *networkResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A network of the VDC in a zone (createNetwork): a Proxmox SDN VNet with one subnet.",
		Attributes: map[string]schema.Attribute{
			"id":      idAttribute(),
			"name":    replacing("Unique per VDC and zone."),
			"zone":    replacing("The zone's name."),
			"cidr":    replacing("IPv4 network in CIDR notation, e.g. 10.1.0.0/24."),
			"gateway": replacing("The gateway address of its subnet."),
			"vnet": schema.StringAttribute{Computed: true, Description: "The Proxmox VNet (what a NIC's bridge names).",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
		},
	}
}

func (r *networkResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	createWith(ctx, req, resp, "create network", func(ctx context.Context, m *networkModel) error {
		out, err := api.CreateNetwork(ctx, r.c, api.CreateNetworkInput{Name: m.Name.ValueString(), Zone: m.Zone.ValueString(),
			Cidr: m.CIDR.ValueString(), Gateway: m.Gateway.ValueString()})
		if err != nil {
			return err
		}
		setNetwork(m, &out.CreateNetwork.NetworkFields)
		return nil
	})
}

func setNetwork(m *networkModel, n *api.NetworkFields) {
	m.ID, m.Name, m.Zone = types.StringValue(n.Id), types.StringValue(n.Name), types.StringValue(n.Zone.Name)
	m.CIDR, m.Gateway, m.VNet = types.StringValue(n.Cidr), types.StringValue(n.Gateway), types.StringValue(n.Vnet)
}

func (r *networkResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readInto(ctx, req, resp, "read network", func(ctx context.Context, m *networkModel) (bool, error) {
		out, err := api.GetNetwork(ctx, r.c, m.ID.ValueString())
		if err != nil || out.Node == nil {
			return false, err
		}
		n, ok := (*out.Node).(*api.GetNetworkNodeNetwork)
		if ok && n != nil {
			setNetwork(m, &n.NetworkFields)
		}
		return ok && n != nil, nil
	})
}

func (r *networkResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteByID(ctx, req, resp, "delete network", r.c, api.DeleteNetwork)
}
