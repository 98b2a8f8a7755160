package tfprovider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// loadBalancerResource is flexplane_load_balancer: createLoadBalancer. Its
// description, listeners, pools and certificates change in place
// (updateLoadBalancer); its name and zone replace it. The API reads back
// listeners' and pools' essentials only: the state keeps what was applied,
// and an import fills in what the API reads.
type loadBalancerResource struct{ base }

type loadBalancerModel struct {
	ID            types.String    `tfsdk:"id"`
	Name          types.String    `tfsdk:"name"`
	Zone          types.String    `tfsdk:"zone"`
	Description   types.String    `tfsdk:"description"`
	Listeners     []listenerModel `tfsdk:"listeners"`
	Pools         []poolModel     `tfsdk:"pools"`
	Certificates  []certModel     `tfsdk:"certificates"`
	PublicAddress types.String    `tfsdk:"public_address"`
}

type listenerModel struct {
	Name         types.String `tfsdk:"name"`
	Protocol     types.String `tfsdk:"protocol"`
	Port         types.Int64  `tfsdk:"port"`
	Pool         types.String `tfsdk:"pool"`
	Routes       []routeModel `tfsdk:"routes"`
	SNIRoutes    []sniModel   `tfsdk:"sni_routes"`
	Certificates types.List   `tfsdk:"certificates"`
	ServerNames  types.List   `tfsdk:"server_names"`
}

type routeModel struct {
	PathPrefix types.String `tfsdk:"path_prefix"`
	Pool       types.String `tfsdk:"pool"`
}

type sniModel struct {
	ServerName types.String `tfsdk:"server_name"`
	Pool       types.String `tfsdk:"pool"`
}

type poolModel struct {
	Name        types.String   `tfsdk:"name"`
	Backends    []backendModel `tfsdk:"backends"`
	HealthCheck *healthModel   `tfsdk:"health_check"`
}

type backendModel struct {
	VMID types.String `tfsdk:"vm_id"`
	Port types.Int64  `tfsdk:"port"`
}

type healthModel struct {
	Protocol           types.String `tfsdk:"protocol"`
	Path               types.String `tfsdk:"path"`
	IntervalSeconds    types.Int64  `tfsdk:"interval_seconds"`
	TimeoutSeconds     types.Int64  `tfsdk:"timeout_seconds"`
	HealthyThreshold   types.Int64  `tfsdk:"healthy_threshold"`
	UnhealthyThreshold types.Int64  `tfsdk:"unhealthy_threshold"`
}

type certModel struct {
	Name           types.String `tfsdk:"name"`
	CertificatePEM types.String `tfsdk:"certificate_pem"`
	PrivateKeyPEM  types.String `tfsdk:"private_key_pem"`
}

func (r *loadBalancerResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_load_balancer"
}

