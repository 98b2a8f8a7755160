package meshnode

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeLookup stands for the node's LocalAPI WhoIs: it answers who after
// delay (the wait for the node's backend lock), or fails with gone, and
// counts its lookups.
type fakeLookup struct {
	mu    sync.Mutex
	delay time.Duration
	who   Peer
	gone  bool
	calls int
}

func (f *fakeLookup) lookup(ctx context.Context, addr string) (Peer, error) {
	f.mu.Lock()
	f.calls++
	delay := f.delay
	f.mu.Unlock()
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return Peer{}, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		return Peer{}, errors.New("meshnode: whois " + addr + ": unknown peer")
	}
	return f.who.clone(), nil
}

func (f *fakeLookup) set(fn func(f *fakeLookup)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeLookup) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// nodeWithLookup is a Node whose WhoIs asks f instead of a LocalAPI.
func nodeWithLookup(t *testing.T, f *fakeLookup) *Node {
	ctx, stop := context.WithCancel(context.Background())
	n := &Node{whois: newWhoisCache(ctx, f.lookup), stopWhois: stop}
	t.Cleanup(func() { n.stopWhois(); n.whois.wait() })
	return n
}

func whoisWithin(n *Node, d time.Duration, addr string) (Peer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.WhoIs(ctx, addr)
}

const orchAddr = "100.64.0.1:41000"

// A lookup that takes longer than a call's deadline (the node busy
// applying new mesh maps holds its backend lock) goes on, and the next call
// on the connection is identified at once, however short its deadline: the
// agent's health checks are no longer refused one after the other while
// its node is busy.
func TestWhoIsOutlivesTheCallsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeLookup{delay: 2 * time.Second, who: Peer{Name: "orch", Tags: []string{TagOrchestrator}}}
		n := nodeWithLookup(t, f)

		if _, err := whoisWithin(n, time.Second, orchAddr); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a call whose deadline ends before the lookup: err %v, want the deadline's", err)
		}
		time.Sleep(time.Second) // the next health check
		p, err := whoisWithin(n, time.Second, orchAddr)
		if err != nil || !p.HasTag(TagOrchestrator) {
			t.Fatalf("the next call on the connection: %+v, %v; want the orchestrator at once", p, err)
		}
		for range 10 {
			if _, err := whoisWithin(n, time.Millisecond, orchAddr); err != nil {
				t.Fatal(err)
			}
		}
		if got := f.count(); got != 1 {
			t.Errorf("%d lookups for one connection, want 1", got)
		}
		// Another connection is another lookup.
		f.set(func(f *fakeLookup) { f.delay = 0 })
		if _, err := whoisWithin(n, time.Second, "100.64.0.1:41001"); err != nil {
			t.Fatal(err)
		}
		if got := f.count(); got != 2 {
			t.Errorf("%d lookups for two connections, want 2", got)
		}
	})
}

// Calls waiting together share one lookup.
func TestWhoIsOneLookupForConcurrentCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeLookup{delay: time.Second, who: Peer{Name: "orch", Tags: []string{TagOrchestrator}}}
		n := nodeWithLookup(t, f)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() { _, errs[i] = whoisWithin(n, 10*time.Second, orchAddr) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if got := f.count(); got != 1 {
			t.Errorf("%d lookups for 8 concurrent calls, want 1", got)
		}
	})
}

