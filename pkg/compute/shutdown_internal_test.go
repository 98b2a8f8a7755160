package compute

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestNoRunnerStartsOnceShutdownBegan: creates arriving while Shutdown waits
// for the runners neither race its wait (the race detector reports an Add
// concurrent with Wait) nor start a runner after it returned.
func TestNoRunnerStartsOnceShutdownBegan(t *testing.T) {
	t.Parallel()
	s := newEngine(slog.New(slog.DiscardHandler), nil)
	release := make(chan struct{})
	s.spawn(func(ctx context.Context) { <-release })

	var started, after atomic.Int64
	var returned atomic.Bool
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				s.spawn(func(ctx context.Context) {
					started.Add(1)
					if returned.Load() {
						after.Add(1)
					}
				})
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() {
		err := s.shutdown(ctx)
		returned.Store(true)
		shut <- err
	}()
	close(release)
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n := after.Load(); n != 0 {
		t.Fatalf("%d runners started after Shutdown returned", n)
	}
	s.spawn(func(ctx context.Context) { t.Error("a runner started after Shutdown") })
	t.Logf("%d runners started before Shutdown began", started.Load())
}
