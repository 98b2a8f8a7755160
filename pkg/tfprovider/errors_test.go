package tfprovider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
)

// TestFieldPath maps the API's extensions.field under a mutation's input
// to the attribute path the provider reports the error on.
func TestFieldPath(t *testing.T) {
	t.Parallel()
	for field, want := range map[string]path.Path{
		"input.nics[0].address":   path.Root("nics").AtListIndex(0).AtName("address"),
		"input.diskGiB":           path.Root("disk_gib"),
		"input.vmId":              path.Root("vm_id"),
		"input.rules[3].peerCidr": path.Root("rules").AtListIndex(3).AtName("peer_cidr"),
		"input.sshKeyNames[1]":    path.Root("ssh_key_names").AtListIndex(1),
		"input.readMBps":          path.Root("read_mbps"),
	} {
		got, ok := fieldPath(field)
		if !ok || !got.Equal(want) {
			t.Errorf("fieldPath(%q) = %v, %v; want %v", field, got, ok, want)
		}
	}
	for _, field := range []string{"", "quotas.vms", "input.", "input.nics[x].address", "input.nics[0"} {
		if got, ok := fieldPath(field); ok {
			t.Errorf("fieldPath(%q) = %v, want none", field, got)
		}
	}
}
