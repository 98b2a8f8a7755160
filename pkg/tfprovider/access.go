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

// securityGroupResource is flexplane_security_group: createSecurityGroup;
// its description and rules change in place (updateSecurityGroup).
type securityGroupResource struct{ base }

type securityGroupModel struct {
	ID          types.String `tfsdk:"id"`
	Name        types.String `tfsdk:"name"`
	Description types.String `tfsdk:"description"`
	Rules       []ruleModel  `tfsdk:"rules"`
}

type ruleModel struct {
	Direction   types.String `tfsdk:"direction"`
	Protocol    types.String `tfsdk:"protocol"`
	Ports       types.String `tfsdk:"ports"`
	PeerCIDR    types.String `tfsdk:"peer_cidr"`
	PeerGroup   types.String `tfsdk:"peer_group"`
	Description types.String `tfsdk:"description"`
}

func (r *securityGroupResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_security_group"
}

func (r *securityGroupResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	opt := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, Description: desc}
	}
	resp.Schema = schema.Schema{
		Description: "A security group of the VDC (createSecurityGroup): rules that allow traffic to and from its member VMs. Its description and rules change in place.",
		Attributes: map[string]schema.Attribute{
			"id":   idAttribute(),
			"name": replacing("A DNS label, unique in the VDC."),
			"description": schema.StringAttribute{Optional: true, Computed: true, Description: "Free text.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"rules": schema.ListNestedAttribute{Required: true, Description: "What the group allows (at most 200 rules).",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"direction":   schema.StringAttribute{Required: true, Description: "INBOUND or OUTBOUND."},
					"protocol":    schema.StringAttribute{Required: true, Description: "TCP, UDP, ICMP or ANY."},
					"ports":       opt("Ports as Proxmox writes them (22, 8000:8100, 80,443); unset: all."),
					"peer_cidr":   opt("The peer's CIDR."),
					"peer_group":  opt("Another security group of the VDC, by name, as the peer."),
					"description": opt("Free text."),
				}}},
		},
	}
}

func (r *securityGroupResource) rules(m *securityGroupModel) []api.SecurityRuleInput {
	out := []api.SecurityRuleInput{}
	for _, x := range m.Rules {
		out = append(out, api.SecurityRuleInput{Direction: api.FirewallDirection(x.Direction.ValueString()),
			Protocol: api.SecurityProtocol(x.Protocol.ValueString()), Ports: optString(x.Ports),
			PeerCidr: optString(x.PeerCIDR), PeerGroup: optString(x.PeerGroup), Description: optString(x.Description)})
	}
	return out
}

func setSecurityGroup(m *securityGroupModel, g *api.SecurityGroupFields) {
	m.ID, m.Name, m.Description = types.StringValue(g.Id), types.StringValue(g.Name), types.StringValue(g.Description)
	m.Rules = []ruleModel{}
	for _, x := range g.Rules {
		m.Rules = append(m.Rules, ruleModel{Direction: types.StringValue(string(x.Direction)), Protocol: types.StringValue(string(x.Protocol)),
			Ports: stringOf(x.Ports), PeerCIDR: stringOf(x.PeerCidr), PeerGroup: stringOf(x.PeerGroup), Description: stringOf(x.Description)})
	}
}

func (r *securityGroupResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	createWith(ctx, req, resp, "create security group", func(ctx context.Context, m *securityGroupModel) error {
		out, err := api.CreateSecurityGroup(ctx, r.c, api.CreateSecurityGroupInput{Name: m.Name.ValueString(),
			Description: optString(m.Description), Rules: r.rules(m)})
		if err != nil {
			return err
		}
		setSecurityGroup(m, &out.CreateSecurityGroup.SecurityGroupFields)
		return nil
	})
}

func (r *securityGroupResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readInto(ctx, req, resp, "read security group", func(ctx context.Context, m *securityGroupModel) (bool, error) {
		out, err := api.ListSecurityGroups(ctx, r.c)
		if err != nil {
			return false, err
		}
		for _, g := range out.SecurityGroups {
			if g.Id == m.ID.ValueString() {
				setSecurityGroup(m, &g.SecurityGroupFields)
				return true, nil
			}
		}
		return false, nil
	})
}

