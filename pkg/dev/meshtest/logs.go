package meshtest

import (
	"context"
	"log/slog"

	"github.com/flexplane/flexplane/pkg/dev/syncbuf"
)

// LogRecorder is a slog.Handler that keeps every log line (text format, all
// levels) in memory, for tests that inspect logs (e.g. that no secret is
// logged). Pass it to WithLogHandler.
type LogRecorder struct {
	h   slog.Handler
	buf *syncbuf.Buffer
}

// NewLogRecorder returns an empty recorder.
func NewLogRecorder() *LogRecorder {
	buf := &syncbuf.Buffer{}
	return &LogRecorder{buf: buf, h: slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})}
}

// Enabled implements slog.Handler.
func (r *LogRecorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (r *LogRecorder) Handle(ctx context.Context, rec slog.Record) error { return r.h.Handle(ctx, rec) }

// WithAttrs implements slog.Handler.
func (r *LogRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &LogRecorder{buf: r.buf, h: r.h.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (r *LogRecorder) WithGroup(name string) slog.Handler {
	return &LogRecorder{buf: r.buf, h: r.h.WithGroup(name)}
}

// Bytes returns a copy of everything logged so far.
func (r *LogRecorder) Bytes() []byte {
	return r.buf.Bytes()
}
