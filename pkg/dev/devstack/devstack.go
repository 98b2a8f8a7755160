// Package devstack runs the whole of flexplane on one machine for
// development, demos and end-to-end tests (`make dev`).
//
// Run builds the binaries it needs into Dir/bin (go build, which reuses
// what is up to date) and starts, each as its own process: the orchestrator
// (embedded Headscale, GraphQL at /graphql and the portal at / on
// Config.Addr), two simulated Proxmox clusters (pvesim: fra1 with 3 nodes,
// hel1 with 2, realistic task timing) and one agent per simulated node,
// enrolled with a key made by `orchestrator keys create`. In its own process
// it runs the development OpenID provider (pkg/dev/devidp) and a loopback HTTP
// server of generated stand-in OS images. It then creates the demo data
// through the GraphQL API, writes a bearer token per demo user to
// Dir/tokens/<user>.token, and prints exactly one line
//
//	flexplane dev ready: http://ADDR
//
// Every child runs in its own process group with its output prefixed and
// multiplexed to Config.Stdout and copied to Dir/logs/<name>.log. The
// children are supervised as systemd supervises services: one that exits is
// started again (same arguments, same state: an agent keeps its mesh
// identity, the orchestrator its data directory, a simulator its addresses)
// after a delay that doubles with each start (Config.RestartDelay,
// RestartDelayMax); only a child started Config.StartLimitBurst times within
// Config.StartLimitInterval that exits again stops the stack (Run returns
// the error naming it). When ctx ends Run stops every child (SIGTERM to its
// group, SIGKILL after a grace period; nothing is restarted while stopping)
// and waits for them; on Linux the kernel kills the children if the devstack
// itself dies (parent-death signal), so nothing is left behind.
//
// While it runs the stack serves a control socket, Dir/control.sock
// (owner-only), through which the devstack command causes failures: stop,
// start or kill an agent, take a simulated node offline and back, partition
// a zone from the orchestrator and heal it (see Command).
//
// State lives in Dir and survives restarts: the orchestrator's data
// directory (mesh state, catalog), the agents' mesh identities, the
// provider's signing key, the addresses of the provider and the image
// server (Dir/stack.json) and the simulated clusters' certificates and
// state (Dir/pve/<cluster>-certs, Dir/pve/<cluster>-state.json: guests,
// disks and staged images, SDN networks, IPAM, pools, task history) and
// their nodes' file systems (Dir/pve/<cluster>-files/<node>: the snippets
// of the VMs' cloud-init user-data, which storage "local" keeps, and what
// the VMs' first boots wrote with the data plane). A
// second start therefore finds the VMs of the first still there (a running
// VM still running) and the seeder, which reads before it creates, leaves
// the demo data as it is.
package devstack

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/support/atomicfile"
)

// ReadyPrefix starts the line Run prints once the stack is ready; the
// stack's URL follows it.
const ReadyPrefix = "flexplane dev ready: "

// ClientID is the OAuth client id of the portal (and the audience of the
// API's tokens).
const ClientID = "flexplane-portal"

// CLIClientID is the OAuth client id of flexctl (device authorization),
// which the orchestrator accepts and names in the portal's /config.json.
const CLIClientID = "flexctl"

// SessionTokenLifetime is how long the access tokens of the portal's
// sessions (logins with offline_access, so with a refresh token) are
// valid: short, so that `make dev` shows the portal renewing its session.
const SessionTokenLifetime = 5 * time.Minute

// TokenLifetime is how long the tokens written to Dir/tokens (and those of
// portal logins) are valid: a working day.
const TokenLifetime = 12 * time.Hour

// DemoUser is a demo account of the development provider.
type DemoUser struct {
	Username, Password, Name, Email string
	// Roles are role keys (see package auth).
	Roles []string
	// About says what the user may do.
	About string
}

// DemoUsers are the accounts of the development provider.
func DemoUsers() []DemoUser {
	return []DemoUser{
		{Username: "admin", Password: "admin-pw", Name: "Ada Admin", Email: "admin@dev.flexplane.local",
			Roles: []string{auth.PlatformAdminRole}, About: "platform admin: zones, hosts, VDCs, profiles, images"},
		{Username: "alice", Password: "alice-pw", Name: "Alice Member", Email: "alice@dev.flexplane.local",
			Roles: []string{auth.VDCRoleKey("prod", auth.RoleMember), auth.VDCRoleKey("dev", auth.RoleMember)}, About: "member of VDCs prod and dev"},
		{Username: "bob", Password: "bob-pw", Name: "Bob Member", Email: "bob@dev.flexplane.local",
			Roles: []string{auth.VDCRoleKey("staging", auth.RoleMember)}, About: "member of VDC staging"},
	}
}

