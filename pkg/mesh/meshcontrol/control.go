// Package meshcontrol embeds the mesh control server (Headscale with its DERP
// relay) in the orchestrator: its state lives under a data directory, its
// control protocol is served through an http.Handler the orchestrator mounts
// on its own listener, and its users are managed here: enrollment keys for
// agents, the mesh policy (tag:orchestrator may reach tag:agent on the agent
// port, nothing else) and the list of nodes.
//
// Headscale is built as a program, not a library, and this package contains
// what that implies:
//   - hscontrol.Serve installs handlers for SIGINT, SIGTERM, SIGQUIT and SIGHUP.
//     A signal that reaches the process therefore also stops (or, for SIGHUP,
//     reloads) the embedded server; the orchestrator is shutting down anyway
//     on those signals.
//   - Serve has no way to stop other than a signal. Close stops forwarding to
//     it and closes every client connection, but headscale's own goroutines,
//     its internal loopback listener and its STUN socket stay until the
//     process exits. Start may be called again in the same process (tests do)
//     on the same data directory; the new instance gets fresh ports.
//   - The fatal log calls of headscale that are reachable with the
//     configuration built here (an unusable STUN address) are checked before
//     headscale starts, so they become errors of Start.
//   - Headscale logs through zerolog's global logger; it is routed into the
//     slog.Logger of the last started Control.
//   - Headscale has data races of its own (its NodeStore, its Noise handler, a
//     logging global written by every Serve), so packages whose tests run it
//     are not run under the race detector.
//   - The DERP relay does not verify clients against the node list: headscale
//     implements that by registering a protocol on http.DefaultTransport,
//     which panics the second time in one process.
package meshcontrol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/juanfont/headscale/hscontrol"
	"github.com/juanfont/headscale/hscontrol/types"
	"tailscale.com/tailcfg"

	"github.com/flexplane/flexplane/pkg/support/closectx"
)

// Config configures the embedded control server.
type Config struct {
	// DataDir holds the control server's state: its SQLite database and its
	// Noise and DERP keys. Losing it forces every agent to enroll again,
	// unless Postgres is set: then it holds only copies of what the
	// database keeps and may be thrown away. Required.
	DataDir string
	// Postgres, when set, keeps the state in PostgreSQL (see
	// PostgresConfig) instead of SQLite in DataDir: for replicated
	// deployments. Nil is SQLite, the single-host default.
	Postgres *PostgresConfig
	// ServerURL is the URL nodes use to reach the handler returned by
	// Handler (the orchestrator's public address), e.g.
	// "https://flexplane.example.com". DERP is served there too. Required.
	ServerURL string
	// STUNAddr is the UDP address of the STUN server that helps nodes find
	// direct paths. Default DefaultSTUNAddr. A port of 0 picks a free port.
	STUNAddr string
	// SocketPath is the unix socket of headscale's local API, used by
	// `orchestrator keys`. Default DataDir/headscale.sock.
	SocketPath string
	// AgentPort is the only port tag:orchestrator may reach on agents.
	// Default 50051.
	AgentPort uint16
	// Policy replaces the default mesh policy (see Policy). Leave it empty
	// outside tests.
	Policy string
	// Logger receives the control server's logs. Default slog.Default().
	Logger *slog.Logger
}

// Control is a running embedded control server. Its Client methods manage
// keys and list nodes.
type Control struct {
	*Client

	cfg      Config
	log      *slog.Logger
	proxy    *httputil.ReverseProxy
	internal string // headscale's own loopback listener
	done     chan error

	mu     sync.Mutex
	closed bool                  // protected by mu
	conns  map[net.Conn]struct{} // upgraded client connections, protected by mu
}

// DefaultSTUNAddr is Config.STUNAddr's default.
const DefaultSTUNAddr = ":3478"

