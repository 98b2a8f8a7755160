package devstack

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testStack is a stack without children yet, with the given restart
// policy; the returned function reads its log so far. Its children are
// stopped when the test ends.
func testStack(t *testing.T, cfg Config) (*stack, func() string) {
	t.Helper()
	cfg.StopGrace = cmp.Or(cfg.StopGrace, 5*time.Second)
	cfg.StartLimitBurst = cmp.Or(cfg.StartLimitBurst, DefaultStartLimitBurst)
	cfg.StartLimitInterval = cmp.Or(cfg.StartLimitInterval, time.Minute)
	s := newStack(cfg, &logMux{out: io.Discard, dir: t.TempDir(), w: 5})
	lw, err := s.mux.source("devstack")
	if err != nil {
		t.Fatal(err)
	}
	s.log = slog.New(slog.NewTextHandler(lw, nil))
	t.Cleanup(func() { s.stopAll(); lw.Close() })
	return s, func() string {
		b, _ := os.ReadFile(filepath.Join(s.mux.dir, "devstack.log"))
		return string(b)
	}
}

func sh(script string, env ...string) func() procSpec {
	return func() procSpec { return procSpec{path: "/bin/sh", args: []string{"-c", script}, env: env} }
}

// state returns u's start times and current process under the lock.
func (s *stack) state(u *unit) ([]time.Time, *proc, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), u.starts...), u.cur, u.running()
}

// processState is the state letter of pid in /proc (R, S, T, ...).
func processState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return f[0]
}

// TestSupervisorRestartsWithBackoff: a child that exits twice is started
// again after RestartDelay, then after twice that, and runs on the third
// start; each restart is logged and the stack does not give up.
func TestSupervisorRestartsWithBackoff(t *testing.T) {
	t.Parallel()
	const delay = 150 * time.Millisecond
	s, log := testStack(t, Config{RestartDelay: delay, RestartDelayMax: time.Second})
	count := filepath.Join(t.TempDir(), "starts")
	u, err := s.add("flaky", sh(`n=$(cat "$F" 2>/dev/null || echo 0); echo $((n+1)) > "$F"; [ "$n" -ge 2 ] && exec sleep 60; exit 1`, "F="+count))
	if err != nil {
		t.Fatal(err)
	}
	poll.True(t, 10*time.Second, "the third start to run", func() bool {
		starts, _, running := s.state(u)
		return len(starts) == 3 && running
	})
	starts, _, _ := s.state(u)
	if d := starts[1].Sub(starts[0]); d < delay {
		t.Errorf("first restart after %v, want at least %v", d, delay)
	}
	if d := starts[2].Sub(starts[1]); d < 2*delay {
		t.Errorf("second restart after %v, want at least %v (doubled)", d, 2*delay)
	}
	poll.True(t, 10*time.Second, "both restarts logged", func() bool {
		return strings.Count(log(), `msg="exited unasked; restarting" process=flaky status="exit status 1"`) == 2
	})
	select {
	case err := <-s.died:
		t.Fatalf("the stack gave up: %v", err)
	default:
	}
}

