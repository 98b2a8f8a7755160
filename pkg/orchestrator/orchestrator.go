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
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	kubeclient "k8s.io/client-go/kubernetes"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/pkg/api"
	"github.com/flexplane/flexplane/pkg/api/apierr"
	"github.com/flexplane/flexplane/pkg/api/graphiql"
	"github.com/flexplane/flexplane/pkg/audit"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/console"
	"github.com/flexplane/flexplane/pkg/edge/edgesync"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbsync"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/mesh/meshleader"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
	"github.com/flexplane/flexplane/pkg/release"
	"github.com/flexplane/flexplane/pkg/rollout"
	"github.com/flexplane/flexplane/pkg/tenantkube"
)

// Config configures an orchestrator.
type Config struct {
	// Listen is the public TCP address. Default ":8080".
	Listen string
	// PublicURL is the URL agents use to reach Listen (behind a TLS
	// terminating proxy, its https:// URL). Default "http://" + the bound
	// address, with 127.0.0.1 for an unspecified host (enough for one
	// machine only).
	PublicURL string
	// DataDir keeps the mesh control server's state and the orchestrator's
	// mesh identity. Required.
	DataDir string
	// STUNAddr is the UDP address of the STUN server. Default ":3478"; a
	// zero port picks a free one.
	STUNAddr string
	// MeshPostgres keeps the mesh control server's state in PostgreSQL
	// (replicated deployments: whichever replica runs it finds the same
	// nodes, keys and server keys); nil keeps it in SQLite under DataDir.
	MeshPostgres *meshcontrol.PostgresConfig
	// AgentPort is the agents' gRPC port. Default 50051.
	AgentPort uint16
	// MeshName is the orchestrator's name in the mesh. Default
	// "flexplane-orchestrator".
	MeshName string
	// API configures the GraphQL API served at /graphql; its zero value
	// serves none.
	API APIConfig
	// Handler serves every path the mesh control server and the API do not
	// own (the portal, ...). Nil answers 404.
	Handler http.Handler
	// RefreshInterval is how often zones and host status are refreshed.
	// Default 2s.
	RefreshInterval time.Duration
	// MetricsListen is the TCP address serving the Prometheus metrics: the
	// orchestrator's at /metrics, each agent's (fetched over the mesh) at
	// /metrics/agents/<mesh name>. Keep it off the public network; ""
	// serves none.
	MetricsListen string
	// Audit says where the audit events of mutations go; its zero value
	// records none.
	Audit AuditConfig
	// TracerProvider traces GraphQL operations and the calls they make to
	// the agents, whose spans join the trace; nil traces nothing.
	TracerProvider trace.TracerProvider
	// Kube says how to reach Kubernetes (the catalog's kubernetes
	// backend, the Lease of Replication).
	Kube KubeConfig
	// Replication runs the orchestrator as one of several replicas behind
	// one Service; its zero value runs it alone.
	Replication ReplicationConfig
	// MeshPolicy replaces the default mesh policy; for tests only.
	MeshPolicy string
	// Logger receives all logs, including the control server's. Default
	// slog.Default().
	Logger *slog.Logger
}