// Start starts the embedded control server and applies the mesh policy. It
// returns once the server answers on its API socket.
func Start(ctx context.Context, cfg Config) (*Control, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("meshcontrol: start: DataDir is required")
	}
	u, err := url.Parse(cfg.ServerURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("meshcontrol: start: ServerURL %q is not an http(s) URL", cfg.ServerURL)
	}
	if cfg.AgentPort == 0 {
		cfg.AgentPort = 50051
	}
	if cfg.STUNAddr == "" {
		cfg.STUNAddr = DefaultSTUNAddr
	}
	if cfg.SocketPath == "" {
		cfg.SocketPath = filepath.Join(cfg.DataDir, "headscale.sock")
	}
	if len(cfg.SocketPath) > 100 {
		return nil, fmt.Errorf("meshcontrol: start: socket path %q too long for a unix socket: set SocketPath", cfg.SocketPath)
	}
	if cfg.Policy == "" {
		cfg.Policy = Policy(cfg.AgentPort)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("meshcontrol: start: %w", err)
	}
	var pg *PostgresConfig
	if cfg.Postgres != nil {
		p, err := cfg.Postgres.resolve()
		if err != nil {
			return nil, fmt.Errorf("meshcontrol: start: %w", err)
		}
		pg = &p
	}
	stun, err := resolveUDP(cfg.STUNAddr)
	if err != nil {
		return nil, fmt.Errorf("meshcontrol: start: STUN address: %w", err)
	}
	internal, err := freeTCPAddr()
	if err != nil {
		return nil, fmt.Errorf("meshcontrol: start: %w", err)
	}
	hcfg := headscaleConfig(cfg, pg, stun, internal)
	if pg != nil {
		keys := map[string]string{noiseKeyName: hcfg.NoisePrivateKeyPath, derpKeyName: hcfg.DERP.ServerPrivateKeyPath}
		if err := syncKeys(ctx, *pg, keys); err != nil {
			return nil, fmt.Errorf("meshcontrol: start: %w", err)
		}
	}

	routeHeadscaleLogs(cfg.Logger)
	hs, err := hscontrol.NewHeadscale(hcfg)
	if err != nil {
		return nil, fmt.Errorf("meshcontrol: start headscale: %w", err)
	}
	c := &Control{
		cfg:      cfg,
		log:      cfg.Logger,
		internal: internal,
		done:     make(chan error, 1),
		conns:    make(map[net.Conn]struct{}),
	}
	go func() {
		err := hs.Serve()
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if !closed {
			// A signal to the process (headscale handles SIGINT, SIGTERM and
			// SIGQUIT itself) or a failure: nodes can no longer be served.
			c.log.Error("mesh control server stopped on its own", "err", err)
		}
		c.done <- err
	}()

	client, err := Dial(cfg.SocketPath)
	if err != nil {
		return nil, fmt.Errorf("meshcontrol: start: %w", err)
	}
	c.Client = client
	if err := c.waitReady(ctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("meshcontrol: start: %w", err)
	}
	if err := c.SetPolicy(ctx, cfg.Policy); err != nil {
		client.Close()
		return nil, fmt.Errorf("meshcontrol: start: %w", err)
	}
	target := &url.URL{Scheme: "http", Host: internal}
	c.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		},
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	c.log.Info("mesh control server started", "url", cfg.ServerURL, "stun", stun, "data_dir", cfg.DataDir, "database", hcfg.Database.Type)
	return c, nil
}

// waitReady waits until headscale answers on its socket and its HTTP listener.
func (c *Control) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-c.done:
			return fmt.Errorf("headscale stopped: %w", err)
		default:
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx)
		pcancel()
		if err == nil {
			var conn net.Conn
			conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", c.internal)
			if err == nil {
				conn.Close()
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("headscale not ready: %w", err)
		case <-tick.C:
		}
	}
}

// Handler serves the control protocol (Noise), the DERP relay and the few
// public endpoints nodes use; see Mount.
func (c *Control) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			http.Error(w, "mesh control server stopped", http.StatusServiceUnavailable)
			return
		}
		c.proxy.ServeHTTP(w, r)
	})
}

// HandledPaths are the http.ServeMux patterns of the paths the control
// server owns: what a replica not running it forwards to the one that does.
func HandledPaths() []string {
	return []string{"/ts2021", "/key", "/derp", "/derp/", "/bootstrap-dns", "/health", "/version", "/register/", "/verify"}
}

// Mount registers Handler on mux for every path the control server owns
// (/ts2021, /key, /derp..., /bootstrap-dns, /health, /version, /register/,
// /verify); the rest of mux stays free for the orchestrator's API.
func (c *Control) Mount(mux *http.ServeMux) {
	h := c.Handler()
	for _, p := range HandledPaths() {
		mux.Handle(p, h)
	}
}

// TrackConn is an http.Server ConnState hook: it lets Close cut the
// long-lived upgraded (hijacked) connections of nodes, which http.Server's
// Shutdown leaves alone. Chain it into the server's ConnState.
func (c *Control) TrackConn(conn net.Conn, state http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case http.StateHijacked:
		if c.closed {
			conn.Close()
			return
		}
		c.conns[conn] = struct{}{}
	case http.StateClosed:
		delete(c.conns, conn)
	}
}

// Close stops serving the control protocol and closes the connections of all
// nodes, and then its client of headscale's local API, until ctx ends. See
// the package documentation for what headscale leaves behind.
func (c *Control) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	conns := c.conns
	c.conns = nil
	c.mu.Unlock()
	for conn := range conns {
		conn.Close()
	}
	err := closectx.Do(ctx, "meshcontrol: close", c.Client.Close)
	c.log.Info("mesh control server stopped")
	return err
}

