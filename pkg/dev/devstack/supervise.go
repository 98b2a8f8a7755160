package devstack

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Restart policy defaults (Config.RestartDelay and the others).
const (
	DefaultRestartDelay       = time.Second
	DefaultRestartDelayMax    = 30 * time.Second
	DefaultStartLimitBurst    = 5
	DefaultStartLimitInterval = 60 * time.Second
)

// Errors of the supervisor's operations (the control socket maps them).
var (
	errNoSuchChild = errors.New("no such process")
	errConflict    = errors.New("not in that state")
)

// unit is a supervised child, as systemd supervises a service: when its
// process exits it is started again after a delay that doubles with every
// start within the start limit interval; a unit started StartLimitBurst
// times within StartLimitInterval that exits again makes the stack give up.
type unit struct {
	name string
	// spec is the process to start, asked anew for every start (an agent
	// enrols only while it has no mesh identity; a simulator keeps its
	// first addresses).
	spec func() procSpec
	// done is closed when the unit's supervisor has returned.
	done chan struct{}

	cur    *proc         // the current (or last) process; protected by stack.mu
	starts []time.Time   // recent start times; protected by stack.mu
	held   bool          // stopped on request: not restarted until started; protected by stack.mu
	resume chan struct{} // receives a start request while held; protected by stack.mu
	frozen bool          // its processes are SIGSTOPped (a partition); protected by stack.mu
}

// policy is the restart policy of a stack's units.
type policy struct {
	delay, delayMax time.Duration
	burst           int
	interval        time.Duration
}

// recent drops the starts older than interval and returns how many remain.
func (u *unit) recent(now time.Time, interval time.Duration) int {
	i := 0
	for i < len(u.starts) && now.Sub(u.starts[i]) > interval {
		i++
	}
	u.starts = u.starts[i:]
	return len(u.starts)
}

// backoff is the delay before the next start when n starts happened within
// the interval: delay, 2*delay, 4*delay, ..., at most delayMax.
func (p policy) backoff(n int) time.Duration {
	d := p.delay
	for i := 1; i < n && d < p.delayMax; i++ {
		d *= 2
	}
	return min(d, p.delayMax)
}

// add starts a supervised unit. Its first start failing is returned (the
// stack cannot come up); later exits are the supervisor's.
func (s *stack) add(name string, spec func() procSpec) (*unit, error) {
	u := &unit{name: name, spec: spec, done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil, errors.New("stopping")
	}
	if err := s.launch(u); err != nil {
		return nil, err
	}
	s.units = append(s.units, u)
	s.supervisors.Add(1)
	go s.supervise(u)
	return u, nil
}

// launch starts u's process; s.mu is held.
func (s *stack) launch(u *unit) error {
	spec := u.spec()
	spec.name = u.name
	p, err := s.mux.start(spec)
	u.starts = append(u.starts, time.Now())
	if err != nil {
		return err
	}
	u.cur = p
	if u.frozen {
		_ = syscall.Kill(-p.pid(), syscall.SIGSTOP)
	}
	s.log.Info("started", "process", u.name, "pid", p.pid(), "starts_within_limit", len(u.starts))
	return nil
}

// supervise restarts u whenever its process exits, until the stack stops
// or u fails too often (then the stack is told on s.died).
func (s *stack) supervise(u *unit) {
	defer s.supervisors.Done()
	defer close(u.done)
	for {
		s.mu.Lock()
		p := u.cur
		s.mu.Unlock()
		select {
		case <-p.exited:
		case <-s.stopped:
			return
		}
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		if u.held {
			s.log.Info("stopped on request", "process", u.name)
			resume := make(chan struct{}, 1)
			u.resume = resume
			s.mu.Unlock()
			select {
			case <-resume:
			case <-s.stopped:
				return
			}
			s.mu.Lock()
		} else {
			n := u.recent(time.Now(), s.policy.interval)
			if n >= s.policy.burst {
				s.mu.Unlock()
				err := fmt.Errorf("%w; it was started %d times within %v (the start limit), giving up", p.exitError(), n, s.policy.interval)
				s.log.Error("giving up", "process", u.name, "err", err)
				select {
				case s.died <- err:
				default:
				}
				return
			}
			d := s.policy.backoff(n)
			s.mu.Unlock()
			s.log.Warn("exited unasked; restarting", "process", u.name, "status", fmt.Sprint(p.err), "in", d.String())
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-s.stopped:
				t.Stop()
				return
			}
			s.mu.Lock()
			if u.held { // stopped on request while waiting: wait for a start
				s.mu.Unlock()
				continue
			}
		}
		if s.stopping {
			s.mu.Unlock()
			return
		}
		if err := s.launch(u); err != nil {
			// Counted as a start; the next round sees a process that has exited.
			s.log.Error("restart failed", "process", u.name, "err", err)
			u.cur = exitedProc(u.name, err)
		}
		s.mu.Unlock()
	}
}

