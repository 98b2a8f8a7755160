package server

import (
	"fmt"
	"testing"
	"time"
)

// newTestLimiter is a limiter of cfg on a clock the test moves with the
// returned function.
func newTestLimiter(t *testing.T, cfg RateLimits) (*rateLimiter, func(time.Duration)) {
	t.Helper()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg.Now = func() time.Time { return now }
	r := newRateLimiter(cfg)
	if r == nil {
		t.Fatal("no limiter")
	}
	return r, func(d time.Duration) { now = now.Add(d) }
}

// TestIdleCallersAreForgotten: the buckets of callers who have been idle
// long enough to have filled up again are dropped at the next sweep, so
// memory follows the callers active lately, not every caller ever seen; a
// caller whose bucket is still filling is kept, and still limited.
func TestIdleCallersAreForgotten(t *testing.T) {
	t.Parallel()
	r, advance := newTestLimiter(t, RateLimits{})
	for i := range 10000 {
		if why := r.take(caller{issuer: "https://id.test", subject: fmt.Sprint(i)}, 1, 0); why != nil {
			t.Fatalf("caller %d refused: %+v", i, why)
		}
	}
	if n := len(r.callers); n != 10000 {
		t.Fatalf("%d callers kept, want 10000", n)
	}
	busy := caller{issuer: "https://id.test", subject: "busy"}
	advance(r.sweepEvery - 500*time.Millisecond)
	if why := r.take(busy, DefaultMutationBurst, 0); why != nil {
		t.Fatalf("busy: %+v", why)
	}
	advance(500 * time.Millisecond) // the sweep: busy's bucket holds 5
	if why := r.take(caller{issuer: "https://id.test", subject: "late"}, 1, 0); why != nil {
		t.Fatalf("late: %+v", why)
	}
	if n := len(r.callers); n != 2 {
		t.Fatalf("%d callers kept after the sweep, want busy and late", n)
	}
	if why := r.take(busy, 6, 0); why == nil || why.wait != 100*time.Millisecond {
		t.Fatalf("busy took 6 of 5 tokens: %+v", why)
	}
}

// TestRateLimitKeys: callers are told apart by issuer and subject; a
// refused openConsole takes no mutation token, an openConsole takes one of
// each bucket, and the wait is the longest of the two.
func TestRateLimitKeys(t *testing.T) {
	t.Parallel()
	r, advance := newTestLimiter(t, RateLimits{MutationRate: 1, MutationBurst: 6, ConsoleRate: 0.5, ConsoleBurst: 2})
	a := caller{issuer: "https://a.test", subject: "u1"}
	for _, c := range []caller{a, {issuer: "https://b.test", subject: "u1"}, {issuer: "https://a.test", subject: "u2"}} {
		if why := r.take(c, 2, 2); why != nil {
			t.Fatalf("%v: %+v", c, why)
		}
	}
	// a has 4 mutation tokens and no console token left.
	why := r.take(a, 1, 1)
	if why == nil || why.limit.what != "openConsole calls" || why.wait != 2*time.Second {
		t.Fatalf("a third openConsole: %+v", why)
	}
	if why := r.take(a, 4, 0); why != nil {
		t.Fatalf("the refused openConsole took a mutation token: %+v", why)
	}
	// Both empty: the console bucket's wait is the longer.
	if why := r.take(a, 1, 1); why == nil || why.wait != 2*time.Second {
		t.Fatalf("both empty: %+v", why)
	}
	advance(time.Second)
	if why := r.take(a, 2, 0); why == nil || why.limit.what != "mutations" || why.wait != time.Second {
		t.Fatalf("two mutations with one token: %+v", why)
	}
}

// TestRateLimitsDefaultsAndOff: zero fields take the defaults, a negative
// rate or burst turns its limit off, and with both off there is no
// limiter.
func TestRateLimitsDefaultsAndOff(t *testing.T) {
	t.Parallel()
	r := newRateLimiter(RateLimits{})
	if r.mutation.rate != 10 || r.mutation.burst != 30 || r.console.rate != 5 || r.console.burst != 5 {
		t.Fatalf("defaults: %+v %+v", r.mutation, r.console)
	}
	if r := newRateLimiter(RateLimits{ConsoleBurst: -1}); r.console.on() || !r.mutation.on() {
		t.Fatalf("console off: %+v %+v", r.mutation, r.console)
	}
	if r := newRateLimiter(RateLimits{MutationRate: -1, ConsoleRate: -1}); r != nil {
		t.Fatalf("both off: %+v", r)
	}
}
