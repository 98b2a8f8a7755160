package meshtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestSoak: 16 users list VMs, hosts and zones and read a VM's details
// without pause for 30s while guests of their VDC are created and deleted in
// Proxmox, and another VDC's member creates and deletes VMs through the API,
// following each operation over a subscription to its end. No request
// fails, every create and delete succeeds, the p99 stays bounded, and
// afterwards the process (the orchestrator, the agents and the simulated
// cluster all run in it) is back to its goroutines, file descriptors and
// heap of before: nothing leaks per request or per subscription.
func TestSoak(t *testing.T) {
	// Not parallel: it counts the process's goroutines, descriptors and
	// heap, which the package's parallel tests (paused until the
	// sequential ones end) would change under it.
	const users, soak = 16, 30 * time.Second
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "soak", Nodes: 2}), meshtest.WithAPI(meshtest.APISpec{}))
	h.WaitOnline(t, 30*time.Second)
	c := h.Clusters[0]
	pve := h.Orchestrator.Zones().Client(h.Zone(t, c).ID)
	ctx := t.Context()
	if err := pve.Post(ctx, "/pools", map[string]any{"poolid": tenancy.PoolID("red")}, nil); err != nil {
		t.Fatal(err)
	}
	guest := func(vmid int, create bool) error {
		var upid proxmox.UPID
		var err error
		if create {
			err = pve.Post(ctx, "/nodes/pve1/qemu", map[string]any{"vmid": vmid, "name": fmt.Sprintf("soak-%d", vmid),
				"tags": tenancy.GuestTags("red"), "pool": tenancy.PoolID("red"), "memory": 512}, &upid)
		} else {
			err = pve.Delete(ctx, fmt.Sprintf("/nodes/pve1/qemu/%d", vmid), &upid)
		}
		if err != nil {
			return err
		}
		return proxmox.NewTask(upid, pve).Wait(ctx, 20*time.Millisecond, 20*time.Second)
	}
	for i := range 5 {
		if err := guest(200+i, true); err != nil {
			t.Fatal(err)
		}
	}
	// What bob's VMs are made of, through the API as an admin would.
	url, sum := vmtest.ImageServer(t, 1<<20)
	tokens := map[string]string{"alice": h.Token(t, "alice"), "admin": h.Token(t, "admin"), "bob": h.Token(t, "bob")}
	h.GraphQL(t, "admin", "", `mutation($u: String!, $c: String!) {
	  createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name }
	  createStorageProfile(input: {name: "ssd", tier: "ssd", readMBps: 200, writeMBps: 100, pools: [{zone: "soak", pool: "local-lvm"}]}) { name }
	  createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name } }`,
		map[string]any{"u": url, "c": sum}).OK(t)
	var lan struct{ ID string }
	h.GraphQL(t, "bob", "blue", `mutation { createNetwork(input: {name: "lan", zone: "soak", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`, nil).
		OK(t).Into(t, "createNetwork", &lan)
	detail := fmt.Sprintf(`{ vm(id: %q) { id name status host { name } zone { name } } }`, tenancy.VMRef{ZoneID: h.Zone(t, c).ID, VMID: 200}.ID())
	queries := []struct{ user, vdc, q string }{
		{"alice", "red", `{ vms { id name status zone { name } } }`},
		{"admin", "", `{ hosts { name status } zones { name status } }`},
		{"alice", "red", detail},
	}
	var (
		requests, failures atomic.Int64
		apiCycles, vmSeq   atomic.Int64
		mu                 sync.Mutex
		took               []time.Duration
		firstErr           atomic.Value
	)
	run := func(d time.Duration) {
		stop := time.Now().Add(d)
		var wg sync.WaitGroup
		for u := range users {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(stop); i++ {
					q := queries[(u+i)%len(queries)]
					began := time.Now()
					r, err := gqltest.Post(ctx, nil, h.GraphQLURL(), gqltest.Request{Query: q.q, Authorization: "Bearer " + tokens[q.user], VDC: q.vdc})
					d := time.Since(began)
					requests.Add(1)
					if err == nil {
						err = r.Err()
					}
					if err != nil {
						failures.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
					mu.Lock()
					took = append(took, d)
					mu.Unlock()
				}
			}()
		}
		// Bob creates and deletes VMs through the API meanwhile, each
		// operation followed over a subscription.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := apiCycle(ctx, h, tokens["bob"], lan.ID, fmt.Sprintf("soak-api-%d", vmSeq.Add(1))); err != nil {
					firstErr.CompareAndSwap(nil, err)
					failures.Add(1)
					return
				}
				apiCycles.Add(1)
			}
		}()
		// Churn: guests of red created and deleted meanwhile.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for vmid := 300; time.Now().Before(stop); vmid++ {
				if err := guest(vmid, true); err != nil {
					firstErr.CompareAndSwap(nil, err)
					failures.Add(1)
					return
				}
				if err := guest(vmid, false); err != nil {
					firstErr.CompareAndSwap(nil, err)
					failures.Add(1)
					return
				}
			}
		}()
		wg.Wait()
	}
	fds := func() int {
		ents, _ := os.ReadDir("/proc/self/fd")
		return len(ents)
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	run(3 * time.Second) // warm: connections, caches, pools
	requests.Store(0)
	failures.Store(0)
	apiCycles.Store(0)
	took = nil
	g0, f0, h0 := runtime.NumGoroutine(), fds(), heap()

	run(soak)
	n := requests.Load()
	slices.Sort(took)
	p := func(q float64) time.Duration { return took[int(float64(len(took)-1)*q)] }
	t.Logf("%d requests in %v by %d users (%.0f/s), %d failed; p50 %v, p99 %v, max %v",
		n, soak, users, float64(n)/soak.Seconds(), failures.Load(), p(0.5).Round(time.Microsecond), p(0.99).Round(time.Microsecond), took[len(took)-1].Round(time.Millisecond))
	t.Logf("%d VMs created and deleted through the API, each operation followed over a subscription", apiCycles.Load())
	if apiCycles.Load() == 0 {
		t.Error("no VM was created and deleted through the API during the soak")
	}
	if f := failures.Load(); f > 0 {
		t.Errorf("%d of %d requests failed; the first: %v", f, n, firstErr.Load())
	}
	if p(0.99) > 2*time.Second {
		t.Errorf("p99 %v, want under 2s", p(0.99))
	}
	// Back to where it was: idle connections and timers settle within
	// seconds; a leak per request would not.
	var g1, f1 int
	var h1 uint64
	settle, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := poll.Context(settle, func() error {
		g1, f1, h1 = runtime.NumGoroutine(), fds(), heap()
		if g1 <= g0+20 && f1 <= f0+10 && h1 <= h0+h0/2+16<<20 {
			return nil
		}
		return errors.New("not settled")
	}); err != nil {
		t.Errorf("after the soak: %d goroutines (%d before), %d file descriptors (%d before), heap %d MiB (%d MiB before)",
			g1, g0, f1, f0, h1>>20, h0>>20)
	}
	t.Logf("goroutines %d -> %d, file descriptors %d -> %d, heap %.1f -> %.1f MiB", g0, g1, f0, f1, float64(h0)/(1<<20), float64(h1)/(1<<20))
}

