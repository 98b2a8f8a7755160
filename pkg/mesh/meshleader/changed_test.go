package meshleader

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
)

const self = "http://10.0.0.1:8080"

// leader is a Leader that has not joined an election: the test drives its
// state as the election would.
func leader() *Leader {
	return newLeader(Config{PeerURL: self, Logger: slog.New(slog.DiscardHandler)})
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Each change of what Leader answers closes the channel taken before it, and only
// a change does: another leader seen, this replica leading, its leadership lost,
// Close.
func TestChangedTellsEachChange(t *testing.T) {
	t.Parallel()
	l := leader()
	c := &meshcontrol.Control{}
	steps := []struct {
		what    string
		do      func()
		changed bool
		leader  string
		leading bool
	}{
		{"another replica leads", func() { l.setLeader("http://10.0.0.2:8080") }, true, "http://10.0.0.2:8080", false},
		{"the same leader seen again", func() { l.setLeader("http://10.0.0.2:8080") }, false, "http://10.0.0.2:8080", false},
		{"this replica elected, its control server not serving yet", func() { l.setLeader(self) }, false, "http://10.0.0.2:8080", false},
		{"its control server serves", func() { l.serving(c) }, true, self, true},
		{"elected again", func() { l.setLeader(self) }, false, self, true},
		{"leadership lost", func() { l.stopped(c) }, true, "", false},
		{"a new leader", func() { l.setLeader("http://10.0.0.3:8080") }, true, "http://10.0.0.3:8080", false},
		{"leading again", func() { l.serving(c) }, true, self, true},
		{"closed", func() { l.mu.Lock(); l.shutLocked(); l.mu.Unlock() }, true, self, false},
		{"leading once closed", func() {
			if l.serving(c) {
				t.Error("a closed Leader served")
			}
		}, false, self, false},
	}
	for _, s := range steps {
		ch := l.Changed()
		s.do()
		if got := closed(ch); got != s.changed {
			t.Errorf("%s: told of a change %v, want %v", s.what, got, s.changed)
		}
		if got, leading := l.Leader(); got != s.leader || leading != s.leading || l.Leading() != s.leading {
			t.Errorf("%s: Leader() = %q, %v; want %q, %v", s.what, got, leading, s.leader, s.leading)
		}
	}
}

// Watchers following the documented loop while leadership changes thousands of
// times, concurrently, all end seeing the last state: no change is missed, and a
// watcher never blocks the election. Run it with -race.
func TestChangedWatchersSeeTheLastChange(t *testing.T) {
	t.Parallel()
	l := leader()
	c := &meshcontrol.Control{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const watchers = 8
	var (
		mu   sync.Mutex
		seen [watchers]string // protected by mu
		wg   sync.WaitGroup
	)
	for i := range watchers {
		wg.Go(func() {
			for {
				changed := l.Changed()
				peer, leading := l.Leader()
				mu.Lock()
				seen[i] = fmt.Sprint(peer, " ", leading)
				mu.Unlock()
				select {
				case <-changed:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	for i := range 3000 {
		switch i % 3 {
		case 0:
			l.serving(c)
		case 1:
			l.stopped(c)
		default:
			l.setLeader(fmt.Sprintf("http://10.0.1.%d:8080", i%250))
		}
	}
	l.setLeader("http://10.0.9.9:8080")
	want := "http://10.0.9.9:8080 false"
	poll.Until(t, 30*time.Second, "every watcher to see the last leader", func() error {
		mu.Lock()
		all := seen
		mu.Unlock()
		for _, s := range all {
			if s != want {
				return fmt.Errorf("watchers saw %q, want all %q", all, want)
			}
		}
		return nil
	})
	cancel()
	wg.Wait()
}
