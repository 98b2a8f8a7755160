// Package agent is the flexplane node agent: it runs on every Proxmox node,
// joins the orchestrator's mesh with an enrollment key, serves the agent gRPC
// API (proto/flexplane/agent/v1) on its mesh address only, accepts only
// callers tagged tag:orchestrator, and is the only holder of the node's
// Proxmox API token: its Proxy RPC forwards an allowlisted set of requests to
// the local Proxmox API with the token attached.
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/agent/privhelper"
	"github.com/flexplane/flexplane/pkg/agent/selfupdate"
	"github.com/flexplane/flexplane/pkg/edge"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	"github.com/flexplane/flexplane/pkg/mesh/rpczstd"
	"github.com/flexplane/flexplane/pkg/proxmox/pvetask"
	"github.com/flexplane/flexplane/pkg/release"
	"github.com/flexplane/flexplane/pkg/support/tracing"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// DefaultPort is the agent's gRPC port on the mesh.
const DefaultPort = 50051

// Where Proxmox keeps the files of a node's membership proof (Prove):
// /etc/pve/local is the node's own directory of the cluster file system.
const (
	DefaultNodeKeyFile   = "/etc/pve/local/pve-ssl.key"
	DefaultNodeCertFile  = "/etc/pve/local/pve-ssl.pem"
	DefaultClusterCAFile = "/etc/pve/pve-root-ca.pem"
)

// maxRequest bounds a request body the agent forwards.
const maxRequest = 8 << 20

