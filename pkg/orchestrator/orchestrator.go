// Package orchestrator runs the flexplane orchestrator: one public HTTP
// address that serves the embedded mesh control server (control protocol and
// DERP relay), the GraphQL API at /graphql (when Config.API names an OIDC
// issuer) and, on every other path, Config.Handler; the orchestrator's own
// mesh node (tag:orchestrator); and the zone registry that discovers agents
// and zones over the mesh.
package orchestrator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	kubeclient "k8s.io/client-go/kubernetes"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/graph/server"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/audit"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/console"
	"github.com/flexplane/flexplane/pkg/edge/edgesync"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbsync"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/mesh/meshleader"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	"github.com/flexplane/flexplane/pkg/mesh/syncowner"
	"github.com/flexplane/flexplane/pkg/release"
	"github.com/flexplane/flexplane/pkg/rollout"
	"github.com/flexplane/flexplane/pkg/securitygroup/sgsync"
	"github.com/flexplane/flexplane/pkg/tenantkube"
)

// lbZones is how each zone's edge gateways reach its flexgateway replicas.
func lbZones(c LoadBalancersConfig) map[string]loadbalancer.Zone {
	out := map[string]loadbalancer.Zone{}
	for name, z := range c.Zones {
		out[name] = z.Zone
	}
	return out
}

// lbDiscovery is the replicas' discovery lc asks for (nil: the fixed
// replicas of its zones).
func lbDiscovery(lc LoadBalancersConfig, kc KubeConfig) (lbsync.Discoverer, error) {
	if lc.EndpointSlices == nil {
		return nil, nil
	}
	rc, ns, err := kc.REST()
	if err != nil {
		return nil, fmt.Errorf("load balancers: endpoint slices: %w", err)
	}
	client, err := kubeclient.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("load balancers: endpoint slices: %w", err)
	}
	cfg := *lc.EndpointSlices
	cfg.Namespace = cmp.Or(cfg.Namespace, ns)
	return lbsync.NewEndpointSlices(client, cfg)
}

// lbHTTP is the client of the replicas' admin API lc asks for: mutual TLS
// with lc.TLS. Without zones it is nil (nothing is pushed).
func lbHTTP(lc LoadBalancersConfig) (*http.Client, error) {
	if len(lc.Zones) == 0 {
		return nil, nil
	}
	tc, err := lbconfig.ClientTLS(lc.TLS)
	if err != nil {
		return nil, fmt.Errorf("load balancers: %w", err)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true,
		MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}}, nil
}

// Server is an orchestrator.
type Server struct {
	cfg Config
	log *slog.Logger

	mu         sync.Mutex
	started    bool                 // protected by mu
	ln         net.Listener         // protected by mu
	url        string               // protected by mu
	http       *http.Server         // protected by mu
	control    *meshcontrol.Control // nil when replicated, protected by mu
	leader     *meshleader.Leader   // nil unless replicated, protected by mu
	meshAPI    *meshcontrol.Client  // the (leading) control server's API, protected by mu
	probe      *probe
	node       *meshnode.Node       // protected by mu
	registry   *fleet.Registry      // protected by mu
	metrics    *prometheus.Registry // protected by mu
	metricsSrv *http.Server         // nil without MetricsListen, protected by mu
	metricsLn  net.Listener         // nil without MetricsListen, protected by mu
	webhook    *audit.Webhook       // nil without an audit webhook, protected by mu
	catalog    catalog.Store        // nil without an API, protected by mu
	closeCat   func()               // releases catalog; nil without an API, protected by mu
	compute    *compute.Service     // nil without an API, protected by mu
	rollouts   *rollout.Service     // nil without releases, protected by mu
	edge       *edgesync.Syncer     // nil without an API, protected by mu
	owner      *syncowner.Owner     // the sync shards held; nil unless replicated, protected by mu
	lbs        *lbsync.Syncer       // nil without an API, protected by mu
	groups     *sgsync.Syncer       // nil without an API, protected by mu
	kube       *kubernetes          // nil without managed Kubernetes, protected by mu
	kubeStop   context.CancelFunc   // stops kube's controllers, protected by mu
	kubeDone   chan struct{}        // closed when kube's controllers stopped, protected by mu
	stop       context.CancelFunc   // stops the registry, protected by mu
	done       chan struct{}        // closed when background work ended, protected by mu
	stopped    chan struct{}        // closed by Shutdown
	stopOnce   sync.Once
}

