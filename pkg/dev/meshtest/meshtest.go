// Package meshtest is an in-process test harness for the mesh: it starts an
// orchestrator with its embedded control server, simulated Proxmox clusters
// (pvesim) and one real agent per simulated node, each joined over the real
// mesh (tsnet, userspace, loopback only). Everything is configured by
// options and stopped by t.Cleanup.
//
//	h := meshtest.New(t, meshtest.WithClusters(
//		meshtest.ClusterSpec{Name: "alpha", Nodes: 3},
//		meshtest.ClusterSpec{Name: "beta", Nodes: 2}))
//	h.WaitOnline(t, 30*time.Second)
//	zone := h.Zone(t, h.Clusters[0])
//	client := h.Orchestrator.Zones().Client(zone.ID) // go-proxmox over the mesh
//
// WithAPI adds a development OpenID provider and the GraphQL API on the
// orchestrator; Token mints real signed tokens and GraphQL runs requests:
//
//	h := meshtest.New(t, meshtest.WithAPI(meshtest.APISpec{}))
//	h.WaitOnline(t, 30*time.Second)
//	r := h.GraphQL(t, "alice", "red", `{ vms { nodes { id name } } }`, nil).OK(t)
package meshtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"
	"go.opentelemetry.io/otel/trace"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/agent/privhelper"
	"github.com/flexplane/flexplane/pkg/audit"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/pvesim/simnet"
	"github.com/flexplane/flexplane/pkg/support/nsnet"
)

// ClusterSpec describes one simulated Proxmox cluster.
type ClusterSpec struct {
	// Name is the Proxmox cluster name; "" makes a standalone node.
	Name string
	// Nodes is the number of nodes (pve1..pveN). Default 1.
	Nodes int
	// Timing is the simulator's task duration model (zero: fast).
	Timing pvesim.Timing
	// MigrationBandwidth is the agents' agent.Config.MigrationBandwidth
	// (bytes per second a volume is read for another zone; 0: no bound).
	MigrationBandwidth int64
	// Snippets makes storage "local" take `snippets` content (as an
	// operator enables it for cloud-init user-data). The nodes' file
	// systems are always real directories (pvesim Config.FileRoot) that
	// the agents write snippets and uploads into (agent Config.FileRoot).
	Snippets bool
	// Helpers runs each agent as the shipped units do: its privileged
	// work (edge gateways, snippets, uploads) through a privileged helper
	// of its own (package privhelper, in-process, on a unix socket; agent
	// Config.HelperSocket). The simulator keeps no guest config files, so
	// such an agent's helper opens no volume of a move.
	Helpers bool
	// DataListen and DataAdvertise are the agents' data listeners
	// (agent Config.DataListen, DataAdvertise: e.g. "127.0.0.1:0", each
	// agent on a port of its own); "" serves none, and uploads cross
	// the mesh.
	DataListen, DataAdvertise string
}

type options struct {
	clusters []ClusterSpec
	handler  slog.Handler
	refresh  time.Duration
	policy   string
	agents   bool
	api      *APISpec
	web      http.Handler
	tracer   trace.TracerProvider
	audit    audit.Sink
	plane    *simnet.Config // WithDataPlane only
	host     string         // WithListenHost; default 127.0.0.1

	releaseKey         string
	releaseHostTimeout time.Duration
}

// Option configures a Harness.
type Option func(*options)

// WithClusters sets the simulated clusters. Default: "alpha" with 3 nodes
// and "beta" with 2.
func WithClusters(specs ...ClusterSpec) Option {
	return func(o *options) { o.clusters = specs }
}

// WithDataPlane gives every simulated cluster a data plane (package simnet:
// nodes, VNet bridges, VXLAN and running guests as network namespaces, named
// after a random prefix; Cluster.Plane), removed by t.Cleanup. It needs root:
// New fails the test without it. upstream are further addresses of each
// cluster's internet namespace (simnet.Config.Upstream).
func WithDataPlane(upstream ...netip.Prefix) Option {
	return func(o *options) { o.plane = &simnet.Config{Upstream: upstream} }
}

// WithListenHost makes the orchestrator (its API, control server, DERP
// relay and STUN server) and the simulated clusters listen on ip rather than
// 127.0.0.1: an address of this network namespace that processes in other
// namespaces reach (e.g. over a veth the test made, to cut it).
func WithListenHost(ip string) Option {
	return func(o *options) { o.host = ip }
}

// WithLogHandler sends every log line of the orchestrator (including the
// control server) and of the agents to h. Default: discarded.
func WithLogHandler(h slog.Handler) Option {
	return func(o *options) { o.handler = h }
}

