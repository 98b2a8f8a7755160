package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/flexplane/flexplane/graph/server/graphiql"
	"github.com/flexplane/flexplane/pkg/audit"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/console"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/mesh/meshleader"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
)

// phase is one named step of Start. run starts what the step owns and
// returns its closer (nil when there is nothing to undo); when a later
// step fails, Start runs the closers of the steps before it, last first.
type phase struct {
	name string
	run  func(ctx context.Context) (closer func(), err error)
}

// phases are Start's steps in their order: each depends only on the ones
// before it.
func (b *boot) phases() []phase {
	return []phase{
		{"listen", b.listen},
		{"mesh control", b.meshControl},
		{"serve", b.serve},
		{"mesh node", b.meshNode},
		{"zone registry", b.zoneRegistry},
		{"audit", b.audit},
		{"api", b.api},
		{"metrics", b.metricsListener},
		{"background work", b.background},
	}
}

// Start listens, starts the mesh control server, joins the mesh as
// tag:orchestrator and starts discovering zones, in the named steps of
// phases. It returns once the orchestrator serves; ctx bounds the start
// only. A failed step undoes the ones before it and names itself in the
// error.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("orchestrator: already started")
	}
	s.started = true
	b := &boot{s: s, cfg: s.cfg, log: s.log}
	var closers []func()
	for _, p := range b.phases() {
		closer, err := p.run(ctx)
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
			return fmt.Errorf("orchestrator: %s: %w", p.name, err)
		}
		if closer != nil {
			closers = append(closers, closer)
		}
		s.log.Debug("orchestrator: started", "phase", p.name)
	}
	s.ln, s.url, s.http, s.control, s.node, s.registry, s.stop, s.done = b.ln, b.publicURL, b.srv, b.control, b.node, b.registry, b.stop, b.done
	s.kubeStop, s.kubeDone = b.kubeStop, b.kubeDone
	s.leader, s.meshAPI = b.leader, b.meshAPI
	s.catalog, s.closeCat, s.compute = b.store, b.closeCat, b.vms
	s.metrics, s.metricsSrv, s.metricsLn, s.webhook = b.reg, b.metricsSrv, b.metricsLn, b.webhook
	s.log.Info("orchestrator serving", "listen", b.ln.Addr().String(), "url", b.publicURL)
	return nil
}

// boot is what Start's phases build, each from what the earlier ones
// built; Start hands it to the Server once every phase ran.
type boot struct {
	s   *Server
	cfg Config
	log *slog.Logger

	ln         net.Listener         // listen
	publicURL  string               // listen
	mux        *http.ServeMux       // mesh control
	srv        *http.Server         // mesh control
	ccfg       meshcontrol.Config   // mesh control
	control    *meshcontrol.Control // mesh control, when alone
	leader     *meshleader.Leader   // mesh control, when replicated
	meshAPI    *meshcontrol.Client  // mesh control
	apiSlot    apiSlot              // serve
	node       *meshnode.Node       // mesh node
	registry   *fleet.Registry      // zone registry
	reg        *prometheus.Registry // zone registry
	webhook    *audit.Webhook       // audit
	auditSink  audit.Sink           // audit
	store      catalog.Store        // api
	closeCat   func()               // api
	vms        *compute.Service     // api
	metricsSrv *http.Server         // metrics
	metricsLn  net.Listener         // metrics
	stop       context.CancelFunc   // background work
	done       chan struct{}        // background work
	kubeStop   context.CancelFunc   // background work
	kubeDone   chan struct{}        // background work
}

// listen binds the public address and settles the public URL.
func (b *boot) listen(context.Context) (func(), error) {
	ln, err := net.Listen("tcp", b.cfg.Listen)
	if err != nil {
		return nil, err
	}
	b.ln = ln
	b.publicURL = b.cfg.PublicURL
	if b.publicURL == "" {
		b.publicURL = "http://" + hostPort(ln.Addr())
	}
	return func() { ln.Close() }, nil
}