// ReplicationConfig makes the orchestrator one of several replicas: the
// embedded mesh control server runs on one of them at a time, the holder
// of a Kubernetes Lease (reached through Config.Kube), with its state in
// Config.MeshPostgres (required); the others forward the control protocol
// to it (package meshleader). Every replica is its own mesh node and
// serves the whole API.
type ReplicationConfig struct {
	// PeerURL is this replica's http:// URL as the other replicas reach
	// it (its pod's IP and the port of Listen); it must differ between
	// replicas. "" runs the orchestrator alone.
	PeerURL string
	// LeaseName is the Lease's name, in the namespace of Config.Kube.
	// Default meshleader.DefaultLeaseName.
	LeaseName string
	// LeaseDuration, RenewDeadline and RetryPeriod are the election's
	// timings (see meshleader.Config); defaults 15s, 10s and 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// APIPath is where the GraphQL API is served.
const APIPath = "/graphql"

// APIConfig configures the GraphQL API. The zero value serves no API.
type APIConfig struct {
	// Issuer is the URL of the OpenID Connect issuer whose bearer tokens
	// the API accepts; "" serves no API. Its discovery document is read at
	// Start, which fails if the issuer cannot be reached.
	Issuer string
	// Audience is the client id tokens must be issued to (the portal's).
	// Required with Issuer.
	Audience string
	// Claims names the role, name and email claims; the zero value reads
	// Zitadel's tokens.
	Claims auth.ClaimNames
	// CatalogBackend is where the catalog (VDCs, profiles, images) lives:
	// CatalogDir (the default: manifests in CatalogDir) or
	// CatalogKubernetes (custom resources, reached through Config.Kube).
	CatalogBackend string
	// CatalogDir holds the catalog's manifests (the dir backend).
	// Default DataDir/catalog.
	CatalogDir string
	// Tenant is the one tenant this deployment serves.
	Tenant graph.Tenant
	// ZoneTimeout bounds each zone's part of a request that spans zones;
	// a slower zone is reported ZONE_UNAVAILABLE. Default
	// graph.DefaultZoneTimeout.
	ZoneTimeout time.Duration
	// AgentVersion is the agent version this orchestrator ships; hosts
	// whose agent reports another show updateAvailable. Empty: never.
	AgentVersion string
	// Releases configures agent releases and rollouts; its zero value
	// offers none.
	Releases ReleasesConfig
	// MaxDepth and MaxComplexity bound queries; zero keeps pkg/api's
	// defaults.
	MaxDepth, MaxComplexity int
	// HTTPClient fetches the issuer's discovery document and signing keys;
	// nil is http.DefaultClient.
	HTTPClient *http.Client
	// VMRecoverAfter is how old an unfinished VM create must be before
	// this orchestrator, not running it, finishes or cleans it up (another
	// replica may still be working on it until then). Default 2m
	// (compute.Config.StaleAfter).
	VMRecoverAfter time.Duration
	// VMRecoverInterval is how often the orchestrator looks for unfinished
	// VM creates and moves to finish or undo. Default 30s
	// (compute.Config.RecoverInterval).
	VMRecoverInterval time.Duration
	// ConsoleTTL is how long a console ticket of openConsole waits for its
	// websocket (1s to 5m). Default console.DefaultTTL.
	ConsoleTTL time.Duration
	// LoadBalancers are the zones' flexgateway replicas the load balancers
	// are pushed to; its zero value serves no balancer (they can be made
	// and are kept, but reach no data plane).
	LoadBalancers LoadBalancersConfig
	// Kubernetes is managed Kubernetes over the management cluster of
	// Config.Kube; its zero value offers none.
	Kubernetes ManagedKubernetesConfig
}

// lbZones is how each zone's edge gateways reach its flexgateway replicas.
func lbZones(c LoadBalancersConfig) map[string]loadbalancer.Zone {
	out := map[string]loadbalancer.Zone{}
	for name, z := range c.Zones {
		out[name] = z.Zone
	}
	return out
}

// LoadBalancersConfig configures the load balancers' sync (package lbsync).
type LoadBalancersConfig struct {
	// Zones are the zones with flexgateway replicas, by zone name.
	Zones map[string]lbsync.Zone `json:"zones"`
	// Token is the replicas' admin bearer token.
	Token string `json:"token"`
	// EndpointSlices, when set, finds each zone's replicas in the
	// EndpointSlices of charts/flexgateway's admin Services in the
	// management cluster of Config.Kube, in place of Zones' Replicas.
	EndpointSlices *lbsync.EndpointSlicesConfig `json:"endpointSlices,omitempty"`
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

// ReleasesConfig configures agent releases (package release) and their
// rollouts (package rollout).
type ReleasesConfig struct {
	// PublicKey is the minisign public key releases are signed with (the
	// agents have the same); "" offers no releases.
	PublicKey string
	// Dir is the release store: published releases and the rollouts'
	// records. Replicas share it (one volume mounted by all). Default
	// DataDir/releases.
	Dir string
	// HostTimeout bounds one host's update in a rollout. Default 3m.
	HostTimeout time.Duration
}

// AuditConfig configures the audit sinks; every one set receives every
// event.
type AuditConfig struct {
	// Log receives the events as JSON lines (os.Stdout, a file); nil
	// writes none.
	Log io.Writer
	// Webhook posts the events in batches when its URL is set; its
	// Metrics and Logger are the orchestrator's.
	Webhook audit.WebhookConfig
	// Sink also receives every event (tests).
	Sink audit.Sink
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
	registry   *zones.Registry      // protected by mu
	metrics    *prometheus.Registry // protected by mu
	metricsSrv *http.Server         // nil without MetricsListen, protected by mu
	metricsLn  net.Listener         // nil without MetricsListen, protected by mu
	webhook    *audit.Webhook       // nil without an audit webhook, protected by mu
	catalog    catalog.Store        // nil without an API, protected by mu
	closeCat   func()               // releases catalog; nil without an API, protected by mu
	compute    *compute.Service     // nil without an API, protected by mu
	rollouts   *rollout.Service     // nil without releases, protected by mu
	edge       *edgesync.Syncer     // nil without an API, protected by mu
	lbs        *lbsync.Syncer       // nil without an API, protected by mu
	kube       *kubernetes          // nil without managed Kubernetes, protected by mu
	kubeStop   context.CancelFunc   // stops kube's controllers, protected by mu
	kubeDone   chan struct{}        // closed when kube's controllers stopped, protected by mu
	stop       context.CancelFunc   // stops the registry, protected by mu
	done       chan struct{}        // closed when background work ended, protected by mu
	stopped    chan struct{}        // closed by Shutdown
	stopOnce   sync.Once
}

// New checks cfg and returns a server; Start or Run starts it.
func New(cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("orchestrator: DataDir is required")
	}
	if cfg.Listen == "" {
		cfg.Listen = ":8080"
	}
	if cfg.PublicURL != "" {
		u, err := url.Parse(cfg.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("orchestrator: PublicURL %q must be an http(s) URL without a path", cfg.PublicURL)
		}
	}
	if cfg.MeshName == "" {
		cfg.MeshName = "flexplane-orchestrator"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.API.Issuer != "" {
		if cfg.API.Audience == "" {
			return nil, errors.New("orchestrator: API.Audience is required with API.Issuer")
		}
		if cfg.API.CatalogDir == "" {
			cfg.API.CatalogDir = filepath.Join(cfg.DataDir, "catalog")
		}
	}
	if cfg.Replication.PeerURL != "" && cfg.MeshPostgres == nil {
		return nil, errors.New("orchestrator: Replication needs MeshPostgres: the mesh state moves with the leadership")
	}
	return &Server{cfg: cfg, log: cfg.Logger, stopped: make(chan struct{}), probe: &probe{}}, nil
}

// Start listens, starts the mesh control server, joins the mesh as
// tag:orchestrator and starts discovering zones. It returns once the
// orchestrator serves; ctx bounds the start only.
func (s *Server) Start(ctx context.Context) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("orchestrator: already started")
	}
	s.started = true
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()

	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("orchestrator: listen: %w", err)
	}
	undo = append(undo, func() { ln.Close() })
	publicURL := s.cfg.PublicURL
	if publicURL == "" {
		publicURL = "http://" + hostPort(ln.Addr())
	}
	ccfg := meshcontrol.Config{
		DataDir:   filepath.Join(s.cfg.DataDir, "headscale"),
		ServerURL: publicURL,
		STUNAddr:  s.cfg.STUNAddr,
		Postgres:  s.cfg.MeshPostgres,
		AgentPort: s.cfg.AgentPort,
		Policy:    s.cfg.MeshPolicy,
		Logger:    s.log,
	}
	mux := http.NewServeMux()
	s.probe.mount(mux)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	var control *meshcontrol.Control
	var leader *meshleader.Leader
	var meshAPI *meshcontrol.Client
	if s.cfg.Replication.PeerURL == "" {
		if control, err = meshcontrol.Start(ctx, ccfg); err != nil {
			return fmt.Errorf("orchestrator: %w", err)
		}
		undo = append(undo, func() { control.Close(context.WithoutCancel(ctx)) })
		control.Mount(mux)
		srv.ConnState = control.TrackConn
		meshAPI = control.Client
	} else {
		if leader, err = s.startLeader(ctx, ccfg); err != nil {
			return err
		}
		undo = append(undo, func() { leader.Close(context.WithoutCancel(ctx)) })
		leader.Mount(mux)
		srv.ConnContext = leader.ConnContext
		meshAPI = leader.Client()
	}
	s.probe.setLeader(leader)
	if s.cfg.Handler != nil {
		mux.Handle("/", s.cfg.Handler)
	}
	var api apiSlot
	if s.cfg.API.Issuer != "" {
		mux.Handle(APIPath, &api)
		mux.Handle(APIPath+"/"+graphiql.AssetDir, &api)
	}
	done := make(chan struct{})
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("orchestrator: serve", "err", err)
		}
	}()
	undo = append(undo, func() { srv.Close() })

	meshDir := filepath.Join(s.cfg.DataDir, "mesh")
	var authKey string
	if !meshnode.HasState(meshDir) {
		key, err := ownKey(ctx, meshAPI, leader != nil)
		if err != nil {
			return fmt.Errorf("orchestrator: enroll own mesh node: %w", err)
		}
		authKey = key.Secret
	}
	node, err := meshnode.Start(ctx, meshnode.Config{
		Hostname:   s.cfg.MeshName,
		Dir:        meshDir,
		ControlURL: publicURL,
		AuthKey:    authKey,
		Logger:     s.log,
	})
	if err != nil {
		return fmt.Errorf("orchestrator: join mesh: %w", err)
	}
	undo = append(undo, func() { node.Close(context.WithoutCancel(ctx)) })
	s.probe.setNode(node)

	registry, err := zones.New(zones.Config{
		Mesh:            mesh{control: meshAPI, node: node},
		AgentPort:       s.cfg.AgentPort,
		RefreshInterval: s.cfg.RefreshInterval,
		Logger:          s.log,
		TracerProvider:  s.cfg.TracerProvider,
	})
	if err != nil {
		return fmt.Errorf("orchestrator: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(registry, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var sinks audit.Multi
	if s.cfg.Audit.Log != nil {
		sinks = append(sinks, audit.NewWriter(s.cfg.Audit.Log, s.log))
	}
	var webhook *audit.Webhook
	if wc := s.cfg.Audit.Webhook; wc.URL != "" {
		wc.Metrics, wc.Logger = reg, s.log.With("component", "audit")
		if webhook, err = audit.NewWebhook(wc); err != nil {
			return fmt.Errorf("orchestrator: %w", err)
		}
		undo = append(undo, func() { webhook.Close(context.WithoutCancel(ctx)) })
		sinks = append(sinks, webhook)
	}
	if s.cfg.Audit.Sink != nil {
		sinks = append(sinks, s.cfg.Audit.Sink)
	}
	var auditSink audit.Sink
	if len(sinks) > 0 {
		auditSink = sinks
	}
	var store catalog.Store
	var closeCatalog func()
	var vms *compute.Service
	if s.cfg.API.Issuer != "" {
		s.probe.expectAPI()
		consoles, err := console.New(console.Config{Agents: consoleAgents{registry}, TTL: s.cfg.API.ConsoleTTL,
			Logger: s.log.With("component", "console")})
		if err != nil {
			return fmt.Errorf("orchestrator: %w", err)
		}
		h, st, closeCat, cs, err := s.newAPI(ctx, registry, meshAPI, leader, reg, auditSink, consoles)
		if err != nil {
			return err
		}
		undo = append(undo, closeCat)
		closeCatalog = closeCat
		vms = cs
		// ServeMux allows registering while it serves; until now the
		// console path fell through to Handler.
		mux.Handle(console.PathPrefix, consoles.Handler())
		api.set(h)
		store = st
		s.probe.setCatalog(st)
	}
	var metricsSrv *http.Server
	var metricsLn net.Listener
	if s.cfg.MetricsListen != "" {
		if metricsLn, err = net.Listen("tcp", s.cfg.MetricsListen); err != nil {
			return fmt.Errorf("orchestrator: metrics: listen: %w", err)
		}
		undo = append(undo, func() { metricsLn.Close() })
		metricsSrv = &http.Server{Handler: metricsHandler(reg, registry), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
		go func() {
			if err := metricsSrv.Serve(metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("orchestrator: serve metrics", "err", err)
			}
		}()
		s.log.Info("orchestrator serving metrics", "listen", metricsLn.Addr().String())
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	kctx, kubeStop := context.WithCancel(rctx)
	kubeDone := make(chan struct{})
	if k := s.kube; k != nil {
		// Cluster API's controllers run on one replica at a time: the
		// mesh control server's leader (this one when not replicated).
		var l leadership = alone{}
		if leader != nil {
			l = leader
		}
		go func() {
			defer close(kubeDone)
			k.run(kctx, l)
		}()
	} else {
		close(kubeDone)
	}
	edge, lbs := s.edge, s.lbs
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		if vms != nil {
			// Finishes creates other orchestrators left unfinished.
			wg.Go(func() { _ = vms.Run(rctx) })
		}
		if edge != nil {
			wg.Go(func() { edge.Run(rctx) })
		}
		if lbs != nil {
			wg.Go(func() { _ = lbs.Run(rctx) })
		}
		registry.Run(rctx)
		wg.Wait()
	}()

	s.ln, s.url, s.http, s.control, s.node, s.registry, s.stop, s.done = ln, publicURL, srv, control, node, registry, stop, done
	s.kubeStop, s.kubeDone = kubeStop, kubeDone
	s.leader, s.meshAPI = leader, meshAPI
	s.catalog, s.closeCat, s.compute = store, closeCatalog, vms
	s.metrics, s.metricsSrv, s.metricsLn, s.webhook = reg, metricsSrv, metricsLn, webhook
	s.log.Info("orchestrator serving", "listen", ln.Addr().String(), "url", publicURL)
	return nil
}

// newAPI builds the GraphQL handler over the registry, the catalog
// directory and the control server's enrollment keys.
func (s *Server) newAPI(ctx context.Context, registry *zones.Registry, meshAPI *meshcontrol.Client, leader *meshleader.Leader, reg prometheus.Registerer, sink audit.Sink, consoles *console.Broker) (_ http.Handler, _ catalog.Store, closeCat func(), _ *compute.Service, err error) {
	c := s.cfg.API
	// The identity provider may come up after the orchestrator (or be down
	// for a while): the verifier keeps asking it until it answers, and the
	// API answers UNAVAILABLE (503) meanwhile; the mesh works regardless.
	verifier, err := auth.NewLazyVerifier(auth.Config{Issuer: c.Issuer, Audience: c.Audience, Claims: c.Claims, HTTPClient: c.HTTPClient})
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
	vms, err := compute.New(compute.Config{Catalog: store, Zones: computeZones{registry}, Volumes: volumeMover{registry}, Snippets: registry.SnippetWriter(),
		ZoneTimeout: c.ZoneTimeout, StaleAfter: c.VMRecoverAfter, RecoverInterval: c.VMRecoverInterval, Recovers: recovers, Logger: s.log.With("component", "compute")})
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("orchestrator: %w", err)
	}
	// Every replica runs the load balancers' sync too: a replica given the
	// config it runs does nothing.
	var lbs graph.LBSyncer
	if secrets, ok := store.(catalog.SecretStore); ok {
		disc, err := lbDiscovery(c.LoadBalancers, s.cfg.Kube)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("orchestrator: %w", err)
		}
		s.lbs = lbsync.New(lbsync.Config{Store: store, Secrets: secrets, Zones: c.LoadBalancers.Zones, Token: c.LoadBalancers.Token,
			Discover: disc, Logger: s.log.With("component", "lbsync")})
		lbs = s.lbs
	}
	if s.kube, err = newKubernetes(c.Kubernetes, s.cfg.Kube, store, vms, s.log.With("component", "kubernetes")); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("orchestrator: %w", err)
	}
	var kube *tenantkube.Service
	var kubeTargets edgesync.KubeTargets
	if s.kube != nil {
		kube, kubeTargets = s.kube.svc, s.kube.targets
	}
	// Every replica runs the edge gateways' syncer: they all compute the
	// same placement from the catalog.
	s.edge = edgesync.New(edgesync.Config{Zones: registry, Logger: s.log.With("component", "edgesync"),
		Desired: edgesync.FromCatalog(store, registry, s.log.With("component", "edgesync"), lbZones(c.LoadBalancers), kubeTargets)})
	if rc := c.Releases; rc.PublicKey != "" {
		if s.rollouts, err = newRollouts(rc, s.cfg.DataDir, registry, s.log); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	// One read service of the estate for every request: its bound on the
	// Proxmox answers decoded at a time holds for the process.
	est := estate.New(estate.Config{Zones: registry, Catalog: store, Placement: vms, Timeout: c.ZoneTimeout,
		Logger: s.log.With("component", "estate")})
	h, err := api.New(api.Config{
		Verifier: verifier,
		Resolver: &graph.Resolver{
			Catalog:       store,
			Tenant:        c.Tenant,
			Logger:        s.log.With("component", "api"),
			Zones:         registry,
			Estate:        est,
			ZoneTimeout:   c.ZoneTimeout,
			Keys:          meshAPI,
			AgentVersion:  c.AgentVersion,
			Compute:       vms,
			Rollouts:      s.rollouts,
			Edge:          s.edge,
			Consoles:      consoles,
			LoadBalancers: lbs,
			Kubernetes:    kube,
		},
		Logger:         s.log.With("component", "api"),
		MaxDepth:       c.MaxDepth,
		MaxComplexity:  c.MaxComplexity,
		Metrics:        reg,
		TracerProvider: s.cfg.TracerProvider,
		Audit:          sink,
	})
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("orchestrator: %w", err)
	}
	return h, store, closeCat, vms, nil
}

