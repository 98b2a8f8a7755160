// Package calendar reads Proxmox's calendar events: the schedule syntax of
// its backup jobs (/cluster/backup), replication and Proxmox Backup
// Server's prune and verify jobs, derived from systemd's calendar events:
//
//	[WEEKDAY] [[YEARS-]MONTHS-DAYS] [HOURS:MINUTES[:SECONDS]]
//
// Each field is `*`, a value, a range `a..b`, a repetition `a/step` (from a
// every step) or a comma-separated list of those; weekdays are mon..sun. A
// time part without a colon is minutes of every hour (`*/5`: every five
// minutes). A missing date means every day, a missing time 00:00. The
// special values minutely, hourly, daily, weekly, monthly, yearly
// (annually), quarterly and semiannually (semi-annually) stand for their
// full forms.
//
// flexplane checks a schedule here before it writes a Proxmox job, so that
// a tenant's mistake is named at the API rather than failing at 02:00, and
// the Proxmox simulator runs its jobs with Next.
package calendar

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// SyntaxError is a schedule that does not parse.
type SyntaxError struct {
	// Input is the schedule as given.
	Input string
	// Reason says what is wrong, naming the offending part.
	Reason string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("calendar event %q: %s", e.Input, e.Reason)
}

// Event is a parsed calendar event.
type Event struct {
	src      string
	weekdays uint8 // bit n: time.Weekday(n)
	years    []span
	months   uint64 // bits 1..12
	days     uint64 // bits 1..31
	hours    uint64 // bits 0..23
	minutes  uint64 // bits 0..59
	seconds  uint64 // bits 0..59
}

// span is a run of years: start, start+step, … up to end (inclusive).
type span struct{ start, end, step int }

const (
	minYear = 1970
	maxYear = 9999
	// horizon bounds Next's search: a matching time further than this
	// is treated as none (February 29 on a given weekday recurs within
	// 28 years; 400 years cover every Gregorian cycle).
	horizon = 400
)

var specials = map[string]string{
	"minutely":      "*-*-* *:*:00",
	"hourly":        "*-*-* *:00:00",
	"daily":         "*-*-* 00:00:00",
	"weekly":        "mon *-*-* 00:00:00",
	"monthly":       "*-*-01 00:00:00",
	"yearly":        "*-01-01 00:00:00",
	"annually":      "*-01-01 00:00:00",
	"quarterly":     "*-01,04,07,10-01 00:00:00",
	"semiannually":  "*-01,07-01 00:00:00",
	"semi-annually": "*-01,07-01 00:00:00",
}

var weekdayNames = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// Parse reads a calendar event; the error is a *SyntaxError.
func Parse(s string) (*Event, error) {
	fail := func(format string, a ...any) (*Event, error) {
		return nil, &SyntaxError{Input: s, Reason: fmt.Sprintf(format, a...)}
	}
	in := strings.ToLower(strings.TrimSpace(s))
	if in == "" {
		return fail("empty")
	}
	if len(in) > 256 {
		return fail("longer than 256 characters")
	}
	if full, ok := specials[in]; ok {
		in = full
	}
	e := &Event{src: strings.TrimSpace(s), weekdays: 0x7f, months: mask(1, 12), days: mask(1, 31),
		hours: 1, minutes: 1, seconds: 1}
	var haveDate, haveTime bool
	for i, tok := range strings.Fields(in) {
		switch {
		case i == 0 && tok[0] >= 'a' && tok[0] <= 'z':
			w, err := parseWeekdays(tok)
			if err != nil {
				return fail("weekday %q: %v", tok, err)
			}
			e.weekdays = w
		case strings.Contains(tok, ":"):
			if haveTime {
				return fail("%q: a second time part", tok)
			}
			haveTime = true
			if err := e.parseTime(tok); err != nil {
				return fail("time %q: %v", tok, err)
			}
		case strings.Contains(tok, "-"):
			if haveDate || haveTime {
				return fail("%q: the date comes once, before the time", tok)
			}
			haveDate = true
			if err := e.parseDate(tok); err != nil {
				return fail("date %q: %v", tok, err)
			}
		default:
			// Minutes of every hour (`*/5`, `30/10`, `*`).
			if haveTime {
				return fail("%q: a second time part", tok)
			}
			haveTime = true
			m, err := parseField(tok, 0, 59)
			if err != nil {
				return fail("minutes %q: %v", tok, err)
			}
			e.hours, e.minutes, e.seconds = mask(0, 23), m, 1
		}
	}
	if e.days&e.validDays() == 0 {
		return fail("no month it names has the days it names")
	}
	return e, nil
}