// WithRefreshInterval sets the orchestrator's zone refresh interval.
// Default 300ms.
func WithRefreshInterval(d time.Duration) Option {
	return func(o *options) { o.refresh = d }
}

// WithMeshPolicy replaces the mesh policy (to test defence in depth).
func WithMeshPolicy(policy string) Option {
	return func(o *options) { o.policy = policy }
}

// WithoutAgents starts the clusters but no agents; start them with
// Agent.Start (e.g. to measure enrollment).
func WithoutAgents() Option {
	return func(o *options) { o.agents = false }
}

// WithTracerProvider traces the orchestrator and every agent with tp (e.g.
// an SDK provider recording into a tracetest.InMemoryExporter).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracer = tp }
}

// WithAuditSink sends the orchestrator's audit events to sink.
func WithAuditSink(sink audit.Sink) Option {
	return func(o *options) { o.audit = sink }
}

// WithHandler serves h on the orchestrator's own origin, on every path the
// mesh control server and the API do not own (orchestrator.Config.Handler),
// e.g. the portal. With WithAPI, the provider's client (APIClientID) also
// accepts <orchestrator URL>/auth/callback as redirect and <orchestrator
// URL>/ after logout, so a browser can sign in there.
func WithHandler(h http.Handler) Option {
	return func(o *options) { o.web = h }
}

// Harness is a running mesh.
type Harness struct {
	// Orchestrator is the running orchestrator; RestartOrchestrator
	// replaces it.
	Orchestrator *orchestrator.Server
	// Clusters are the simulated clusters, in the order of WithClusters.
	Clusters []*Cluster

	opts    options
	logger  *slog.Logger
	dataDir string
	listen  string
	agents  []*Agent
	api     *apiState // WithAPI only
	extra   int       // agents added by NewAgent
}

// Cluster is a simulated Proxmox cluster and its agents.
type Cluster struct {
	Spec ClusterSpec
	Sim  *pvesim.Cluster
	// Token is the cluster's Proxmox API token (USER@REALM!ID=SECRET); only
	// the agents hold it.
	Token string
	// Secret is the secret part of Token.
	Secret string
	// Agents are the cluster's agents, one per node, in node order.
	Agents []*Agent
	// Plane is the cluster's data plane (WithDataPlane only).
	Plane *simnet.Plane
	label string
	// edgePrefix starts the names of the agents' gateway namespaces
	// without a data plane: the harness's own, removed with it.
	edgePrefix string
}

// Agent is one agent of a simulated node.
type Agent struct {
	Cluster *Cluster
	// Node is the Proxmox node name; MeshName the agent's mesh name
	// (unique in the harness).
	Node     string
	MeshName string
	// StateDir is the agent's state directory.
	StateDir string
	// ProxmoxURL and ProxmoxFingerprint, when set before Start, replace
	// the cluster's API as the agent's local Proxmox, and Files the node's
	// certificate files: for an impostor (see StartImpostor).
	ProxmoxURL, ProxmoxFingerprint string
	Files                          *pvesim.NodeFiles

	h      *Harness
	key    string
	helper string // its helper's socket (ClusterSpec.Helpers), else ""
	mu     sync.Mutex
	agent  *agent.Agent // protected by mu
	joined bool         // protected by mu
}

