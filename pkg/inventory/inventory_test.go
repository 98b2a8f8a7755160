package inventory_test

import (
	"context"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/inventory"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestReads decodes what a simulated cluster answers: guests, nodes and
// storage of /cluster/resources and the IPAM's mappings.
func TestReads(t *testing.T) {
	t.Parallel()
	const token = "flexplane@pve!test=0123456789abcdef"
	_, c := pvetest.Start(t, pvesim.Config{Cluster: "lab", Nodes: 2}, token)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var upid proxmox.UPID
	if err := c.Post(ctx, "/nodes/pve2/qemu", map[string]any{"vmid": 130, "name": "web", "cores": 3, "memory": 3072, "tags": tenancy.GuestTags("red"), "start": 1}, &upid); err != nil {
		t.Fatal(err)
	}
	if err := proxmox.NewTask(upid, c).Wait(ctx, 10*time.Millisecond, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	rs, err := pveapi.Resources(ctx, c, "")
	if err != nil {
		t.Fatal(err)
	}
	var vms, nodes, storages int
	for _, r := range rs {
		switch r.Type {
		case "qemu":
			vms++
			if r.VMID != 130 || r.Name != "web" || r.Node != "pve2" || r.Status != "running" || r.MaxCPU != 3 || r.MaxMem != 3072<<20 || r.Uptime < 0 {
				t.Errorf("guest %+v", r)
			}
			if vdc, ok := tenancy.VDCOf(r.Tags()); !ok || vdc != "red" {
				t.Errorf("tags %q", r.RawTags)
			}
		case "node":
			nodes++
			if r.Status != "online" || r.MaxCPU <= 0 || r.MaxMem <= 0 {
				t.Errorf("node %+v", r)
			}
		case "storage":
			storages++
			if r.Storage == "" || r.MaxDisk <= 0 {
				t.Errorf("storage %+v", r)
			}
		}
	}
	if vms != 1 || nodes != 2 || storages == 0 {
		t.Errorf("resources: %d guests, %d nodes, %d storages", vms, nodes, storages)
	}
	only, err := pveapi.Resources(ctx, c, "vm")
	if err != nil || len(only) != 1 {
		t.Errorf("type=vm: %+v, %v", only, err)
	}

	vnet := inventory.AddRedWebAddress(ctx, t, c)
	ms, err := pveapi.IPAMStatus(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, m := range ms {
		if m.IP == "10.5.0.7" {
			found = m.VMID == 130 && m.VNet == vnet && m.Gateway == 0
		}
	}
	if !found {
		t.Errorf("IPAM = %+v", ms)
	}
}
