package meshcontrol

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"
	zlog "github.com/rs/zerolog/log"
)

// Headscale logs through zerolog's process-global logger. That global can only
// be set once safely (goroutines of a previous instance keep reading it), so it
// is pointed, exactly once per process, at a writer that forwards every line
// to the slog.Logger of the Control started last, and zerolog's global level
// follows that logger's. This is the one piece of process-wide state of the
// package and it exists because headscale has it.
var (
	zerologOnce   sync.Once
	zerologTarget atomic.Pointer[slog.Logger]
)

// routeHeadscaleLogs makes headscale's log lines go to logger.
func routeHeadscaleLogs(logger *slog.Logger) {
	zerologTarget.Store(logger)
	zerologOnce.Do(func() {
		zlog.Logger = zerolog.New(zerologBridge{}).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	})
	// Lines logger would drop are not even formatted: headscale's
	// routine lines (debug and info, our debug) cost an encode and a
	// decode each, many per map update. zerolog's global level is atomic.
	zerolog.SetGlobalLevel(zerologLevel(logger))
}

// zerologLevel is the lowest zerolog level whose lines logger keeps (as
// slogLevel maps them).
func zerologLevel(logger *slog.Logger) zerolog.Level {
	ctx := context.Background()
	switch {
	case logger.Enabled(ctx, slog.LevelDebug):
		return zerolog.DebugLevel
	case logger.Enabled(ctx, slog.LevelWarn):
		return zerolog.WarnLevel
	case logger.Enabled(ctx, slog.LevelError):
		return zerolog.ErrorLevel
	default:
		return zerolog.Disabled
	}
}

// zerologBridge turns zerolog's JSON lines into slog records.
type zerologBridge struct{}

func (zerologBridge) Write(p []byte) (int, error) {
	logger := zerologTarget.Load()
	if logger == nil {
		return len(p), nil
	}
	var fields map[string]any
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		logger.Warn("headscale: unparsable log line", "line", string(bytes.TrimSpace(p)))
		return len(p), nil
	}
	level := slogLevel(fields[zerolog.LevelFieldName])
	ctx := context.Background()
	if !logger.Enabled(ctx, level) {
		return len(p), nil
	}
	msg, _ := fields[zerolog.MessageFieldName].(string)
	delete(fields, zerolog.LevelFieldName)
	delete(fields, zerolog.MessageFieldName)
	delete(fields, zerolog.TimestampFieldName)
	attrs := make([]any, 0, 2*len(fields)+2)
	attrs = append(attrs, "component", "headscale")
	for k, v := range fields {
		attrs = append(attrs, k, v)
	}
	logger.Log(ctx, level, msg, attrs...)
	return len(p), nil
}

func slogLevel(v any) slog.Level {
	s, _ := v.(string)
	switch s {
	case "trace", "debug":
		return slog.LevelDebug
	case "info":
		// Headscale is chatty at info; its routine lines are our debug.
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error", "fatal", "panic":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}
