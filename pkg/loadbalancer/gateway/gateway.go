// Package gateway is flexgateway, the load balancers' data plane: it embeds
// Caddy v2 with caddy-l4 as libraries and serves the lbconfig.Config the
// orchestrator pushes through the admin API of lbconfig (PUT /v1/config).
//
// A Config is validated (Validate), rendered into Caddy's JSON config by
// typed structs of this package (TCP and TLS passthrough listeners as
// caddy-l4 servers, HTTP and HTTPS listeners as Caddy HTTP servers with
// path-prefix routes and reverse_proxy, certificates loaded from the
// Config and chosen by SNI) and loaded with caddy.Load, which starts the
// new servers on the listeners the old ones hold and only then stops the
// old ones: established TCP streams and requests in flight run on. HTTP
// and HTTPS connections are served by the gateway's own http.Server per
// address (front.go), which hands each request to the Caddy server in
// force: a reload closes no keep-alive connection. An invalid Config is refused and changes nothing; one Caddy fails to start
// leaves the old one running.
//
// Health checks are the gateway's own (TCP connect or HTTP GET with
// thresholds, per pool): a backend that fails UnhealthyThreshold checks in
// a row is left out of the rendered config until it passes
// HealthyThreshold checks in a row; each change of health reloads Caddy.
//
// The admin API is served over TLS only, and answers only a client whose
// certificate chains to Config.TLS's CA and who bears the zone's token
// (Config.Token); private keys are write-only: GET /v1/config shows a
// fingerprint of each key, never the key.
//
// Caddy's own admin endpoint is disabled and its config is never
// autosaved; its storage is DataDir. Caddy's running config is
// process-wide, so a process runs at most one Gateway at a time.
package gateway

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	// The Caddy modules a rendered config uses, and no others.
	_ "github.com/caddyserver/caddy/v2/modules/caddyevents"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	_ "github.com/caddyserver/caddy/v2/modules/caddytls"
	_ "github.com/caddyserver/caddy/v2/modules/filestorage"
	_ "github.com/mholt/caddy-l4/layer4"
	_ "github.com/mholt/caddy-l4/modules/l4close"
	_ "github.com/mholt/caddy-l4/modules/l4proxy"
	_ "github.com/mholt/caddy-l4/modules/l4tls"

	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// Config configures a Gateway.
type Config struct {
	// AdminAddr is the host:port of the admin API (lbconfig's), served
	// over TLS only, also serving /healthz, /readyz and /metrics (which
	// need no client certificate); "127.0.0.1:0" picks a port
	// (Gateway.AdminAddr tells which). Required.
	AdminAddr string
	// TLS are the admin listener's certificate and key, and the CA a
	// client's certificate must chain to for the admin API (see
	// lbconfig.ServerTLS); the files are read at every handshake.
	// Required.
	TLS lbconfig.TLSFiles
	// Token is the admin API's bearer token: the token of the gateway's
	// zone only. Required.
	Token string
	// DataDir is the only directory the gateway and Caddy write to
	// (Caddy's storage under DataDir/caddy). Required; created if absent.
	DataDir string
	// CaddyLogLevel is the level of Caddy's own logs on stderr (DEBUG,
	// INFO, WARN, ERROR); empty is WARN.
	CaddyLogLevel string
	// Logger receives the gateway's logs; nil is slog.Default().
	Logger *slog.Logger
	// Registry is where the gateway's metrics are registered and what
	// /metrics serves; nil makes one of its own with the Go and process
	// collectors.
	Registry *prometheus.Registry
}

// running claims Caddy's process-wide running config for one Gateway.
var running atomic.Bool

// Gateway is a running flexgateway. Make one with New.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	admin   *http.Server
	ln      net.Listener
	metrics *gatewayMetrics
	reload  chan struct{} // a health change asks for a reload
	done    chan struct{} // closed by Shutdown
	stop    sync.Once

	// applyMu serialises rendering and loading Caddy configs.
	applyMu sync.Mutex

	mu       sync.Mutex
	current  *lbconfig.Config             // protected by mu; nil before the first Apply
	applied  time.Time                    // protected by mu
	health   map[backendKey]*backendState // protected by mu
	checkers context.CancelFunc           // protected by mu; stops the current health checkers
	// gen is the status's generation: it changes with every apply and
	// every backend health change; it starts at the process's start time
	// so that a restarted gateway never reuses its predecessor's.
	gen     uint64        // protected by mu
	changed chan struct{} // closed and replaced when gen changes, protected by mu
}

