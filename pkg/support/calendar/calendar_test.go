package calendar_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones the test names, whatever the machine has

	"github.com/flexplane/flexplane/pkg/support/calendar"
)

// base is a Wednesday.
var base = time.Date(2026, time.December, 2, 10, 17, 30, 0, time.UTC)

func at(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04:05", s)
	if err != nil {
		panic(err)
	}
	return t
}

// The examples of Proxmox's documentation, and what each names next.
func TestNextFollowsProxmoxExamples(t *testing.T) {
	t.Parallel()
	cases := []struct {
		event string
		after time.Time
		want  []string // the next times, in order
	}{
		{"daily", base, []string{"2026-12-03 00:00:00", "2026-12-04 00:00:00"}},
		{"hourly", base, []string{"2026-12-02 11:00:00", "2026-12-02 12:00:00"}},
		{"minutely", base, []string{"2026-12-02 10:18:00", "2026-12-02 10:19:00"}},
		{"weekly", base, []string{"2026-12-07 00:00:00", "2026-12-14 00:00:00"}},
		{"monthly", base, []string{"2027-01-01 00:00:00", "2027-02-01 00:00:00"}},
		{"yearly", base, []string{"2027-01-01 00:00:00", "2028-01-01 00:00:00"}},
		{"quarterly", base, []string{"2027-01-01 00:00:00", "2027-04-01 00:00:00"}},
		{"Semi-Annually", base, []string{"2027-01-01 00:00:00", "2027-07-01 00:00:00"}},
		{"mon..fri", base, []string{"2026-12-03 00:00:00", "2026-12-04 00:00:00", "2026-12-07 00:00:00"}},
		{"sat..sun", base, []string{"2026-12-05 00:00:00", "2026-12-06 00:00:00", "2026-12-12 00:00:00"}},
		{"mon,wed,fri", base, []string{"2026-12-04 00:00:00", "2026-12-07 00:00:00", "2026-12-09 00:00:00"}},
		{"12:05", base, []string{"2026-12-02 12:05:00", "2026-12-03 12:05:00"}},
		{"*/5", base, []string{"2026-12-02 10:20:00", "2026-12-02 10:25:00"}},
		{"*", base, []string{"2026-12-02 10:18:00", "2026-12-02 10:19:00"}},
		{"mon..wed 30/10", base, []string{"2026-12-02 10:30:00", "2026-12-02 10:40:00", "2026-12-02 10:50:00", "2026-12-02 11:30:00"}},
		{"mon..fri 8..17,22:0/15", at("2026-12-04 17:50:00"), []string{"2026-12-04 22:00:00", "2026-12-04 22:15:00", "2026-12-04 22:30:00", "2026-12-04 22:45:00", "2026-12-07 08:00:00"}},
		{"fri 12..13:5/20", base, []string{"2026-12-04 12:05:00", "2026-12-04 12:25:00", "2026-12-04 12:45:00", "2026-12-04 13:05:00"}},
		{"12,14,16,18,20,22:5", base, []string{"2026-12-02 12:05:00", "2026-12-02 14:05:00"}},
		{"*-05", base, []string{"2026-12-05 00:00:00", "2027-01-05 00:00:00"}},
		{"Sat *-1..7 15:00", base, []string{"2026-12-05 15:00:00", "2027-01-02 15:00:00", "2027-02-06 15:00:00"}},
		{"2027-10-21", base, []string{"2027-10-21 00:00:00"}},
		{"mon..fri 02:00", base, []string{"2026-12-03 02:00:00", "2026-12-04 02:00:00", "2026-12-07 02:00:00"}},
		{"*-02-29 06:00:30", base, []string{"2028-02-29 06:00:30", "2032-02-29 06:00:30"}},
		{"2027/2-12-25", base, []string{"2027-12-25 00:00:00", "2029-12-25 00:00:00"}},
		// From an exact match, the next one: strictly after.
		{"daily", at("2026-12-03 00:00:00"), []string{"2026-12-04 00:00:00"}},
	}
	for _, c := range cases {
		e, err := calendar.Parse(c.event)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.event, err)
			continue
		}
		now := c.after
		for _, w := range c.want {
			got, ok := e.Next(now)
			if !ok || !got.Equal(at(w)) {
				t.Errorf("%q after %s: got %s (%v), want %s", c.event, now, got, ok, w)
				break
			}
			now = got
		}
	}
}

