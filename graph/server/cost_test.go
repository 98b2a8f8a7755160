package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/gqltest"
)

// cost is what one in-process request cost the server.
type cost struct {
	allocBytes uint64 // bytes the handler allocated while serving it
	answer     int    // bytes of the answer
	body       string
	status     int
}

// inProcess is a transport that serves every request with a handler in
// this process and counts what the handler allocates meanwhile.
type inProcess struct {
	handler    http.Handler
	allocBytes uint64 // of the last request
}

func (p *inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p.handler.ServeHTTP(rec, r)
	runtime.ReadMemStats(&after)
	p.allocBytes = after.TotalAlloc - before.TotalAlloc
	return rec.Result(), nil
}

// measure serves one request in process (a first time to warm the
// issuer's keys and the caches, then again) and returns what it cost. The
// tests that call it do not run in parallel, so the allocations counted are
// the request's own.
func (h *harness) measure(t *testing.T, user, query string) cost {
	t.Helper()
	p := &inProcess{handler: h.handler}
	hc := &http.Client{Transport: p}
	req := gqltest.Request{Query: query, Authorization: "Bearer " + h.token(t, user)}
	var r *gqltest.Response
	for range 2 {
		var err error
		if r, err = gqltest.Post(context.Background(), hc, "http://in-process/graphql", req); err != nil {
			t.Fatal(err)
		}
	}
	return cost{allocBytes: p.allocBytes, answer: len(r.Raw), body: r.Raw, status: r.Status}
}

// No request, however it is formed, costs the server more than a small
// fixed amount: the parser's token limit, the query size limit, the cap on
// the validation errors and the limit on introspection fields all act
// before the work grows with the request. (Not parallel: it counts the
// process's allocations.)
func TestRequestCostIsBounded(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	baseline := h.measure(t, "alice", `{ tenant { name } }`)
	if baseline.status != http.StatusOK {
		t.Fatalf("baseline: %d %s", baseline.status, baseline.body)
	}
	t.Logf("baseline: %d bytes allocated, %d bytes answered", baseline.allocBytes, baseline.answer)

	list := func(n int, format string) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, format, i+1)
		}
		return b.String()
	}
	repeat := func(n int, format string) string { return "{" + list(n, format) + " }" }
	const maxAlloc, maxAnswer = 2 << 20, 4 << 10
	for _, tc := range []struct {
		name, query, message string
		errors               int
	}{
		// 1,000 fields of one name with different arguments: every pair
		// conflicts, ~500,000 validation errors unbounded.
		{"1000 conflicting zones fields", repeat(1000, " zones(first: %d) { name }"), "exceeds the limit of 16384", 1},
		// 300 aliased schemas.
		{"300 aliased __schema", repeat(300, " s%d: __schema { types { name fields { name } } }"), "exceeded token limit of 2000", 1},
		// Within the size and token limits.
		{"150 conflicting zones fields", repeat(150, " zones(first: %d) { name }"), `more than 10 fields named "zones"`, 1},
		{"60 conflicting fields through fragments", repeat(60, " ...F%[1]d") + list(60, " fragment F%[1]d on Query { zones(first: %[1]d) { name } }"), `more than 10 fields named "zones"`, 1},
		{"10 conflicting zones fields", repeat(10, " zones(first: %d) { name }"), "too many validation errors: only the first 10 are reported", 11},
		{"20 aliased __schema", repeat(20, " s%d: __schema { types { name fields { name } } }"), "20 __schema and __type fields, which exceeds the limit of 2", 1},
		{"a 200 KiB string", `{ vdc(name: "` + strings.Repeat("x", 200<<10) + `") { name } }`, "exceeds the limit of 16384", 1},
	} {
		c := h.measure(t, "alice", tc.query)
		t.Logf("%s: %d bytes in, %d bytes allocated, %d bytes answered", tc.name, len(tc.query), c.allocBytes, c.answer)
		if c.allocBytes > maxAlloc || c.answer > maxAnswer {
			t.Errorf("%s: %d bytes allocated (max %d), %d bytes answered (max %d): %.300s", tc.name, c.allocBytes, maxAlloc, c.answer, maxAnswer, c.body)
		}
		var r response
		if err := json.Unmarshal([]byte(c.body), &r); err != nil || len(r.Errors) != tc.errors || r.Data != nil {
			t.Errorf("%s: want %d errors and no data, got %.300s", tc.name, tc.errors, c.body)
			continue
		}
		last := r.Errors[len(r.Errors)-1]
		if last.Extensions["code"] != "BAD_USER_INPUT" || !strings.Contains(last.Message, tc.message) {
			t.Errorf("%s: want BAD_USER_INPUT %q, got %.300s", tc.name, tc.message, c.body)
		}
	}

	// What clients really send still works: the full introspection query
	// (GraphiQL's) and a query with both introspection fields.
	for _, q := range []string{introspectionQuery, `{ __schema { queryType { name } } __type(name: "VM") { name } }`} {
		if c := h.measure(t, "alice", q); c.status != http.StatusOK || strings.Contains(c.body, `"errors"`) {
			t.Errorf("%.40s: %d %.300s", q, c.status, c.body)
		}
	}
}