// meshControl starts the embedded mesh control server, or, replicated,
// the election of the replica that runs it, and mounts it on the public
// mux.
func (b *boot) meshControl(ctx context.Context) (func(), error) {
	b.ccfg = meshcontrol.Config{
		DataDir:   filepath.Join(b.cfg.DataDir, "headscale"),
		ServerURL: b.publicURL,
		STUNAddr:  b.cfg.STUNAddr,
		Postgres:  b.cfg.MeshPostgres,
		AgentPort: b.cfg.AgentPort,
		Policy:    b.cfg.MeshPolicy,
		Logger:    b.log,
	}
	b.mux = http.NewServeMux()
	b.s.probe.mount(b.mux)
	b.srv = &http.Server{
		Handler:           b.mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(b.log.Handler(), slog.LevelDebug),
	}
	var closer func()
	if b.cfg.Replication.PeerURL == "" {
		control, err := meshcontrol.Start(ctx, b.ccfg)
		if err != nil {
			return nil, err
		}
		control.Mount(b.mux)
		b.srv.ConnState = control.TrackConn
		b.control, b.meshAPI = control, control.Client
		closer = func() { control.Close(context.WithoutCancel(ctx)) }
	} else {
		leader, err := b.s.startLeader(ctx, b.ccfg)
		if err != nil {
			return nil, err
		}
		leader.Mount(b.mux)
		b.srv.ConnContext = leader.ConnContext
		b.leader, b.meshAPI = leader, leader.Client()
		closer = func() { leader.Close(context.WithoutCancel(ctx)) }
	}
	b.s.probe.setLeader(b.leader)
	return closer, nil
}

// serve starts serving the public mux: the mesh control protocol, the
// probes, Config.Handler, and the API's slot, which answers UNAVAILABLE
// until the api phase fills it.
func (b *boot) serve(context.Context) (func(), error) {
	if b.cfg.Handler != nil {
		b.mux.Handle("/", b.cfg.Handler)
	}
	if b.cfg.API.Issuer != "" {
		b.mux.Handle(APIPath, &b.apiSlot)
		b.mux.Handle(APIPath+"/"+graphiql.AssetDir, &b.apiSlot)
	}
	srv, ln := b.srv, b.ln
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.log.Error("orchestrator: serve", "err", err)
		}
	}()
	return func() { srv.Close() }, nil
}

// meshNode joins the mesh as the orchestrator's own node, enrolling it
// with a fresh key the first time.
func (b *boot) meshNode(ctx context.Context) (func(), error) {
	meshDir := filepath.Join(b.cfg.DataDir, "mesh")
	var authKey string
	if !meshnode.HasState(meshDir) {
		key, err := ownKey(ctx, b.meshAPI, b.leader != nil)
		if err != nil {
			return nil, fmt.Errorf("enroll own mesh node: %w", err)
		}
		authKey = key.Secret
	}
	node, err := meshnode.Start(ctx, meshnode.Config{
		Hostname:   b.cfg.MeshName,
		Dir:        meshDir,
		ControlURL: b.publicURL,
		AuthKey:    authKey,
		Logger:     b.log,
	})
	if err != nil {
		return nil, fmt.Errorf("join mesh: %w", err)
	}
	b.node = node
	b.s.probe.setNode(node)
	return func() { node.Close(context.WithoutCancel(ctx)) }, nil
}