func (r *securityGroupResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m, state securityGroupModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	out, err := api.UpdateSecurityGroup(ctx, r.c, api.UpdateSecurityGroupInput{Id: state.ID.ValueString(),
		Description: optString(m.Description), Rules: r.rules(&m)})
	if err != nil {
		addAPIError(&resp.Diagnostics, "update security group", err)
		return
	}
	setSecurityGroup(&m, &out.UpdateSecurityGroup.SecurityGroupFields)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *securityGroupResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteByID(ctx, req, resp, "delete security group", r.c, api.DeleteSecurityGroup)
}

// serviceAccountResource is flexplane_service_account: a service account
// of the VDC and its token (createServiceAccount, VDC ADMIN). The token is
// known only to the apply that created it (flexplane keeps its hash):
// an imported account has none.
type serviceAccountResource struct {
	base
	replaceOnly
}

type serviceAccountModel struct {
	ID        types.String `tfsdk:"id"`
	Name      types.String `tfsdk:"name"`
	Role      types.String `tfsdk:"role"`
	ExpiresAt types.String `tfsdk:"expires_at"`
	CreatedAt types.String `tfsdk:"created_at"`
	Token     types.String `tfsdk:"token"`
}

func (r *serviceAccountResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_service_account"
}

func (r *serviceAccountResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	resp.Schema = schema.Schema{
		Description: "A service account of the VDC and its bearer token (createServiceAccount; needs the VDC's ADMIN role).",
		Attributes: map[string]schema.Attribute{
			"id":         idAttribute(),
			"name":       replacing("Unique in the VDC."),
			"role":       replacing("VIEWER, MEMBER or ADMIN: at most the caller's."),
			"expires_at": optionalReplacing("When its token stops working (RFC 3339); unset: never."),
			"created_at": schema.StringAttribute{Computed: true, Description: "When it was made.", PlanModifiers: keep},
			"token": schema.StringAttribute{Computed: true, Sensitive: true, PlanModifiers: keep,
				Description: "The bearer token (fpsa_...), known to the apply that created the account only."},
		},
	}
}

func (r *serviceAccountResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	createWith(ctx, req, resp, "create service account", func(ctx context.Context, m *serviceAccountModel) error {
		out, err := api.CreateServiceAccount(ctx, r.c, api.CreateServiceAccountInput{Name: m.Name.ValueString(),
			Role: api.VDCRole(m.Role.ValueString()), ExpiresAt: optString(m.ExpiresAt)})
		if err != nil {
			return err
		}
		setServiceAccount(m, &out.CreateServiceAccount.ServiceAccount.ServiceAccountFields)
		m.Token = types.StringValue(out.CreateServiceAccount.Token)
		return nil
	})
}

func setServiceAccount(m *serviceAccountModel, a *api.ServiceAccountFields) {
	m.ID, m.Name, m.Role, m.CreatedAt = types.StringValue(a.Id), types.StringValue(a.Name), types.StringValue(string(a.Role)), types.StringValue(a.CreatedAt)
	// A configured expiry keeps its spelling (the API answers its own
	// RFC 3339 form of it).
	if m.ExpiresAt.IsNull() || m.ExpiresAt.IsUnknown() {
		m.ExpiresAt = stringOf(a.ExpiresAt)
	}
}

func (r *serviceAccountResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readInto(ctx, req, resp, "read service account", func(ctx context.Context, m *serviceAccountModel) (bool, error) {
		out, err := api.ListServiceAccounts(ctx, r.c)
		if err != nil {
			return false, err
		}
		for _, a := range out.ServiceAccounts {
			if a.Id == m.ID.ValueString() {
				setServiceAccount(m, &a.ServiceAccountFields)
				return true, nil
			}
		}
		return false, nil
	})
}

func (r *serviceAccountResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteByID(ctx, req, resp, "delete service account", r.c, api.DeleteServiceAccount)
}