// newAPI builds the GraphQL handler over the registry, the catalog
// directory and the control server's enrollment keys.
func (s *Server) newAPI(ctx context.Context, registry *fleet.Registry, meshAPI *meshcontrol.Client, leader *meshleader.Leader, reg prometheus.Registerer, sink audit.Sink, consoles *console.Broker) (_ http.Handler, _ catalog.Store, closeCat func(), _ *compute.Service, err error) {
	c := s.cfg.API
	// The identity provider may come up after the orchestrator (or be down
	// for a while): the verifier keeps asking it until it answers, and the
	// API answers UNAVAILABLE (503) meanwhile; the mesh works regardless.
	verifier, err := auth.NewLazyVerifier(auth.Config{Issuer: c.Issuer, Audience: c.Audience, CLIClientID: c.CLIClientID, Claims: c.Claims, HTTPClient: c.HTTPClient})
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("orchestrator: api: %w", err)
	}
	if err := verifier.Ready(ctx); err != nil {
		s.log.Warn("the OIDC issuer cannot be reached yet; the API answers UNAVAILABLE until it can", "issuer", c.Issuer, "err", err)
	}
	store, closeCat, err := OpenCatalog(ctx, CatalogConfig{Backend: c.CatalogBackend, Dir: c.CatalogDir, Kube: s.cfg.Kube,
		Logger: s.log.With("component", "catalog")})
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("orchestrator: api: %w", err)
	}
	defer func() {
		if err != nil {
			closeCat()
		}
	}()
	var recovers func() bool
	if leader != nil {
		// The replica running the mesh control server also takes over
		// the creates a dead replica left: one replica at a time.
		recovers = leader.Leading
	}
	// Creates wait for the security groups' writer, which reads the VMs
	// from the compute service: built below, before anything runs.
	firewall := &firewallGate{}
	vms, err := compute.New(compute.Config{Catalog: store, Zones: computeZones{registry}, Volumes: volumeMover{registry}, Snippets: NewSnippetWriter(registry),
		Uploads: NewVolumeUploader(registry, s.log.With("component", "uploads")), Firewall: firewall, ZoneTimeout: c.ZoneTimeout, StaleAfter: c.VMRecoverAfter, RecoverInterval: c.VMRecoverInterval, RecoverResyncInterval: c.VMRecoverResync, BackupQuotaInterval: c.BackupQuotaInterval, ImageCopyRecoverInterval: c.ImageCopyRecoverInterval, Recovers: recovers,
		DrainParallel: c.DrainParallel, HARequestTimeout: c.HARequestTimeout, Logger: s.log.With("component", "compute"),
		HARecovered: func(_ context.Context, r compute.HARecovery) {
			// An audit event of what Proxmox's HA manager did: the VM,
			// the failed host and the host it runs on now.
			if sink != nil {
				sink.Emit(audit.System("recoverVM", r.VDC, "VM", r.VM, r.Zone+"/"+r.From, r.Zone+"/"+r.To))
			}
		}})
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("orchestrator: %w", err)
	}
	// The edge gateways' and load balancers' syncs follow the catalog's
	// changes, and run for a zone on the replica that owns its shard.
	follow, err := s.newSyncOwner(ctx, store, registry, leader, reg)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("orchestrator: %w", err)
	}
	defer func() {
		if err != nil && follow.owner != nil {
			follow.owner.Close()
		}
	}()
	// Every replica runs the load balancers' sync too: a replica given the
	// config it runs does nothing, and pushes only to the zones it owns.
	if secrets, ok := store.(catalog.SecretStore); ok {
		disc, err := lbDiscovery(c.LoadBalancers, s.cfg.Kube)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("orchestrator: %w", err)
		}
		hc, err := lbHTTP(c.LoadBalancers)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("orchestrator: %w", err)
		}
		s.lbs = lbsync.New(lbsync.Config{Store: store, Secrets: secrets, Zones: c.LoadBalancers.Zones, Tokens: c.LoadBalancers.Tokens,
			HTTP: hc, Discover: disc, Logger: s.log.With("component", "lbsync"), Resync: c.LBResyncInterval,
			Changes: follow.changes, Owns: follow.ownsName})
	}
	if s.kube, err = newKubernetes(c.Kubernetes, s.cfg.Kube, store, vms, s.log.With("component", "kubernetes")); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("orchestrator: %w", err)
	}
	var kube *tenantkube.Service
	var kubeTargets edgesync.KubeTargets
	if s.kube != nil {
		kube, kubeTargets = s.kube.svc, s.kube.targets
	}
	// Every replica runs the edge gateways' syncer, working on the zones
	// it owns; they all compute the same placement from the catalog.
	s.edge = edgesync.New(edgesync.Config{Zones: registry, Logger: s.log.With("component", "edgesync"), Maintenance: vms.Hosts().InMaintenance,
		Desired:  edgesync.FromCatalog(store, registry, s.log.With("component", "edgesync"), lbZones(c.LoadBalancers), kubeTargets),
		Interval: c.EdgeResyncInterval, Rederive: c.EdgeRederiveInterval, Changes: follow.changes, Owns: follow.ownsID, Passed: follow.passed})
	firewall.edge = s.edge
	follow.onChange(s.edge.Kick)
	if s.lbs != nil {
		follow.onChange(s.lbs.Kick)
	}
	s.owner = follow.owner
	// The security groups' writer runs on every replica, writing only
	// while it leads (the mesh control leader; always when alone).
	var leads func() bool
	if leader != nil {
		leads = leader.Leading
	}
	if s.groups, err = sgsync.New(sgsync.Config{Store: store, VMs: vms, Zones: computeZones{registry}, Leads: leads,
		Interval: c.SecurityGroupInterval, ZoneTimeout: c.ZoneTimeout, Logger: s.log.With("component", "sgsync")}); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("orchestrator: %w", err)
	}
	firewall.groups = s.groups
	if rc := c.Releases; rc.PublicKey != "" {
		if s.rollouts, err = newRollouts(rc, s.cfg.DataDir, registry, s.log); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	svcs, err := newServices(registry, store, vms, kube, s.lbs, s.edge, s.groups, c.ZoneTimeout, s.log)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	h, err := server.New(server.Config{
		Verifier: verifier,
		Resolver: &graph.Resolver{
			Catalog:        store,
			Tenant:         c.Tenant,
			Logger:         s.log.With("component", "api"),
			Zones:          registry,
			Estate:         svcs.estate,
			Keys:           meshAPI,
			AgentVersion:   c.AgentVersion,
			Compute:        vms,
			Rollouts:       s.rollouts,
			Gateways:       svcs.gateways,
			Consoles:       consoles,
			LoadBalancers:  svcs.balancers,
			Kubernetes:     kube,
			Networks:       svcs.networks,
			VDCs:           svcs.vdcs,
			SecurityGroups: svcs.groups,
			SSHKeys:        svcs.sshKeys,
		},
		Logger:         s.log.With("component", "api"),
		MaxDepth:       c.MaxDepth,
		MaxComplexity:  c.MaxComplexity,
		RateLimits:     c.RateLimits,
		Metrics:        reg,
		TracerProvider: s.cfg.TracerProvider,
		Audit:          mutationKicks{next: sink, kick: s.edge.Kick},
	})
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("orchestrator: %w", err)
	}
	return h, store, closeCat, vms, nil
}