// exitedProc stands for a process that could not be started.
func exitedProc(name string, err error) *proc {
	p := &proc{name: name, exited: make(chan struct{}), err: err}
	close(p.exited)
	return p
}

// unitNamed returns the unit called name; s.mu is held.
func (s *stack) unitNamed(name string) (*unit, error) {
	for _, u := range s.units {
		if u.name == name {
			return u, nil
		}
	}
	return nil, fmt.Errorf("%q: %w", name, errNoSuchChild)
}

// running reports whether u's current process runs; s.mu is held.
func (u *unit) running() bool {
	select {
	case <-u.cur.exited:
		return false
	default:
		return true
	}
}

// hold stops the unit's process (SIGTERM, SIGKILL after the grace period)
// and keeps it stopped until release.
func (s *stack) hold(name string) error {
	s.mu.Lock()
	u, err := s.unitNamed(name)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if u.held {
		s.mu.Unlock()
		return fmt.Errorf("%s is already stopped: %w", name, errConflict)
	}
	u.held = true
	p := u.cur
	s.mu.Unlock()
	s.log.Info("stopping on request", "process", name)
	p.stop(s.cfg.StopGrace)
	return nil
}

// release starts a held unit again at once; the start limit's count starts
// afresh, as after `systemctl reset-failed`.
func (s *stack) release(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.unitNamed(name)
	if err != nil {
		return err
	}
	if !u.held {
		return fmt.Errorf("%s was not stopped (devstack agent stop): %w", name, errConflict)
	}
	u.held = false
	u.starts = nil
	if u.resume != nil {
		u.resume <- struct{}{}
		u.resume = nil
	}
	return nil
}

// kill sends SIGKILL to the unit's process group, as a crash would end it;
// the supervisor restarts it.
func (s *stack) kill(name string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.unitNamed(name)
	if err != nil {
		return 0, err
	}
	if u.held || !u.running() {
		return 0, fmt.Errorf("%s is not running: %w", name, errConflict)
	}
	pid := u.cur.pid()
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill %s: %w", name, err)
	}
	s.log.Warn("killed on request (SIGKILL)", "process", name, "pid", pid)
	return pid, nil
}

// freeze stops (SIGSTOP) or continues (SIGCONT) the processes of the units
// named; a unit frozen is frozen again when it is restarted. It is a
// conflict when every unit is already so.
func (s *stack) freeze(names []string, frozen bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sig := syscall.SIGCONT
	if frozen {
		sig = syscall.SIGSTOP
	}
	var units []*unit
	changes := false
	for _, name := range names {
		u, err := s.unitNamed(name)
		if err != nil {
			return err
		}
		units = append(units, u)
		changes = changes || u.frozen != frozen
	}
	if !changes {
		state := "running"
		if frozen {
			state = "frozen"
		}
		return fmt.Errorf("%s: already %s: %w", strings.Join(names, ", "), state, errConflict)
	}
	for _, u := range units {
		u.frozen = frozen
		if u.running() {
			_ = syscall.Kill(-u.cur.pid(), sig)
		}
	}
	return nil
}

// stopAll stops every child, agents first, then the rest, the last started
// first, and waits for them and their supervisors: nothing is restarted
// once it began.
func (s *stack) stopAll() {
	s.once.Do(func() {
		s.mu.Lock()
		s.stopping = true
		close(s.stopped)
		units := append([]*unit(nil), s.units...)
		s.mu.Unlock()
		var wg sync.WaitGroup
		for _, agents := range []bool{true, false} {
			for i := len(units) - 1; i >= 0; i-- {
				u := units[i]
				if isAgent(u.name) == agents {
					wg.Go(func() { u.cur.stop(s.cfg.StopGrace) })
				}
			}
			wg.Wait()
		}
		s.supervisors.Wait()
	})
}