func (r *loadBalancerResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	req := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Required: true, Description: desc}
	}
	opt := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, Description: desc}
	}
	optInt := func(desc string) schema.Int64Attribute {
		return schema.Int64Attribute{Optional: true, Description: desc}
	}
	strings := func(desc string) schema.ListAttribute {
		return schema.ListAttribute{ElementType: types.StringType, Optional: true, Description: desc}
	}
	nested := func(desc string, attrs map[string]schema.Attribute) schema.ListNestedAttribute {
		return schema.ListNestedAttribute{Optional: true, Description: desc, NestedObject: schema.NestedAttributeObject{Attributes: attrs}}
	}
	listeners := nested("The listeners (1 to 8, no two on one port).", map[string]schema.Attribute{
		"name":     req("The listener's name."),
		"protocol": req("TCP, HTTP, HTTPS or TLS_PASSTHROUGH."),
		"port":     schema.Int64Attribute{Required: true, Description: "The public port."},
		"pool":     opt("The default pool."),
		"routes": nested("HTTP path routes.", map[string]schema.Attribute{
			"path_prefix": req("The path prefix (starting with /)."), "pool": req("The pool's name."),
		}),
		"sni_routes": nested("TLS passthrough routes by server name.", map[string]schema.Attribute{
			"server_name": req("The server name."), "pool": req("The pool's name."),
		}),
		"certificates": strings("The certificates an HTTPS listener serves, by name."),
		"server_names": strings("The host names an HTTP(S) listener answers."),
	})
	listeners.Optional, listeners.Required = false, true
	pools := nested("The backend pools (at most 16).", map[string]schema.Attribute{
		"name": req("The pool's name."),
		"backends": schema.ListNestedAttribute{Required: true, Description: "The pool's VMs.", NestedObject: schema.NestedAttributeObject{
			Attributes: map[string]schema.Attribute{
				"vm_id": req("The VM (in the balancer's zone)."),
				"port":  schema.Int64Attribute{Required: true, Description: "The VM's port."},
			}}},
		"health_check": schema.SingleNestedAttribute{Optional: true, Description: "How the backends are checked.", Attributes: map[string]schema.Attribute{
			"protocol":            req("TCP or HTTP."),
			"path":                opt("The HTTP check's path."),
			"interval_seconds":    optInt("Seconds between checks."),
			"timeout_seconds":     optInt("Seconds one check may take."),
			"healthy_threshold":   optInt("Checks in a row that must pass to bring a backend back."),
			"unhealthy_threshold": optInt("Checks in a row that must fail to take a backend out."),
		}},
	})
	pools.Optional, pools.Required = false, true
	certs := nested("The TLS certificates HTTPS listeners serve (at most 16).", map[string]schema.Attribute{
		"name":            req("The certificate's name."),
		"certificate_pem": opt("The certificate chain, PEM."),
		"private_key_pem": schema.StringAttribute{Optional: true, Sensitive: true, Description: "The private key, PEM (never read back)."},
	})
	resp.Schema = schema.Schema{
		Description: "A load balancer of the VDC in a zone (createLoadBalancer). Its description, listeners, pools and certificates change in place (updateLoadBalancer).",
		Attributes: map[string]schema.Attribute{
			"id":           idAttribute(),
			"name":         replacing("The balancer's name in its VDC."),
			"zone":         replacing("The zone's name."),
			"description":  opt("Free text."),
			"listeners":    listeners,
			"pools":        pools,
			"certificates": certs,
			"public_address": schema.StringAttribute{Computed: true, Description: "The public address it listens on.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
		},
	}
}

// inputs is the model's listeners, pools and certificates as the API takes them.
func (m *loadBalancerModel) inputs(ctx context.Context, diags *diag.Diagnostics) ([]api.LoadBalancerListenerInput, []api.BackendPoolInput, []api.TLSCertificateInput) {
	listeners := []api.LoadBalancerListenerInput{}
	for _, l := range m.Listeners {
		in := api.LoadBalancerListenerInput{Name: l.Name.ValueString(), Protocol: api.LoadBalancerProtocol(l.Protocol.ValueString()),
			Port: int(l.Port.ValueInt64()), Pool: optString(l.Pool),
			Certificates: stringsOf(ctx, l.Certificates, diags), ServerNames: stringsOf(ctx, l.ServerNames, diags)}
		for _, x := range l.Routes {
			in.Routes = append(in.Routes, api.PathRouteInput{PathPrefix: x.PathPrefix.ValueString(), Pool: x.Pool.ValueString()})
		}
		for _, x := range l.SNIRoutes {
			in.SniRoutes = append(in.SniRoutes, api.SNIRouteInput{ServerName: x.ServerName.ValueString(), Pool: x.Pool.ValueString()})
		}
		listeners = append(listeners, in)
	}
	pools := []api.BackendPoolInput{}
	for _, p := range m.Pools {
		in := api.BackendPoolInput{Name: p.Name.ValueString(), Backends: []api.BackendInput{}}
		for _, b := range p.Backends {
			in.Backends = append(in.Backends, api.BackendInput{VmId: b.VMID.ValueString(), Port: int(b.Port.ValueInt64())})
		}
		if h := p.HealthCheck; h != nil {
			in.HealthCheck = &api.HealthCheckInput{Protocol: api.HealthCheckProtocol(h.Protocol.ValueString()), Path: optString(h.Path),
				IntervalSeconds: optInt(h.IntervalSeconds), TimeoutSeconds: optInt(h.TimeoutSeconds),
				HealthyThreshold: optInt(h.HealthyThreshold), UnhealthyThreshold: optInt(h.UnhealthyThreshold)}
		}
		pools = append(pools, in)
	}
	var certs []api.TLSCertificateInput
	for _, c := range m.Certificates {
		certs = append(certs, api.TLSCertificateInput{Name: c.Name.ValueString(), CertificatePem: optString(c.CertificatePEM), PrivateKeyPem: optString(c.PrivateKeyPEM)})
	}
	return listeners, pools, certs
}

