package meshtest_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestReplicasCreateInFlight: a createVM sent through one replica, which
// is SIGKILLed while the create is in flight (its guest cloned, not yet
// started), is finished or cleaned up by a survivor, twice: first a
// replica that does not lead is killed (the leader takes its create over),
// then the leader itself (the last replica, once it leads, takes it over).
// Each time, through the survivor and in Proxmox: the VM exists once and is
// RUNNING, or not at all; no guest is left marked as being created, none
// without its VM; the VDC's quota usage counts exactly its VMs; no address
// of the IPAM belongs to no guest.
func TestReplicasCreateInFlight(t *testing.T) {
	t.Parallel()
	// Starts take 5s, so that a create is in flight long enough to be
	// seen and killed; creates a dead replica left are taken over after
	// 20s, looked for every 2s.
	rs := startReplicas(t, pvesim.Timing{Base: 100 * time.Millisecond, PerGiB: 200 * time.Millisecond, Start: 5 * time.Second},
		"-vm-recover-after", "20s", "-vm-recover-interval", "2s")
	ctx := t.Context()
	pve := pvetest.Client(t, rs.sim, simToken)
	alice := rs.token("alice")
	leader := rs.waitLeader(30*time.Second, nil)
	var first, last *replica
	for _, r := range rs.replicas {
		if r != leader {
			first, last = last, r
		}
	}

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	lan := rs.seedRed(leader)

	// settled is nil once name is RUNNING (or gone) through r, and
	// nothing of its create is left over.
	settled := func(r *replica, name string) error {
		var d struct {
			VMs []struct{ Name, Status string }
			VDC struct{ Usage struct{ VMs int } }
		}
		if err := rs.graphql(r, alice, "red", `{ vms { name status } vdc(name: "red") { usage { vms } } }`, nil, &d); err != nil {
			return err
		}
		var mine []string
		for _, v := range d.VMs {
			if v.Name == name {
				mine = append(mine, v.Status)
			}
		}
		switch {
		case len(mine) > 1:
			t.Fatalf("%s listed %d times: %v", name, len(mine), mine)
		case len(mine) == 1 && mine[0] != "RUNNING":
			return fmt.Errorf("%s is %s", name, mine[0])
		case d.VDC.Usage.VMs != len(d.VMs):
			return fmt.Errorf("the quota usage counts %d VMs, %d are listed", d.VDC.Usage.VMs, len(d.VMs))
		}
		guests, err := pveapi.Guests(ctx, pve)
		if err != nil {
			return err
		}
		macs := map[string]bool{}
		named := 0
		for _, g := range guests {
			if g.Template == 1 {
				continue
			}
			if g.HasTag(tenancy.CreatingTag) {
				return fmt.Errorf("guest %d %s still marked %s", g.VMID, g.Name, tenancy.CreatingTag)
			}
			if g.Name == name {
				named++
			}
			cfg, err := pveapi.GuestConfig(ctx, pve, g.Node, g.VMID)
			if err != nil {
				return err
			}
			for i := range 8 {
				if _, mac, ok := strings.Cut(cfg.Str("net"+strconv.Itoa(i)), "="); ok {
					macs[strings.ToUpper(strings.Split(mac, ",")[0])] = true
				}
			}
		}
		if named != len(mine) {
			return fmt.Errorf("%d guests named %s in Proxmox, %d VMs listed", named, name, len(mine))
		}
		maps, err := ipam.Mappings(ctx, pve)
		if err != nil {
			return err
		}
		for _, m := range maps {
			if m.Gateway == 0 && ipam.IsFlexplaneMAC(m.MAC) && !macs[strings.ToUpper(m.MAC)] {
				return fmt.Errorf("address %s (MAC %s) belongs to no guest", m.IP, m.MAC)
			}
		}
		return nil
	}

	// outcome is how name ended: RUNNING or gone.
	outcome := func(r *replica, name string) string {
		var d struct {
			VMs []struct{ Name, Status string }
		}
		must(rs.graphql(r, alice, "red", `{ vms { name status } }`, nil, &d))
		if i := slices.IndexFunc(d.VMs, func(v struct{ Name, Status string }) bool { return v.Name == name }); i >= 0 {
			return d.VMs[i].Status
		}
		return "gone"
	}

	// killDuringCreate sends a createVM through a, SIGKILLs a once the
	// create's guest exists and before the create has ended, and returns
	// the step it was at.
	killDuringCreate := func(a *replica, name string) string {
		var created struct {
			CreateVM struct{ Operation struct{ ID string } }
		}
		poll.Until(t, 60*time.Second, "createVM "+name+" accepted by "+a.name, func() error {
			return rs.graphql(a, alice, "red", `mutation($in: CreateVMInput!) { createVM(input: $in) { operation { id } } }`, map[string]any{"in": map[string]any{
				"name": name, "zone": "ha", "image": "tiny", "computeProfile": "small", "storageProfile": "ssd", "diskGiB": 4,
				"nics": []any{map[string]any{"network": lan}}, "user": "alice"}}, &created)
		})
		var step string
		deadline := time.Now().Add(2 * time.Minute)
		// poll:own-loop: the kill must land while the create works on
		// its guest, a window sampled every 20 ms.
		for {
			var d struct{ Operation struct{ State, Step string } }
			err := rs.graphql(a, alice, "red", `query($id: ID!) { operation(id: $id) { state step } }`, map[string]any{"id": created.CreateVM.Operation.ID}, &d)
			if err == nil && d.Operation.State != "RUNNING" {
				t.Fatalf("the create of %s ended (%s) before it could be killed", name, d.Operation.State)
			}
			if err == nil && slices.Contains([]string{"configure", "resize", "start"}, d.Operation.Step) {
				step = d.Operation.Step
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the create of %s never reached its guest: %+v %v", name, d.Operation, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		must(a.cmd.Process.Signal(syscall.SIGKILL))
		<-a.exited
		return step
	}

	// A replica that does not lead dies: the leader takes its create over.
	step := killDuringCreate(first, "inflight-1")
	killed := time.Now()
	poll.Until(t, 3*time.Minute, "inflight-1 settled on the leader", func() error { return settled(leader, "inflight-1") })
	t.Logf("%s killed during the %s step of a create: the leader settled it (%s) %v later", first.name, step, outcome(leader, "inflight-1"), time.Since(killed).Round(100*time.Millisecond))

	// The leader dies: the last replica, once it leads, takes it over.
	step = killDuringCreate(leader, "inflight-2")
	killed = time.Now()
	if next := rs.waitLeader(45*time.Second, leader); next != last {
		t.Fatalf("%s leads, not the last live replica %s", next.name, last.name)
	}
	poll.Until(t, 3*time.Minute, "inflight-2 settled on the new leader", func() error {
		return errors.Join(settled(last, "inflight-1"), settled(last, "inflight-2"))
	})
	t.Logf("the leader %s killed during the %s step of a create: the new leader settled it (%s) %v later", leader.name, step, outcome(last, "inflight-2"), time.Since(killed).Round(100*time.Millisecond))
}