// Cluster is a simulated Proxmox cluster of the stack.
type Cluster struct {
	Name  string
	Nodes int
	// Upstream is the router address (with its prefix) of the zone's external
	// network in the data plane's internet namespace.
	Upstream string
}

// Clusters are the stack's simulated clusters (zones).
func Clusters() []Cluster {
	return []Cluster{{Name: "fra1", Nodes: 3, Upstream: "203.0.113.254/24"}, {Name: "hel1", Nodes: 2, Upstream: "198.51.100.254/24"}}
}

// DataPlanePrefix starts the names of the network namespaces of zone's data plane
// for the stack in dir: "fp", 6 hex digits of dir's absolute path, "-", the zone.
func DataPlanePrefix(dir, zone string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	sum := sha256.Sum256([]byte(abs))
	return "fp" + hex.EncodeToString(sum[:3]) + "-" + zone
}

// Config configures a dev stack.
type Config struct {
	// Addr is the one public address: portal, API and mesh control.
	// Default "127.0.0.1:8080" (env DEV_ADDR in cmd/devstack).
	Addr string
	// Dir holds all state, binaries, logs and tokens. Default ".dev" (env
	// DEV_DIR).
	Dir string
	// RepoDir is the root of the flexplane module the binaries are built
	// from. Default: the module of the working directory (go env GOMOD).
	RepoDir string
	// PortalDir is the built portal; default RepoDir/portal/.output/public
	// (`make portal`).
	PortalDir string
	// Go is the go command; default "go".
	Go string
	// LogLevel is the children's log level; default "info".
	LogLevel string
	// Stdout receives the multiplexed logs and the ready line; default
	// os.Stdout.
	Stdout io.Writer
	// StopGrace is how long a child may take to stop after SIGTERM before
	// it is killed; default 15s.
	StopGrace time.Duration
	// RestartDelay is how long a child that exited unasked waits before it
	// is started again when it has not been started within
	// StartLimitInterval; each start within the interval doubles it, up to
	// RestartDelayMax. Defaults 1s and 30s.
	RestartDelay, RestartDelayMax time.Duration
	// StartLimitBurst and StartLimitInterval are the start limit (systemd's
	// StartLimitBurst and StartLimitIntervalSec): a child that exits after
	// being started StartLimitBurst times within StartLimitInterval is not
	// started again and the stack stops, naming it. Defaults 5 and 60s.
	StartLimitBurst    int
	StartLimitInterval time.Duration
	// VMRecoverAfter is the orchestrator's -vm-recover-after: how old a
	// create left unfinished (by a killed orchestrator) must be before the
	// next one finishes it. Zero keeps the orchestrator's default (2m).
	VMRecoverAfter time.Duration
	// PVETiming is the simulated clusters' task duration model: "realistic"
	// (the default) or "fast" (tests that run many creates).
	PVETiming string
	// Kube runs the orchestrator as Kubernetes runs it: Replicas replicas
	// behind one front on Addr, on a real kube-apiserver (the Lease, the
	// catalog in CRDs) with a node running pods (NodeName) and the mesh
	// state in PostgreSQL, all fresh on every start (see startKube). Needs
	// root (PostgreSQL runs as "nobody"; the node's containerd and kubelet),
	// `make kube-bin`, `make kube-node` and `make postgres` (env DEV_KUBE=1).
	Kube bool
}

// stackState is Dir/stack.json: addresses that should stay the same across
// restarts (the issuer URL is in every token; image URLs are in the
// catalog), and the URLs scripts need (the portal's browser tests take the
// issuer from here).
type stackState struct {
	IDPAddr   string `json:"idpAddr"`
	ImageAddr string `json:"imageAddr"`
	// URL is the stack's public URL, Issuer the OpenID issuer's.
	URL    string `json:"url"`
	Issuer string `json:"issuer"`
	// Metrics is the orchestrator's metrics address (its -metrics-addr):
	// http://<Metrics>/metrics, and each agent's at
	// /metrics/agents/<mesh name>.
	Metrics string `json:"metrics"`
	// Control is the control socket's path (see Command).
	Control string `json:"control"`
}

