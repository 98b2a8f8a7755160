package meshtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/dev/gobin"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/support/nsnet"
)

// WithReleases configures agent releases on the orchestrator (it needs
// WithAPI): publicKey is the minisign public key, hostTimeout bounds one
// host's update in a rollout (0: the default). The store is
// DataDir()/releases.
func WithReleases(publicKey string, hostTimeout time.Duration) Option {
	return func(o *options) { o.releaseKey, o.releaseHostTimeout = publicKey, hostTimeout }
}

// BuildAgent builds cmd/agent reporting version into dir and returns its
// path (go build with -ldflags -X main.buildVersion=version).
func BuildAgent(t testing.TB, dir, version string) string {
	t.Helper()
	return BuildProgram(t, dir, "agent-"+version, "github.com/flexplane/flexplane/cmd/agent", "-X main.buildVersion="+version)
}

// BuildProgram builds the Go package pkg into dir/name with ldflags.
func BuildProgram(t testing.TB, dir, name, pkg, ldflags string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	gobin.Build(t, "", out, "-ldflags", ldflags, pkg)
	return out
}

// ProcessAgent is an agent of a simulated node running as a process of
// its own binary, supervised as systemd's Restart=always would: started
// again RestartDelay after it exits, until Stop.
type ProcessAgent struct {
	Cluster  *Cluster
	Node     string
	MeshName string
	StateDir string
	// Bin is the installed binary (the launcher).
	Bin string

	env   []string
	netns string // named network namespace it runs in; "" this process's
	mu    sync.Mutex
	cmd   *exec.Cmd    // protected by mu
	log   bytes.Buffer // protected by mu
	stop  chan struct{}
	done  chan struct{}
	// Starts counts the supervisor's starts; protected by mu.
	starts int
	// startedAt is when the supervisor last started the agent; protected
	// by mu.
	startedAt time.Time
}

// RestartDelay is the supervisor's pause before starting an exited agent.
const RestartDelay = 200 * time.Millisecond

// StartProcessAgents starts one ProcessAgent of bin per node of c; env
// adds to (or overrides) the agents' environment. t.Cleanup stops them.
func (h *Harness) StartProcessAgents(t testing.TB, c *Cluster, bin string, env ...string) []*ProcessAgent {
	t.Helper()
	return h.StartProcessAgentsIn(t, "", c, bin, env...)
}

// StartProcessAgentsIn is StartProcessAgents with the agents (and their
// restarts) running in the named network namespace ns (package nsnet; ""
// is this process's), which must reach the orchestrator's and the
// clusters' addresses (WithListenHost).
func (h *Harness) StartProcessAgentsIn(t testing.TB, ns string, c *Cluster, bin string, env ...string) []*ProcessAgent {
	t.Helper()
	key := h.NewKey(t, meshcontrol.KeyOptions{Reusable: true, TTL: time.Hour})
	var out []*ProcessAgent
	for _, node := range c.Sim.NodeNames() {
		p := &ProcessAgent{
			Cluster: c, Node: node, MeshName: c.label + "-" + node, StateDir: shortTempDir(t, "fpp"), Bin: bin,
			stop: make(chan struct{}), done: make(chan struct{}), netns: ns,
		}
		p.env = append(os.Environ(),
			agent.EnvControlURL+"="+h.Orchestrator.URL(),
			agent.EnvEnrollKey+"="+key,
			agent.EnvStateDir+"="+p.StateDir,
			agent.EnvNodeName+"="+node,
			agent.EnvMeshName+"="+p.MeshName,
			agent.EnvProxmoxURL+"="+c.Sim.NodeURL(node),
			agent.EnvFingerprint+"="+c.Sim.NodeFingerprint(node),
			agent.EnvNodeKeyFile+"="+c.Sim.NodeFiles(node).Key,
			agent.EnvNodeCertFile+"="+c.Sim.NodeFiles(node).Cert,
			agent.EnvClusterCAFile+"="+c.Sim.NodeFiles(node).CA,
			agent.EnvProxmoxToken+"="+c.Token,
		)
		p.env = append(p.env, env...)
		go p.superviseIn(t)
		t.Cleanup(p.Stop)
		out = append(out, p)
	}
	return out
}

// superviseIn supervises the agent from a thread in its namespace: a
// process started there is in it, and so are its restarts.
func (p *ProcessAgent) superviseIn(t testing.TB) {
	if p.netns == "" {
		p.supervise()
		return
	}
	ran := false
	err := nsnet.Do(p.netns, func() error { ran = true; p.supervise(); return nil })
	if !ran {
		close(p.done)
	}
	if err != nil {
		t.Errorf("meshtest: %s in namespace %s: %v", p.MeshName, p.netns, err)
	}
}

func (p *ProcessAgent) supervise() {
	defer close(p.done)
	for {
		cmd := exec.Command(p.Bin)
		cmd.Env = p.env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		w := &lockedWriter{p: p}
		cmd.Stdout, cmd.Stderr = w, w
		p.mu.Lock()
		err := cmd.Start()
		if err == nil {
			p.cmd = cmd
			p.starts++
			p.startedAt = time.Now()
		}
		p.mu.Unlock()
		if err == nil {
			exited := make(chan struct{})
			go func() { cmd.Wait(); close(exited) }()
			select {
			case <-exited:
			case <-p.stop:
				syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(15 * time.Second):
					syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					<-exited
				}
				return
			}
		}
		select {
		case <-p.stop:
			return
		case <-time.After(RestartDelay):
		}
	}
}

// Stop stops the agent (SIGTERM to its process group, SIGKILL after 15s)
// and its supervisor.
func (p *ProcessAgent) Stop() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// Restart sends SIGTERM to the agent's process group, as `systemctl
// restart` would, and returns at once: the supervisor starts it again
// RestartDelay after it exited.
func (p *ProcessAgent) Restart() error {
	pid := p.Pid()
	if pid == 0 {
		return fmt.Errorf("meshtest: restart %s: not running", p.MeshName)
	}
	if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("meshtest: restart %s: %w", p.MeshName, err)
	}
	return nil
}

// StartedAt is when the supervisor last started the agent.
func (p *ProcessAgent) StartedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startedAt
}

// Pid is the supervised process's (the launcher's) pid.
func (p *ProcessAgent) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Starts is how many times the supervisor started the agent.
func (p *ProcessAgent) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// Log is everything the agent (launcher and children) wrote.
func (p *ProcessAgent) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

type lockedWriter struct{ p *ProcessAgent }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.log.Write(b)
}

// ProcessHost returns the agent's host and its zone as the orchestrator
// sees them.
func (h *Harness) ProcessHost(p *ProcessAgent) (fleet.Host, fleet.Zone, bool) {
	for _, z := range h.Orchestrator.Zones().Zones() {
		for _, host := range z.Hosts {
			if host.MeshName == p.MeshName {
				return host, z, true
			}
		}
	}
	return fleet.Host{}, fleet.Zone{}, false
}

func (p *ProcessAgent) String() string { return fmt.Sprintf("agent %s (pid %d)", p.MeshName, p.Pid()) }
