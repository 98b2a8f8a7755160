package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
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