// New checks cfg, claims the process's Caddy and listens on AdminAddr. Run
// serves; a Gateway that is never run must still be Shutdown.
func New(cfg Config) (*Gateway, error) {
	switch {
	case cfg.AdminAddr == "":
		return nil, errors.New("gateway: AdminAddr is required")
	case cfg.Token == "":
		return nil, errors.New("gateway: Token is required")
	case cfg.DataDir == "":
		return nil, errors.New("gateway: DataDir is required")
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "caddy"), 0o700); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if !running.CompareAndSwap(false, true) {
		return nil, errors.New("gateway: another Gateway runs in this process (Caddy's config is process-wide)")
	}
	// Caddy keeps a few files of its own (an instance id) in its app data
	// directory, found from the environment: point it into DataDir.
	if err := os.Setenv("XDG_DATA_HOME", cfg.DataDir); err != nil {
		running.Store(false)
		return nil, fmt.Errorf("gateway: %w", err)
	}
	tlsCfg, err := lbconfig.ServerTLS(cfg.TLS)
	if err != nil {
		running.Store(false)
		return nil, fmt.Errorf("gateway: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		running.Store(false)
		return nil, fmt.Errorf("gateway: admin listener: %w", err)
	}
	ln = tls.NewListener(ln, tlsCfg)
	g := &Gateway{
		cfg:     cfg,
		log:     cmp.Or(cfg.Logger, slog.Default()),
		ln:      ln,
		reload:  make(chan struct{}, 1),
		done:    make(chan struct{}),
		health:  map[backendKey]*backendState{},
		gen:     uint64(time.Now().UnixNano()),
		changed: make(chan struct{}),
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	g.metrics = newMetrics(reg, g)
	g.admin = &http.Server{Handler: g.handler(reg), ReadHeaderTimeout: 10 * time.Second}
	return g, nil
}

// AdminAddr is the address the admin API listens on.
func (g *Gateway) AdminAddr() net.Addr { return g.ln.Addr() }

// Run serves the admin API and reloads Caddy on health changes until ctx
// ends or Shutdown is called; then it stops Caddy and returns. It returns
// nil after a Shutdown or the end of ctx.
func (g *Gateway) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- g.admin.Serve(g.ln) }()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			return g.Shutdown(sctx)
		case <-g.done:
			return nil
		case err := <-errc:
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			_ = g.Shutdown(context.WithoutCancel(ctx))
			return fmt.Errorf("gateway: admin: %w", err)
		case <-g.reload:
			if err := g.reloadHealth(); err != nil {
				g.log.Error("reload after a health change", "err", err)
			}
		}
	}
}

// Shutdown stops the admin API (waiting for its requests up to ctx), the
// health checks and Caddy's servers: listeners close, connections in
// flight are closed. The process may then run another Gateway. Calls after
// the first return nil.
func (g *Gateway) Shutdown(ctx context.Context) error {
	var err error
	g.stop.Do(func() {
		close(g.done)
		err = g.admin.Shutdown(ctx)
		g.mu.Lock()
		if g.checkers != nil {
			g.checkers()
		}
		started := g.current != nil
		g.mu.Unlock()
		g.applyMu.Lock()
		defer g.applyMu.Unlock()
		if started {
			stopped := make(chan error, 1)
			go func() { stopped <- caddy.Stop() }()
			select {
			case e := <-stopped:
				err = errors.Join(err, e)
			case <-ctx.Done():
				err = errors.Join(err, ctx.Err())
			}
		}
		closeUnused(nil)
		running.Store(false)
	})
	if err != nil {
		return fmt.Errorf("gateway shutdown: %w", err)
	}
	return nil
}

// Apply validates cfg and loads it: an invalid cfg is an error wrapping
// ErrInvalid and changes nothing; so does one Caddy fails to start. Health
// of backends kept by cfg (same balancer, pool, id and address) carries
// over; new backends start healthy and are checked at once.
func (g *Gateway) Apply(ctx context.Context, cfg lbconfig.Config) error {
	start := time.Now()
	if err := Validate(cfg); err != nil {
		g.metrics.applies.WithLabelValues("invalid").Inc()
		return err
	}
	g.applyMu.Lock()
	defer g.applyMu.Unlock()
	select {
	case <-g.done:
		return errors.New("gateway apply: shut down")
	case <-ctx.Done():
		return fmt.Errorf("gateway apply: %w", ctx.Err())
	default:
	}
	opened, err := openSockets(cfg, g.log)
	if err != nil {
		g.metrics.applies.WithLabelValues("invalid").Inc()
		return err
	}
	g.mu.Lock()
	health := carryHealth(g.health, cfg)
	g.mu.Unlock()
	if err := g.load(cfg, downSet(health)); err != nil {
		closeSockets(opened)
		g.metrics.applies.WithLabelValues("failed").Inc()
		return err
	}
	closeUnused(&cfg)
	g.mu.Lock()
	if g.checkers != nil {
		g.checkers()
	}
	g.current, g.applied, g.health = &cfg, time.Now(), health
	g.bump()
	checkCtx, cancel := context.WithCancel(context.Background())
	g.checkers = cancel
	g.mu.Unlock()
	g.startChecks(checkCtx, cfg)
	g.metrics.applies.WithLabelValues("applied").Inc()
	g.metrics.applySeconds.Observe(time.Since(start).Seconds())
	g.log.Info("config applied", "revision", cfg.Revision, "balancers", len(cfg.Balancers), "took", time.Since(start))
	return nil
}

