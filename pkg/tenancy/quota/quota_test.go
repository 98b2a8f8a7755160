package quota_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// TestReserveTwoReplicas races reservations from two ledgers on two stores
// over one catalog directory (two orchestrator replicas): the quota of 6 VMs,
// 2 of them used by guests in Proxmox, admits exactly 4 of 20 creates.
func TestReserveTwoReplicas(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "alpha", 1)
	ctx := vmtest.Ctx(t)
	st := vmtest.Catalog(t, []string{"prod"}, catalog.VDCQuotas{VCPUs: 100, MemoryMiB: 1 << 20, StorageGiB: 1000, VMs: 6}, "http://127.0.0.1/x.qcow2", "sha256:"+fmt.Sprintf("%064d", 0), z)
	st2, err := catalog.OpenDir(st.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, vmid := range []int{100, 101} {
		if _, err := pveapi.Run(ctx, z.Client, "POST", "/nodes/pve1/qemu", map[string]any{
			"vmid": vmid, "cores": 2, "memory": 1024, "tags": tenancy.GuestTags("prod"), "scsi0": "local-lvm:2",
		}); err != nil {
			t.Fatal(err)
		}
	}
	clients := func(context.Context) []*proxmox.Client { return []*proxmox.Client{z.Client} }
	ledgers := []*quota.Ledger{{Store: st, Clients: clients}, {Store: st2, Clients: clients}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for i := range 20 {
		wg.Go(func() {
			err := ledgers[i%2].Reserve(ctx, "prod", fmt.Sprintf("op%d", i), quota.Usage{VCPUs: 1, MemoryMiB: 512, StorageGiB: 1})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, quota.ErrExceeded):
				refused++
			default:
				t.Errorf("reserve: %v", err)
			}
		})
	}
	wg.Wait()
	if ok != 4 || refused != 16 {
		t.Fatalf("%d reserved, %d refused; want 4 and 16", ok, refused)
	}
	rs, err := ledgers[0].Reservations(ctx, "prod")
	if err != nil || len(rs) != 4 {
		t.Fatalf("reservations %v, %v; want 4", rs, err)
	}
	// Releasing frees room; a refusal names the resource.
	if err := ledgers[1].Release(ctx, "prod", rs[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := ledgers[0].Reserve(ctx, "prod", "again", quota.Usage{VCPUs: 1}); err != nil {
		t.Fatalf("reserve after release: %v", err)
	}
	var qe *quota.ExceededError
	if err := ledgers[0].Reserve(ctx, "prod", "big", quota.Usage{VCPUs: 1}); !errors.As(err, &qe) || qe.Resource != "vms" || qe.Limit != 6 {
		t.Fatalf("over quota: %v; want vms of 6", err)
	}
	if err := ledgers[0].Reserve(ctx, "prod", "again", quota.Usage{VCPUs: 1}); err != nil {
		t.Fatalf("reserving an id twice: %v", err)
	}
}

// TestUsageSkipsReservedGuests: a creating guest tagged with its operation
// is counted through its reservation only.
func TestUsageSkipsReservedGuests(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "beta", 1)
	ctx := vmtest.Ctx(t)
	if _, err := pveapi.Run(ctx, z.Client, "POST", "/nodes/pve1/qemu", map[string]any{
		"vmid": 100, "cores": 3, "memory": 2048, "scsi0": "local-lvm:5",
		"tags": tenancy.GuestTags("prod", tenancy.CreatingTag, tenancy.OpTag("x1")),
	}); err != nil {
		t.Fatal(err)
	}
	cs := []*proxmox.Client{z.Client}
	u, err := quota.ProxmoxUsage(ctx, cs, "prod", nil)
	if err != nil || u != (quota.Usage{VCPUs: 3, MemoryMiB: 2048, StorageGiB: 5, VMs: 1}) {
		t.Fatalf("usage %+v, %v", u, err)
	}
	u, err = quota.ProxmoxUsage(ctx, cs, "prod", map[string]bool{"x1": true})
	if err != nil || u != (quota.Usage{}) {
		t.Fatalf("usage skipping x1 %+v, %v", u, err)
	}
	if u, _ := quota.ProxmoxUsage(ctx, cs, "other", nil); u != (quota.Usage{}) {
		t.Fatalf("other VDC usage %+v", u)
	}
}