// stack is a dev stack being run.
type stack struct {
	cfg       Config
	dataPlane bool // run as root: the simulators build their data plane
	policy    policy
	log       *slog.Logger
	mux       *logMux
	url       string

	kube *KubeState // with Config.Kube, once startKube ran

	mu       sync.Mutex
	units    []*unit // protected by mu
	stopping bool    // protected by mu
	// stopped is closed when stopping begins.
	stopped     chan struct{}
	supervisors sync.WaitGroup
	// died receives why the stack gave up on a child.
	died chan error
	once sync.Once
}

// Run runs the stack until ctx ends or a child dies, then stops it.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:8080"
	}
	if cfg.Dir == "" {
		cfg.Dir = ".dev"
	}
	if cfg.Go == "" {
		cfg.Go = "go"
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "info"
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 15 * time.Second
	}
	cfg.RestartDelay = cmp.Or(cfg.RestartDelay, DefaultRestartDelay)
	cfg.RestartDelayMax = cmp.Or(cfg.RestartDelayMax, DefaultRestartDelayMax)
	cfg.StartLimitBurst = cmp.Or(cfg.StartLimitBurst, DefaultStartLimitBurst)
	cfg.StartLimitInterval = cmp.Or(cfg.StartLimitInterval, DefaultStartLimitInterval)
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return fmt.Errorf("devstack: address %q: %w", cfg.Addr, err)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	cfg.Dir = dir
	if cfg.RepoDir == "" {
		out, err := exec.CommandContext(ctx, cfg.Go, "env", "GOMOD").Output()
		mod := strings.TrimSpace(string(out))
		if err != nil || mod == "" || mod == os.DevNull {
			return fmt.Errorf("devstack: run it inside the flexplane module (go env GOMOD: %q, %v)", mod, err)
		}
		cfg.RepoDir = filepath.Dir(mod)
	}
	cfg.PortalDir = cmp.Or(cfg.PortalDir, filepath.Join(cfg.RepoDir, "portal", ".output", "public"))
	for _, d := range []string{"bin", "logs", "tokens", "pve", "agents", "idp", "images"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return fmt.Errorf("devstack: %w", err)
		}
	}
	s := newStack(cfg, &logMux{out: cfg.Stdout, dir: filepath.Join(dir, "logs"), w: len("agent hel1-pve2")})
	lw, err := s.mux.source("devstack")
	if err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	defer lw.Close()
	s.log = slog.New(slog.NewTextHandler(lw, nil))
	ctx, cancel := context.WithCancel(ctx)
	err = s.run(ctx)
	cancel()
	s.stopAll()
	if err != nil {
		s.log.Error("stopped", "err", err)
		return fmt.Errorf("devstack: %w", err)
	}
	s.log.Info("stopped")
	return nil
}

// newStack makes the stack of a complete cfg.
func newStack(cfg Config, mux *logMux) *stack {
	return &stack{
		cfg:       cfg,
		dataPlane: os.Geteuid() == 0,
		policy: policy{delay: cfg.RestartDelay, delayMax: cfg.RestartDelayMax,
			burst: cfg.StartLimitBurst, interval: cfg.StartLimitInterval},
		mux:     mux,
		url:     "http://" + cfg.Addr,
		stopped: make(chan struct{}),
		died:    make(chan error, 1),
	}
}

func (s *stack) path(elem ...string) string {
	return filepath.Join(append([]string{s.cfg.Dir}, elem...)...)
}

// The environment runIsolated gives the stack it starts in a namespace:
// how long the build took, and the addresses whose host listeners are its
// file descriptors 3, 4, ...
const (
	envBuilt   = "DEVSTACK_BUILT"
	envForward = "DEVSTACK_FORWARD"
)

