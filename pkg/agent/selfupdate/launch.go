package selfupdate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/flexplane/flexplane/pkg/release"
)

// EnvLaunched is set in the environment of the agent the launcher starts,
// so that it runs as the agent rather than launching again.
const EnvLaunched = "FLEXPLANE_AGENT_LAUNCHED"

// RestartExitCode is the exit status of an agent that staged an update and
// asks to be started again (EX_TEMPFAIL). The launcher starts the new
// current version at once; a supervisor without the launcher restarts it.
const RestartExitCode = 75

// DefaultProbation is how long a new version has by default to become
// healthy: long enough to join the mesh and be checked by the orchestrator
// on a busy node, short enough that a bad release is rolled back within a
// minute.
const DefaultProbation = 40 * time.Second

// LaunchConfig configures Launch.
type LaunchConfig struct {
	// Dir is the update directory. Required.
	Dir *Dir
	// Self is the launcher's own binary, run while no newer version is
	// current. Required.
	Self string
	// SelfVersion is the launcher's version.
	SelfVersion string
	// Verifier checks an installed version before every start (Dir.Verify:
	// its signed manifest, expiry, the floor and the binary's SHA-256); a
	// version that fails is not run: the launcher falls back to the
	// previous version, else to Self. Nil refuses every installed version.
	Verifier *release.Verifier
	// Args are the agent's arguments (without the program name); every
	// version gets the same ones, and the same environment.
	Args []string
	// Probation is how long a new version has to become healthy. Default
	// DefaultProbation.
	Probation time.Duration
	// MaxStarts is how many times a new version may start during its
	// probation; exiting after the last is a crash loop. Default 3.
	MaxStarts int
	// RestartDelay is the pause before starting a version on probation
	// again after it exited. Default 1s.
	RestartDelay time.Duration
	// StopTimeout bounds how long an agent may take to stop after SIGTERM
	// before it is killed. Default 15s.
	StopTimeout time.Duration
	// Stdout and Stderr receive the agent's output. Default os.Stdout and
	// os.Stderr.
	Stdout, Stderr io.Writer
	// Logger receives the launcher's logs. Default slog.Default().
	Logger *slog.Logger
}

func (c *LaunchConfig) setDefaults() {
	if c.Probation <= 0 {
		c.Probation = DefaultProbation
	}
	if c.MaxStarts <= 0 {
		c.MaxStarts = 3
	}
	if c.RestartDelay <= 0 {
		c.RestartDelay = time.Second
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 15 * time.Second
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Launch runs the agent as a child process and is the only judge of a new
// version on probation: it starts the current version (or Self), restarts
// it into a newly staged version when it exits with RestartExitCode, and
// switches back to the previous version when the new one exits MaxStarts
// times during its probation or is not healthy by the deadline (the
// reason, with the last line the new version wrote, goes into the state).
// Outside a probation an agent's exit ends Launch with its exit status,
// for the supervisor to restart. When ctx ends (SIGTERM) the agent is
// stopped and Launch returns its status.
func Launch(ctx context.Context, cfg LaunchConfig) (int, error) {
	cfg.setDefaults()
	l := &launcher{cfg: cfg, log: cfg.Logger.With("component", "launcher")}
	for {
		code, again, err := l.once(ctx)
		if err != nil || !again {
			return code, err
		}
	}
}

type launcher struct {
	cfg LaunchConfig
	log *slog.Logger
}

// target is the binary to run and its version.
func (l *launcher) target() (string, string, error) {
	cur, err := l.cfg.Dir.Current()
	if err != nil {
		return "", "", err
	}
	if cur == "" || (release.ValidVersion(l.cfg.SelfVersion) && release.Compare(cur, l.cfg.SelfVersion) <= 0) {
		// No update installed, or the installed binary is as new (a
		// package upgrade): run it.
		return l.cfg.Self, l.cfg.SelfVersion, nil
	}
	return l.cfg.Dir.binary(cur), cur, nil
}

// once starts the agent once and waits for it; again says whether to
// start it again at once.
func (l *launcher) once(ctx context.Context) (code int, again bool, err error) {
	d := l.cfg.Dir
	bin, version, err := l.target()
	if err != nil {
		return 1, false, err
	}
	st, err := d.State()
	if err != nil {
		return 1, false, err
	}
	if st.Phase == Restarting && st.Version == version {
		st.Phase, st.Deadline, st.Starts = Probation, time.Now().Add(l.cfg.Probation).UTC(), 0
	}
	probation := st.Phase == Probation && st.Version == version
	if probation {
		if st.Starts >= l.cfg.MaxStarts {
			return l.rollback(st, fmt.Sprintf("%s exited %d times during its probation", version, st.Starts))
		}
		if time.Now().After(st.Deadline) {
			return l.rollback(st, fmt.Sprintf("%s was not healthy within %s", version, l.cfg.Probation))
		}
		st.Starts++
		if err := d.SetState(st); err != nil {
			return 1, false, err
		}
	}
	if _, err := os.Stat(bin); err != nil {
		if probation || bin != l.cfg.Self {
			return l.rollback(st, fmt.Sprintf("the binary of %s is missing: %v", version, err))
		}
		return 1, false, fmt.Errorf("selfupdate: launch: %w", err)
	}
	if bin != l.cfg.Self {
		if err := d.Verify(l.cfg.Verifier, version); err != nil {
			return l.refuse(st, version, err)
		}
	}

	last := &lastLine{w: l.cfg.Stderr}
	cmd := exec.Command(bin, l.cfg.Args...)
	cmd.Env = append(os.Environ(), EnvLaunched+"=1")
	cmd.Stdout, cmd.Stderr = l.cfg.Stdout, last
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		if probation {
			return l.rollback(st, fmt.Sprintf("%s did not start: %v", version, err))
		}
		return 1, false, fmt.Errorf("selfupdate: launch %s: %w", bin, err)
	}
	l.log.Info("launcher: agent started", "version", version, "pid", cmd.Process.Pid, "probation", probation, "start", st.Starts)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case werr := <-exited:
			return l.exited(ctx, version, werr, last.String())
		case <-ctx.Done():
			return l.stop(cmd, exited), false, nil
		case <-tick.C:
			if !probation {
				continue
			}
			cur, err := d.State()
			if err != nil {
				continue
			}
			if cur.Phase != Probation {
				probation = false // healthy: done
				continue
			}
			if time.Now().After(cur.Deadline) {
				l.stop(cmd, exited)
				return l.rollback(cur, fmt.Sprintf("%s was not healthy within %s%s", version, l.cfg.Probation, lastSaid(last.String())))
			}
		}
	}
}