// TestSupervisorGivesUpAfterTheStartLimit: a child that keeps exiting is
// started StartLimitBurst times, then the stack gives up with an error
// naming it and its exit status.
func TestSupervisorGivesUpAfterTheStartLimit(t *testing.T) {
	t.Parallel()
	s, _ := testStack(t, Config{RestartDelay: 10 * time.Millisecond, RestartDelayMax: 20 * time.Millisecond,
		StartLimitBurst: 3, StartLimitInterval: time.Minute})
	u, err := s.add("doomed", sh("echo bye >&2; exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.died:
		for _, want := range []string{"doomed exited: exit status 3", "started 3 times within 1m0s"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("gave up with %q, want it to say %q", err, want)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stack did not give up on a child that always exits")
	}
	<-u.done
	if starts, _, _ := s.state(u); len(starts) != 3 {
		t.Errorf("started %d times, want 3 (the burst)", len(starts))
	}
	if b, _ := os.ReadFile(filepath.Join(s.mux.dir, "doomed.log")); string(b) != "bye\nbye\nbye\n" {
		t.Errorf("doomed.log = %q", b)
	}
}

// TestSupervisorForgetsOldStarts: starts older than StartLimitInterval do
// not count; a child that fails now and then is restarted forever.
func TestSupervisorForgetsOldStarts(t *testing.T) {
	t.Parallel()
	s, _ := testStack(t, Config{RestartDelay: 10 * time.Millisecond, StartLimitBurst: 2, StartLimitInterval: 100 * time.Millisecond})
	count := filepath.Join(t.TempDir(), "starts")
	// Each run lasts longer than the interval; the fifth stays up.
	u, err := s.add("slow", sh(`n=$(cat "$F" 2>/dev/null || echo 0); echo $((n+1)) > "$F"; [ "$n" -ge 4 ] && exec sleep 60; sleep 0.2; exit 1`, "F="+count))
	if err != nil {
		t.Fatal(err)
	}
	poll.True(t, 20*time.Second, "the fifth start", func() bool {
		b, _ := os.ReadFile(count)
		return strings.TrimSpace(string(b)) == "5"
	})
	select {
	case err := <-s.died:
		t.Fatalf("gave up though no two starts were within the interval: %v", err)
	default:
	}
	if _, _, running := s.state(u); !running {
		t.Error("the fifth start does not run")
	}
}

// TestSupervisorRestartsNothingWhileStopping: stopping the stack ends every
// child, and none is started again, though each exits (by SIGTERM) while
// its supervisor would restart it at once.
func TestSupervisorRestartsNothingWhileStopping(t *testing.T) {
	t.Parallel()
	s, _ := testStack(t, Config{RestartDelay: time.Millisecond})
	var units []*unit
	for _, name := range []string{"agent a", "agent b", "orchestrator"} {
		u, err := s.add(name, sh("exec sleep 60"))
		if err != nil {
			t.Fatal(err)
		}
		units = append(units, u)
	}
	s.stopAll()
	for _, u := range units {
		starts, p, running := s.state(u)
		if len(starts) != 1 || running || syscall.Kill(p.pid(), 0) == nil {
			t.Errorf("%s after stop: %d starts, running %v", u.name, len(starts), running)
		}
	}
	if _, err := s.add("late", sh("exec sleep 60")); err == nil {
		t.Error("a stopped stack started a child")
	}
	select {
	case err := <-s.died:
		t.Errorf("the stack gave up while stopping: %v", err)
	default:
	}
}

// TestSupervisorStopStartKillAndFreeze: what the control socket does to a
// child. A child stopped on request stays stopped until started; a killed
// child is restarted; a frozen child is stopped (T), frozen again when it
// is restarted, and continues when thawed.
func TestSupervisorStopStartKillAndFreeze(t *testing.T) {
	t.Parallel()
	s, log := testStack(t, Config{RestartDelay: 10 * time.Millisecond})
	u, err := s.add("agent x", sh("exec sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	_, first, _ := s.state(u)

	if err := s.hold("agent x"); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 10*time.Second, "the supervisor to see the stop", func() bool {
		return strings.Contains(log(), `msg="stopped on request" process="agent x"`)
	})
	if starts, cur, running := s.state(u); running || cur != first || len(starts) != 1 {
		t.Fatalf("after stop: running %v, %d starts", running, len(starts))
	}
	if err := s.hold("agent x"); !errors.Is(err, errConflict) {
		t.Errorf("stopping a stopped child: %v, want a conflict", err)
	}
	if _, err := s.kill("agent x"); !errors.Is(err, errConflict) {
		t.Errorf("killing a stopped child: %v, want a conflict", err)
	}
	if err := s.release("agent x"); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 10*time.Second, "the start", func() bool { _, cur, running := s.state(u); return running && cur != first })
	if err := s.release("agent x"); !errors.Is(err, errConflict) {
		t.Errorf("starting a running child: %v, want a conflict", err)
	}

	if err := s.freeze([]string{"agent x"}, true); err != nil {
		t.Fatal(err)
	}
	_, second, _ := s.state(u)
	poll.True(t, 10*time.Second, "the child stopped (T)", func() bool { return processState(second.pid()) == "T" })
	killed, err := s.kill("agent x")
	if err != nil || killed != second.pid() {
		t.Fatalf("kill: %d, %v; want pid %d", killed, err, second.pid())
	}
	poll.True(t, 10*time.Second, "the restart after the kill", func() bool {
		_, cur, running := s.state(u)
		return running && cur != second && processState(cur.pid()) == "T"
	})
	_, third, _ := s.state(u)
	if err := s.freeze([]string{"agent x"}, false); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 10*time.Second, "the child continued", func() bool { return processState(third.pid()) == "S" })
	<-second.exited
	if !strings.Contains(second.err.Error(), "killed") {
		t.Errorf("the killed child ended with %v, want a kill", second.err)
	}

	for _, f := range []func() error{
		func() error { return s.hold("agent nope") },
		func() error { return s.release("agent nope") },
		func() error { _, err := s.kill("agent nope"); return err },
		func() error { return s.freeze([]string{"agent nope"}, true) },
	} {
		if err := f(); !errors.Is(err, errNoSuchChild) {
			t.Errorf("an unknown child: %v, want errNoSuchChild", err)
		}
	}
}