// An identity is not kept past its life: a peer retagged is seen so after
// the renewal, one gone from the mesh is refused after it, and a failed
// lookup is not remembered.
func TestWhoIsRenewsAndForgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeLookup{gone: true}
		n := nodeWithLookup(t, f)

		if _, err := whoisWithin(n, time.Second, orchAddr); err == nil {
			t.Fatal("a peer the node does not know was identified")
		}
		f.set(func(f *fakeLookup) { f.gone, f.who = false, Peer{Name: "orch", Tags: []string{TagOrchestrator}} })
		if p, err := whoisWithin(n, time.Second, orchAddr); err != nil || !p.HasTag(TagOrchestrator) {
			t.Fatalf("after a failed lookup: %+v, %v; want the peer found now", p, err)
		}

		// Retagged: the cached identity holds until the renewal.
		f.set(func(f *fakeLookup) { f.who = Peer{Name: "orch", Tags: []string{TagAgent}} })
		time.Sleep(whoisRenew)
		if p, _ := whoisWithin(n, time.Second, orchAddr); !p.HasTag(TagOrchestrator) {
			t.Fatalf("before the renewal ended: %+v, want the identity cached", p)
		}
		synctest.Wait()
		if p, _ := whoisWithin(n, time.Second, orchAddr); p.HasTag(TagOrchestrator) || !p.HasTag(TagAgent) {
			t.Fatalf("after the renewal: %+v, want the new tags", p)
		}

		// Gone: the renewal forgets it.
		f.set(func(f *fakeLookup) { f.gone = true })
		time.Sleep(whoisRenew)
		whoisWithin(n, time.Second, orchAddr) // starts the renewal
		synctest.Wait()
		if p, err := whoisWithin(n, time.Second, orchAddr); err == nil {
			t.Fatalf("a peer gone from the mesh is still identified as %+v", p)
		}

		// Not asked for a whole life: identified again on the next call.
		f.set(func(f *fakeLookup) { f.gone = false })
		if _, err := whoisWithin(n, time.Second, orchAddr); err != nil {
			t.Fatal(err)
		}
		before := f.count()
		time.Sleep(whoisTTL)
		f.set(func(f *fakeLookup) { f.gone = true })
		if p, err := whoisWithin(n, time.Second, orchAddr); err == nil {
			t.Fatalf("an identity past its life was used: %+v", p)
		}
		if f.count() != before+1 {
			t.Errorf("%d lookups after the identity's life, want 1", f.count()-before)
		}
	})
}

// A peer in the node's current map is identified without asking the node,
// however busy the node is; a new map that no longer holds a peer, or holds
// it with other tags, ends the identity its connections had.
func TestWhoIsFromTheNodesMap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeLookup{delay: time.Hour, who: Peer{Name: "orch", Tags: []string{TagOrchestrator}}}
		n := nodeWithLookup(t, f)
		orch := netip.MustParseAddr("100.64.0.1")
		n.setPeers(map[netip.Addr]Peer{orch: {Name: "orch", Tags: []string{TagOrchestrator}}})
		p, err := whoisWithin(n, time.Millisecond, orchAddr)
		if err != nil || !p.HasTag(TagOrchestrator) {
			t.Fatalf("a peer of the node's map: %+v, %v; want it at once", p, err)
		}
		if f.count() != 0 {
			t.Errorf("the node was asked %d times for a peer of its map", f.count())
		}
		// A peer not in the map (it joined since) is asked for.
		f.set(func(f *fakeLookup) { f.delay = 0 })
		if p, err := whoisWithin(n, time.Second, "100.64.0.9:41000"); err != nil || !p.HasTag(TagOrchestrator) {
			t.Fatalf("a peer not yet in the map: %+v, %v", p, err)
		}
		// Retagged in the next map: the connection's identity is dropped,
		// and the map's answer is the new one.
		n.setPeers(map[netip.Addr]Peer{orch: {Name: "orch", Tags: []string{TagOrchestrator}}, netip.MustParseAddr("100.64.0.9"): {Name: "orch", Tags: []string{TagAgent}}})
		f.set(func(f *fakeLookup) { f.gone = true })
		if p, _ := whoisWithin(n, time.Second, "100.64.0.9:41000"); p.HasTag(TagOrchestrator) {
			t.Fatalf("after a map with other tags: %+v", p)
		}
		// Gone from the map: asked again, and refused.
		n.setPeers(map[netip.Addr]Peer{orch: {Name: "orch", Tags: []string{TagOrchestrator}}})
		if p, err := whoisWithin(n, time.Second, "100.64.0.9:41000"); err == nil {
			t.Fatalf("a peer gone from the map is still identified as %+v", p)
		}
	})
}