func TestNextIsNoneOncePast(t *testing.T) {
	t.Parallel()
	e, err := calendar.Parse("2015-10-21")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := e.Next(base); ok {
		t.Fatalf("a date in 2015 recurs at %s", got)
	}
	// Friday the 13th on February 29 never happens in a 400-year cycle? It
	// does; a Monday February 30 never does: refused at parse.
	if _, err := calendar.Parse("mon *-02-30"); err == nil {
		t.Fatal("February 30 accepted")
	}
}

func TestNextKeepsTheLocationAndSkippedHours(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	next := func(event string, after time.Time) time.Time {
		t.Helper()
		e, err := calendar.Parse(event)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := e.Next(after)
		if !ok {
			t.Fatalf("%q: none after %s", event, after)
		}
		return got
	}
	// 2027-03-28 02:30 does not exist in Berlin (clocks go 02:00 → 03:00):
	// it happens when the clock reads 03:30, not a day late.
	day := time.Date(2027, time.March, 27, 12, 0, 0, 0, berlin)
	if got := next("02:30", day); got.Location() != berlin || !got.Equal(time.Date(2027, time.March, 28, 3, 30, 0, 0, berlin)) {
		t.Fatalf("02:30: got %s, want 2027-03-28 03:30 CEST", got)
	}
	// A skipped time never runs after a real one that comes first.
	if got := next("2,3:0,15,45", time.Date(2027, time.March, 28, 1, 50, 0, 0, berlin)); !got.Equal(time.Date(2027, time.March, 28, 3, 0, 0, 0, berlin)) {
		t.Fatalf("2,3:0,15,45: got %s, want 03:00 CEST", got)
	}
	if got := next("daily", day); !got.Equal(time.Date(2027, time.March, 28, 0, 0, 0, 0, berlin)) || got.Sub(day) != 12*time.Hour {
		t.Fatalf("daily: got %s", got)
	}
}

func TestParseRefusesNamingThePart(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"":                       "empty",
		"daily 02:00":            `weekday "daily"`,
		"mon..fri 25:00":         "hours",
		"12:60":                  "minutes",
		"12:00:61":               "seconds",
		"*-13-01":                "months",
		"*-04-31":                "no month",
		"fri..mon":               "ends before it starts",
		"someday":                "not one of",
		"*/0":                    "repetition",
		"1969-01-01":             "years",
		"12:00 13:00":            "a second time part",
		"12:00 *-01-01":          "before the time",
		"5..3":                   "ends before it starts",
		"mon tue":                "minutes",
		"1:2:3:4":                "HOURS:MINUTES",
		"1-2-3-4":                "YEARS-",
		strings.Repeat("*", 300): "longer than",
	}
	for in, want := range cases {
		_, err := calendar.Parse(in)
		var se *calendar.SyntaxError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want a SyntaxError naming %q", in, err, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"daily", "mon..fri 8..17,22:0/15", "Sat *-1..7 15:00", "*/5", "2027/2-12-25", "12:00:05"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := calendar.Parse(s)
		if err != nil {
			var se *calendar.SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q): %T %v, want a SyntaxError", s, err, err)
			}
			return
		}
		// Whatever parses names a time after any other, or none; the
		// time it names is after the one asked, and again parses.
		got, ok := e.Next(base)
		if ok && !got.After(base) {
			t.Fatalf("%q: next %s is not after %s", s, got, base)
		}
		if _, err := calendar.Parse(e.String()); err != nil {
			t.Fatalf("%q does not parse again: %v", e.String(), err)
		}
	})
}