// New starts a harness; t.Cleanup stops it.
func New(t testing.TB, opts ...Option) *Harness {
	t.Helper()
	o := options{
		clusters: []ClusterSpec{{Name: "alpha", Nodes: 3}, {Name: "beta", Nodes: 2}},
		handler:  slog.DiscardHandler,
		refresh:  300 * time.Millisecond,
		agents:   true,
		host:     "127.0.0.1",
	}
	for _, opt := range opts {
		opt(&o)
	}
	h := &Harness{opts: o, logger: slog.New(o.handler), dataDir: shortTempDir(t, "fpo")}
	meshnode.PrepareProcess("http://") // the harness serves plain HTTP on loopback
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	listen := net.JoinHostPort(o.host, "0")
	if o.web != nil && o.api != nil {
		// The provider must know the orchestrator's origin before either
		// starts: take a free port for it now.
		listen = freeAddr(t)
	}
	if o.api != nil {
		h.startIDP(t, "http://"+listen)
	}
	h.startOrchestrator(t, ctx, listen)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Orchestrator.Shutdown(sctx)
	})
	h.listen = h.Orchestrator.Addr().String()

	for i, spec := range o.clusters {
		c := &Cluster{Spec: spec, label: spec.Name}
		if c.label == "" {
			c.label = fmt.Sprintf("solo%d", i+1)
		}
		c.Secret = randomHex(16)
		c.Token = "flexplane@pve!agent=" + c.Secret
		simCfg := pvesim.Config{Listen: net.JoinHostPort(o.host, "0"), Cluster: spec.Name, Nodes: spec.Nodes, Tokens: []string{c.Token}, Timing: spec.Timing,
			DiskDir: t.TempDir(), FileRoot: t.TempDir()}
		if o.plane != nil {
			if os.Geteuid() != 0 {
				t.Fatal("meshtest: WithDataPlane builds network namespaces: run the test as root")
			}
			pc := *o.plane
			pc.Prefix, pc.Logger = "fpm"+randomHex(4), h.logger
			p, err := simnet.New(pc)
			if err != nil {
				t.Fatalf("meshtest: data plane of %s: %v", c.label, err)
			}
			t.Cleanup(func() {
				if err := p.Close(); err != nil {
					t.Errorf("meshtest: %v", err)
				}
			})
			c.Plane, simCfg.DataPlane = p, p
		}
		if o.plane == nil {
			// Without a data plane the agents have no bridges for a gateway
			// (one the orchestrator sends fails part way, by design kept
			// for the next apply); its namespace carries the harness's
			// prefix and goes when the agents have stopped.
			c.edgePrefix = "fpx" + randomHex(4) + "-"
			t.Cleanup(func() {
				names, err := nsnet.List(c.edgePrefix)
				if err != nil {
					t.Errorf("meshtest: %v", err)
				}
				for _, n := range names {
					if err := nsnet.Delete(n); err != nil {
						t.Errorf("meshtest: %v", err)
					}
				}
			})
		}
		sim, err := pvesim.Start(simCfg)
		if err != nil {
			t.Fatalf("meshtest: start cluster %s: %v", c.label, err)
		}
		t.Cleanup(func() { sim.Close() })
		c.Sim = sim
		if spec.Snippets {
			pvetest.EnableSnippets(t, c.Proxmox(t))
		}
		key := h.NewKey(t, meshcontrol.KeyOptions{Reusable: true, TTL: time.Hour})
		for _, node := range sim.NodeNames() {
			a := &Agent{
				Cluster:  c,
				Node:     node,
				MeshName: c.label + "-" + node,
				StateDir: shortTempDir(t, "fpa"),
				h:        h,
				key:      key,
			}
			c.Agents = append(c.Agents, a)
			h.agents = append(h.agents, a)
			t.Cleanup(func() { a.Stop() })
			if spec.Helpers {
				a.startHelper(t)
			}
		}
		h.Clusters = append(h.Clusters, c)
	}
	if o.agents {
		h.StartAgents(t, h.agents...)
	}
	return h
}

func (h *Harness) startOrchestrator(t testing.TB, ctx context.Context, listen string) {
	t.Helper()
	var kube orchestrator.KubeConfig
	if h.opts.api != nil {
		kube = h.opts.api.Kube
	}
	srv, err := orchestrator.New(orchestrator.Config{
		Listen:          listen,
		DataDir:         h.dataDir,
		STUNAddr:        net.JoinHostPort(h.opts.host, "0"),
		RefreshInterval: h.opts.refresh,
		MeshPolicy:      h.opts.policy,
		MetricsListen:   "127.0.0.1:0",
		TracerProvider:  h.opts.tracer,
		Audit:           orchestrator.AuditConfig{Sink: h.opts.audit},
		API:             h.apiConfig(),
		Kube:            kube,
		Handler:         h.opts.web,
		Logger:          h.logger.With("component", "orchestrator"),
	})
	if err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	h.Orchestrator = srv
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	return addr
}

// RestartOrchestrator shuts the orchestrator down and starts a new one on the
// same address and data directory; agents keep running and reconnect.
func (h *Harness) RestartOrchestrator(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := h.Orchestrator.Shutdown(ctx); err != nil {
		t.Logf("meshtest: shutdown orchestrator: %v", err)
	}
	h.startOrchestrator(t, ctx, h.listen)
}

// StartAgents starts agents concurrently (joining takes seconds each).
func (h *Harness) StartAgents(t testing.TB, agents ...*Agent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, len(agents))
	for _, a := range agents {
		go func() { errs <- a.Start(ctx) }()
	}
	for range agents {
		if err := <-errs; err != nil {
			t.Fatalf("meshtest: %v", err)
		}
	}
}

