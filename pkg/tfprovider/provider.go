// Package tfprovider is flexplane's Terraform provider (source address
// flexplane/flexplane, binary terraform-provider-flexplane), built on
// hashicorp/terraform-plugin-framework over the API's generated GraphQL
// client (pkg/flexctl/api). Its resources are the API's creates: their
// attributes are the create input's fields in snake_case, with a computed
// id and the read-only fields the API reports; each imports by id. See
// docs/use/terraform.md.
package tfprovider

import (
	"context"
	"net/http"
	"os"
	"strings"

	"github.com/Khan/genqlient/graphql"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/flexplane/flexplane/pkg/flexctl"
)

// Address is the provider's source address: `source = "flexplane/flexplane"`
// in a configuration's required_providers.
const Address = "registry.opentofu.org/flexplane/flexplane"

// Config configures the provider as a program builds it.
type Config struct {
	// Version is what the provider reports as its version.
	Version string
	// HTTPClient carries the API's requests; nil is http.DefaultClient.
	HTTPClient *http.Client
}

// New returns the provider's factory for providerserver.
func New(cfg Config) func() provider.Provider {
	return func() provider.Provider { return &flexplaneProvider{cfg: cfg} }
}

type flexplaneProvider struct {
	cfg Config
}

type providerModel struct {
	Endpoint types.String `tfsdk:"endpoint"`
	Token    types.String `tfsdk:"token"`
	VDC      types.String `tfsdk:"vdc"`
}

func (p *flexplaneProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "flexplane"
	resp.Version = p.cfg.Version
}

func (p *flexplaneProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "flexplane: a multi-tenant cloud over Proxmox VE clusters. Each setting falls back to its FLEXPLANE_* variable, so an empty provider block works with them set.",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{Optional: true,
				Description: "The API's base URL, e.g. http://127.0.0.1:8080 (without /graphql); default $" + flexctl.EnvEndpoint + "."},
			"token": schema.StringAttribute{Optional: true, Sensitive: true,
				Description: "A bearer token: a service account's fpsa_ token or a user's access token; default $" + flexctl.EnvToken + "."},
			"vdc": schema.StringAttribute{Optional: true,
				Description: "The VDC the resources are in (the FlexPlane-VDC-ID header); default $" + flexctl.EnvVDC + "."},
		},
	}
}

func (p *flexplaneProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	endpoint := setting(m.Endpoint, flexctl.EnvEndpoint)
	token := setting(m.Token, flexctl.EnvToken)
	vdc := setting(m.VDC, flexctl.EnvVDC)
	if endpoint == "" {
		resp.Diagnostics.AddAttributeError(path.Root("endpoint"), "no endpoint",
			"set endpoint in the provider block or $"+flexctl.EnvEndpoint+" (the API's base URL, without /graphql)")
		return
	}
	if strings.HasSuffix(strings.TrimRight(endpoint, "/"), flexctl.GraphQLPath) {
		resp.Diagnostics.AddAttributeError(path.Root("endpoint"), "endpoint names the GraphQL path",
			"give the API's base URL without "+flexctl.GraphQLPath+", e.g. http://127.0.0.1:8080")
		return
	}
	c := flexctl.NewGraphQLClient(strings.TrimRight(endpoint, "/"), token, vdc, p.cfg.HTTPClient)
	resp.ResourceData = c
	resp.DataSourceData = c
}

// setting is v when the configuration sets it, else the variable env.
func setting(v types.String, env string) string {
	if !v.IsNull() && !v.IsUnknown() {
		return v.ValueString()
	}
	return os.Getenv(env)
}

func (p *flexplaneProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		func() resource.Resource { return &networkResource{} },
		func() resource.Resource { return &vmResource{} },
		func() resource.Resource { return &firewallRuleResource{} },
		func() resource.Resource { return &portForwardResource{} },
		func() resource.Resource { return &oneToOneResource{} },
		func() resource.Resource { return &securityGroupResource{} },
		func() resource.Resource { return &serviceAccountResource{} },
		func() resource.Resource { return &loadBalancerResource{} },
		func() resource.Resource { return &kubernetesClusterResource{} },
		func() resource.Resource { return &nodePoolResource{} },
		func() resource.Resource { return &backupResource{} },
		func() resource.Resource { return &backupScheduleResource{} },
		func() resource.Resource { return &diskResource{} },
	}
}

func (p *flexplaneProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{
		zoneDataSource,
		imageDataSource,
		computeProfileDataSource,
		storageProfileDataSource,
		func() datasource.DataSource { return &backupsDataSource{} },
	}
}

// clientOf is the API client the provider's Configure gave a resource or
// data source (nil before it ran, as in validation).
func clientOf(data any) graphql.Client {
	c, _ := data.(graphql.Client)
	return c
}