// newRollouts opens the release store and the rollout service over it.
func newRollouts(rc ReleasesConfig, dataDir string, registry *zones.Registry, log *slog.Logger) (*rollout.Service, error) {
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
func (s *Server) Zones() *zones.Registry {
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

// mesh adapts the control server and the orchestrator's node to zones.Mesh.
type mesh struct {
	control *meshcontrol.Client
	node    *meshnode.Node
}

func (m mesh) Nodes(ctx context.Context) ([]zones.MeshNode, error) {
	nodes, err := m.control.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]zones.MeshNode, 0, len(nodes))
	for _, n := range nodes {
		zn := zones.MeshNode{ID: n.ID, Name: n.GivenName, Tags: n.Tags, Online: n.Online}
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

func (m mesh) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return m.node.Dial(ctx, network, addr)
}

// AgentMetricsPath is the path prefix, on MetricsListen, of each agent's
// metrics: AgentMetricsPath + <the agent's mesh name>.
const AgentMetricsPath = "/metrics/agents/"

// metricsHandler serves the orchestrator's metrics at /metrics and each
// agent's, read over the mesh with its Metrics RPC, below AgentMetricsPath.
func metricsHandler(reg prometheus.Gatherer, registry *zones.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	mux.HandleFunc("GET "+AgentMetricsPath+"{host}", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		text, contentType, err := registry.AgentMetrics(ctx, r.PathValue("host"))
		switch {
		case errors.Is(err, zones.ErrUnknownHost):
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
