package shared

import (
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestStartedOnceAndClosedInReverse(t *testing.T) {
	var starts atomic.Int32
	var order []string
	var dir string
	f := New("counter", func(tb testing.TB) int {
		starts.Add(1)
		dir = tb.TempDir()
		tb.Cleanup(func() { order = append(order, "first") })
		tb.Cleanup(func() {
			order = append(order, "second")
			if tb.Context().Err() == nil {
				t.Error("the fixture's context is not cancelled before its cleanups")
			}
		})
		return 42
	})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if v := f.Get(t); v != 42 {
				t.Errorf("Get = %d", v)
			}
		})
	}
	wg.Wait()
	if n := starts.Load(); n != 1 {
		t.Fatalf("started %d times, want once", n)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the fixture's TempDir: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(order, []string{"second", "first"}) {
		t.Errorf("cleanups ran %v, want the last registered first", order)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the fixture's TempDir after Close: %v", err)
	}
}

// get calls f.Get as a test would, with a TB whose failure it reports.
func get[T any](f *Fixture[T]) (failed bool, report string) {
	caller := newPackageTB("caller")
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Get(caller)
	}()
	<-done
	return caller.Failed(), caller.report()
}

func TestAFailedStartFailsEveryTestThatAsks(t *testing.T) {
	var starts atomic.Int32
	f := New("broken", func(tb testing.TB) string {
		starts.Add(1)
		tb.Logf("starting")
		tb.Fatalf("no free port")
		return "unreachable"
	})
	for i := range 2 {
		failed, report := get(f)
		if !failed || !strings.Contains(report, "shared broken did not start") || !strings.Contains(report, "no free port") ||
			!strings.Contains(report, "starting") {
			t.Errorf("caller %d: failed %t, %q", i, failed, report)
		}
	}
	if n := starts.Load(); n != 1 {
		t.Errorf("started %d times, want once", n)
	}
	if err := f.Close(); err != nil {
		t.Errorf("Close of a fixture that did not start: %v", err)
	}
}

func TestAnErrorWhileClosingFailsTheRun(t *testing.T) {
	f := New("leaky", func(tb testing.TB) int {
		tb.Cleanup(func() { tb.Errorf("process %d outlived it", 7) })
		return 1
	})
	f.Get(t)
	if err := f.Close(); err == nil || !strings.Contains(err.Error(), "process 7 outlived it") {
		t.Errorf("Close: %v", err)
	}

	unused := New("unused", func(tb testing.TB) int { t.Error("started without a Get"); return 0 })
	if code := ThenClose(runner(0), unused).Run(); code != 0 {
		t.Errorf("a run with an unused fixture: exit %d", code)
	}
	g := New("leaky", func(tb testing.TB) int {
		tb.Cleanup(func() { tb.Error("left a process") })
		return 1
	})
	g.Get(t)
	if code := ThenClose(runner(0), g).Run(); code != 1 {
		t.Errorf("a passing run whose fixture failed to close: exit %d, want 1", code)
	}
}

type runner int

func (r runner) Run() int { return int(r) }
