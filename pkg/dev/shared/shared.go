// Package shared runs a test fixture once for a whole package's tests: a
// mesh harness or a dev stack that takes seconds to minutes to start is
// started by the first test that asks for it and stopped by TestMain after
// every test has run, instead of once per test.
//
//	var mesh = shared.New("mesh", func(t testing.TB) *meshtest.Harness {
//		return meshtest.New(t, meshtest.WithAPI(meshtest.APISpec{}))
//	})
//
//	func TestMain(m *testing.M) { os.Exit(shared.ThenClose(m, mesh).Run()) }
//
//	func TestSomething(t *testing.T) {
//		h := mesh.Get(t)
//		...
//	}
//
// The start function gets a testing.TB of the package, not of a test: what
// it registers with Cleanup runs at Close, in reverse order, and what it
// reports with Error or Fatal fails every test that asks for the fixture
// (when starting) or the package's run (when closing). Tests that share a
// fixture must leave it as they found it, or keep their own.
package shared

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Fixture is a value started once, by the first Get, and stopped by Close.
type Fixture[T any] struct {
	name  string
	start func(testing.TB) T

	once sync.Once
	tb   *packageTB
	v    T     // set by once
	err  error // set by once
}

// New returns a fixture that start makes on the first Get. name says what
// it is in failure messages.
func New[T any](name string, start func(testing.TB) T) *Fixture[T] {
	return &Fixture[T]{name: name, start: start}
}

// Get returns the fixture, starting it on the first call; a fixture that
// failed to start fails t (and every later caller) with the reason.
func (f *Fixture[T]) Get(t testing.TB) T {
	t.Helper()
	f.once.Do(func() {
		f.tb = newPackageTB(f.name)
		done := make(chan struct{})
		go func() { // Fatal ends this goroutine, not the caller's test
			defer close(done)
			f.v = f.start(f.tb)
		}()
		<-done
		if f.tb.Failed() {
			f.err = fmt.Errorf("shared %s did not start:\n%s", f.name, f.tb.report())
		}
	})
	if f.err != nil {
		t.Fatal(f.err)
	}
	return f.v
}

// Close stops the fixture if it was started: the context of its TB is
// cancelled and its cleanups run, last registered first. It returns what
// was reported as an error meanwhile.
func (f *Fixture[T]) Close() error {
	f.once.Do(func() {}) // a fixture nobody asked for is never started
	if f.tb == nil {
		return nil
	}
	f.tb.runCleanups()
	if f.tb.Failed() && f.err == nil {
		return fmt.Errorf("shared %s failed while stopping:\n%s", f.name, f.tb.report())
	}
	return nil
}

// Runner is what TestMain runs: a *testing.M.
type Runner interface{ Run() int }

type thenClose struct {
	m        Runner
	fixtures []io.Closer
}

// ThenClose is m, and then the fixtures closed: a fixture failing at its
// close fails the run (exit code 1, the reason on stderr).
func ThenClose(m Runner, fixtures ...io.Closer) Runner { return thenClose{m, fixtures} }

func (r thenClose) Run() int {
	code := r.m.Run()
	for _, f := range r.fixtures {
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// packageTB is the testing.TB a fixture is started with. The embedded TB is
// nil: it only supplies the interface's unexported method; every exported
// one is implemented here.
type packageTB struct {
	testing.TB
	name   string
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	cleanups []func()        // protected by mu
	log      strings.Builder // protected by mu
	failed   bool            // protected by mu
}

func newPackageTB(name string) *packageTB {
	ctx, cancel := context.WithCancel(context.Background())
	return &packageTB{name: name, ctx: ctx, cancel: cancel}
}

func (p *packageTB) runCleanups() {
	p.cancel()
	for {
		p.mu.Lock()
		n := len(p.cleanups)
		if n == 0 {
			p.mu.Unlock()
			return
		}
		f := p.cleanups[n-1]
		p.cleanups = p.cleanups[:n-1]
		p.mu.Unlock()
		f()
	}
}

// report is what was logged and reported.
func (p *packageTB) report() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (p *packageTB) logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := fmt.Sprintf(format, args...)
	p.log.WriteString("    " + strings.TrimSuffix(s, "\n") + "\n")
}

func (p *packageTB) Helper()                  {}
func (p *packageTB) Name() string             { return p.name }
func (p *packageTB) Context() context.Context { return p.ctx }
func (p *packageTB) Output() io.Writer        { return writerFunc(func(b []byte) { p.logf("%s", b) }) }
func (p *packageTB) Log(args ...any)          { p.logf("%s", fmt.Sprintln(args...)) }
func (p *packageTB) Logf(format string, args ...any) {
	p.logf(format, args...)
}
func (p *packageTB) Attr(key, value string) { p.logf("%s: %s", key, value) }

func (p *packageTB) Cleanup(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cleanups = append(p.cleanups, f)
}

func (p *packageTB) Fail() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failed = true
}

func (p *packageTB) Failed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

func (p *packageTB) FailNow() {
	p.Fail()
	runtime.Goexit()
}

func (p *packageTB) Error(args ...any)                 { p.Log(args...); p.Fail() }
func (p *packageTB) Errorf(format string, args ...any) { p.Logf(format, args...); p.Fail() }
func (p *packageTB) Fatal(args ...any)                 { p.Log(args...); p.FailNow() }
func (p *packageTB) Fatalf(format string, args ...any) { p.Logf(format, args...); p.FailNow() }

// A shared fixture cannot be skipped for one test: skipping its start
// fails it, with the reason.
func (p *packageTB) Skip(args ...any)                 { p.Fatal(append([]any{"skipped:"}, args...)...) }
func (p *packageTB) Skipf(format string, args ...any) { p.Fatalf("skipped: "+format, args...) }
func (p *packageTB) SkipNow()                         { p.Fatal("skipped") }
func (p *packageTB) Skipped() bool                    { return false }

func (p *packageTB) TempDir() string {
	dir, err := os.MkdirTemp("", "shared-"+strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == os.PathSeparator {
			return '-'
		}
		return r
	}, p.name))
	if err != nil {
		p.Fatalf("TempDir: %v", err)
	}
	p.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			p.Errorf("TempDir RemoveAll cleanup: %v", err)
		}
	})
	return dir
}

func (p *packageTB) ArtifactDir() string { return p.TempDir() }

// Setenv sets key for the whole process until Close: a fixture shared by
// parallel tests should not need it.
func (p *packageTB) Setenv(key, value string) {
	old, had := os.LookupEnv(key)
	if err := os.Setenv(key, value); err != nil {
		p.Fatalf("Setenv: %v", err)
	}
	p.Cleanup(func() {
		if had {
			os.Setenv(key, old)
		} else {
			os.Unsetenv(key)
		}
	})
}

// Chdir would move every test of the package: refused.
func (p *packageTB) Chdir(string) { p.Fatal(errors.New("Chdir: not for a shared fixture")) }

type writerFunc func([]byte)

func (w writerFunc) Write(b []byte) (int, error) { w(b); return len(b), nil }