// newRollouts opens the release store and the rollout service over it.
func newRollouts(rc ReleasesConfig, dataDir string, registry *fleet.Registry, log *slog.Logger) (*rollout.Service, error) {
	verifier, err := release.NewVerifier(rc.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: %w", err)
	}
	dir := rc.Dir
	if dir == "" {
		dir = filepath.Join(dataDir, "releases")
	}
	store, err := release.OpenStore(dir, verifier)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: %w", err)
	}
	svc, err := rollout.New(rollout.Config{Releases: store, Registry: registry, HostTimeout: rc.HostTimeout, Logger: log.With("component", "rollout")})
	if err != nil {
		return nil, fmt.Errorf("orchestrator: %w", err)
	}
	return svc, nil
}

// Run starts the server and serves until ctx ends or Shutdown is called,
// then shuts down (allowing 10s).
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-s.stopped:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}

// Shutdown stops the orchestrator in net/http's order: it stops accepting
// connections and waits for the requests in flight (API requests still
// reach the agents: the mesh is up), then stops the VM runners (their
// creates stay recorded on the guests for whoever recovers them) and the
// zone registry, leaves the mesh, and stops the mesh control server, which
// closes the connections of all mesh nodes (they reconnect to the next
// orchestrator). When ctx ends first, the remaining steps still run and
// what did not finish is reported. It is safe to call more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stopped) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.http == nil {
		return nil
	}
	var errs []error
	// Connections the control server hijacked (the nodes' control streams,
	// DERP) are not waited for: they stay until the control server stops.
	if err := s.http.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("orchestrator: shutdown http: %w", err))
		s.http.Close()
	}
	if s.metricsSrv != nil {
		// Scrapes are short: no need to wait for them.
		errs = append(errs, s.metricsSrv.Close())
	}
	// Cluster API's controllers before the VM lifecycle they create
	// workers through.
	s.kubeStop()
	select {
	case <-s.kubeDone:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("orchestrator: stop Cluster API's controllers: %w", ctx.Err()))
	}
	if s.compute != nil {
		errs = append(errs, s.compute.Shutdown(ctx))
	}
	if s.rollouts != nil {
		s.rollouts.Close()
	}
	if s.webhook != nil {
		// After the API: the last requests' events are sent too.
		errs = append(errs, s.webhook.Close(ctx))
	}
	if s.closeCat != nil {
		s.closeCat()
	}
	s.stop()
	select {
	case <-s.done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("orchestrator: stop zone registry: %w", ctx.Err()))
	}
	// Leaving the mesh and stopping the control server must happen even
	// after ctx ended, or their goroutines and sockets stay: bound them
	// anew.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	errs = append(errs, s.node.Close(lctx))
	if s.control != nil {
		errs = append(errs, s.control.Close(lctx))
	}
	if s.owner != nil {
		// The syncs stopped: the shards go to the next replica at once.
		s.owner.Close()
	}
	if s.leader != nil {
		// After the node: a leader's own node leaves before its control
		// server stops; then the Lease is released for the next one.
		errs = append(errs, s.leader.Close(lctx))
	}
	s.http = nil
	s.log.Info("orchestrator stopped")
	return errors.Join(errs...)
}