// SocketPath is the unix socket of the local API (see Dial).
func (c *Control) SocketPath() string { return c.cfg.SocketPath }

// mapSessionBuffer is how many map updates the control server queues for
// one node's map stream while the node reads the earlier ones.
//
// Headscale hands an update to a node's stream through a queue of this
// size and waits at most 50 ms when it is full; a stream that times out is
// dropped for good, but the node's session stays open (the server still
// sends it keepalives), so the node never hears of another change until
// its session ends for another reason: it keeps the map it had, missing
// the nodes that joined and the endpoints that changed since. With
// Headscale's default of 30, a mesh of a hundred agents joining at once
// on a busy machine dropped the streams of a third of its nodes, the
// orchestrator's own among them, and its zones never came online. Each
// slot is one pointer (8 KiB a node for 1,024); the updates it queues are
// the ones the node is due anyway.
const mapSessionBuffer = 1024

func headscaleConfig(cfg Config, pg *PostgresConfig, stun, internal string) *types.Config {
	// When nodes reach the server by an IPv4 literal, the DERP node is
	// announced as IPv4-only: otherwise every node's network check waits
	// about 3s for an IPv6 STUN answer that cannot come.
	var derpV4, derpV6 string
	if u, err := url.Parse(cfg.ServerURL); err == nil {
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil && ip.Is4() {
			derpV4, derpV6 = ip.String(), "none"
		}
	}
	db := types.DatabaseConfig{
		Type: types.DatabaseSqlite,
		Sqlite: types.SqliteConfig{
			Path:              filepath.Join(cfg.DataDir, "headscale.sqlite"),
			WriteAheadLog:     true,
			WALAutoCheckPoint: 1000,
		},
	}
	if pg != nil {
		// Headscale joins these into a keyword/value connection string
		// unquoted: quoted here, every value stays one value.
		db = types.DatabaseConfig{
			Type: types.DatabasePostgres,
			Postgres: types.PostgresConfig{
				Host:                quote(pg.Host),
				Port:                pg.Port,
				Name:                quote(pg.Database),
				User:                quote(pg.User),
				Pass:                quote(pg.Password),
				Ssl:                 pg.SSLMode,
				MaxOpenConnections:  pg.MaxOpenConns,
				MaxIdleConnections:  pg.MaxOpenConns,
				ConnMaxIdleTimeSecs: 3600,
			},
		}
	}
	v4 := netip.MustParsePrefix("100.64.0.0/10")
	v6 := netip.MustParsePrefix("fd7a:115c:a1e0::/48")
	return &types.Config{
		ServerURL:                      cfg.ServerURL,
		Addr:                           internal,
		EphemeralNodeInactivityTimeout: 120 * time.Second,
		PrefixV4:                       &v4,
		PrefixV6:                       &v6,
		IPAllocation:                   types.IPAllocationStrategySequential,
		NoisePrivateKeyPath:            filepath.Join(cfg.DataDir, "noise_private.key"),
		DisableUpdateCheck:             true,
		Database:                       db,
		DERP: types.DERPConfig{
			ServerEnabled:                      true,
			AutomaticallyAddEmbeddedDerpRegion: true,
			ServerRegionID:                     999,
			ServerRegionCode:                   "flexplane",
			ServerRegionName:                   "flexplane embedded DERP",
			ServerPrivateKeyPath:               filepath.Join(cfg.DataDir, "derp_server_private.key"),
			STUNAddr:                           stun,
			IPv4:                               derpV4,
			IPv6:                               derpV6,
		},
		TailcfgDNSConfig:     &tailcfg.DNSConfig{},
		UnixSocket:           cfg.SocketPath,
		UnixSocketPermission: 0o770,
		Policy:               types.PolicyConfig{Mode: types.PolicyModeDB},
		Log:                  types.LogConfig{Format: types.JSONLogFormat, Level: 0},
		Tuning: types.Tuning{
			NotifierSendTimeout:            800 * time.Millisecond,
			BatchChangeDelay:               200 * time.Millisecond,
			NodeMapSessionBufferedChanSize: mapSessionBuffer,
			BatcherWorkers:                 types.DefaultBatcherWorkers(),
			NodeStoreBatchSize:             100,
			NodeStoreBatchTimeout:          100 * time.Millisecond,
		},
	}
}

// resolveUDP checks that addr can be bound (headscale exits the process when
// it cannot) and replaces a zero port with a free one.
func resolveUDP(addr string) (string, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return "", err
	}
	bound := pc.LocalAddr().(*net.UDPAddr)
	host, _, err := net.SplitHostPort(addr)
	pc.Close()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, fmt.Sprint(bound.Port)), nil
}

func freeTCPAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick internal port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}
