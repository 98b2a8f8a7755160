package orchestrator

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// switchable is a leadership a test turns on and off, counting how often it
// is asked.
type switchable struct {
	mu      sync.Mutex
	leading bool          // protected by mu
	changed chan struct{} // protected by mu
	asked   int           // Leading calls; protected by mu
}

func newSwitchable() *switchable { return &switchable{changed: make(chan struct{})} }

func (s *switchable) Leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	return s.leading
}

func (s *switchable) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *switchable) set(leading bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leading = leading
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *switchable) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked
}

// Cluster API's controllers run while the replica leads, stop when it loses the
// leadership and start again when it leads again, told by the leadership's
// changes: while nothing changes, the leadership is not asked (polled).
func TestControllersFollowTheLeadership(t *testing.T) {
	t.Parallel()
	l := newSwitchable()
	running := make(chan bool, 16)
	k := &kubernetes{log: slog.New(slog.DiscardHandler),
		controllers: func(ctx context.Context) error {
			running <- true
			<-ctx.Done()
			running <- false
			return nil
		},
		finishDeletes: func(context.Context) (int, error) { return 0, nil },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.run(ctx, l) }()
	expect := func(what string, want bool) {
		t.Helper()
		select {
		case got := <-running:
			if got != want {
				t.Fatalf("%s: controllers running %v, want %v", what, got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the controllers did not follow", what)
		}
	}
	quiet := func(what string) {
		t.Helper()
		before := l.calls()
		select {
		case got := <-running:
			t.Fatalf("%s: controllers running %v with nothing changed", what, got)
		case <-time.After(2500 * time.Millisecond):
		}
		// One call may be the loop's own, after the last change: a poll
		// every second would make two or more.
		if n := l.calls() - before; n > 1 {
			t.Errorf("%s: the leadership was asked %d times in 2.5 s with nothing changed", what, n)
		}
	}
	quiet("not leading")
	l.set(true)
	expect("leading", true)
	quiet("leading")
	l.set(false)
	expect("leadership lost", false)
	l.set(true)
	expect("leading again", true)
	cancel()
	expect("stopped", false)
	<-done
}

// A lone orchestrator leads from the start, and runs its controllers until it
// stops.
func TestControllersAlone(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	k := &kubernetes{log: slog.New(slog.DiscardHandler),
		controllers: func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return nil
		},
		finishDeletes: func(context.Context) (int, error) { return 0, nil },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.run(ctx, alone{}) }()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the controllers did not start")
	}
	cancel()
	<-done
}
