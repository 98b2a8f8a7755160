package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flexplane/flexplane/pkg/audit"
)

// TestWriter shows one JSON line per event.
func TestWriter(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := audit.NewWriter(&buf, nil)
	w.Emit(audit.Event{Verb: "createVM", AuditID: "a"})
	w.Emit(audit.Event{Verb: "deleteVM", AuditID: "b"})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines: %q", buf.String())
	}
	var ev audit.Event
	if err := json.Unmarshal([]byte(lines[1]), &ev); err != nil || ev.Verb != "deleteVM" {
		t.Errorf("second line %q: %v %+v", lines[1], err, ev)
	}
}

// TestWebhookBatchesAndRetries shows events posted in batches of at most
// BatchSize, a failed POST retried, nothing lost, and what does not fit in
// the queue dropped and counted.
func TestWebhookBatchesAndRetries(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var batches [][]audit.Event
	fails := 1
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		var body struct{ Items []audit.Event }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("decode: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		batches = append(batches, body.Items)
	}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	w, err := audit.NewWebhook(audit.WebhookConfig{URL: srv.URL, BatchSize: 2, FlushInterval: 10 * time.Millisecond,
		QueueSize: 4, RetryDelay: time.Millisecond, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	// The first batch is taken and held in its POST; the queue holds 4
	// more: of 10 events, at most 6 fit and the rest are dropped.
	for i := range 10 {
		w.Emit(audit.Event{AuditID: string(rune('a' + i))})
	}
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	sent := 0
	for _, b := range batches {
		if len(b) > 2 {
			t.Errorf("batch of %d", len(b))
		}
		sent += len(b)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
	got, err := testutil.GatherAndCount(reg, "flexplane_audit_events_dropped_total")
	if err != nil || got != 1 {
		t.Errorf("dropped series: %d %v", got, err)
	}
	fams, _ := reg.Gather()
	var dropped, delivered float64
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "flexplane_audit_events_dropped_total":
				dropped += m.GetCounter().GetValue()
			case "flexplane_audit_events_sent_total":
				delivered += m.GetCounter().GetValue()
			}
		}
	}
	if sent == 0 || float64(sent) != delivered || float64(sent)+dropped != 10 || dropped == 0 {
		t.Errorf("sent %d (counted %v), dropped %v, of 10", sent, delivered, dropped)
	}
}

// roundTrip is an http.RoundTripper answering in process: a webhook
// whose POSTs go through it runs entirely inside a synctest bubble.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestWebhookTimings shows the webhook's clock at its default settings,
// on synctest's fake clock: a lone event waits FlushInterval (1s) for its
// batch, a full batch goes at once, and a failed POST is retried after
// RetryDelay (500ms), then after twice that.
func TestWebhookTimings(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var posts []time.Time
		var sizes []int
		failures := 0
		client := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
			var body struct{ Items []audit.Event }
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				t.Errorf("decode: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			posts = append(posts, time.Now())
			sizes = append(sizes, len(body.Items))
			status := http.StatusNoContent
			if failures > 0 {
				failures--
				status = http.StatusServiceUnavailable
			}
			return &http.Response{StatusCode: status, Body: http.NoBody, Request: r}, nil
		})}
		seen := func() ([]time.Time, []int) {
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(posts), slices.Clone(sizes)
		}
		w, err := audit.NewWebhook(audit.WebhookConfig{URL: "http://audit.invalid/events", BatchSize: 3, Client: client})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		w.Emit(audit.Event{AuditID: "lone"})
		time.Sleep(time.Second - time.Millisecond)
		if p, _ := seen(); len(p) != 0 {
			t.Fatalf("a lone event was posted after %v, before FlushInterval", p[0].Sub(start))
		}
		time.Sleep(time.Millisecond)
		if p, s := seen(); len(p) != 1 || p[0].Sub(start) != time.Second || s[0] != 1 {
			t.Fatalf("posts %v of sizes %v, want one of 1 event at 1s", p, s)
		}

		// A full batch does not wait.
		start = time.Now()
		for _, id := range []string{"a", "b", "c"} {
			w.Emit(audit.Event{AuditID: id})
		}
		if p, s := seen(); len(p) != 2 || p[1] != start || s[1] != 3 {
			t.Fatalf("posts %v of sizes %v, want the full batch at once", p, s)
		}

		// Failed twice: retried after 500ms, then after 1s more.
		mu.Lock()
		failures = 2
		mu.Unlock()
		start = time.Now()
		for _, id := range []string{"d", "e", "f"} {
			w.Emit(audit.Event{AuditID: id})
		}
		time.Sleep(2 * time.Second)
		p, s := seen()
		if len(p) != 5 {
			t.Fatalf("posts %v, want the batch tried 3 times", p)
		}
		want := []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond}
		for i, at := range p[2:] {
			if at.Sub(start) != want[i] || s[2+i] != 3 {
				t.Errorf("try %d of the batch at %v with %d events, want at %v with 3", i+1, at.Sub(start), s[2+i], want[i])
			}
		}
		if err := w.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}