// runIsolated runs the stack in a network namespace of its own whose only
// interface is lo (pkg/dev/netns): tsnet binds the mesh nodes' sockets on
// all interfaces, and there all of them are loopback. It builds the binaries
// here (the namespace has no way to the module proxy), listens on the host's
// loopback on the addresses a browser uses (DEV_ADDR, the OpenID provider's)
// and the orchestrator's metrics address, and starts this program again in
// the namespace with those listeners, which it forwards to the same addresses
// there. It returns when that stack has exited.
func (s *stack) runIsolated(ctx context.Context) error {
	// Say at once when the address is taken (another make dev?) rather
	// than after the build.
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("address %s (DEV_ADDR) is not free: %w", s.cfg.Addr, err)
	}
	defer ln.Close()
	start := time.Now()
	if err := s.build(ctx); err != nil {
		return err
	}
	st := s.readState()
	idpLn, err := listenPreferred(st.IDPAddr)
	if err != nil {
		return err
	}
	defer idpLn.Close()
	metricsLn, err := listenPreferred(st.Metrics)
	if err != nil {
		return err
	}
	defer metricsLn.Close()
	st.IDPAddr, st.Metrics = idpLn.Addr().String(), metricsLn.Addr().String()
	s.writeState(st) // the stack in the namespace takes the same addresses
	var files []*os.File
	var addrs []string
	for _, l := range []net.Listener{ln, idpLn, metricsLn} {
		f, err := l.(*net.TCPListener).File()
		if err != nil {
			return fmt.Errorf("forward %s: %w", l.Addr(), err)
		}
		defer f.Close()
		files = append(files, f)
		addrs = append(addrs, l.Addr().String())
	}
	s.log.Info("starting the stack in a network namespace of its own (only lo)", "forwarded", strings.Join(addrs, ","))
	if code := netns.Reexec([]string{envBuilt + "=" + time.Since(start).String(), envForward + "=" + strings.Join(addrs, ",")}, files...); code != 0 {
		return fmt.Errorf("the stack in its network namespace exited with status %d", code)
	}
	return nil
}

// readState reads Dir/stack.json; missing or bad, it is empty.
func (s *stack) readState() stackState {
	var st stackState
	if b, err := os.ReadFile(s.path("stack.json")); err == nil {
		_ = json.Unmarshal(b, &st)
	}
	return st
}

// writeState writes Dir/stack.json.
func (s *stack) writeState(st stackState) { _ = writeJSON(s.path("stack.json"), st) }

// writeJSON writes v as indented JSON to path, owner-only.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, b, 0o600)
}

// AgentPrefix starts the process name of an agent: "agent fra1-pve1".
const AgentPrefix = "agent "

func isAgent(name string) bool { return strings.HasPrefix(name, AgentPrefix) }

// endpoint is a simulated node's API endpoint.
type endpoint struct{ url, fingerprint string }

// sim is a simulated cluster: its nodes' endpoints, learnt from what its
// first start prints and kept by every restart.
type sim struct {
	cluster   Cluster
	tokenFile string
	// ready is closed once every node's endpoint is known.
	ready chan struct{}
	mu    sync.Mutex
	nodes map[string]endpoint // protected by mu
}

