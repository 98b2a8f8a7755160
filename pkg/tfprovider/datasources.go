package tfprovider

import (
	"context"

	"github.com/Khan/genqlient/graphql"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// dsBase is what every data source shares: the API client.
type dsBase struct{ c graphql.Client }

func (b *dsBase) Configure(_ context.Context, req datasource.ConfigureRequest, _ *datasource.ConfigureResponse) {
	if c := clientOf(req.ProviderData); c != nil {
		b.c = c
	}
}

func nameArg(desc string) schema.StringAttribute {
	return schema.StringAttribute{Required: true, Description: desc}
}

func computedString(desc string) schema.StringAttribute {
	return schema.StringAttribute{Computed: true, Description: desc}
}

func computedInt(desc string) schema.Int64Attribute {
	return schema.Int64Attribute{Computed: true, Description: desc}
}

// namedDataSource is a data source of one object the configuration names
// (its attribute name), read into the model M.
type namedDataSource[M any] struct {
	dsBase
	// typeName follows the provider's type name: _zone is flexplane_zone.
	typeName string
	// what names the object in diagnostics: "zone".
	what string
	// schema is the data source's schema.
	schema schema.Schema
	// lookup fills m, whose name the configuration gives, from the API and
	// reports whether the API knows it.
	lookup func(ctx context.Context, c graphql.Client, m *M) (bool, error)
}

func (d *namedDataSource[M]) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + d.typeName
}

func (d *namedDataSource[M]) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = d.schema
}