// apiCycle creates a VM of blue through the API, follows the create over a
// subscription until it succeeds, reads the VM, deletes it and follows the
// delete the same way.
func apiCycle(ctx context.Context, h *meshtest.Harness, token, network, name string) error {
	post := func(q string, vars map[string]any, out any) error {
		r, err := gqltest.Post(ctx, nil, h.GraphQLURL(), gqltest.Request{Query: q, Variables: vars, Authorization: "Bearer " + token, VDC: "blue"})
		if err == nil {
			err = r.Err()
		}
		if err == nil && out != nil {
			err = r.Decode(out)
		}
		return err
	}
	follow := func(op string) error {
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		msgs, err := gqltest.Subscribe(sctx, h.GraphQLURL(), map[string]any{"Authorization": "Bearer " + token, gqltest.VDCHeader: "blue"},
			fmt.Sprintf(`subscription { operation(id: %q) { state error } }`, op))
		if err != nil {
			return fmt.Errorf("follow %s: %w", op, err)
		}
		var last struct {
			Data struct{ Operation struct{ State, Error string } }
		}
		for _, m := range msgs {
			switch m.Type {
			case "next":
				if err := json.Unmarshal(m.Payload, &last); err != nil {
					return fmt.Errorf("follow %s: %w", op, err)
				}
			case "error", "connection_error":
				return fmt.Errorf("follow %s: %s", op, m.Payload)
			}
		}
		if len(msgs) == 0 || msgs[len(msgs)-1].Type != "complete" || last.Data.Operation.State != "SUCCEEDED" {
			return fmt.Errorf("follow %s: ended %+v after %d messages", op, last.Data.Operation, len(msgs))
		}
		return nil
	}
	var created struct {
		CreateVM struct {
			VM        struct{ ID string }
			Operation struct{ ID string }
		}
	}
	if err := post(`mutation($in: CreateVMInput!) { createVM(input: $in) { vm { id } operation { id } } }`, map[string]any{"in": map[string]any{
		"name": name, "zone": "soak", "image": "tiny", "computeProfile": "small", "storageProfile": "ssd", "diskGiB": 4,
		"nics": []any{map[string]any{"network": network}}, "user": "bob",
		"sshKeys": []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq0kYxJ9ehr0wF7rJ1aA0Yq8hZ3k2wq1n0X6cYzK7fU bob@laptop"}}}, &created); err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	if err := follow(created.CreateVM.Operation.ID); err != nil {
		return err
	}
	var vm struct{ VM struct{ ID, Status string } }
	if err := post(`query($id: ID!) { vm(id: $id) { id status } }`, map[string]any{"id": created.CreateVM.VM.ID}, &vm); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if vm.VM.Status != "RUNNING" {
		return fmt.Errorf("%s is %s after its create, want RUNNING", name, vm.VM.Status)
	}
	var deleted struct{ DeleteVM struct{ ID string } }
	if err := post(`mutation($id: ID!) { deleteVM(id: $id) { id } }`, map[string]any{"id": created.CreateVM.VM.ID}, &deleted); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return follow(deleted.DeleteVM.ID)
}
