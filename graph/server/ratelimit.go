package server

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/auth"
)

// Rate limits per caller: a token bucket per principal (its token's issuer
// and subject, so one user or service account however many tokens it
// holds) for mutation fields, and another for openConsole on top of it.
// They act before the operation's VDC is resolved and before any resolver
// runs: a refused operation does nothing (docs/api/errors.md). Queries and
// subscriptions are not limited here; the depth and complexity limits
// bound them. Each replica keeps its own buckets.

// The defaults of RateLimits.
const (
	DefaultMutationRate  = 10
	DefaultMutationBurst = 30
	DefaultConsoleRate   = 5
	DefaultConsoleBurst  = 5
)

// consoleField is the mutation field that also takes a token of the
// console bucket.
const consoleField = "openConsole"

// RateLimits bound how fast one caller may mutate. Each limit is a token
// bucket: Burst fields pass at once, then Rate per second. A zero field
// takes its default; a negative Rate or Burst turns its limit off.
type RateLimits struct {
	// MutationRate is how many mutation fields per second one caller may
	// run, sustained (each root field of a mutation operation counts one);
	// 0 is DefaultMutationRate.
	MutationRate float64
	// MutationBurst is how many mutation fields one caller may run at once
	// after a pause; 0 is DefaultMutationBurst. An operation with more
	// fields than this is refused as BAD_USER_INPUT.
	MutationBurst int
	// ConsoleRate is how many openConsole fields per second one caller may
	// run, sustained, besides taking a mutation token each; 0 is
	// DefaultConsoleRate.
	ConsoleRate float64
	// ConsoleBurst is how many openConsole fields one caller may run at
	// once; 0 is DefaultConsoleBurst.
	ConsoleBurst int
	// Now is the limits' clock; nil is time.Now.
	Now func() time.Time
}

// bucketLimit is one token bucket's shape; off when rate is 0.
type bucketLimit struct {
	rate, burst float64
	what        string // what it counts, for the refusal's message
}

func newBucketLimit(rate float64, burst int, defRate float64, defBurst int, what string) bucketLimit {
	if rate == 0 {
		rate = defRate
	}
	if burst == 0 {
		burst = defBurst
	}
	if rate < 0 || burst < 0 {
		return bucketLimit{}
	}
	return bucketLimit{rate: rate, burst: float64(burst), what: what}
}

func (l bucketLimit) on() bool { return l.rate > 0 }

// fill is how long an empty bucket takes to fill.
func (l bucketLimit) fill() time.Duration {
	return time.Duration(l.burst / l.rate * float64(time.Second))
}

// bucket is one caller's tokens of one limit: tokens at time at. The zero
// bucket is full.
type bucket struct {
	tokens float64
	at     time.Time
}

// level is the tokens of b at now.
func (l bucketLimit) level(b bucket, now time.Time) float64 {
	if b.at.IsZero() {
		return l.burst
	}
	return min(l.burst, b.tokens+max(0, now.Sub(b.at).Seconds())*l.rate)
}

// wait is how long until b holds n tokens (0: now).
func (l bucketLimit) wait(b bucket, n float64, now time.Time) time.Duration {
	if !l.on() || n == 0 {
		return 0
	}
	have := l.level(b, now)
	if have >= n {
		return 0
	}
	return time.Duration(math.Ceil((n - have) / l.rate * float64(time.Second)))
}

// take removes n tokens from b at now (wait said it may).
func (l bucketLimit) take(b *bucket, n float64, now time.Time) {
	if !l.on() || n == 0 {
		return
	}
	*b = bucket{tokens: l.level(*b, now) - n, at: now}
}

// full reports whether b has filled up again: forgetting it changes
// nothing.
func (l bucketLimit) full(b bucket, now time.Time) bool {
	return !l.on() || l.level(b, now) >= l.burst
}

// caller names a principal across issuers.
type caller struct{ issuer, subject string }

// callerBuckets are one caller's buckets.
type callerBuckets struct{ mutation, console bucket }

// rateLimiter holds the buckets of the callers seen lately. A caller whose
// buckets have filled up again is forgotten at the next sweep (at most one
// per sweepEvery), as a full bucket is what a new caller gets: memory
// grows with the callers active since the last sweep, not with all.
type rateLimiter struct {
	mutation, console bucketLimit
	now               func() time.Time
	sweepEvery        time.Duration

	mu      sync.Mutex
	callers map[caller]*callerBuckets // protected by mu
	swept   time.Time                 // protected by mu
}

