package meshcontrol

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	zlog "github.com/rs/zerolog/log"
)

// countingHandler counts the records it is given, by level.
type countingHandler struct {
	min slog.Level
	mu  sync.Mutex
	n   map[slog.Level]int
	msg []string
}

func (h *countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }

func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Level]++
	h.msg = append(h.msg, r.Message)
	return nil
}

func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// TestHeadscaleLogLevels: headscale's lines reach the logger at the
// levels it keeps (its info is our debug), and those it would drop are
// not formatted at all. Not parallel: headscale's logger is the process's.
func TestHeadscaleLogLevels(t *testing.T) {
	for _, tc := range []struct {
		min                 slog.Level
		debug, info, warned bool
	}{
		{slog.LevelInfo, false, false, true},
		{slog.LevelDebug, true, true, true},
		{slog.LevelError, false, false, false},
	} {
		h := &countingHandler{min: tc.min, n: map[slog.Level]int{}}
		routeHeadscaleLogs(slog.New(h))
		formatted := 0
		probe := func() string { formatted++; return "x" }
		zlog.Debug().Func(func(e *zerolog.Event) { e.Str("probe", probe()) }).Msg("debug line")
		zlog.Info().Msg("info line")
		zlog.Warn().Msg("warn line")
		h.mu.Lock()
		got := map[string]bool{}
		for _, m := range h.msg {
			got[m] = true
		}
		h.mu.Unlock()
		if got["debug line"] != tc.debug || got["info line"] != tc.info || got["warn line"] != tc.warned {
			t.Errorf("logger at %v got %v, want debug %v info %v warn %v", tc.min, h.msg, tc.debug, tc.info, tc.warned)
		}
		if (formatted == 1) != tc.debug {
			t.Errorf("logger at %v: the debug line was formatted %d times", tc.min, formatted)
		}
	}
}
