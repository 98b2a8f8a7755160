package tfprovider

import (
	"context"

	"github.com/Khan/genqlient/graphql"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// gateway is one of the VDC's edge gateways as ListEdgeGateways reads it.
type gateway = api.ListEdgeGatewaysEdgeGatewaysEdgeGatewayConnectionNodesEdgeGateway

// eachGateway calls f with each of the VDC's edge gateways until f
// returns true.
func eachGateway(ctx context.Context, c graphql.Client, f func(*gateway) bool) error {
	var after *string
	for {
		out, err := api.ListEdgeGateways(ctx, c, 100, after)
		if err != nil {
			return err
		}
		for i := range out.EdgeGateways.Nodes {
			if f(&out.EdgeGateways.Nodes[i]) {
				return nil
			}
		}
		if !out.EdgeGateways.PageInfo.HasNextPage || out.EdgeGateways.PageInfo.EndCursor == nil {
			return nil
		}
		after = out.EdgeGateways.PageInfo.EndCursor
	}
}

// readFromGateways is the Read of an object of the VDC's edge gateways:
// fill looks for the object of m's id in gateway g, fills m from it and
// reports whether it found it. The gateways are read until it does; an
// object none of them holds is dropped from the state (readInto).
func readFromGateways[M any](ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse, op string,
	c graphql.Client, fill func(g *gateway, m *M) bool) {
	readInto(ctx, req, resp, op, func(ctx context.Context, m *M) (found bool, err error) {
		err = eachGateway(ctx, c, func(g *gateway) bool {
			found = fill(g, m)
			return found
		})
		return found, err
	})
}

// replacingInt is a required number the API cannot change in place.
func replacingInt(desc string) schema.Int64Attribute {
	return schema.Int64Attribute{Required: true, Description: desc,
		PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()}}
}

// optionalReplacingInt is an optional number the API cannot change in place.
func optionalReplacingInt(desc string) schema.Int64Attribute {
	return schema.Int64Attribute{Optional: true, Description: desc,
		PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()}}
}

// firewallRuleResource is flexplane_firewall_rule: a rule of the VDC's
// edge gateway in a zone (createFirewallRule). Rules change by
// replacement.
type firewallRuleResource struct {
	base
	replaceOnly
}

type firewallRuleModel struct {
	ID          types.String `tfsdk:"id"`
	Zone        types.String `tfsdk:"zone"`
	Direction   types.String `tfsdk:"direction"`
	Protocol    types.String `tfsdk:"protocol"`
	FromPort    types.Int64  `tfsdk:"from_port"`
	ToPort      types.Int64  `tfsdk:"to_port"`
	Source      types.String `tfsdk:"source"`
	Destination types.String `tfsdk:"destination"`
	Action      types.String `tfsdk:"action"`
	Position    types.Int64  `tfsdk:"position"`
	Description types.String `tfsdk:"description"`
}

func (r *firewallRuleResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_firewall_rule"
}

func (r *firewallRuleResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A firewall rule of the VDC's edge gateway in a zone (createFirewallRule); the first rule that matches decides.",
		Attributes: map[string]schema.Attribute{
			"id":          idAttribute(),
			"zone":        replacing("The zone's name."),
			"direction":   replacing("INBOUND or OUTBOUND."),
			"protocol":    replacing("TCP, UDP, ICMP or ANY."),
			"from_port":   optionalReplacingInt("First port (TCP and UDP)."),
			"to_port":     optionalReplacingInt("Last port (TCP and UDP)."),
			"source":      optionalReplacing("Source CIDR; unset matches any."),
			"destination": optionalReplacing("Destination CIDR; unset matches any."),
			"action":      replacing("ALLOW or DENY."),
			"position": schema.Int64Attribute{Optional: true, Computed: true, Description: "Its place in the rule list; unset appends it.",
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplaceIfConfigured(), int64planmodifier.UseStateForUnknown()}},
			"description": optionalReplacing("Free text."),
		},
	}
}

func (r *firewallRuleResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	createWith(ctx, req, resp, "create firewall rule", func(ctx context.Context, m *firewallRuleModel) error {
		out, err := api.CreateFirewallRule(ctx, r.c, api.CreateFirewallRuleInput{Zone: m.Zone.ValueString(),
			Direction: api.FirewallDirection(m.Direction.ValueString()), Protocol: api.FirewallProtocol(m.Protocol.ValueString()),
			FromPort: optInt(m.FromPort), ToPort: optInt(m.ToPort), Source: optString(m.Source), Destination: optString(m.Destination),
			Action: api.FirewallAction(m.Action.ValueString()), Position: optInt(m.Position), Description: optString(m.Description)})
		if err != nil {
			return err
		}
		setFirewallRule(m, &out.CreateFirewallRule.FirewallRuleFields)
		return nil
	})
}

func setFirewallRule(m *firewallRuleModel, f *api.FirewallRuleFields) {
	m.ID, m.Direction, m.Protocol = types.StringValue(f.Id), types.StringValue(string(f.Direction)), types.StringValue(string(f.Protocol))
	m.FromPort, m.ToPort, m.Source, m.Destination = intOf(f.FromPort), intOf(f.ToPort), stringOf(f.Source), stringOf(f.Destination)
	m.Action, m.Position, m.Description = types.StringValue(string(f.Action)), types.Int64Value(int64(f.Position)), stringOf(f.Description)
}