// Config configures an agent. ControlURL, StateDir, NodeName and
// ProxmoxToken are required (AuthKey too on the first start).
type Config struct {
	// ControlURL is the orchestrator's public URL.
	ControlURL string
	// AuthKey is the enrollment key. It is needed only until the agent has
	// enrolled; afterwards StateDir identifies the agent.
	AuthKey string
	// StateDir keeps the agent's mesh identity.
	StateDir string
	// NodeName is the Proxmox node this agent runs on (its host name on a
	// real node).
	NodeName string
	// MeshName is the agent's host name in the mesh, a DNS label (letters,
	// digits, inner hyphens; at most 63). Default NodeName. Node names repeat
	// across clusters (every cluster has a pve1), so agents of several
	// clusters in one mesh want distinct names such as "fra1-pve1"; Headscale
	// would otherwise rename the duplicates.
	MeshName string
	// ProxmoxURL is the local Proxmox API. Default https://127.0.0.1:8006.
	ProxmoxURL string
	// ProxmoxToken is the API token, USER@REALM!TOKENID=SECRET. It is used
	// only for requests to ProxmoxURL and never logged or returned.
	ProxmoxToken string
	// ProxmoxFingerprint pins the SHA-256 fingerprint (AB:CD:...) of the
	// Proxmox certificate. Empty means verifying it against the system's CAs.
	ProxmoxFingerprint string
	// NodeKeyFile is the node's TLS private key (Proxmox's pve-ssl.key,
	// root:www-data 0640), with which the agent proves the orchestrator that
	// it runs on a node of its cluster (Prove). Default
	// DefaultNodeKeyFile.
	NodeKeyFile string
	// NodeCertFile is the node's certificate, issued by the cluster CA
	// (pve-ssl.pem). Default DefaultNodeCertFile.
	NodeCertFile string
	// ClusterCAFile is the cluster CA's certificate (pve-root-ca.pem),
	// whose identity is the agent's zone. Default DefaultClusterCAFile.
	ClusterCAFile string
	// Port is the gRPC port on the mesh address. Default DefaultPort.
	Port uint16
	// MigrationPort is the port of the migration service on the mesh
	// address, which other agents reach to read offered volumes (the mesh
	// policy opens it to tag:agent only). Default Port+1.
	MigrationPort uint16
	// MigrationBandwidth bounds the rate (bytes per second, runs of zeros
	// counted) at which the migration service reads a volume for another
	// agent, as Proxmox's migration bwlimit does, so that a move leaves the
	// node's disks and links to its guests; 0 is no bound.
	MigrationBandwidth int64
	// Version is reported by Info. Default "dev".
	Version string
	// HealthTimeout bounds the Proxmox check of Health. Default 3s.
	HealthTimeout time.Duration
	// Logger receives the agent's logs. Default slog.Default().
	Logger *slog.Logger
	// ReleaseKey holds the trusted minisign public keys agent releases and
	// floors are signed with (release.NewVerifier's forms: a .pub file's
	// text, or `ID=BASE64KEY` entries separated by newlines or commas);
	// "" refuses every update.
	ReleaseKey string
	// EdgeBridgeNamespace is the named network namespace holding the node's
	// bridges (VNets, the external network's), where the edge gateways' NICs
	// are plugged: "" is the agent's own namespace, as on a real Proxmox node;
	// with the simulator's data plane it is the node's namespace
	// (simnet.Plane.NodeNS). The edge gateways need root; with a helper
	// (HelperSocket) they are the helper's, configured by its own flags.
	EdgeBridgeNamespace string
	// EdgeNamespacePrefix starts the names of the edge gateways' network
	// namespaces (default "fp"): two agents on one host (the simulator) need
	// distinct prefixes.
	EdgeNamespacePrefix string
	// TracerProvider traces the agent API's calls (children of the
	// orchestrator's spans, whose W3C trace context comes along) and the
	// Proxmox requests they make; nil traces nothing.
	TracerProvider trace.TracerProvider
	// HelperSocket is the unix socket of the node's privileged helper
	// (package privhelper), which then does the agent's privileged work:
	// the edge gateways, the volume I/O of moves, the snippet files. ""
	// does that work in the agent's own process, which then needs root.
	HelperSocket string
	// FileRoot is the directory the paths of the node's storages are
	// under, where WriteSnippet writes: "" is "/", the node's own file
	// system; a test points it at a simulated node's
	// (pvesim.Cluster.NodeRoot).
	FileRoot string
	// DataListen is the host address (HOST:PORT, not a mesh address) of
	// the agent's data listener: an HTTPS listener, with a certificate the
	// agent makes at start, on which the orchestrator uploads tenants'
	// images directly rather than over the mesh, each upload with a
	// one-time ticket it asked for over the mesh (IssueUploadTicket;
	// dataplane.go). "" serves none: uploads then cross the mesh
	// (UploadVolume), as they do when the orchestrator cannot reach it.
	DataListen string
	// DataAdvertise is the HOST:PORT the orchestrator dials to reach the
	// data listener (an address of this node the orchestrator's network
	// reaches). Default DataListen when it names a host; a port of 0 or
	// none is the listener's own port.
	DataAdvertise string
	// PBSPassword is the secret (password or API token secret) the agent
	// gives Proxmox with a VDC's Proxmox Backup Server storage entry,
	// which the orchestrator asks for without it (pbs.go); "" adds none.
	// The Proxmox token's, it never leaves the agent.
	PBSPassword string
}