// URL is the public URL agents use (after Start).
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// Addr is the bound public address (after Start).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ln.Addr()
}

// MetricsAddr is the bound address of MetricsListen (after Start; nil
// without one).
func (s *Server) MetricsAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.metricsLn == nil {
		return nil
	}
	return s.metricsLn.Addr()
}

// Metrics is the registry of the orchestrator's own metrics (after Start),
// whether or not MetricsListen serves them.
func (s *Server) Metrics() prometheus.Gatherer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metrics
}

// Zones is the zone registry (after Start).
func (s *Server) Zones() *fleet.Registry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registry
}

// Catalog is the catalog store the API uses (after Start; nil without an
// API).
func (s *Server) Catalog() catalog.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.catalog
}

// Control is the embedded mesh control server: enrollment keys and nodes
// (after Start). A replica (Config.Replication) has none: see MeshAPI.
func (s *Server) Control() *meshcontrol.Control {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.control
}

// MeshAPI reaches the API of the mesh control server (after Start): the
// embedded one, or a replica's leader's.
func (s *Server) MeshAPI() *meshcontrol.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.meshAPI
}

// MeshNode is the orchestrator's own mesh node (after Start).
func (s *Server) MeshNode() *meshnode.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node
}

// SocketPath is the unix socket `orchestrator keys` talks to for a data
// directory.
func SocketPath(dataDir string) string {
	return filepath.Join(dataDir, "headscale", "headscale.sock")
}