func (r *firewallRuleResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readFromGateways(ctx, req, resp, "read firewall rule", r.c, func(g *gateway, m *firewallRuleModel) (found bool) {
		for _, f := range g.FirewallRules {
			if f.Id == m.ID.ValueString() {
				setFirewallRule(m, &f.FirewallRuleFields)
				m.Zone, found = types.StringValue(g.Zone.Name), true
			}
		}
		return found
	})
}

func (r *firewallRuleResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteByID(ctx, req, resp, "delete firewall rule", r.c, api.DeleteFirewallRule)
}

// portForwardResource is flexplane_port_forward: a public port of the
// VDC's edge gateway forwarded to a VM's port (createPortForward).
type portForwardResource struct {
	base
	replaceOnly
}

type portForwardModel struct {
	ID            types.String `tfsdk:"id"`
	VMID          types.String `tfsdk:"vm_id"`
	Protocol      types.String `tfsdk:"protocol"`
	PublicPort    types.Int64  `tfsdk:"public_port"`
	TargetPort    types.Int64  `tfsdk:"target_port"`
	PublicAddress types.String `tfsdk:"public_address"`
}

func (r *portForwardResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_port_forward"
}

func (r *portForwardResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A public port of the VDC's edge gateway in the VM's zone forwarded to a port of the VM (createPortForward).",
		Attributes: map[string]schema.Attribute{
			"id":             idAttribute(),
			"vm_id":          replacing("The VM's id."),
			"protocol":       replacing("TCP or UDP."),
			"public_port":    replacingInt("The public port (1 to 65535)."),
			"target_port":    replacingInt("The VM's port (1 to 65535)."),
			"public_address": computedDefault("A public address of the VDC in the zone; unset: the gateway's own."),
		},
	}
}

func (r *portForwardResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	createWith(ctx, req, resp, "create port forward", func(ctx context.Context, m *portForwardModel) error {
		out, err := api.CreatePortForward(ctx, r.c, api.CreatePortForwardInput{VmId: m.VMID.ValueString(),
			Protocol: api.PortForwardProtocol(m.Protocol.ValueString()), PublicPort: int(m.PublicPort.ValueInt64()),
			TargetPort: int(m.TargetPort.ValueInt64()), PublicAddress: optString(m.PublicAddress)})
		if err != nil {
			return err
		}
		setPortForward(m, &out.CreatePortForward.PortForwardFields)
		return nil
	})
}

func setPortForward(m *portForwardModel, f *api.PortForwardFields) {
	m.ID, m.VMID, m.Protocol = types.StringValue(f.Id), types.StringValue(f.VmId), types.StringValue(string(f.Protocol))
	m.PublicPort, m.TargetPort = types.Int64Value(int64(f.PublicPort)), types.Int64Value(int64(f.TargetPort))
	m.PublicAddress = types.StringValue(f.PublicAddress)
}

func (r *portForwardResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readFromGateways(ctx, req, resp, "read port forward", r.c, func(g *gateway, m *portForwardModel) (found bool) {
		for _, f := range g.PortForwards {
			if f.Id == m.ID.ValueString() {
				setPortForward(m, &f.PortForwardFields)
				found = true
			}
		}
		return found
	})
}

func (r *portForwardResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteByID(ctx, req, resp, "delete port forward", r.c, api.DeletePortForward)
}

// oneToOneResource is flexplane_one_to_one_address: a public address of a
// VM's own, both ways (createOneToOneAddress).
type oneToOneResource struct {
	base
	replaceOnly
}

type oneToOneModel struct {
	ID            types.String `tfsdk:"id"`
	VMID          types.String `tfsdk:"vm_id"`
	PublicAddress types.String `tfsdk:"public_address"`
}

func (r *oneToOneResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_one_to_one_address"
}

func (r *oneToOneResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A public address of a VM's own, both ways (1:1 NAT; createOneToOneAddress).",
		Attributes: map[string]schema.Attribute{
			"id":             idAttribute(),
			"vm_id":          replacing("The VM's id."),
			"public_address": computedDefault("An address of the zone's pool; unset: the lowest free one."),
		},
	}
}

func (r *oneToOneResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	createWith(ctx, req, resp, "create 1:1 address", func(ctx context.Context, m *oneToOneModel) error {
		out, err := api.CreateOneToOneAddress(ctx, r.c, api.CreateOneToOneAddressInput{VmId: m.VMID.ValueString(), PublicAddress: optString(m.PublicAddress)})
		if err != nil {
			return err
		}
		f := out.CreateOneToOneAddress
		m.ID, m.VMID, m.PublicAddress = types.StringValue(f.Id), types.StringValue(f.VmId), types.StringValue(f.PublicAddress)
		return nil
	})
}

func (r *oneToOneResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readFromGateways(ctx, req, resp, "read 1:1 address", r.c, func(g *gateway, m *oneToOneModel) (found bool) {
		for _, f := range g.OneToOneAddresses {
			if f.Id == m.ID.ValueString() {
				m.VMID, m.PublicAddress, found = types.StringValue(f.VmId), types.StringValue(f.PublicAddress), true
			}
		}
		return found
	})
}

func (r *oneToOneResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteByID(ctx, req, resp, "delete 1:1 address", r.c, api.DeleteOneToOneAddress)
}