// zoneRegistry builds the registry of zones and hosts over the mesh (it
// starts discovering in background work) and the metrics registry.
func (b *boot) zoneRegistry(context.Context) (func(), error) {
	registry, err := fleet.New(fleet.Config{
		Mesh:            mesh{control: b.meshAPI, node: b.node},
		AgentPort:       b.cfg.AgentPort,
		RefreshInterval: b.cfg.RefreshInterval,
		Logger:          b.log,
		TracerProvider:  b.cfg.TracerProvider,
	})
	if err != nil {
		return nil, err
	}
	b.registry = registry
	b.reg = prometheus.NewRegistry()
	b.reg.MustRegister(registry, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return nil, nil
}

// audit opens the audit sinks Config.Audit names.
func (b *boot) audit(ctx context.Context) (func(), error) {
	var sinks audit.Multi
	if b.cfg.Audit.Log != nil {
		sinks = append(sinks, audit.NewWriter(b.cfg.Audit.Log, b.log))
	}
	var closer func()
	if wc := b.cfg.Audit.Webhook; wc.URL != "" {
		wc.Metrics, wc.Logger = b.reg, b.log.With("component", "audit")
		webhook, err := audit.NewWebhook(wc)
		if err != nil {
			return nil, err
		}
		b.webhook = webhook
		closer = func() { webhook.Close(context.WithoutCancel(ctx)) }
		sinks = append(sinks, webhook)
	}
	if b.cfg.Audit.Sink != nil {
		sinks = append(sinks, b.cfg.Audit.Sink)
	}
	if len(sinks) > 0 {
		b.auditSink = sinks
	}
	return closer, nil
}

// api builds the GraphQL API with the capabilities' services (newAPI)
// and puts it in its slot, when Config.API names an issuer.
func (b *boot) api(ctx context.Context) (func(), error) {
	if b.cfg.API.Issuer == "" {
		return nil, nil
	}
	b.s.probe.expectAPI()
	consoles, err := console.New(console.Config{Agents: consoleAgents{b.registry}, TTL: b.cfg.API.ConsoleTTL,
		Logger: b.log.With("component", "console")})
	if err != nil {
		return nil, err
	}
	h, store, closeCat, vms, err := b.s.newAPI(ctx, b.registry, b.meshAPI, b.leader, b.reg, b.auditSink, consoles)
	if err != nil {
		return nil, err
	}
	b.store, b.closeCat, b.vms = store, closeCat, vms
	// ServeMux allows registering while it serves; until now the console
	// path fell through to Handler.
	b.mux.Handle(console.PathPrefix, consoles.Handler())
	b.apiSlot.set(h)
	b.s.probe.setCatalog(store)
	return closeCat, nil
}

// metricsListener serves the metrics on Config.MetricsListen, if set.
func (b *boot) metricsListener(context.Context) (func(), error) {
	if b.cfg.MetricsListen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", b.cfg.MetricsListen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: metricsHandler(b.reg, b.registry), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(b.log.Handler(), slog.LevelDebug)}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.log.Error("orchestrator: serve metrics", "err", err)
		}
	}()
	b.metricsLn, b.metricsSrv = ln, srv
	b.log.Info("orchestrator serving metrics", "listen", ln.Addr().String())
	return func() { srv.Close() }, nil
}

// background starts the work that runs until Shutdown: zone discovery,
// the VM runners' recovery, the edge gateways' and load balancers' syncs,
// and, on the mesh control leader, Cluster API's controllers. It is the
// last phase: it cannot fail.
func (b *boot) background(ctx context.Context) (func(), error) {
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	kctx, kubeStop := context.WithCancel(rctx)
	kubeDone := make(chan struct{})
	if k := b.s.kube; k != nil {
		// Cluster API's controllers run on one replica at a time: the
		// mesh control server's leader (this one when not replicated).
		var l leadership = alone{}
		if b.leader != nil {
			l = b.leader
		}
		go func() {
			defer close(kubeDone)
			k.run(kctx, l)
		}()
	} else {
		close(kubeDone)
	}
	done := make(chan struct{})
	vms, edge, lbs, groups, registry := b.vms, b.s.edge, b.s.lbs, b.s.groups, b.registry
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
		if groups != nil {
			wg.Go(func() { groups.Run(rctx) })
		}
		registry.Run(rctx)
		wg.Wait()
	}()
	b.stop, b.done, b.kubeStop, b.kubeDone = stop, done, kubeStop, kubeDone
	return nil, nil
}