// newRateLimiter returns the limiter of cfg, or nil when both limits are
// off.
func newRateLimiter(cfg RateLimits) *rateLimiter {
	r := &rateLimiter{
		mutation: newBucketLimit(cfg.MutationRate, cfg.MutationBurst, DefaultMutationRate, DefaultMutationBurst, "mutations"),
		console:  newBucketLimit(cfg.ConsoleRate, cfg.ConsoleBurst, DefaultConsoleRate, DefaultConsoleBurst, consoleField+" calls"),
		now:      cfg.Now,
		callers:  map[caller]*callerBuckets{},
	}
	if !r.mutation.on() && !r.console.on() {
		return nil
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.sweepEvery = time.Minute
	for _, l := range []bucketLimit{r.mutation, r.console} {
		if l.on() {
			r.sweepEvery = max(r.sweepEvery, l.fill())
		}
	}
	return r
}

// limited is why take refused: the limit and how long until it allows
// the request.
type limited struct {
	limit bucketLimit
	wait  time.Duration
}

// take takes the tokens of n mutation fields, consoles of them
// openConsole, from c's buckets, or none and says why not.
func (r *rateLimiter) take(c caller, n, consoles int) *limited {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.sweep(now)
	b := r.callers[c]
	if b == nil {
		b = &callerBuckets{}
	}
	var worst *limited
	for _, x := range []struct {
		l bucketLimit
		b bucket
		n int
	}{{r.mutation, b.mutation, n}, {r.console, b.console, consoles}} {
		if w := x.l.wait(x.b, float64(x.n), now); w > 0 && (worst == nil || w > worst.wait) {
			worst = &limited{limit: x.l, wait: w}
		}
	}
	if worst != nil {
		return worst
	}
	r.mutation.take(&b.mutation, float64(n), now)
	r.console.take(&b.console, float64(consoles), now)
	r.callers[c] = b
	return nil
}

// sweep forgets the callers whose buckets are full again, once per
// sweepEvery. Called with mu held.
func (r *rateLimiter) sweep(now time.Time) {
	if now.Sub(r.swept) < r.sweepEvery {
		return
	}
	r.swept = now
	for c, b := range r.callers {
		if r.mutation.full(b.mutation, now) && r.console.full(b.console, now) {
			delete(r.callers, c)
		}
	}
}

// limit takes the tokens of a mutation operation from its caller's
// buckets (nothing for other operations or without a caller, whom
// beginOperation refuses). A refusal is RATE_LIMITED with the seconds until
// the operation would pass (an HTTP request is also answered 429 with
// Retry-After, throttleWriter); an operation with more fields than a
// bucket holds can never pass and is BAD_USER_INPUT.
func (r *rateLimiter) limit(ctx context.Context, oc *graphql.OperationContext) error {
	if r == nil || oc == nil || oc.Operation == nil || oc.Operation.Operation != ast.Mutation {
		return nil
	}
	p, ok := auth.FromContext(ctx)
	if !ok {
		return nil
	}
	n, consoles := 0, 0
	for _, f := range graphql.CollectFields(oc, oc.Operation.SelectionSet, []string{"Mutation"}) {
		switch f.Name {
		case "__typename":
			continue
		case consoleField:
			consoles++
		}
		n++
	}
	for _, x := range []struct {
		l bucketLimit
		n int
	}{{r.mutation, n}, {r.console, consoles}} {
		if x.l.on() && float64(x.n) > x.l.burst {
			return apierr.New(apierr.BadUserInput, "the operation has %d %s; at most %d may run at once", x.n, x.l.what, int(x.l.burst))
		}
	}
	why := r.take(caller{issuer: p.Issuer, subject: p.Subject}, n, consoles)
	if why == nil {
		return nil
	}
	secs := max(1, int(math.Ceil(why.wait.Seconds())))
	if w, ok := ctx.Value(throttleKey{}).(*throttleWriter); ok {
		w.retryAfter = secs
	}
	return &apierr.Error{Code: apierr.RateLimited, RetryAfter: secs, Message: fmt.Sprintf(
		"too many %s: a caller may run %s per second, %d at once; try again in %d s",
		why.limit.what, strconv.FormatFloat(why.limit.rate, 'f', -1, 64), int(why.limit.burst), secs)}
}

type throttleKey struct{}

// throttleWriter answers 429 Too Many Requests with Retry-After in place
// of 200 when the request's operation was refused by a rate limit; the
// body is the GraphQL answer as ever. It wraps HTTP requests, not
// websocket upgrades.
type throttleWriter struct {
	http.ResponseWriter
	retryAfter  int // seconds; 0 while not refused
	wroteHeader bool
}

// withThrottle returns w wrapped and r with the wrapper in its context.
func withThrottle(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	tw := &throttleWriter{ResponseWriter: w}
	return tw, r.WithContext(context.WithValue(r.Context(), throttleKey{}, tw))
}

func (w *throttleWriter) WriteHeader(code int) {
	if !w.wroteHeader && w.retryAfter > 0 && code == http.StatusOK {
		w.Header().Set("Retry-After", strconv.Itoa(w.retryAfter))
		code = http.StatusTooManyRequests
	}
	w.wroteHeader = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *throttleWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *throttleWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