func (c *Config) setDefaults() error {
	var missing []string
	for name, v := range map[string]string{
		"ControlURL": c.ControlURL, "StateDir": c.StateDir, "NodeName": c.NodeName, "ProxmoxToken": c.ProxmoxToken,
	} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("agent: missing configuration: %s", strings.Join(missing, ", "))
	}
	if !segmentName(c.NodeName) {
		return fmt.Errorf("agent: node name %q is not a Proxmox node name", c.NodeName)
	}
	if c.MeshName == "" {
		c.MeshName = c.NodeName
	} else if !dnsLabel(c.MeshName) {
		return fmt.Errorf("agent: mesh name %q is not a DNS label (letters, digits and inner hyphens, at most 63)", c.MeshName)
	}
	if c.ProxmoxURL == "" {
		c.ProxmoxURL = "https://127.0.0.1:8006"
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.NodeKeyFile == "" {
		c.NodeKeyFile = DefaultNodeKeyFile
	}
	if c.NodeCertFile == "" {
		c.NodeCertFile = DefaultNodeCertFile
	}
	if c.ClusterCAFile == "" {
		c.ClusterCAFile = DefaultClusterCAFile
	}
	if c.FileRoot != "" && !filepath.IsAbs(c.FileRoot) {
		return fmt.Errorf("agent: file root %q is not an absolute path", c.FileRoot)
	}
	if c.DataAdvertise != "" && c.DataListen == "" {
		return errors.New("agent: a data advertise address without a data listener (DataListen)")
	}
	if c.DataListen != "" && c.DataAdvertise == "" {
		host, _, err := net.SplitHostPort(c.DataListen)
		if ip := net.ParseIP(host); err != nil || host == "" || (ip != nil && ip.IsUnspecified()) {
			return fmt.Errorf("agent: data listener %q names no host the orchestrator can dial: give its advertise address (DataAdvertise)", c.DataListen)
		}
	}
	if c.MigrationPort == 0 {
		c.MigrationPort = c.Port + 1
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = 3 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.AuthKey == "" && !meshnode.HasState(c.StateDir) {
		return errors.New("agent: an enrollment key is needed for the first start")
	}
	return nil
}

// dnsLabel reports whether s is one DNS label: letters, digits and hyphens,
// not starting or ending with a hyphen, 1 to 63 characters.
func dnsLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func segmentName(s string) bool {
	for _, c := range s {
		if !segmentChar(c) {
			return false
		}
	}
	return s != ""
}

// Agent is a running agent.
type Agent struct {
	cfg         Config
	log         *slog.Logger
	pve         *pve
	policy      policy
	metrics     *agentMetrics
	tracer      trace.Tracer
	node        *meshnode.Node
	grpc        *grpc.Server
	served      chan struct{}
	updater     *selfupdate.Updater
	restart     chan struct{} // closed when a staged update asks for a restart
	restartOnce sync.Once
	// migrate serves MigrationService on MigrationPort; offers are the
	// volumes offered to other agents.
	migrate  *grpc.Server
	migrated chan struct{}
	offers   capabilities[offer]
	// helper does the privileged work when Config.HelperSocket is set.
	helper *privhelper.Client
	// consoles are the console tickets waiting for their Console stream.
	consoles capabilities[consoleTicket]
	// data is the data listener (Config.DataListen), nil without one;
	// uploads are the upload tickets waiting for their upload on it.
	data    *dataListener
	uploads capabilities[uploadTicket]

	closeOnce sync.Once
	closeErr  error
}

// Start checks the configuration, joins the mesh and serves the agent API.
// It returns once the agent is reachable on the mesh. Proxmox need not be
// reachable yet: Health reports it.
func Start(ctx context.Context, cfg Config) (*Agent, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	client, err := newPVE(cfg.ProxmoxURL, cfg.ProxmoxToken, cfg.ProxmoxFingerprint)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	var verifier *release.Verifier
	if cfg.ReleaseKey != "" {
		if verifier, err = release.NewVerifier(cfg.ReleaseKey); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	udir, err := selfupdate.OpenDir(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a := &Agent{
		restart:  make(chan struct{}),
		updater:  selfupdate.NewUpdater(selfupdate.UpdaterConfig{Dir: udir, Verifier: verifier, Version: cfg.Version, Logger: cfg.Logger.With("node", cfg.NodeName)}),
		cfg:      cfg,
		log:      cfg.Logger.With("node", cfg.NodeName),
		pve:      client,
		policy:   newPolicy(),
		metrics:  newAgentMetrics(cfg.Version, cfg.NodeName),
		tracer:   tracing.OrNoop(cfg.TracerProvider).Tracer(TracerName),
		served:   make(chan struct{}),
		migrated: make(chan struct{}),
	}
	authKey := cfg.AuthKey
	if meshnode.HasState(cfg.StateDir) {
		// Enrolled already: the key (still in the environment of a
		// restarted or updated agent) must not register the node again,
		// which would give its node key a second identity in the mesh.
		authKey = ""
	}
	a.node, err = meshnode.Start(ctx, meshnode.Config{
		Hostname:   cfg.MeshName,
		Dir:        cfg.StateDir,
		ControlURL: cfg.ControlURL,
		AuthKey:    authKey,
		Logger:     cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("agent: join mesh: %w", err)
	}
	ln, err := a.node.Listen("tcp", ":"+strconv.Itoa(int(cfg.Port)))
	if err != nil {
		a.node.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("agent: listen on mesh: %w", err)
	}
	a.grpc = grpc.NewServer(
		grpc.StatsHandler(tracing.ServerHandler(cfg.TracerProvider)),
		grpc.ChainUnaryInterceptor(a.metrics.count, a.authorize),
		grpc.StreamInterceptor(a.authorizeStream),
		grpc.MaxRecvMsgSize(maxRequest+64<<10),
		grpc.MaxSendMsgSize(maxResponse+64<<10),
		// The orchestrator pings to notice a vanished agent (see
		// zones.KeepaliveTime); allow it, idle connections included.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	agentv1.RegisterAgentServiceServer(a.grpc, &service{a: a})
	if cfg.HelperSocket != "" {
		if a.helper, err = privhelper.Dial(cfg.HelperSocket); err != nil {
			ln.Close()
			a.node.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("agent: %w", err)
		}
		edgev1.RegisterEdgeServiceServer(a.grpc, newEdgeWatch(a.helper.EdgeServer()))
	} else {
		edgev1.RegisterEdgeServiceServer(a.grpc, newEdgeWatch(privhelper.NewEdgeServer(edge.NewManager(edge.Config{
			BridgeNamespace: cfg.EdgeBridgeNamespace, NamespacePrefix: cfg.EdgeNamespacePrefix, Logger: a.log,
		}), a.log)))
	}
	mln, err := a.node.Listen("tcp", ":"+strconv.Itoa(int(cfg.MigrationPort)))
	if err != nil {
		a.closeHelper()
		ln.Close()
		a.node.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("agent: listen on mesh: %w", err)
	}
	a.migrate = grpc.NewServer(grpc.StatsHandler(tracing.ServerHandler(cfg.TracerProvider)),
		grpc.MaxSendMsgSize(chunkSize+64<<10), grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(streamWindow),
		grpc.WriteBufferSize(chunkSize), grpc.ReadBufferSize(chunkSize),
		// Readers ping (see pullPingTime); the server pings too, so that
		// a reader that vanished mid-copy ends the read.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: pullPingTime / 2, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: pullPingTime, Timeout: pullPingTimeout}))
	agentv1.RegisterMigrationServiceServer(a.migrate, &migration{a: a})
	go func() {
		defer close(a.served)
		if err := a.grpc.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			a.log.Error("agent: serve", "err", err)
		}
	}()
	go func() {
		defer close(a.migrated)
		if err := a.migrate.Serve(mln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			a.log.Error("agent: serve migrations", "err", err)
		}
	}()
	if cfg.DataListen != "" {
		dln, err := net.Listen("tcp", cfg.DataListen)
		if err == nil {
			err = a.serveData(dln, cmp.Or(cfg.DataAdvertise, cfg.DataListen))
			if err != nil {
				dln.Close()
			}
		}
		if err != nil {
			a.grpc.Stop()
			a.migrate.Stop()
			a.closeHelper()
			a.node.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("agent: data listener: %w", err)
		}
	}
	a.log.Info("agent serving on the mesh", "addr", net.JoinHostPort(a.node.Addr().String(), strconv.Itoa(int(cfg.Port))), "proxmox", cfg.ProxmoxURL)
	return a, nil
}

// Shutdown stops accepting calls, lets the calls in flight finish until ctx
// ends (then cancels them), and leaves the mesh. The agent stays enrolled: a
// new agent with the same StateDir needs no key. It is safe to call more
// than once; later calls return the first one's result.
func (a *Agent) Shutdown(ctx context.Context) error {
	a.closeOnce.Do(func() {
		stopped := make(chan struct{})
		go func() { a.grpc.GracefulStop(); a.migrate.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			a.grpc.Stop()
			a.migrate.Stop()
		}
		a.closeData(ctx)
		// Leaving the mesh gets its own short bound: an expired ctx must
		// not leave the node's stack running.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		a.closeErr = a.node.Close(lctx)
		<-a.served
		<-a.migrated
		a.closeHelper()
		a.log.Info("agent stopped")
	})
	return a.closeErr
}

// KillForTest stops the agent as a node losing power would: the mesh node
// goes first, so no peer hears the connections end. For tests of what the
// orchestrator does about a vanished agent; Shutdown is the way to stop.
func (a *Agent) KillForTest() error {
	a.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.closeErr = a.node.Close(ctx)
		a.grpc.Stop()
		a.migrate.Stop()
		a.closeData(ctx)
		<-a.served
		<-a.migrated
		a.closeHelper()
	})
	return a.closeErr
}

// closeHelper closes the connection to the helper, if any.
func (a *Agent) closeHelper() {
	if a.helper != nil {
		a.helper.Close()
	}
}

// Addr is the agent's gRPC address on the mesh (ip:port).
func (a *Agent) Addr() string {
	return net.JoinHostPort(a.node.Addr().String(), strconv.Itoa(int(a.cfg.Port)))
}

// Dial dials over the agent's own mesh node; the mesh policy decides what it
// may reach (nothing, for an agent). For diagnostics and tests.
func (a *Agent) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return a.node.Dial(ctx, network, addr)
}

// ListenForTest listens on the agent's own mesh node (its mesh address,
// the port of addr), as its migration service does: for a test measuring
// the mesh between two agents' nodes. The mesh policy decides who may
// reach the port.
func (a *Agent) ListenForTest(network, addr string) (net.Listener, error) {
	return a.node.Listen(network, addr)
}

// authorize lets only mesh peers tagged tag:orchestrator call the agent.
func (a *Agent) authorize(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.orchestratorOnly(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// authorizeStream is authorize for streaming calls.
func (a *Agent) authorizeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := a.orchestratorOnly(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// orchestratorOnly refuses a caller that is not tag:orchestrator.
func (a *Agent) orchestratorOnly(ctx context.Context, method string) error {
	who, err := a.caller(ctx)
	if err != nil {
		a.log.Warn("agent: refused unidentified caller", "method", method, "err", err)
		return err
	}
	if !who.HasTag(meshnode.TagOrchestrator) {
		a.log.Warn("agent: refused caller without orchestrator tag", "caller", who.Name, "tags", who.Tags, "method", method)
		return status.Errorf(codes.PermissionDenied, "agent: caller %s is not %s", who.Name, meshnode.TagOrchestrator)
	}
	return nil
}

// RestartRequested is closed once an update is staged: the agent's
// process should shut down and exit with selfupdate.RestartExitCode, so
// that the launcher (or supervisor) starts the new version.
func (a *Agent) RestartRequested() <-chan struct{} { return a.restart }

// TracerName is the instrumentation scope of the agent's Proxmox spans.
const TracerName = "github.com/flexplane/flexplane/pkg/agent"

// proxmox sends a Proxy request to Proxmox in a span of its own, which
// names the task (proxmox.upid) when the answer starts one.
func (a *Agent) proxmox(ctx context.Context, method, tmpl, path string, req *agentv1.ProxyRequest) (pveResponse, error) {
	ctx, span := a.tracer.Start(ctx, "proxmox "+method+" "+tmpl, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", method), attribute.String("url.template", tmpl),
			attribute.String("proxmox.node", a.cfg.NodeName)))
	defer span.End()
	resp, err := a.pve.do(ctx, method, path, req.GetQuery(), req.GetBody(), req.GetContentType())
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
		return resp, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.status))
	if resp.status >= 400 {
		span.SetStatus(otelcodes.Error, resp.reason)
	}
	if upid := pvetask.UPIDOfAnswer(resp.body); upid != "" {
		span.SetAttributes(attribute.String("proxmox.upid", upid))
	}
	return resp, nil
}

// taskStatusPath is the allowlist template of a task's status, whose
// answers give the task durations.
const taskStatusPath = "/nodes/{node}/tasks/{upid}/status"

// compressAbove is the size from which a Proxy answer is sent compressed
// (zstd, when the caller accepts it): smaller ones fit in a few packets.
const compressAbove = 2 << 10

// acceptsZstd reports whether the caller of the RPC of ctx accepts answers
// compressed with rpczstd (an orchestrator that does not is answered
// uncompressed).
func acceptsZstd(ctx context.Context) bool {
	names, err := grpc.ClientSupportedCompressors(ctx)
	return err == nil && slices.Contains(names, rpczstd.Name)
}

// service implements the agent API.
type service struct {
	agentv1.UnimplementedAgentServiceServer
	a *Agent
}

func (s *service) Info(ctx context.Context, _ *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	f, err := s.a.pve.facts(ctx, s.a.cfg.NodeName)
	if err != nil {
		s.a.log.Warn("agent: info", "err", err)
		return nil, status.Errorf(codes.Unavailable, "agent: read proxmox facts: %v", err)
	}
	return &agentv1.InfoResponse{
		AgentVersion:   s.a.cfg.Version,
		NodeName:       s.a.cfg.NodeName,
		ClusterName:    f.clusterName,
		ClusterId:      f.clusterID,
		ProxmoxVersion: f.version,
		Platform:       release.Platform(),
	}, nil
}

func (s *service) Health(ctx context.Context, _ *agentv1.HealthRequest) (*agentv1.HealthResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.a.cfg.HealthTimeout)
	defer cancel()
	resp, err := s.a.pve.do(ctx, http.MethodGet, "/version", "", nil, "")
	s.a.metrics.proxmoxUp.Set(0)
	out := &agentv1.HealthResponse{Status: agentv1.HealthStatus_HEALTH_STATUS_NOT_SERVING, AgentVersion: s.a.cfg.Version}
	switch {
	case err != nil:
		out.Detail = "proxmox unreachable: " + err.Error()
	case resp.status == http.StatusUnauthorized || resp.status == http.StatusForbidden:
		out.Detail = fmt.Sprintf("proxmox refused the agent's token (%d)", resp.status)
	case resp.status != http.StatusOK:
		out.Detail = fmt.Sprintf("proxmox answered %d", resp.status)
	default:
		s.a.metrics.proxmoxUp.Set(1)
		out.Status = agentv1.HealthStatus_HEALTH_STATUS_SERVING
		// The orchestrator reached this agent over the mesh, its gRPC
		// serves and Proxmox answers: a version on probation is healthy.
		if err := s.a.updater.Healthy(); err != nil {
			s.a.log.Warn("agent: end probation", "err", err)
		}
	}
	out.Update = s.a.updateStatus()
	return out, nil
}

// updateStatus is the update state as the API reports it.
func (a *Agent) updateStatus() *agentv1.UpdateStatus {
	st, err := a.updater.State()
	if err != nil {
		a.log.Warn("agent: update state", "err", err)
		return nil
	}
	return &agentv1.UpdateStatus{
		Phase: string(st.Phase), Version: st.Version, From: st.From, Reason: st.Reason,
		Operation: st.Operation, UpdatedAtUnixMs: st.UpdatedAt.UnixMilli(),
	}
}

// Update receives a release (selfupdate.Updater.Stage) and, once it is
// staged, asks the process to restart into it.
func (s *service) Update(stream agentv1.AgentService_UpdateServer) error {
	first, err := stream.Recv()
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "agent: update: %v", err)
	}
	if len(first.GetManifest()) == 0 || len(first.GetSignature()) == 0 {
		return status.Error(codes.InvalidArgument, "agent: update: the first message must carry the manifest and its signature")
	}
	pending := first.GetData()
	next := func() ([]byte, error) {
		if pending != nil {
			b := pending
			pending = nil
			return b, nil
		}
		msg, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		return msg.GetData(), nil
	}
	var m *release.Manifest
	if len(first.GetFloor()) > 0 {
		// The floor comes first: a release below it is refused.
		_, err = s.a.updater.SeeFloor(first.GetFloor(), first.GetFloorSignature())
	}
	if err == nil {
		m, err = s.a.updater.Stage(stream.Context(), first.GetOperation(), first.GetManifest(), first.GetSignature(), next)
	}
	switch {
	case errors.Is(err, release.ErrRefused), errors.Is(err, selfupdate.ErrNoKey):
		return status.Errorf(codes.FailedPrecondition, "agent: update: %v", err)
	case errors.Is(err, selfupdate.ErrBusy):
		return status.Errorf(codes.Aborted, "agent: update: %v", err)
	case err != nil:
		return status.Errorf(codes.Internal, "agent: update: %v", err)
	}
	if err := stream.SendAndClose(&agentv1.UpdateResponse{Version: m.Version}); err != nil {
		return err
	}
	s.a.restartOnce.Do(func() { close(s.a.restart) })
	return nil
}

