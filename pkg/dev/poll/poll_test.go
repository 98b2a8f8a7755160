package poll_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(f) // Fatalf does not return
}

func run(t *testing.T, f func(*fakeT)) (failed string) {
	ft := &fakeT{TB: t}
	defer func() {
		if r := recover(); r != nil && r != ft {
			panic(r)
		}
		failed = ft.failed
	}()
	f(ft)
	return ""
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ready := start.Add(3 * time.Second)
		calls := 0
		failed := run(t, func(ft *fakeT) {
			poll.Until(ft, time.Minute, "ready", func() error {
				calls++
				if time.Now().Before(ready) {
					return errors.New("not ready")
				}
				return nil
			})
		})
		if failed != "" {
			t.Fatalf("Until failed: %s", failed)
		}
		// The interval grows to MaxInterval: seen at most MaxInterval late,
		// after a few dozen checks rather than thousands.
		if late := time.Since(ready); late > poll.MaxInterval {
			t.Errorf("seen %v after it held", late)
		}
		if calls > 40 {
			t.Errorf("%d checks in 3s", calls)
		}
	})
}

func TestUntilFailsWithTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		failed := run(t, func(ft *fakeT) {
			poll.Until(ft, 2*time.Second, "the answer", func() error {
				n++
				return fmt.Errorf("attempt %d", n)
			})
		})
		want := fmt.Sprintf("attempt %d", n)
		if !strings.Contains(failed, "the answer") || !strings.Contains(failed, want) {
			t.Errorf("failure %q does not name what and %q", failed, want)
		}
	})
}

func TestTrue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		deadline := time.Now().Add(time.Second)
		if failed := run(t, func(ft *fakeT) {
			poll.True(ft, 5*time.Second, "a second", func() bool { return !time.Now().Before(deadline) })
		}); failed != "" {
			t.Errorf("True failed: %s", failed)
		}
		if failed := run(t, func(ft *fakeT) {
			poll.True(ft, time.Second, "never", func() bool { return false })
		}); !strings.Contains(failed, "never") {
			t.Errorf("True on a false condition: %q", failed)
		}
	})
}

func TestContextEndsWithTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		err := poll.Context(ctx, func() error { return errors.New("down") })
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "down") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestLazyReasonIsMadeOnlyForTheFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		checks, made := 0, 0
		failed := run(t, func(ft *fakeT) {
			poll.Until(ft, time.Second, "never", func() error {
				checks++
				return poll.Lazy(func() string { made++; return fmt.Sprintf("after %d checks", checks) })
			})
		})
		if made != 1 || !strings.Contains(failed, fmt.Sprintf("after %d checks", checks)) {
			t.Errorf("%d checks made the reason %d times; failure %q", checks, made, failed)
		}
	})
}