// NewAgent adds a new, not yet enrolled agent for node of cluster c with a
// unique mesh name and the enrollment key key ("" creates a fresh
// single-use one); Start starts it (e.g. to measure enrollment).
func (h *Harness) NewAgent(t testing.TB, c *Cluster, node, key string) *Agent {
	t.Helper()
	if key == "" {
		key = h.NewKey(t, meshcontrol.KeyOptions{TTL: time.Hour})
	}
	h.extra++
	a := &Agent{
		Cluster:  c,
		Node:     node,
		MeshName: fmt.Sprintf("%s-%s-%d", c.label, node, h.extra),
		StateDir: shortTempDir(t, "fpa"),
		h:        h,
		key:      key,
	}
	h.agents = append(h.agents, a)
	t.Cleanup(func() { a.Stop() })
	return a
}

// Agents returns every agent of the harness.
func (h *Harness) Agents() []*Agent { return slices.Clone(h.agents) }

// DataDir is the orchestrator's data directory.
func (h *Harness) DataDir() string { return h.dataDir }

// NewKey creates an enrollment key.
func (h *Harness) NewKey(t testing.TB, opts meshcontrol.KeyOptions) string {
	t.Helper()
	k, err := h.Orchestrator.Control().CreateKey(context.Background(), opts)
	if err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	return k.Secret
}

// JoinNode joins a plain mesh node (no agent) with a fresh single-use key
// carrying tags; t.Cleanup removes it.
func (h *Harness) JoinNode(t testing.TB, name string, tags ...string) *meshnode.Node {
	t.Helper()
	key := h.NewKey(t, meshcontrol.KeyOptions{TTL: time.Hour, Tags: tags})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := meshnode.Start(ctx, meshnode.Config{
		Hostname: name, Dir: shortTempDir(t, "fpn"), ControlURL: h.Orchestrator.URL(), AuthKey: key,
		Logger: h.logger.With("component", "node"),
	})
	if err != nil {
		t.Fatalf("meshtest: join %s: %v", name, err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

// Start starts (or restarts, with its state and without a key) the agent.
func (a *Agent) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.agent != nil {
		return nil
	}
	key := ""
	if !a.joined {
		key = a.key
	}
	edgeNS, edgePrefix := a.edge()
	if a.helper != "" {
		// The helper runs the gateways: the agent's own configuration
		// names a bridge namespace that does not exist, so a gateway that
		// works cannot be the agent's.
		edgeNS = "meshtest-not-the-agents"
	}
	pveURL, pveFP, files := a.Cluster.Sim.URL(), a.Cluster.Sim.Fingerprint(), a.Cluster.Sim.NodeFiles(a.Node)
	if a.ProxmoxURL != "" {
		pveURL, pveFP = a.ProxmoxURL, a.ProxmoxFingerprint
	}
	if a.Files != nil {
		files = *a.Files
	}
	ag, err := agent.Start(ctx, agent.Config{
		HelperSocket:        a.helper,
		EdgeBridgeNamespace: edgeNS,
		EdgeNamespacePrefix: edgePrefix,
		ControlURL:          a.h.Orchestrator.URL(),
		AuthKey:             key,
		StateDir:            a.StateDir,
		NodeName:            a.Node,
		MeshName:            a.MeshName,
		ProxmoxURL:          pveURL,
		ProxmoxToken:        a.Cluster.Token,
		ProxmoxFingerprint:  pveFP,
		FileRoot:            a.Cluster.Sim.NodeRoot(a.Node),
		NodeKeyFile:         files.Key,
		NodeCertFile:        files.Cert,
		ClusterCAFile:       files.CA,
		MigrationBandwidth:  a.Cluster.Spec.MigrationBandwidth,
		DataListen:          a.Cluster.Spec.DataListen,
		DataAdvertise:       a.Cluster.Spec.DataAdvertise,
		Version:             "meshtest",
		TracerProvider:      a.h.opts.tracer,
		Logger:              a.h.logger.With("component", "agent", "agent", a.MeshName),
	})
	if err != nil {
		return fmt.Errorf("start agent %s: %w", a.MeshName, err)
	}
	a.agent, a.joined = ag, true
	return nil
}

// edge is the agent's edge configuration: the namespace of its node's
// bridges and its gateways' prefix.
func (a *Agent) edge() (bridgeNS, prefix string) {
	if p := a.Cluster.Plane; p != nil {
		// The node's bridges live in its namespace; the gateways' namespaces
		// go with the plane.
		return p.NodeNS(a.Node), p.NodeNS(a.Node) + "-"
	}
	return "", a.Cluster.edgePrefix
}

// startHelper starts the agent's privileged helper, serving this
// process's user, until the test ends.
func (a *Agent) startHelper(t testing.TB) {
	t.Helper()
	edgeNS, edgePrefix := a.edge()
	cfg := privhelper.Config{
		Socket: filepath.Join(shortTempDir(t, "fph"), "helper.sock"), AgentUID: os.Getuid(), AgentGID: os.Getgid(),
		SnippetDirs: []string{}, VolumeDirs: []string{}, UploadDirs: []string{}, GuestConfigDir: filepath.Join(a.StateDir, "no-guest-configs"),
		EdgeBridgeNamespace: edgeNS, EdgeNamespacePrefix: edgePrefix,
		Logger: a.h.logger.With("component", "helper", "agent", a.MeshName),
	}
	if root := a.Cluster.Sim.NodeRoot(a.Node); root != "" {
		vz := filepath.Join(root, "var", "lib", "vz")
		cfg.SnippetDirs = []string{filepath.Join(vz, "snippets")}
		cfg.UploadDirs = []string{filepath.Join(vz, "import"), filepath.Join(vz, "template", "iso")}
	}
	hp, err := privhelper.Start(cfg)
	if err != nil {
		t.Fatalf("meshtest: helper of %s: %v", a.MeshName, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hp.Shutdown(ctx)
	})
	a.helper = cfg.Socket
}

// Stop stops the agent as SIGTERM stops its process: calls in flight
// finish (for up to 5s) and its connections close; Start brings it back.
func (a *Agent) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.stop(ctx)
}

// Kill stops the agent as a node losing power would: its mesh node goes
// away without a word to anyone, so the orchestrator's connections to it
// fall silent rather than close. Start brings it back.
func (a *Agent) Kill() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.agent == nil {
		return nil
	}
	err := a.agent.KillForTest()
	a.agent = nil
	return err
}