// load renders cfg without the backends that are down and loads it into
// Caddy. The caller holds applyMu.
func (g *Gateway) load(cfg lbconfig.Config, down map[backendKey]bool) error {
	out, err := render(cfg, renderOptions{
		StorageDir: filepath.Join(g.cfg.DataDir, "caddy"),
		LogLevel:   g.cfg.CaddyLogLevel,
		Down:       func(k backendKey) bool { return down[k] },
		Listen: func(p lbconfig.Protocol, addr string) string {
			if p == lbconfig.ProtocolHTTP || p == lbconfig.ProtocolHTTPS {
				return caddyHTTPNetwork + "/" + addr
			}
			return caddyNetwork + "/" + addr
		},
	})
	if err != nil {
		return err
	}
	if err := caddy.Load(out, true); err != nil {
		return fmt.Errorf("gateway apply: caddy: %w", err)
	}
	return nil
}

// reloadHealth loads the config in force again after a health change.
func (g *Gateway) reloadHealth() error {
	g.applyMu.Lock()
	defer g.applyMu.Unlock()
	g.mu.Lock()
	cfg, down := g.current, downSet(g.health)
	g.mu.Unlock()
	if cfg == nil {
		return nil
	}
	start := time.Now()
	if err := g.load(*cfg, down); err != nil {
		return err
	}
	g.metrics.healthReloads.Inc()
	g.log.Info("reloaded after a health change", "revision", cfg.Revision, "took", time.Since(start))
	return nil
}

// bump changes the status's generation and wakes its watchers; g.mu is held.
func (g *Gateway) bump() {
	g.gen++
	close(g.changed)
	g.changed = make(chan struct{})
}

// Status is the gateway's lbconfig.Status.
func (g *Gateway) Status() lbconfig.Status {
	st, _ := g.statusAndChanged()
	return st
}

// statusAndChanged is the status and a channel closed when its generation
// changes.
func (g *Gateway) statusAndChanged() (lbconfig.Status, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.status(), g.changed
}

// status is the gateway's lbconfig.Status; g.mu is held.
func (g *Gateway) status() lbconfig.Status {
	st := lbconfig.Status{Generation: g.gen, Applied: g.applied, Backends: []lbconfig.BackendStatus{}}
	if g.current == nil {
		return st
	}
	st.Revision = g.current.Revision
	for _, b := range g.current.Balancers {
		for _, p := range b.Pools {
			if p.HealthCheck == nil {
				continue
			}
			for _, be := range p.Backends {
				s := g.health[backendKey{b.ID, p.Name, be.ID}]
				if s == nil {
					continue
				}
				st.Backends = append(st.Backends, lbconfig.BackendStatus{
					Balancer: b.ID, Pool: p.Name, Backend: be.ID,
					Healthy: s.healthy, LastError: s.lastError, Checked: s.checked,
				})
			}
		}
	}
	return st
}

// configInForce is the Config in force with certificate keys redacted
// (each key's fingerprint in its place, and only the CERTIFICATE blocks
// of each chain, so that a key pasted after a chain is left out too), and
// whether there is one.
func (g *Gateway) configInForce() (lbconfig.Config, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.current == nil {
		return lbconfig.Config{}, false
	}
	// A deep enough copy: only the certificates are changed.
	var cfg lbconfig.Config
	b, _ := json.Marshal(g.current)
	_ = json.Unmarshal(b, &cfg)
	for i := range cfg.Balancers {
		for j := range cfg.Balancers[i].Certificates {
			c := &cfg.Balancers[i].Certificates[j]
			c.KeyFingerprint = lbconfig.KeyFingerprint(c.KeyPEM)
			c.KeyPEM, c.CertPEM = "", lbconfig.CertificatesOnly(c.CertPEM)
		}
	}
	return cfg, true
}
