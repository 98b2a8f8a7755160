package devstack_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/devstack"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// testPlacement is TestStack's placement check (docs/operate/placement.md,
// docs/operate/maintenance.md) on the stack as `make dev` starts it, beside
// the demo VMs: nine VMs created at once in fra1 land on all three of its
// hosts, at most four on one; fra1's pve1 put in maintenance is emptied of
// every VDC's VMs, then taken out of it. The nine are deleted after.
func testPlacement(t *testing.T, admin, alice *devstack.Client) {
	ctx := t.Context()
	var nets struct{ Networks []struct{ ID string } }
	if err := alice.Do(ctx, "dev", `{ networks(zone: "fra1") { id } }`, nil, &nets); err != nil || len(nets.Networks) != 1 {
		t.Fatalf("dev's network in fra1: %+v %v", nets, err)
	}
	const n = 9
	names := make([]string, n)
	for i := range names {
		// e2e-: not counted among the demo VMs by TestStack's checks.
		names[i] = "e2e-place-" + strconv.Itoa(i+1)
		if _, err := devstack.CreateVM(ctx, alice, "dev", devstack.VMSpec{Name: names[i], Zone: "fra1", Image: "debian-12",
			ComputeProfile: "small", StorageProfile: "ssd-standard", DiskGiB: 10, Network: nets.Networks[0].ID}); err != nil {
			t.Fatalf("create %s: %v", names[i], err)
		}
	}
	type placed struct {
		ID, Name, Status string
		Zone             struct{ Name string }
		Host             *struct{ Name string }
	}
	vmsOn := func(vdc string) ([]placed, error) {
		var d struct{ VMs []placed }
		err := admin.Do(ctx, vdc, `{ vms { id name status zone { name } host { name } } }`, nil, &d)
		return d.VMs, err
	}
	var ids []string
	perHost := map[string]int{}
	poll.Until(t, 2*time.Minute, "the nine VMs RUNNING on their hosts", func() error {
		vms, err := vmsOn("dev")
		if err != nil {
			return err
		}
		ids, perHost = nil, map[string]int{}
		for _, v := range vms {
			if !slices.Contains(names, v.Name) {
				continue
			}
			if v.Status != "RUNNING" || v.Host == nil {
				return fmt.Errorf("%s %s", v.Name, v.Status)
			}
			ids = append(ids, v.ID)
			perHost[v.Host.Name]++
		}
		if len(ids) != n {
			return fmt.Errorf("%d of %d VMs", len(ids), n)
		}
		return nil
	})
	t.Cleanup(func() { deleteVMs(t, alice, ids) })
	t.Logf("the nine VMs per host of fra1: %v", perHost)
	if len(perHost) != 3 {
		t.Errorf("the nine VMs use %d of fra1's 3 hosts: %v", len(perHost), perHost)
	}
	for h, c := range perHost {
		if c > 4 {
			t.Errorf("%d of the nine VMs on %s, at most 4 wanted: %v", c, h, perHost)
		}
	}

	var hosts struct {
		Hosts []struct{ ID, Name string }
	}
	if err := admin.Do(ctx, "", `{ hosts(zone: "fra1") { id name } }`, nil, &hosts); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(hosts.Hosts, func(h struct{ ID, Name string }) bool { return h.Name == "pve1" })
	if i < 0 {
		t.Fatalf("fra1's hosts: %+v", hosts.Hosts)
	}
	pve1 := hosts.Hosts[i].ID
	// ctx is done when the cleanups run: they use their own.
	setMaintenance := func(ctx context.Context, on bool) {
		t.Helper()
		if err := admin.Do(ctx, "", `mutation($h: ID!, $on: Boolean!) { setHostMaintenance(input: {host: $h, enabled: $on}) { maintenance } }`,
			map[string]any{"h": pve1, "on": on}, nil); err != nil {
			t.Fatalf("setHostMaintenance(%v): %v", on, err)
		}
	}
	setMaintenance(ctx, true)
	t.Cleanup(func() { setMaintenance(context.Background(), false) })
	poll.Until(t, 2*time.Minute, "fra1's pve1 in maintenance with no VM left", func() error {
		var d struct {
			Node struct {
				Maintenance string
				Drain       []struct{ VMName, Status, Message string }
			}
		}
		if err := admin.Do(ctx, "", `query($h: ID!) { node(id: $h) { ... on Host { maintenance drain { vmName status message } } } }`,
			map[string]any{"h": pve1}, &d); err != nil {
			return err
		}
		h := d.Node
		if h.Maintenance != "MAINTENANCE" {
			if h.Maintenance == "FAILED" {
				t.Fatalf("the drain of pve1 failed: %+v", h.Drain)
			}
			return fmt.Errorf("%s: %+v", h.Maintenance, h.Drain)
		}
		// Every VDC's VMs, as the platform admin sees them in each.
		for _, vdc := range []string{"prod", "dev", "staging"} {
			vms, err := vmsOn(vdc)
			if err != nil {
				return err
			}
			for _, v := range vms {
				if v.Zone.Name == "fra1" && v.Host != nil && v.Host.Name == "pve1" {
					return fmt.Errorf("%s/%s still on pve1 (%s)", vdc, v.Name, v.Status)
				}
			}
		}
		return nil
	})
}

// deleteVMs deletes the VMs of dev with ids at once and waits for each
// delete (deleteVM returns when the VM is gone).
func deleteVMs(t *testing.T, c *devstack.Client, ids []string) {
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			if err := c.Do(context.Background(), "dev", `mutation($id: ID!) { deleteVM(id: $id) { __typename } }`, map[string]any{"id": id}, nil); err != nil {
				t.Errorf("delete %s: %v", id, err)
			}
		})
	}
	wg.Wait()
}