func (a *Agent) stop(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.agent == nil {
		return nil
	}
	err := a.agent.Shutdown(ctx)
	a.agent = nil
	return err
}

// Running returns the running agent, or nil.
func (a *Agent) Running() *agent.Agent {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.agent
}

// Host returns the agent's host as the orchestrator sees it.
func (a *Agent) Host() (fleet.Host, bool) {
	for _, z := range a.h.Orchestrator.Zones().Zones() {
		for _, host := range z.Hosts {
			if host.MeshName == a.MeshName {
				return host, true
			}
		}
	}
	return fleet.Host{}, false
}

// Zone returns the orchestrator's zone of cluster c (found through its
// agents), failing the test when there is none.
func (h *Harness) Zone(t testing.TB, c *Cluster) fleet.Zone {
	t.Helper()
	if z, ok := h.zoneOf(c); ok {
		return z
	}
	t.Fatalf("meshtest: no zone for cluster %s", c.label)
	return fleet.Zone{}
}

func (h *Harness) zoneOf(c *Cluster) (fleet.Zone, bool) {
	for _, z := range h.Orchestrator.Zones().Zones() {
		for _, host := range z.Hosts {
			for _, a := range c.Agents {
				if host.MeshName == a.MeshName {
					return z, true
				}
			}
		}
	}
	return fleet.Zone{}, false
}

// WaitOnline waits until every running agent's host is online.
func (h *Harness) WaitOnline(t testing.TB, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "all running agents online", func() error {
		if !h.allOnline() {
			return poll.Lazy(func() string { return "not all online:\n" + h.Status() })
		}
		return nil
	})
}

// Status describes every agent's host, for failure messages.
func (h *Harness) Status() string {
	var b strings.Builder
	for _, a := range h.agents {
		host, ok := a.Host()
		fmt.Fprintf(&b, "%s running=%t known=%t status=%s detail=%q\n", a.MeshName, a.Running() != nil, ok, host.Status, host.Detail)
	}
	return b.String()
}

func (h *Harness) allOnline() bool {
	for _, a := range h.agents {
		if a.Running() == nil {
			continue
		}
		host, ok := a.Host()
		if !ok || host.Status != fleet.StatusOnline {
			return false
		}
	}
	return true
}

func shortTempDir(t testing.TB, prefix string) string {
	t.Helper()
	// Short paths: the control server's unix socket lives in the data dir.
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Proxmox returns a go-proxmox client straight to the simulated cluster
// with its token, trusting its CA: what an operator at the cluster sees,
// bypassing the mesh. Tests seed guests and inspect state with it.
func (c *Cluster) Proxmox(t testing.TB) *proxmox.Client {
	t.Helper()
	return pvetest.Client(t, c.Sim, c.Token)
}