func (d *namedDataSource[M]) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m M
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	found, err := d.lookup(ctx, d.c, &m)
	if err != nil {
		addAPIError(&resp.Diagnostics, "read "+d.what, err)
		return
	}
	if !found {
		resp.Diagnostics.AddAttributeError(path.Root("name"), "read "+d.what, "the API has no "+d.what+" of that name")
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// zoneDataSource is flexplane_zone: zone(name).
func zoneDataSource() datasource.DataSource {
	return &namedDataSource[zoneModel]{typeName: "_zone", what: "zone", schema: schema.Schema{
		Description: "A zone (a Proxmox cluster) the caller sees.", Attributes: map[string]schema.Attribute{
			"name":       nameArg("The zone's name."),
			"id":         computedString("The zone's id."),
			"status":     computedString("Whether its hosts are online."),
			"standalone": schema.BoolAttribute{Computed: true, Description: "Whether it is a standalone Proxmox node."},
		}},
		lookup: func(ctx context.Context, c graphql.Client, m *zoneModel) (bool, error) {
			out, err := api.GetZone(ctx, c, m.Name.ValueString())
			if err != nil || out.Zone == nil {
				return false, err
			}
			m.ID, m.Status, m.Standalone = types.StringValue(out.Zone.Id), types.StringValue(string(out.Zone.Status)), types.BoolValue(out.Zone.Standalone)
			return true, nil
		}}
}

type zoneModel struct {
	ID         types.String `tfsdk:"id"`
	Name       types.String `tfsdk:"name"`
	Status     types.String `tfsdk:"status"`
	Standalone types.Bool   `tfsdk:"standalone"`
}

// imageDataSource is flexplane_image: image(name).
func imageDataSource() datasource.DataSource {
	return &namedDataSource[imageModel]{typeName: "_image", what: "image", schema: schema.Schema{
		Description: "An image of the catalog.", Attributes: map[string]schema.Attribute{
			"name":        nameArg("The image's name."),
			"description": computedString("What it is."),
			"version":     computedString("Its version."),
			"url":         computedString("Where it is downloaded from."),
			"checksum":    computedString("Its checksum."),
			"cloud_init":  schema.BoolAttribute{Computed: true, Description: "Whether it runs cloud-init."},
		}},
		lookup: func(ctx context.Context, c graphql.Client, m *imageModel) (bool, error) {
			out, err := api.GetImage(ctx, c, m.Name.ValueString())
			if err != nil || out.Image == nil {
				return false, err
			}
			i := out.Image
			m.Description, m.Version, m.URL = types.StringValue(i.Description), types.StringValue(i.Version), types.StringValue(i.Url)
			m.Checksum, m.CloudInit = types.StringValue(i.Checksum), types.BoolValue(i.CloudInit)
			return true, nil
		}}
}

type imageModel struct {
	Name        types.String `tfsdk:"name"`
	Description types.String `tfsdk:"description"`
	Version     types.String `tfsdk:"version"`
	URL         types.String `tfsdk:"url"`
	Checksum    types.String `tfsdk:"checksum"`
	CloudInit   types.Bool   `tfsdk:"cloud_init"`
}

// computeProfileDataSource is flexplane_compute_profile: computeProfile(name).
func computeProfileDataSource() datasource.DataSource {
	return &namedDataSource[computeProfileModel]{typeName: "_compute_profile", what: "compute profile", schema: schema.Schema{
		Description: "A compute profile (vCPUs and memory).", Attributes: map[string]schema.Attribute{
			"name":        nameArg("The profile's name."),
			"description": computedString("What it is for."),
			"vcpus":       computedInt("Virtual CPUs of a VM of this profile."),
			"memory_mib":  computedInt("Memory of a VM of this profile, in MiB."),
		}},
		lookup: func(ctx context.Context, c graphql.Client, m *computeProfileModel) (bool, error) {
			out, err := api.GetComputeProfile(ctx, c, m.Name.ValueString())
			if err != nil || out.ComputeProfile == nil {
				return false, err
			}
			p := out.ComputeProfile
			m.Description, m.VCPUs, m.MemoryMiB = types.StringValue(p.Description), types.Int64Value(int64(p.Vcpus)), types.Int64Value(int64(p.MemoryMiB))
			return true, nil
		}}
}

type computeProfileModel struct {
	Name        types.String `tfsdk:"name"`
	Description types.String `tfsdk:"description"`
	VCPUs       types.Int64  `tfsdk:"vcpus"`
	MemoryMiB   types.Int64  `tfsdk:"memory_mib"`
}

// storageProfileDataSource is flexplane_storage_profile: storageProfile(name).
func storageProfileDataSource() datasource.DataSource {
	return &namedDataSource[storageProfileModel]{typeName: "_storage_profile", what: "storage profile", schema: schema.Schema{
		Description: "A storage profile (disk tier and MB/s limits).", Attributes: map[string]schema.Attribute{
			"name":        nameArg("The profile's name."),
			"description": computedString("What it is for."),
			"tier":        computedString("The tier's label, e.g. ssd."),
			"read_mbps":   computedInt("Read limit in MB/s; 0 is unlimited."),
			"write_mbps":  computedInt("Write limit in MB/s; 0 is unlimited."),
			"zones":       schema.ListAttribute{ElementType: types.StringType, Computed: true, Description: "The zones offering it."},
		}},
		lookup: func(ctx context.Context, c graphql.Client, m *storageProfileModel) (bool, error) {
			out, err := api.GetStorageProfile(ctx, c, m.Name.ValueString())
			if err != nil || out.StorageProfile == nil {
				return false, err
			}
			p := out.StorageProfile
			m.Description, m.Tier = types.StringValue(p.Description), types.StringValue(p.Tier)
			m.ReadMBps, m.WriteMBps = types.Int64Value(int64(p.ReadMBps)), types.Int64Value(int64(p.WriteMBps))
			zones := make([]attr.Value, 0, len(p.Pools))
			for _, z := range p.Pools {
				zones = append(zones, types.StringValue(z.Zone))
			}
			m.Zones = types.ListValueMust(types.StringType, zones)
			return true, nil
		}}
}

type storageProfileModel struct {
	Name        types.String `tfsdk:"name"`
	Description types.String `tfsdk:"description"`
	Tier        types.String `tfsdk:"tier"`
	ReadMBps    types.Int64  `tfsdk:"read_mbps"`
	WriteMBps   types.Int64  `tfsdk:"write_mbps"`
	Zones       types.List   `tfsdk:"zones"`
}
