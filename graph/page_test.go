package graph

import (
	"testing"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestVMStatusIsPveapiState: every status the estate gives a guest
// (pveapi's one mapping) is a status of the schema.
func TestVMStatusIsPveapiState(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"running", "stopped", "paused", "suspended", "unknown", ""} {
		for _, lock := range []string{"", "clone", "create", "suspended", "backup"} {
			for _, tags := range []string{"", tenancy.GuestTags("red"), tenancy.GuestTags("red", tenancy.CreatingTag)} {
				res := pveapi.Resource{Type: "qemu", VMID: 7, Status: status, Lock: lock, RawTags: tags}
				for _, creating := range []map[int]bool{nil, {7: true}} {
					if got := model.VMStatus(estate.GuestStatus(res, creating)); !got.IsValid() {
						t.Errorf("%+v: %q is no status of the schema", res, got)
					}
				}
			}
		}
	}
}
