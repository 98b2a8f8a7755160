package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Writer writes each event as one JSON line to w (os.Stdout, a file).
type Writer struct {
	mu  sync.Mutex
	enc *json.Encoder // protected by mu
	log *slog.Logger
}

// NewWriter returns a sink writing JSON lines to w; write errors go to log
// (nil discards them).
func NewWriter(w io.Writer, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Writer{enc: json.NewEncoder(w), log: log}
}

// Emit writes ev.
func (w *Writer) Emit(ev Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.enc.Encode(ev); err != nil {
		w.log.Error("audit: write event", "audit_id", ev.AuditID, "err", err)
	}
}

// Multi sends every event to each of its sinks.
type Multi []Sink

// Emit sends ev to every sink.
func (m Multi) Emit(ev Event) {
	for _, s := range m {
		s.Emit(ev)
	}
}

// WebhookConfig configures a Webhook. URL is required.
type WebhookConfig struct {
	// URL receives POSTs of JSON {"kind":"EventList","items":[...]}.
	URL string
	// BatchSize is the most events per POST. Default 100.
	BatchSize int
	// FlushInterval is how long an event may wait for its batch to fill.
	// Default 1s.
	FlushInterval time.Duration
	// QueueSize bounds the events waiting to be sent; further events are
	// dropped and counted. Default 10000.
	QueueSize int
	// Retries is how many times a failed POST is retried (with doubling
	// delays from RetryDelay) before its batch is dropped. Default 5.
	Retries int
	// RetryDelay is the first retry's delay. Default 500ms.
	RetryDelay time.Duration
	// Client sends the POSTs. Default a client with a 10s timeout.
	Client *http.Client
	// Metrics receives flexplane_audit_events_dropped_total and
	// flexplane_audit_events_sent_total; nil keeps none.
	Metrics prometheus.Registerer
	// Logger receives failures. Default discards.
	Logger *slog.Logger
}

// Webhook posts events in batches from a bounded queue.
type Webhook struct {
	cfg     WebhookConfig
	queue   chan Event
	dropped *prometheus.CounterVec // reason
	sent    prometheus.Counter
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// NewWebhook starts a webhook sink; Close flushes and stops it.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	if cfg.URL == "" {
		return nil, errors.New("audit: webhook: URL is required")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = time.Second
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 10000
	}
	if cfg.Retries < 0 {
		cfg.Retries = 0
	} else if cfg.Retries == 0 {
		cfg.Retries = 5
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = 500 * time.Millisecond
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Webhook{
		cfg:   cfg,
		queue: make(chan Event, cfg.QueueSize),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "flexplane", Subsystem: "audit", Name: "events_dropped_total",
			Help: "Audit events the webhook sink dropped: its queue was full (queue_full) or every retry of their batch failed (undeliverable)."}, []string{"reason"}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "flexplane", Subsystem: "audit", Name: "events_sent_total",
			Help: "Audit events the webhook sink delivered."}),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	if cfg.Metrics != nil {
		for _, c := range []prometheus.Collector{w.dropped, w.sent} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("audit: webhook: %w", err)
			}
		}
	}
	go w.run()
	return w, nil
}

// Emit queues ev, or drops it (counted) when the queue is full.
func (w *Webhook) Emit(ev Event) {
	select {
	case w.queue <- ev:
	default:
		w.dropped.WithLabelValues("queue_full").Inc()
	}
}

// Close sends what is queued (retrying until ctx ends) and stops.
func (w *Webhook) Close(ctx context.Context) error {
	w.once.Do(func() { close(w.stop) })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("audit: webhook: close: %w", ctx.Err())
	}
}

func (w *Webhook) run() {
	defer close(w.done)
	var batch []Event
	timer := time.NewTimer(w.cfg.FlushInterval)
	defer timer.Stop()
	flush := func() {
		if len(batch) > 0 {
			w.send(batch)
			batch = nil
		}
	}
	add := func(ev Event) {
		batch = append(batch, ev)
		if len(batch) >= w.cfg.BatchSize {
			flush()
		}
	}
	for {
		select {
		case ev := <-w.queue:
			add(ev)
		case <-timer.C:
			flush()
			timer.Reset(w.cfg.FlushInterval)
		case <-w.stop:
			for {
				select {
				case ev := <-w.queue:
					add(ev)
				default:
					flush()
					return
				}
			}
		}
	}
}

// send posts one batch, retrying with doubling delays.
func (w *Webhook) send(batch []Event) {
	body, err := json.Marshal(map[string]any{"kind": "EventList", "apiVersion": APIVersion, "items": batch})
	if err != nil {
		w.cfg.Logger.Error("audit: webhook: encode batch", "err", err)
		w.dropped.WithLabelValues("undeliverable").Add(float64(len(batch)))
		return
	}
	delay := w.cfg.RetryDelay
	for attempt := 0; ; attempt++ {
		err = w.post(body)
		if err == nil {
			w.sent.Add(float64(len(batch)))
			return
		}
		if attempt >= w.cfg.Retries {
			break
		}
		time.Sleep(delay)
		delay *= 2
	}
	w.cfg.Logger.Error("audit: webhook: batch dropped", "events", len(batch), "err", err)
	w.dropped.WithLabelValues("undeliverable").Add(float64(len(batch)))
}

func (w *Webhook) post(body []byte) error {
	resp, err := w.cfg.Client.Post(w.cfg.URL, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}