// setLoadBalancer fills m from the API's answer: its name, zone,
// description and address always; listeners and pools only when m has
// none (an import), as the API reads back their essentials only.
func setLoadBalancer(m *loadBalancerModel, lb *api.LoadBalancerFields) {
	m.ID, m.Name, m.Zone = types.StringValue(lb.Id), types.StringValue(lb.Name), types.StringValue(lb.Zone.Name)
	m.PublicAddress = types.StringValue(lb.PublicAddress)
	if lb.Description != nil && *lb.Description != "" || !m.Description.IsNull() {
		m.Description = stringOf(lb.Description)
	}
	if m.Listeners == nil {
		for _, l := range lb.Listeners {
			m.Listeners = append(m.Listeners, listenerModel{Name: types.StringValue(l.Name), Protocol: types.StringValue(string(l.Protocol)),
				Port: types.Int64Value(int64(l.Port)), Pool: stringOf(l.Pool),
				Certificates: types.ListNull(types.StringType), ServerNames: types.ListNull(types.StringType)})
		}
	}
	if m.Pools == nil {
		for _, p := range lb.Pools {
			pm := poolModel{Name: types.StringValue(p.Name), Backends: []backendModel{}}
			for _, b := range p.Backends {
				pm.Backends = append(pm.Backends, backendModel{VMID: types.StringValue(b.VmId), Port: types.Int64Value(int64(b.Port))})
			}
			m.Pools = append(m.Pools, pm)
		}
	}
}

func (r *loadBalancerResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	createWith(ctx, req, resp, "create load balancer", func(ctx context.Context, m *loadBalancerModel) error {
		var diags diag.Diagnostics
		listeners, pools, certs := m.inputs(ctx, &diags)
		if diags.HasError() {
			return fmt.Errorf("read the listeners: %s", diags[0].Detail())
		}
		out, err := api.CreateLoadBalancer(ctx, r.c, api.CreateLoadBalancerInput{Name: m.Name.ValueString(), Zone: m.Zone.ValueString(),
			Description: optString(m.Description), Listeners: listeners, Pools: pools, Certificates: certs})
		if err != nil {
			return err
		}
		setLoadBalancer(m, &out.CreateLoadBalancer.LoadBalancerFields)
		return nil
	})
}

func (r *loadBalancerResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readInto(ctx, req, resp, "read load balancer", func(ctx context.Context, m *loadBalancerModel) (bool, error) {
		out, err := api.GetLoadBalancer(ctx, r.c, m.ID.ValueString())
		if err != nil {
			return false, err
		}
		setLoadBalancer(m, &out.LoadBalancer.LoadBalancerFields)
		return true, nil
	})
}

func (r *loadBalancerResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m, state loadBalancerModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	listeners, pools, certs := m.inputs(ctx, &resp.Diagnostics)
	out, err := api.UpdateLoadBalancer(ctx, r.c, api.UpdateLoadBalancerInput{Id: state.ID.ValueString(),
		Description: optString(m.Description), Listeners: listeners, Pools: pools, Certificates: certs})
	if err != nil {
		addAPIError(&resp.Diagnostics, "update load balancer", err)
		return
	}
	setLoadBalancer(&m, &out.UpdateLoadBalancer.LoadBalancerFields)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *loadBalancerResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteByID(ctx, req, resp, "delete load balancer", r.c, api.DeleteLoadBalancer)
}
