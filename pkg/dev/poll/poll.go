// Package poll waits for a condition in tests and test harnesses: it checks
// the condition at a growing interval (a few milliseconds at first, so a
// condition that holds soon is seen soon, at most MaxInterval later, so a
// slow one costs little) until it holds or a deadline passes. Tests poll
// for what they wait on instead of sleeping a guessed time; this is the one
// place that loop is written.
package poll

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

const (
	// FirstInterval is the wait after the first failed check.
	FirstInterval = 5 * time.Millisecond
	// MaxInterval bounds the wait between two checks.
	MaxInterval = 200 * time.Millisecond
)

// Until calls cond until it returns nil. When timeout passes first, it
// fails t with what and cond's last error.
func Until(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := Context(ctx, cond); err != nil {
		t.Fatalf("timed out after %v waiting for %s: %v", timeout, what, err)
	}
}

// errNotYet is what True's conditions report while they do not hold.
var errNotYet = errors.New("condition not met")

// True calls cond until it returns true. When timeout passes first, it
// fails t with what.
func True(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Until(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// Context calls f until it returns nil, and returns nil then. When ctx
// ends first, it returns ctx's error with f's last error.
func Context(ctx context.Context, f func() error) error {
	interval := FirstInterval
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		}
		timer.Reset(interval)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-timer.C:
		}
		interval = min(2*interval, MaxInterval)
	}
}

// Lazy is an error whose message msg makes only when it is read: a
// condition's reason that costs I/O or formatting (a log's tail, the state
// of every agent) is then made once, for the failure, not at every check.
func Lazy(msg func() string) error { return lazy(msg) }

type lazy func() string

func (l lazy) Error() string { return l() }
