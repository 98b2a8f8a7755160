package compute_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestCreatesInFlightAcrossARestart: 100 creates in flight, over two zones,
// when the VM service stops as a restarting orchestrator's does (Shutdown:
// runners end where they are, requests in flight are cut), and a new
// service recovers (what the next orchestrator does at start). Every create
// that was accepted ends RUNNING, exactly once, with its address; every one
// refused leaves nothing; no address, reservation or VM id is left without
// its VM.
func TestCreatesInFlightAcrossARestart(t *testing.T) {
	t.Parallel()
	const n = 100
	e := newEnv(t, bigQuota, "alpha", "beta")
	for _, z := range e.zones {
		e.stage(z)
		// Slow enough that the restart finds creates at every step.
		z.Sim.SetLatency(5 * time.Millisecond)
	}
	ctx, cancelAll := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancelAll()
	dying := e.newService(e.cfg)
	// Ten clients at a time (100 at once mostly measure how creates
	// contend for the next free address and the VDC's quota).
	clients := make(chan struct{}, 10)
	reqCtx, cut := context.WithCancel(ctx)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted = map[string]bool{}
		unsent   []int // not sent before the restart: sent to the new one
		started  atomic.Int32
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clients <- struct{}{}
			defer func() { <-clients }()
			if reqCtx.Err() != nil {
				mu.Lock()
				unsent = append(unsent, i)
				mu.Unlock()
				return // the orchestrator is gone: sent again to the next
			}
			zone := e.zones[i%2].Name
			name := fmt.Sprintf("load-%03d", i)
			started.Add(1)
			_, _, err := dying.CreateVM(reqCtx, e.input(zone, name))
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				accepted[name] = true
			}
		}()
	}
	// Restart once about half the creates were accepted.
	began := time.Now()
	// poll:own-loop: the restart must come while about half the creates
	// are in, a moment sampled every 5 ms; after a minute it comes anyway.
	for deadline := time.Now().Add(time.Minute); ; {
		mu.Lock()
		k := len(accepted)
		mu.Unlock()
		if k >= n/2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	t.Logf("restart after %v: %d of %d creates accepted", time.Since(began).Round(time.Millisecond), len(accepted), n)
	mu.Unlock()
	cut()
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dying.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	t.Logf("stopped after %v: %d of %d creates accepted", time.Since(began).Round(time.Millisecond), len(accepted), n)

	for _, z := range e.zones {
		z.Sim.SetLatency(0)
	}
	fresh := e.newService(e.cfg)
	if err := fresh.Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	// The clients that could not send theirs send them now.
	var ops []*compute.Operation
	for _, i := range unsent {
		name := fmt.Sprintf("load-%03d", i)
		_, op, err := fresh.CreateVM(ctx, e.input(e.zones[i%2].Name, name))
		if err != nil {
			t.Fatalf("%s after the restart: %v", name, err)
		}
		accepted[name] = true
		ops = append(ops, op)
	}
	for _, op := range ops {
		if fin := e.wait(fresh, "blue", op.ID); fin.State != compute.OpSucceeded {
			t.Errorf("create after the restart: %+v", fin)
		}
	}
	// What Recover adopted has ended; a second Recover finds nothing to do.
	if err := fresh.Recover(ctx); err != nil {
		t.Fatalf("recover again: %v", err)
	}

	byName := map[string]int{}
	ids := map[string]bool{}
	for _, z := range e.zones {
		gs, err := pveapi.Guests(ctx, z.Client)
		if err != nil {
			t.Fatal(err)
		}
		guests := 0
		for _, g := range gs {
			if !strings.HasPrefix(g.Name, "load-") {
				continue
			}
			guests++
			byName[g.Name]++
			ids[fmt.Sprintf("%s/%d", z.Name, g.VMID)] = true
			if g.Status != "running" || isCreatingGuest(g) {
				t.Errorf("%s (%s/%d): %s, creating %v; want running and finished", g.Name, z.Name, g.VMID, g.Status, isCreatingGuest(g))
			}
		}
		if ms := e.flexMappings(z); len(ms) != guests {
			t.Errorf("zone %s: %d flexplane addresses for %d guests: %+v", z.Name, len(ms), guests, ms)
		}
	}
	for name, c := range byName {
		if c != 1 || !accepted[name] {
			t.Errorf("%s: %d guests (accepted: %v)", name, c, accepted[name])
		}
	}
	for name := range accepted {
		if byName[name] != 1 {
			t.Errorf("%s was accepted but has %d guests", name, byName[name])
		}
	}
	if s := e.snapshot(); s.reserved != 0 {
		t.Errorf("%d quota reservations left", s.reserved)
	}
	// The service answers each as the API would.
	for ref := range ids {
		zone, vmid, _ := strings.Cut(ref, "/")
		id, _ := strconv.Atoi(vmid)
		v, err := fresh.VM(ctx, "blue", tenancy.VMRef{ZoneID: zone, VMID: id}.ID())
		if err != nil || v.Status != compute.StatusRunning || len(v.Addresses) != 1 {
			t.Errorf("VM %s: %+v, %v; want RUNNING with its address", ref, v, err)
		}
	}
	t.Logf("%d creates sent before the restart, %d after; %d accepted, %d VMs at the end (the others refused during the restart, leaving nothing)",
		started.Load(), len(unsent), len(accepted), len(byName))
}
