package compute_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

// TestCreatesUnderProxmoxFaults: creates meet what Proxmox does under
// load — lock timeouts ("can't lock file '/var/lock/qemu-server/lock-N.conf'
// - got timeout", what parallel clones of one template cause), 500s and
// slow answers — at each step. Where Proxmox lets a request be sent again
// (a lock timeout did nothing) the create retries and ends RUNNING, with
// one guest and one address; where it cannot, it fails with a clear error
// and leaves nothing behind: no guest, no address, no reservation.
func TestCreatesUnderProxmoxFaults(t *testing.T) {
	t.Parallel()
	const clone, config, start = "/nodes/*/qemu/*/clone", "/nodes/*/qemu/*/config", "/nodes/*/qemu/*/status/start"
	lock := func(path string, n int) pvesim.Fault {
		return pvesim.Fault{Method: "POST", Path: path, LockTimeout: true, Delay: 50 * time.Millisecond, Count: n}
	}
	for _, c := range []struct {
		name   string
		faults []pvesim.Fault
		// creates run at once
		creates int
		// latency of every request
		latency time.Duration
		// refused: CreateVM fails with this code and text; failed: the
		// create's operation fails with this text.
		refused apierr.Code
		failed  string
		text    string
	}{
		{name: "lock timeouts on clone", faults: []pvesim.Fault{lock(clone, 6)}, creates: 4},
		{name: "lock timeouts on configure and start", faults: []pvesim.Fault{lock(config, 3), lock(start, 2)}, creates: 2},
		{name: "slow answers", latency: 150 * time.Millisecond, creates: 2},
		{name: "a 500 on clone", faults: []pvesim.Fault{{Method: "POST", Path: clone, Status: 500, Count: 1}}, creates: 1,
			refused: apierr.Internal, text: "cloning the template failed"},
		{name: "lock timeouts on clone that do not end", faults: []pvesim.Fault{lock(clone, 1000)}, creates: 1,
			refused: apierr.Internal, text: "could not lock it in time"},
		{name: "500s on start", faults: []pvesim.Fault{{Method: "POST", Path: start, Status: 500, Count: 1000}}, creates: 1,
			failed: "start"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, bigQuota, "alpha")
			e.stage(e.zones[0])
			ctx := vmtest.Ctx(t)
			before := e.snapshot()
			sim := e.zones[0].Sim
			for _, f := range c.faults {
				sim.InjectFault(f)
			}
			sim.SetLatency(c.latency)
			began := time.Now()
			var wg sync.WaitGroup
			for i := range c.creates {
				wg.Add(1)
				go func() {
					defer wg.Done()
					name := fmt.Sprintf("vm-%d", i)
					vm, op, err := e.svc.CreateVM(ctx, e.input("alpha", name))
					if c.refused != "" {
						if got, _ := code(err); got != c.refused || !strings.Contains(err.Error(), c.text) {
							t.Errorf("%s: create: %v (%s), want %s with %q", name, err, got, c.refused, c.text)
						}
						return
					}
					if err != nil {
						t.Errorf("%s: create: %v", name, err)
						return
					}
					final := e.wait(e.svc, "blue", op.ID)
					if c.failed != "" {
						if final.State != compute.OpFailed || !strings.Contains(final.Error, c.failed) {
							t.Errorf("%s: operation %+v, want FAILED in %s", name, final, c.failed)
						}
						return
					}
					if final.State != compute.OpSucceeded {
						t.Errorf("%s: operation %+v, want SUCCEEDED", name, final)
						return
					}
					got, err := e.svc.VM(ctx, "blue", vm.ID)
					if err != nil || got.Status != compute.StatusRunning || len(got.Addresses) != 1 {
						t.Errorf("%s: %+v, %v; want RUNNING with its address", name, got, err)
					}
				}()
			}
			wg.Wait()
			sim.SetLatency(0)
			for _, f := range c.faults {
				sim.InjectFault(pvesim.Fault{Method: f.Method, Path: f.Path})
			}
			after := e.snapshot()
			if c.refused != "" || c.failed != "" {
				// (The VDC's resourceVersion moved: the create reserved
				// quota, and released it.)
				if !slices.Equal(before.guests, after.guests) || !slices.Equal(before.mappings, after.mappings) || after.reserved != 0 {
					t.Errorf("a create that failed left something:\nbefore %+v\nafter  %+v", before, after)
				}
			} else {
				gs, err := pveapi.Guests(ctx, e.zones[0].Client)
				if err != nil {
					t.Fatal(err)
				}
				created := 0
				for _, g := range gs {
					if strings.HasPrefix(g.Name, "vm-") {
						created++
					}
				}
				if created != c.creates || len(e.flexMappings(e.zones[0])) != c.creates || after.reserved != 0 {
					t.Errorf("%d guests, %d addresses, %d reservations; want %d, %d, 0", created,
						len(e.flexMappings(e.zones[0])), after.reserved, c.creates, c.creates)
				}
			}
			t.Logf("%d creates took %v", c.creates, time.Since(began).Round(time.Millisecond))
		})
	}
}
