package meshtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// OrchestratorProcess is the harness's orchestrator run as a process of
// cmd/orchestrator (`orchestrator serve`) on the address, data directory
// (mesh state, catalog) and API configuration of the in-process one it
// replaced, so that a test can SIGKILL it as a machine losing power would.
// The agents keep running and reconnect to it. h.Orchestrator is shut
// down then: use GraphQL (and the simulators), not h.Orchestrator's
// registry, while the process runs.
type OrchestratorProcess struct {
	bin  string
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd     // protected by mu
	exited chan struct{} // closed when cmd exited; protected by mu

	logMu sync.Mutex
	log   bytes.Buffer // protected by logMu
}

// ReplaceOrchestratorWithProcess shuts the in-process orchestrator down
// and starts bin (cmd/orchestrator, BuildProgram) in its place; the
// harness must have WithAPI. t.Cleanup stops the process (SIGTERM, then
// SIGKILL) and logs its output if the test failed.
func (h *Harness) ReplaceOrchestratorWithProcess(t testing.TB, bin string) *OrchestratorProcess {
	t.Helper()
	a := h.needAPI(t)
	spec := h.opts.api
	args := []string{"serve",
		"-listen", h.listen, "-public-url", h.Orchestrator.URL(), "-data-dir", h.dataDir,
		"-stun-addr", net.JoinHostPort(h.opts.host, "0"), "-log-level", "info",
		"-oidc-issuer", a.idp.Issuer(), "-oidc-audience", APIClientID, "-oidc-cli-client-id", CLIClientID, "-catalog-dir", h.catalogDir(),
		"-tenant-name", "Test Cloud", "-tenant-domain", "cloud.test", "-agent-version", spec.AgentVersion,
		"-zone-timeout", spec.ZoneTimeout.String(),
	}
	if spec.VMRecoverAfter > 0 {
		args = append(args, "-vm-recover-after", spec.VMRecoverAfter.String())
	}
	if spec.VMRecoverInterval > 0 {
		args = append(args, "-vm-recover-interval", spec.VMRecoverInterval.String())
	}
	if spec.BackupQuotaInterval > 0 {
		args = append(args, "-backup-quota-interval", spec.BackupQuotaInterval.String())
	}
	if spec.ImageCopyRecoverInterval > 0 {
		args = append(args, "-image-copy-recover-interval", spec.ImageCopyRecoverInterval.String())
	}
	if spec.SecurityGroupInterval > 0 {
		args = append(args, "-security-group-interval", spec.SecurityGroupInterval.String())
	}
	if spec.MaxComplexity > 0 {
		args = append(args, "-max-complexity", fmt.Sprint(spec.MaxComplexity))
	}
	rl := spec.RateLimits
	for _, l := range []struct {
		rateFlag, burstFlag string
		rate                float64
		burst               int
	}{{"-mutation-rate", "-mutation-burst", rl.MutationRate, rl.MutationBurst}, {"-console-rate", "-console-burst", rl.ConsoleRate, rl.ConsoleBurst}} {
		if l.rate < 0 || l.burst < 0 {
			args = append(args, l.rateFlag, "0") // the limit off
			continue
		}
		if l.rate > 0 {
			args = append(args, l.rateFlag, fmt.Sprint(l.rate))
		}
		if l.burst > 0 {
			args = append(args, l.burstFlag, fmt.Sprint(l.burst))
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := h.Orchestrator.Shutdown(sctx); err != nil {
		t.Logf("meshtest: shutdown orchestrator: %v", err)
	}
	p := &OrchestratorProcess{bin: bin, args: args}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			log := p.Log()
			t.Logf("orchestrator process log (head):\n%s\n(tail):\n%s", log[:min(len(log), 4000)], lastBytes(log, 8000))
		}
	})
	return p
}

// Start starts the process (again, after Kill) on its thread of its own:
// it dies with the test (parent-death signal, which follows the thread
// that started it).
func (p *OrchestratorProcess) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.exited:
		default:
			return fmt.Errorf("meshtest: orchestrator process %d still runs", p.cmd.Process.Pid)
		}
	}
	cmd := exec.Command(p.bin, p.args...)
	w := &bufWriter{mu: &p.logMu, buf: &p.log}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	exited := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			errc <- err
			return
		}
		errc <- nil
		_ = cmd.Wait()
		close(exited)
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("meshtest: start orchestrator: %w", err)
	}
	p.cmd, p.exited = cmd, exited
	return nil
}

// Kill sends SIGKILL to the process and waits until it is gone.
func (p *OrchestratorProcess) Kill() error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("meshtest: kill orchestrator: not started")
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("meshtest: kill orchestrator: %w", err)
	}
	<-exited
	return nil
}

// Pid is the running process's pid (0 before Start).
func (p *OrchestratorProcess) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Log is everything the process (all its starts) wrote.
func (p *OrchestratorProcess) Log() string {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	return p.log.String()
}

// stop sends SIGTERM and, 15s later, SIGKILL.
func (p *OrchestratorProcess) stop() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// bufWriter appends to buf under mu.
type bufWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w *bufWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