// validDays is the days that exist in at least one of e's months.
func (e *Event) validDays() uint64 {
	if e.months&^(1<<2) != 0 {
		if e.months&^(1<<2|1<<4|1<<6|1<<9|1<<11) != 0 {
			return mask(1, 31)
		}
		return mask(1, 30)
	}
	return mask(1, 29)
}

func (e *Event) parseDate(tok string) error {
	parts := strings.Split(tok, "-")
	if len(parts) < 2 || len(parts) > 3 {
		return fmt.Errorf("want [YEARS-]MONTHS-DAYS")
	}
	if len(parts) == 3 {
		ys, err := parseYears(parts[0])
		if err != nil {
			return fmt.Errorf("years: %w", err)
		}
		e.years, parts = ys, parts[1:]
	}
	var err error
	if e.months, err = parseField(parts[0], 1, 12); err != nil {
		return fmt.Errorf("months: %w", err)
	}
	if e.days, err = parseField(parts[1], 1, 31); err != nil {
		return fmt.Errorf("days: %w", err)
	}
	return nil
}

func (e *Event) parseTime(tok string) error {
	parts := strings.Split(tok, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return fmt.Errorf("want HOURS:MINUTES[:SECONDS]")
	}
	var err error
	if e.hours, err = parseField(parts[0], 0, 23); err != nil {
		return fmt.Errorf("hours: %w", err)
	}
	if e.minutes, err = parseField(parts[1], 0, 59); err != nil {
		return fmt.Errorf("minutes: %w", err)
	}
	e.seconds = 1
	if len(parts) == 3 {
		if e.seconds, err = parseField(parts[2], 0, 59); err != nil {
			return fmt.Errorf("seconds: %w", err)
		}
	}
	return nil
}

// parseField reads a comma-separated list of `*`, n, a..b and a/step
// (a may be `*`) within lo..hi, as a bit mask.
func parseField(s string, lo, hi int) (uint64, error) {
	var m uint64
	for item := range strings.SplitSeq(s, ",") {
		sp, err := parseItem(item, lo, hi)
		if err != nil {
			return 0, err
		}
		for v := sp.start; v <= sp.end; v += sp.step {
			m |= 1 << v
		}
	}
	return m, nil
}

func parseYears(s string) ([]span, error) {
	var out []span
	for item := range strings.SplitSeq(s, ",") {
		sp, err := parseItem(item, minYear, maxYear)
		if err != nil {
			return nil, err
		}
		out = append(out, sp)
	}
	return out, nil
}

func parseItem(item string, lo, hi int) (span, error) {
	num := func(s string) (int, error) {
		if s == "" || len(s) > 4 || strings.TrimLeft(s, "0123456789") != "" {
			return 0, fmt.Errorf("%q is not a number", s)
		}
		v, _ := strconv.Atoi(s)
		if v < lo || v > hi {
			return 0, fmt.Errorf("%d is outside %d..%d", v, lo, hi)
		}
		return v, nil
	}
	switch {
	case item == "*":
		return span{lo, hi, 1}, nil
	case strings.Contains(item, "/"):
		a, b, _ := strings.Cut(item, "/")
		start := lo
		if a != "*" {
			v, err := num(a)
			if err != nil {
				return span{}, err
			}
			start = v
		}
		step, err := strconv.Atoi(b)
		if err != nil || step < 1 || step > hi || strings.TrimLeft(b, "0123456789") != "" {
			return span{}, fmt.Errorf("repetition %q: want a step from 1 to %d", b, hi)
		}
		return span{start, hi, step}, nil
	case strings.Contains(item, ".."):
		a, b, _ := strings.Cut(item, "..")
		x, err := num(a)
		if err != nil {
			return span{}, err
		}
		y, err := num(b)
		if err != nil {
			return span{}, err
		}
		if y < x {
			return span{}, fmt.Errorf("range %s ends before it starts", item)
		}
		return span{x, y, 1}, nil
	default:
		v, err := num(item)
		if err != nil {
			return span{}, err
		}
		return span{v, v, 1}, nil
	}
}

