package tfprovider_test

import (
	"context"
	"slices"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/flexplane/flexplane/pkg/tfprovider"
)

// TestSchema asks the provider for its schema as OpenTofu does first: it
// must hold every resource and data source, each with an id or a name,
// and no diagnostic (the framework checks the schemas' plan modifiers and
// nesting here).
func TestSchema(t *testing.T) {
	t.Parallel()
	srv, err := providerserver.NewProtocol6WithError(tfprovider.New(tfprovider.Config{Version: "test"})())()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.GetProviderSchema(context.Background(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range resp.Diagnostics {
		t.Errorf("schema diagnostic: %s: %s", d.Summary, d.Detail)
	}
	for _, name := range []string{"flexplane_network", "flexplane_vm", "flexplane_firewall_rule", "flexplane_port_forward",
		"flexplane_one_to_one_address", "flexplane_security_group", "flexplane_service_account", "flexplane_load_balancer",
		"flexplane_kubernetes_cluster", "flexplane_node_pool", "flexplane_backup", "flexplane_backup_schedule", "flexplane_disk"} {
		s, ok := resp.ResourceSchemas[name]
		if !ok {
			t.Errorf("no resource %s", name)
			continue
		}
		if !slices.ContainsFunc(s.Block.Attributes, func(a *tfprotov6.SchemaAttribute) bool { return a.Name == "id" && a.Computed }) {
			t.Errorf("resource %s has no computed id", name)
		}
	}
	// A VM takes an image, an ISO or both: each optional, replacing.
	vm := resp.ResourceSchemas["flexplane_vm"]
	for _, attr := range []string{"image", "iso"} {
		if vm == nil || !slices.ContainsFunc(vm.Block.Attributes, func(a *tfprotov6.SchemaAttribute) bool { return a.Name == attr && a.Optional && !a.Required }) {
			t.Errorf("flexplane_vm has no optional %s", attr)
		}
	}
	// A VM's keep_backups is optional and computed (its default, true).
	if vm == nil || !slices.ContainsFunc(vm.Block.Attributes, func(a *tfprotov6.SchemaAttribute) bool {
		return a.Name == "keep_backups" && a.Optional && a.Computed
	}) {
		t.Error("flexplane_vm has no optional keep_backups")
	}
	// A schedule changes in place: its schedule and keep options do not
	// replace it.
	if sched := resp.ResourceSchemas["flexplane_backup_schedule"]; sched == nil ||
		!slices.ContainsFunc(sched.Block.Attributes, func(a *tfprotov6.SchemaAttribute) bool { return a.Name == "schedule" && a.Required }) {
		t.Error("flexplane_backup_schedule has no required schedule")
	}
	if b := resp.DataSourceSchemas["flexplane_backups"]; b == nil ||
		!slices.ContainsFunc(b.Block.Attributes, func(a *tfprotov6.SchemaAttribute) bool { return a.Name == "vm" && a.Optional }) {
		t.Error("no data source flexplane_backups with an optional vm")
	}
	for _, name := range []string{"flexplane_zone", "flexplane_image", "flexplane_compute_profile", "flexplane_storage_profile"} {
		s, ok := resp.DataSourceSchemas[name]
		if !ok {
			t.Errorf("no data source %s", name)
			continue
		}
		if !slices.ContainsFunc(s.Block.Attributes, func(a *tfprotov6.SchemaAttribute) bool { return a.Name == "name" && a.Required }) {
			t.Errorf("data source %s has no required name", name)
		}
	}
}
