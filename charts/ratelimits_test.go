package charts

import (
	"strings"
	"testing"
)

// TestRateLimitFlags: the Deployment passes rateLimits to the
// orchestrator's rate limit flags (by default the orchestrator's own
// defaults; a rate of 0 turns its limit off), and the schema refuses what
// is no rate or burst, naming the value.
func TestRateLimitFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		limits map[string]any
		want   []string
	}{
		{nil, []string{`"-mutation-rate=10"`, `"-mutation-burst=30"`, `"-console-rate=5"`, `"-console-burst=5"`}},
		{map[string]any{"mutationRate": 2.5, "mutationBurst": 100, "consoleRate": 0},
			[]string{`"-mutation-rate=2.5"`, `"-mutation-burst=100"`, `"-console-rate=0"`, `"-console-burst=5"`}},
	} {
		v := requiredValues()
		if c.limits != nil {
			v["rateLimits"] = c.limits
		}
		manifest, err := render(t, "flexplane", v)
		if err != nil {
			t.Fatalf("%v: %v", c.limits, err)
		}
		for _, want := range c.want {
			if !strings.Contains(manifest, "- "+want+"\n") {
				t.Errorf("%v: the Deployment lacks the argument %s", c.limits, want)
			}
		}
	}
	for _, bad := range []map[string]any{
		{"mutationRate": -1}, {"mutationBurst": 0}, {"consoleBurst": 1.5}, {"consoleRate": "fast"}, {"openConsoleRate": 1},
	} {
		v := requiredValues()
		v["rateLimits"] = bad
		var name string
		for k := range bad {
			name = k
		}
		if _, err := render(t, "flexplane", v); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("rateLimits %v: %v, want an error naming %s", bad, err, name)
		}
	}
}