func parseWeekdays(tok string) (uint8, error) {
	day := func(s string) (int, error) {
		for i, n := range weekdayNames {
			if s == n {
				return i, nil
			}
		}
		return 0, fmt.Errorf("%q is not one of mon, tue, wed, thu, fri, sat, sun", s)
	}
	var m uint8
	for item := range strings.SplitSeq(tok, ",") {
		a, b, isRange := strings.Cut(item, "..")
		x, err := day(a)
		if err != nil {
			return 0, err
		}
		if !isRange {
			m |= 1 << x
			continue
		}
		y, err := day(b)
		if err != nil {
			return 0, err
		}
		// Ranges run Monday to Sunday: mon..sun is the whole week.
		mx, my := (x+6)%7, (y+6)%7
		if my < mx {
			return 0, fmt.Errorf("range %s ends before it starts (weeks run mon..sun)", item)
		}
		for d := mx; d <= my; d++ {
			m |= 1 << ((d + 1) % 7)
		}
	}
	return m, nil
}

func mask(lo, hi int) uint64 {
	var m uint64
	for v := lo; v <= hi; v++ {
		m |= 1 << v
	}
	return m
}

// String is the schedule as it was given.
func (e *Event) String() string { return e.src }

func (e *Event) yearOK(y int) bool {
	if e.years == nil {
		return true
	}
	for _, sp := range e.years {
		if y >= sp.start && y <= sp.end && (y-sp.start)%sp.step == 0 {
			return true
		}
	}
	return false
}

// Next is the first time strictly after `after`, in after's location and
// at whole seconds, that e names; false when there is none (its years
// are past, or none comes within 400 years).
func (e *Event) Next(after time.Time) (time.Time, bool) {
	loc := after.Location()
	t := after.Truncate(time.Second).Add(time.Second)
	y0, m0, d0 := t.Date()
	for y := y0; y <= y0+horizon && y <= maxYear; y++ {
		if !e.yearOK(y) {
			continue
		}
		for m := time.January; m <= time.December; m++ {
			if e.months&(1<<m) == 0 || (y == y0 && m < m0) {
				continue
			}
			last := time.Date(y, m+1, 0, 0, 0, 0, 0, loc).Day()
			for d := 1; d <= last; d++ {
				if e.days&(1<<d) == 0 || (y == y0 && m == m0 && d < d0) {
					continue
				}
				if e.weekdays&(1<<time.Date(y, m, d, 12, 0, 0, 0, loc).Weekday()) == 0 {
					continue
				}
				from := time.Date(y, m, d, 0, 0, 0, 0, loc)
				if y == y0 && m == m0 && d == d0 {
					from = t
				}
				if at, ok := e.inDay(from); ok {
					return at, true
				}
			}
		}
	}
	return time.Time{}, false
}

// inDay is the first of e's times of day at or after from, on from's day.
// A time of day the clock skips (a daylight-saving change) happens when
// the clock reaches it: 02:30 on a day that jumps from 02:00 to 03:00 is
// 03:30 that day, as cron runs what the change skipped.
func (e *Event) inDay(from time.Time) (time.Time, bool) {
	y, m, d := from.Date()
	h0, mi0, s0 := from.Clock()
	var shifted time.Time // the earliest skipped time, as the clock reads it
	for h := firstAtOrAfter(e.hours, h0); h < 24; h = firstAtOrAfter(e.hours, h+1) {
		mstart := 0
		if h == h0 {
			mstart = mi0
		}
		for mi := firstAtOrAfter(e.minutes, mstart); mi < 60; mi = firstAtOrAfter(e.minutes, mi+1) {
			sstart := 0
			if h == h0 && mi == mi0 {
				sstart = s0
			}
			s := firstAtOrAfter(e.seconds, sstart)
			if s >= 60 {
				continue
			}
			at := time.Date(y, m, d, h, mi, s, 0, from.Location())
			if at.Day() != d || at.Before(from) {
				continue
			}
			if hh, mm, _ := at.Clock(); hh != h || mm != mi {
				if shifted.IsZero() || at.Before(shifted) {
					shifted = at
				}
				continue
			}
			if !shifted.IsZero() && shifted.Before(at) {
				return shifted, true
			}
			return at, true
		}
	}
	return shifted, !shifted.IsZero()
}

// firstAtOrAfter is the lowest bit of m at or above v, or 64.
func firstAtOrAfter(m uint64, v int) int {
	if v >= 64 {
		return 64
	}
	return bits.TrailingZeros64(m >> v << v)
}
