package devstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// logMux writes whole lines from many sources to one writer, each prefixed
// with its source's name, and a copy to a file per source.
type logMux struct {
	mu  sync.Mutex
	out io.Writer // protected by mu
	dir string
	w   int // width of the name column
}

// line writes one prefixed line to the shared writer.
func (m *logMux) line(name, text string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintf(m.out, "%-*s | %s\n", m.w, name, text)
}

// source returns a writer for name: every line written to it is
// multiplexed and appended to dir/<name>.log. Close flushes a last partial
// line and the file.
func (m *logMux) source(name string) (io.WriteCloser, error) {
	f, err := os.OpenFile(filepath.Join(m.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log %s: %w", name, err)
	}
	pr, pw := io.Pipe()
	s := &sourceWriter{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer f.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Fprintln(f, sc.Text())
			m.line(name, sc.Text())
		}
		// Drain whatever a too-long line left, so writers never block.
		_, _ = io.Copy(io.Discard, pr)
	}()
	return s, nil
}

type sourceWriter struct {
	pw   *io.PipeWriter
	done chan struct{}
}

func (s *sourceWriter) Write(p []byte) (int, error) { return s.pw.Write(p) }

func (s *sourceWriter) Close() error {
	err := s.pw.Close()
	<-s.done
	return err
}

// proc is one supervised child process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  io.WriteCloser
	// exited is closed when the process has exited and its output is
	// drained; err is then its exit status.
	exited chan struct{}
	err    error
}

// procSpec describes a child process to start.
type procSpec struct {
	name string
	path string
	args []string
	env  []string // added to the devstack's environment
	// stdout, if set, also receives the child's stdout lines (before they
	// are logged).
	stdout func(line string)
}

// start starts a child in its own process group (so a terminal's Ctrl-C
// reaches only the devstack, which stops the children in order) that the
// kernel kills if the devstack dies (see sysProcAttr).
func (m *logMux) start(spec procSpec) (*proc, error) {
	lw, err := m.source(spec.name)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(spec.path, spec.args...)
	cmd.Env = append(os.Environ(), spec.env...)
	cmd.Stderr = lw
	cmd.SysProcAttr = sysProcAttr()
	var stdout io.ReadCloser
	if spec.stdout != nil {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			lw.Close()
			return nil, fmt.Errorf("start %s: %w", spec.name, err)
		}
	} else {
		cmd.Stdout = lw
	}
	if err := cmd.Start(); err != nil {
		lw.Close()
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	p := &proc{name: spec.name, cmd: cmd, log: lw, exited: make(chan struct{})}
	var copied sync.WaitGroup
	if stdout != nil {
		copied.Add(1)
		go func() {
			defer copied.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				spec.stdout(sc.Text())
				fmt.Fprintln(lw, sc.Text())
			}
			_, _ = io.Copy(io.Discard, stdout)
		}()
	}
	go func() {
		copied.Wait()
		p.err = cmd.Wait()
		lw.Close()
		close(p.exited)
	}()
	return p, nil
}

// pid is the child's process id (and its process group id).
func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM (and SIGCONT) to the child's process group and waits
// until it exits; after grace it sends SIGKILL. It returns once the child is gone.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	_ = syscall.Kill(-p.pid(), syscall.SIGCONT) // a partitioned (stopped) child handles it
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.exited
	}
}

// exitError describes how a child ended.
func (p *proc) exitError() error {
	if p.err == nil {
		return fmt.Errorf("%s exited", p.name)
	}
	return fmt.Errorf("%s exited: %w", p.name, p.err)
}

// run runs a short command to completion, logging its output under name,
// and returns its stdout.
func (m *logMux) run(ctx context.Context, name, dir, path string, args ...string) (string, error) {
	lw, err := m.source(name)
	if err != nil {
		return "", err
	}
	defer lw.Close()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.Stderr = lw
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ctx.Err() == nil {
			return "", fmt.Errorf("%s %s: %w (see %s)", filepath.Base(path), strings.Join(args, " "), err, filepath.Join(m.dir, name+".log"))
		}
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return out.String(), nil
}
