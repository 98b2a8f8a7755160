package meshtest_test

import (
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
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestSoak: 16 users list VMs, hosts and zones without pause for 30s while
// guests of their VDC are created and deleted in Proxmox. No request fails,
// the p99 stays bounded, and afterwards the process (the orchestrator, the
// agents and the simulated cluster all run in it) is back to its goroutines,
// file descriptors and heap of before: nothing leaks per request.
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
	tokens := map[string]string{"alice": h.Token(t, "alice"), "admin": h.Token(t, "admin")}
	queries := []struct{ user, vdc, q string }{
		{"alice", "red", `{ vms { id name status zone { name } } }`},
		{"admin", "", `{ hosts { name status } zones { name status } }`},
	}
	var (
		requests, failures atomic.Int64
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
	took = nil
	g0, f0, h0 := runtime.NumGoroutine(), fds(), heap()

	run(soak)
	n := requests.Load()
	slices.Sort(took)
	p := func(q float64) time.Duration { return took[int(float64(len(took)-1)*q)] }
	t.Logf("%d requests in %v by %d users (%.0f/s), %d failed; p50 %v, p99 %v, max %v",
		n, soak, users, float64(n)/soak.Seconds(), failures.Load(), p(0.5).Round(time.Microsecond), p(0.99).Round(time.Microsecond), took[len(took)-1].Round(time.Millisecond))
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
	deadline := time.Now().Add(30 * time.Second)
	for {
		g1, f1, h1 = runtime.NumGoroutine(), fds(), heap()
		settled := g1 <= g0+20 && f1 <= f0+10 && h1 <= h0+h0/2+16<<20
		if settled || time.Now().After(deadline) {
			if !settled {
				t.Errorf("after the soak: %d goroutines (%d before), %d file descriptors (%d before), heap %d MiB (%d MiB before)",
					g1, g0, f1, f0, h1>>20, h0>>20)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("goroutines %d -> %d, file descriptors %d -> %d, heap %.1f -> %.1f MiB", g0, g1, f0, f1, float64(h0)/(1<<20), float64(h1)/(1<<20))
}