// parse reads a line pvesim prints:
// "node pve2: https://127.0.0.1:PORT/api2/json fingerprint AB:CD:...".
func (sm *sim) parse(line string) {
	var node, u, fp string
	if n, _ := fmt.Sscanf(line, "node %s %s fingerprint %s", &node, &u, &fp); n != 3 {
		return
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if len(sm.nodes) == sm.cluster.Nodes {
		return // a restart, on the same addresses
	}
	sm.nodes[strings.TrimSuffix(node, ":")] = endpoint{url: strings.TrimSuffix(u, "/api2/json"), fingerprint: fp}
	if len(sm.nodes) == sm.cluster.Nodes {
		close(sm.ready)
	}
}

func (sm *sim) endpoint(node string) endpoint {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.nodes[node]
}

// listenArgs are pvesim's address flags: free ports on the first start, the
// same addresses afterwards (the agents know them).
func (sm *sim) listenArgs() []string {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if len(sm.nodes) < sm.cluster.Nodes {
		return []string{"--listen", "127.0.0.1:0"}
	}
	var args []string
	for i := 1; i <= sm.cluster.Nodes; i++ {
		node := fmt.Sprintf("pve%d", i)
		hostport := strings.TrimPrefix(sm.nodes[node].url, "https://")
		if i == 1 {
			args = append(args, "--listen", hostport)
		} else {
			args = append(args, "--node-listen", node+"="+hostport)
		}
	}
	return args
}

// banner logs what a newcomer needs: users, passwords, addresses.
func (s *stack) banner(issuer, images string, build, total time.Duration) {
	s.log.Info("stack up", "build", build.Round(100*time.Millisecond).String(), "total", total.Round(100*time.Millisecond).String())
	lines := []string{
		"portal   " + s.url + "/",
		"graphql  " + s.url + "/graphql (header " + VDCHeader + ": <vdc>)",
		"issuer   " + issuer + "   images " + images,
		"tokens   " + s.path("tokens") + "/<user>.token (valid " + TokenLifetime.String() + ")",
	}
	lines = append(lines, s.tryLines()...)
	if s.kube != nil {
		lines = append(lines, fmt.Sprintf("replicas %s spreads connections over %s (mesh control leader: Lease default/%s)",
			s.url, strings.Join(slices.Sorted(maps.Values(s.kube.Replicas)), ", "), LeaseName),
			"kube     "+s.path("kube", "kube.json")+" (kubeconfig of the kube-apiserver; catalog: kubectl get flexplane)",
			"kube     "+s.kube.Kubeconfig+" (kubeconfig; node "+s.kube.Node+": kubectl get nodes, pods -A; inside the stack's network namespace)")
	}
	for _, u := range DemoUsers() {
		lines = append(lines, fmt.Sprintf("user     %-6s password %-9s %s", u.Username, u.Password, u.About))
	}
	for _, l := range lines {
		s.mux.line("devstack", l)
	}
}

// tryLines are the banner's lines saying what can be tried right after
// the ready line beyond VMs, networks and images: with the data plane, the
// external network the seed made in each zone (seeder.externalNetworks)
// and the router's namespace to reach its public addresses from.
func (s *stack) tryLines() []string {
	if !s.dataPlane {
		return []string{"try      VMs, networks, images (edge gateways and port forwards need the data plane: run as root)"}
	}
	out := []string{"try      edge gateways, port forwards, 1:1 addresses on each zone's external network (public addresses .10 to .99):"}
	for _, c := range Clusters() {
		router, _, _ := strings.Cut(c.Upstream, "/")
		out = append(out, fmt.Sprintf("external %-5s %s via router %s: ip netns exec %s-inet curl <public address>:<port>",
			c.Name, netip.MustParsePrefix(c.Upstream).Masked(), router, DataPlanePrefix(s.cfg.Dir, c.Name)))
	}
	return out
}

// await waits for ch, a dying child, ctx or the timeout.
func (s *stack) await(ctx context.Context, ch <-chan struct{}, timeout time.Duration, what string) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case err := <-s.died:
		return fmt.Errorf("waiting for %s: %w", what, err)
	case <-t.C:
		return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
	}
}

// poll calls f until it succeeds, a child dies, ctx ends or the timeout
// passes (then its last error is returned).
func (s *stack) poll(ctx context.Context, timeout time.Duration, what string, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s: %w", timeout, what, err)
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case err := <-s.died:
			t.Stop()
			return fmt.Errorf("waiting for %s: %w", what, err)
		case <-t.C:
		}
	}
}

// build builds the binaries into Dir/bin; go build relinks only what
// changed.
func (s *stack) build(ctx context.Context) error {
	t := time.Now()
	_, err := s.mux.run(ctx, "go build", s.cfg.RepoDir, s.cfg.Go, "build", "-o", s.path("bin")+string(filepath.Separator),
		"./cmd/orchestrator", "./cmd/pvesim")
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	// The agent twice: the version the agents run and the next one, the
	// release the stack publishes.
	for out, v := range map[string]string{"agent": AgentVersion, "agent-" + NextAgentVersion: NextAgentVersion} {
		if _, err := s.mux.run(ctx, "go build", s.cfg.RepoDir, s.cfg.Go, "build", "-ldflags", "-X main.buildVersion="+v,
			"-o", s.path("bin", out), "./cmd/agent"); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
	s.log.Info("built binaries", "dir", s.path("bin"), "took", time.Since(t).Round(100*time.Millisecond).String())
	return nil
}

// listenPreferred listens on addr if it is given and free, else on a free
// loopback port.
func listenPreferred(addr string) (net.Listener, error) {
	if addr != "" {
		if ln, err := net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}
