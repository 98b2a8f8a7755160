package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph/server"
	"github.com/flexplane/flexplane/pkg/dev/audittest"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
)

// testClock is a clock the test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time // protected by mu
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// lastHeader is a transport that keeps the header of the last answer.
type lastHeader struct{ header http.Header }

func (l *lastHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		l.header = resp.Header
	}
	return resp, err
}

// TestMutationRateLimit: with the default limits, on a clock the test
// moves, a burst of 30 mutations from one caller passes; the next is
// refused (HTTP 429, Retry-After, RATE_LIMITED with retryAfter in the
// standard error shape) and changes nothing, while another caller's
// mutations and the caller's own queries are still served. After
// retryAfter seconds the caller is served again, at 10 a second; an
// operation with more mutation fields than the burst is bad input. The
// refusal is audited with the object it was about, as a mutation that ran.
func TestMutationRateLimit(t *testing.T) {
	t.Parallel()
	clock := &testClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	events := &audittest.Recorder{}
	h := newHarness(t, harnessOptions{rateLimits: server.RateLimits{Now: clock.Now}, audit: events})
	create := func(i int) string {
		return fmt.Sprintf(`mutation { createComputeProfile(input: {name: "p%d", vcpus: 1, memoryMiB: 1024}) { name } }`, i)
	}
	for i := range server.DefaultMutationBurst {
		h.do(t, "admin", "", create(i), nil).OK(t)
	}
	before := h.snapshot(t)

	// The 31st, keeping the answer's headers.
	rec := &lastHeader{}
	r, err := gqltest.Post(t.Context(), &http.Client{Transport: rec}, h.url, gqltest.Request{Query: create(30), Authorization: "Bearer " + h.token(t, "admin")})
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Data   json.RawMessage
		Errors []struct{ Extensions map[string]any }
	}
	if err := json.Unmarshal([]byte(r.Raw), &answer); err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusTooManyRequests || rec.header.Get("Retry-After") != "1" || string(answer.Data) != "null" || len(r.Errors) != 1 ||
		r.Errors[0].Code() != "RATE_LIMITED" || r.Errors[0].Extensions["retryAfter"] != float64(1) ||
		r.Errors[0].Message != "too many mutations: a caller may run 10 per second, 30 at once; try again in 1 s" {
		t.Fatalf("the 31st mutation: %d (Retry-After %q): %s", r.Status, rec.header.Get("Retry-After"), r.Raw)
	}
	if after := h.snapshot(t); after != before {
		t.Fatalf("a refused mutation changed the catalog:\n%s\n%s", before, after)
	}
	if ev, ok := events.Last(); !ok || ev.Verb != "createComputeProfile" || ev.ResponseStatus.Code != "RATE_LIMITED" ||
		ev.ObjectRef.Resource != "ComputeProfile" || !slices.Equal(ev.ObjectRef.IDs, []string{"p30"}) || ev.RequestObject["input"] == nil {
		t.Fatalf("the refusal's audit event: %+v", ev)
	}
	// Queries are not limited; another caller's mutations are not this
	// caller's (alice may not create profiles: the field does not exist
	// for her, which she learns past the limit).
	h.do(t, "admin", "", `{ computeProfiles { name } }`, nil).OK(t)
	if r := h.do(t, "alice", "", create(99), nil); r.Code(t) != "NOT_FOUND" {
		t.Fatalf("alice: %s", r.Raw)
	}

	// Less than retryAfter later: still refused; then served again.
	clock.Advance(50 * time.Millisecond)
	if r := h.do(t, "admin", "", create(30), nil); r.Code(t) != "RATE_LIMITED" || r.Errors[0].Extensions["retryAfter"] != float64(1) {
		t.Fatalf("50 ms later: %s", r.Raw)
	}
	clock.Advance(time.Second)
	h.do(t, "admin", "", create(30), nil).OK(t)

	// From an empty bucket, ten a second and not eleven; every field of an
	// operation counts.
	clock.Advance(time.Minute)
	var two strings.Builder
	two.WriteString("mutation {")
	for i := range 2 {
		fmt.Fprintf(&two, ` m%d: createComputeProfile(input: {name: "two-%d", vcpus: 1, memoryMiB: 1024}) { name }`, i, i)
	}
	two.WriteString(" }")
	h.do(t, "admin", "", two.String(), nil).OK(t)
	for i := range server.DefaultMutationBurst - 2 {
		h.do(t, "admin", "", create(100+i), nil).OK(t)
	}
	if r := h.do(t, "admin", "", create(199), nil); r.Code(t) != "RATE_LIMITED" {
		t.Fatalf("after a burst of 30 with one operation of two: %s", r.Raw)
	}
	clock.Advance(time.Second)
	for i := range server.DefaultMutationRate {
		h.do(t, "admin", "", create(200+i), nil).OK(t)
	}
	if r := h.do(t, "admin", "", create(299), nil); r.Code(t) != "RATE_LIMITED" {
		t.Fatalf("the eleventh in a second: %s", r.Raw)
	}
	// More fields than the burst can never pass.
	clock.Advance(time.Minute)
	var wide strings.Builder
	wide.WriteString("mutation {")
	for i := range server.DefaultMutationBurst + 1 {
		fmt.Fprintf(&wide, ` m%d: deleteComputeProfile(name: "p%d") { name }`, i, i)
	}
	wide.WriteString(" }")
	before = h.snapshot(t)
	if r := h.do(t, "admin", "", wide.String(), nil); r.Code(t) != "BAD_USER_INPUT" ||
		r.Errors[0].Message != "the operation has 31 mutations; at most 30 may run at once" {
		t.Fatalf("31 fields: %s", r.Raw)
	}
	if after := h.snapshot(t); after != before {
		t.Fatalf("a refused mutation changed the catalog:\n%s\n%s", before, after)
	}
}