func (s *service) Metrics(context.Context, *agentv1.MetricsRequest) (*agentv1.MetricsResponse, error) {
	resp, err := s.a.metrics.text()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "agent: %v", err)
	}
	return resp, nil
}

func (s *service) Proxy(ctx context.Context, req *agentv1.ProxyRequest) (*agentv1.ProxyResponse, error) {
	method, path := req.GetMethod(), req.GetPath()
	switch method {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "agent: method %q is not GET, POST, PUT or DELETE", method)
	}
	if !strings.HasPrefix(path, "/") {
		return nil, status.Errorf(codes.InvalidArgument, "agent: path %q does not start with /", path)
	}
	if len(req.GetBody()) > maxRequest {
		return nil, status.Errorf(codes.InvalidArgument, "agent: body of %d bytes exceeds %d", len(req.GetBody()), maxRequest)
	}
	if strings.ContainsAny(req.GetQuery(), "#\r\n") {
		return nil, status.Error(codes.InvalidArgument, "agent: malformed query")
	}
	tmpl, ok := s.a.policy.match(method, path)
	if !ok {
		s.a.log.Warn("agent: refused request outside the allowlist", "method", method, "path", path)
		return nil, status.Errorf(codes.PermissionDenied, "agent: %s %s is not allowed", method, path)
	}
	if method == http.MethodPost && tmpl == "/storage" {
		checked, err := s.a.pbsEntry(ctx, req)
		if err != nil {
			s.a.log.Warn("agent: refused storage entry", "err", err)
			return nil, status.Errorf(codes.PermissionDenied, "agent: %v", err)
		}
		req = checked
	}
	start := time.Now()
	resp, err := s.a.proxmox(ctx, method, tmpl, path, req)
	s.a.metrics.proxmoxRequest(method, tmpl, resp.status, time.Since(start))
	if err != nil {
		s.a.log.Warn("agent: proxy", "method", method, "path", path, "err", err)
		switch {
		case errors.Is(err, errTooLarge):
			return nil, status.Errorf(codes.ResourceExhausted, "agent: %s %s: %v", method, path, err)
		case ctx.Err() != nil:
			return nil, status.FromContextError(ctx.Err()).Err()
		default:
			return nil, status.Errorf(codes.Unavailable, "agent: proxmox unreachable: %v", err)
		}
	}
	s.a.log.Debug("agent: proxied", "method", method, "path", path, "status", resp.status, "duration", time.Since(start))
	if tmpl == taskStatusPath && method == http.MethodGet && resp.status == http.StatusOK {
		s.a.metrics.taskStatus(path, resp.body, time.Now())
	}
	if len(resp.body) >= compressAbove && acceptsZstd(ctx) {
		// Far fewer bytes over the mesh for a little CPU here; the body
		// the orchestrator reads is unchanged.
		if err := grpc.SetSendCompressor(ctx, rpczstd.Name); err != nil {
			s.a.log.Debug("agent: answer uncompressed", "err", err)
		}
	}
	return &agentv1.ProxyResponse{StatusCode: int32(resp.status), StatusText: resp.reason, Body: resp.body, ContentType: resp.contentType}, nil
}