// exited handles the end of the agent.
func (l *launcher) exited(ctx context.Context, version string, werr error, lastOut string) (int, bool, error) {
	code := exitCode(werr)
	if code == RestartExitCode {
		l.log.Info("launcher: agent asked for a restart", "version", version)
		return code, true, nil
	}
	st, err := l.cfg.Dir.State()
	if err != nil {
		return code, false, err
	}
	if st.Phase != Probation || st.Version != version {
		l.log.Warn("launcher: agent exited", "version", version, "status", werr)
		return code, false, nil
	}
	reason := fmt.Sprintf("%s exited (%v) %d times during its probation%s", version, werr, st.Starts, lastSaid(lastOut))
	if st.Starts >= l.cfg.MaxStarts {
		return l.rollback(st, reason)
	}
	l.log.Warn("launcher: agent on probation exited; starting it again", "version", version, "status", werr, "start", st.Starts)
	select {
	case <-ctx.Done():
		return code, false, nil
	case <-time.After(l.cfg.RestartDelay):
	}
	return code, true, nil
}

// rollback switches back to the previous version and asks to start again.
func (l *launcher) rollback(st State, reason string) (int, bool, error) {
	l.log.Warn("launcher: rolling back", "version", st.Version, "to", st.From, "reason", reason)
	if _, err := l.cfg.Dir.rollback(st, reason); err != nil {
		return 1, false, err
	}
	return 0, true, nil
}

// refuse falls back from an installed version that failed its check
// before start, without running it: current goes back to previous (and
// previous to none, so that a second refusal falls back to the installed
// binary), and the state says why.
func (l *launcher) refuse(st State, version string, cause error) (int, bool, error) {
	d := l.cfg.Dir
	prev, err := d.Previous()
	if err != nil {
		return 1, false, err
	}
	if prev == version {
		prev = ""
	}
	l.log.Error("launcher: refusing to start an installed version; falling back", "version", version, "to", cmp.Or(prev, l.cfg.SelfVersion), "reason", cause)
	if err := d.setLink("current", prev); err != nil {
		return 1, false, err
	}
	if err := d.setLink("previous", ""); err != nil {
		return 1, false, err
	}
	st = State{Phase: RolledBack, Version: version, From: cmp.Or(prev, l.cfg.SelfVersion), Operation: st.Operation,
		Reason: fmt.Sprintf("%s was not started: %v", version, cause)}
	if err := d.SetState(st); err != nil {
		return 1, false, err
	}
	return 0, true, nil
}

// stop sends SIGTERM, then SIGKILL after StopTimeout, and returns the exit
// status.
func (l *launcher) stop(cmd *exec.Cmd, exited <-chan error) int {
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		return exitCode(err)
	case <-time.After(l.cfg.StopTimeout):
		cmd.Process.Kill()
		return exitCode(<-exited)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode()
	default:
		return 1
	}
}

func lastSaid(s string) string {
	if s == "" {
		return ""
	}
	return "; it last wrote: " + s
}

// lastLine passes output through and remembers its last non-empty line.
type lastLine struct {
	w    io.Writer
	mu   sync.Mutex
	line []byte // protected by mu
	cur  []byte // protected by mu
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	for _, c := range p {
		if c == '\n' {
			if len(l.cur) > 0 {
				l.line = append(l.line[:0], l.cur...)
			}
			l.cur = l.cur[:0]
			continue
		}
		if len(l.cur) < 300 {
			l.cur = append(l.cur, c)
		}
	}
	l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lastLine) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.cur) > 0 {
		return string(l.cur)
	}
	return string(l.line)
}