func hostPort(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String()
	}
	if ap.Addr().IsUnspecified() {
		ap = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), ap.Port())
	}
	return ap.String()
}

// mesh adapts the control server and the orchestrator's node to zones.Mesh;
// it is a fleet.MapResyncer too.
type mesh struct {
	control *meshcontrol.Client
	node    *meshnode.Node
}

func (m mesh) Nodes(ctx context.Context) ([]fleet.MeshNode, error) {
	nodes, err := m.control.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]fleet.MeshNode, 0, len(nodes))
	for _, n := range nodes {
		zn := fleet.MeshNode{ID: n.ID, Name: n.GivenName, NodeKey: n.NodeKey, Tags: n.Tags, Online: n.Online}
		for _, a := range n.Addrs {
			if a.Is4() {
				zn.Addr = a
			}
		}
		out = append(out, zn)
	}
	return out, nil
}

func (m mesh) OnlinePeers(ctx context.Context) (map[netip.Addr]bool, error) {
	return m.node.OnlinePeers(ctx)
}

var _ fleet.MapResyncer = mesh{}

var _ fleet.Pinger = mesh{}

func (m mesh) PingPeer(ctx context.Context, ip netip.Addr) error {
	return m.node.PingPeer(ctx, ip)
}

func (m mesh) ResyncMap(ctx context.Context) (bool, error) {
	return m.node.ResyncMap(ctx)
}

func (m mesh) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return m.node.Dial(ctx, network, addr)
}

// AgentMetricsPath is the path prefix, on MetricsListen, of each agent's
// metrics: AgentMetricsPath + <the agent's mesh name>.
const AgentMetricsPath = "/metrics/agents/"

// metricsHandler serves the orchestrator's metrics at /metrics and each
// agent's, read over the mesh with its Metrics RPC, below AgentMetricsPath.
func metricsHandler(reg prometheus.Gatherer, registry *fleet.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	mux.HandleFunc("GET "+AgentMetricsPath+"{host}", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		text, contentType, err := registry.AgentMetrics(ctx, r.PathValue("host"))
		switch {
		case errors.Is(err, fleet.ErrUnknownHost):
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(text)
	})
	return mux
}

// apiSlot serves the API once set; until then (the mesh node joining, the
// catalog opening) it answers 503 with a GraphQL error UNAVAILABLE and
// Retry-After, so that a client of an orchestrator that is starting (after
// a restart) retries rather than getting what Handler answers (a portal's
// 405 to a POST).
type apiSlot struct{ h atomic.Pointer[http.Handler] }

func (a *apiSlot) set(h http.Handler) { a.h.Store(&h) }

func (a *apiSlot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := a.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]any{{
		"message":    "the orchestrator is starting; retry in a moment",
		"extensions": map[string]any{"code": apierr.Unavailable},
	}}})
}

// firewallGate is compute's Config.Firewall: the security groups' writer,
// which is built after the compute service it reads the VMs from (groups
// is set before the API serves). A VM about to start has its addresses:
// the edge gateways' sync is kicked, so that the port forwards and 1:1
// addresses that target it follow.
type firewallGate struct {
	groups *sgsync.Syncer
	edge   *edgesync.Syncer
}

// WaitVM implements compute.Firewall.
func (g *firewallGate) WaitVM(ctx context.Context, zone, vdc string, vmid int) error {
	if g.edge != nil {
		g.edge.Kick()
	}
	return g.groups.WaitVM(ctx, zone, vdc, vmid)
}
