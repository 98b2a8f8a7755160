// Package meshleader runs the mesh control server on exactly one of the
// orchestrator replicas sharing its PostgreSQL database: the one holding a
// Kubernetes Lease (client-go's leader election). The other replicas
// forward the control protocol (Noise at /ts2021, /key, DERP and the other
// paths the control server owns) to it, so mesh nodes keep one URL (the
// Service's) whichever replica they reach, and they reach its headscale
// API (enrollment keys, the node list) through a tunnel on the same
// listener, authenticated by a token kept in the database.
//
// Leadership gained, the replica starts the control server from the state
// in PostgreSQL; lost (or Close), it stops serving it and closes every
// connection it served or forwarded, so nodes reconnect to the next
// leader. Headscale cannot be stopped inside a process (see package
// meshcontrol): a replica that lost leadership keeps its idle goroutines
// until it exits.
//
// Every replica answers STUN on the control server's STUN address (a
// fixed port; the DERP map names it, the Service spreads it over the
// replicas): the leader through its control server, the others with a
// responder of their own, which a replica closes before it starts the
// control server.
//
// Whatever else runs on the leader only (Cluster API's controllers, say)
// follows Leader.Changed, a channel closed on each change of leadership,
// rather than polling Leader.
package meshleader

import (
	"bufio"
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/flexplane/flexplane/pkg/mesh/lease"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
)

// DefaultLeaseName is the Lease's default name.
const DefaultLeaseName = "flexplane-mesh-control"

// APIPath is where the leader serves the tunnel to its headscale API.
const APIPath = "/flexplane/mesh-api"

// apiUpgrade is the Upgrade protocol of the tunnel.
const apiUpgrade = "flexplane-mesh-api"

// Config configures a replica's part in the election.
type Config struct {
	// Kube reaches the Kubernetes API holding the Lease. Required.
	Kube *rest.Config
	// Namespace is the Lease's namespace. Required.
	Namespace string
	// LeaseName is the Lease's name. Default DefaultLeaseName.
	LeaseName string
	// PeerURL is this replica's own http:// URL as the other replicas
	// reach it (its pod's address and port): where they forward to while
	// it leads. It is the replica's identity in the Lease, so it must
	// differ between replicas. Required.
	PeerURL string
	// Control configures the control server this replica runs while it
	// leads; Control.Postgres is required (the state moves with the
	// leadership).
	Control meshcontrol.Config
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's
	// election timings: a dead leader is replaced LeaseDuration after its
	// last renewal, plus up to RetryPeriod. Defaults 15s, 10s and 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Logger receives the election's logs. Default slog.Default().
	Logger *slog.Logger
}

// Leader is one replica's part in the election: Mount serves the control
// paths (locally while leading, forwarded otherwise) and Client reaches the
// leader's headscale API.
type Leader struct {
	cfg       Config
	log       *slog.Logger
	token     string
	elector   *leaderelection.LeaderElector
	client    *meshcontrol.Client
	transport *http.Transport
	cancel    context.CancelFunc
	done      chan struct{}
	leadMu    sync.Mutex // serialises starting and stopping the control server
	// stun answers STUN on Control.STUNAddr while no control server of
	// this process holds it; protected by leadMu.
	stun *stunServer
	// stunHeld: a control server of this process bound Control.STUNAddr;
	// headscale keeps it until the process exits (and answers on it);
	// protected by leadMu.
	stunHeld bool

	mu      sync.Mutex
	leader  string                // the Lease's holder (a PeerURL); "" none seen; protected by mu
	control *meshcontrol.Control  // running while this replica leads; protected by mu
	conns   map[net.Conn]struct{} // upgraded and API connections, closed when the leader changes; protected by mu
	resign  context.CancelFunc    // ends the current election round; protected by mu
	closed  bool                  // protected by mu
	// changed is closed, and replaced, when Leader's answer changes;
	// protected by mu.
	changed chan struct{}
	// told is Leader's answer when changed was last closed (or made);
	// protected by mu.
	told leadership
}

// leadership is what Leader answers.
type leadership struct {
	peerURL string
	self    bool
}

// Start joins the election and returns; the replica serves the control
// paths once a leader is known (Leader).
func Start(ctx context.Context, cfg Config) (*Leader, error) {
	switch {
	case cfg.Kube == nil:
		return nil, errors.New("meshleader: Kube is required")
	case cfg.Namespace == "":
		return nil, errors.New("meshleader: Namespace is required")
	case cfg.Control.Postgres == nil:
		return nil, errors.New("meshleader: the control server's state must be in PostgreSQL (Control.Postgres)")
	}
	if u, err := url.Parse(cfg.PeerURL); err != nil || u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("meshleader: PeerURL %q must be an http:// URL without a path", cfg.PeerURL)
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = DefaultLeaseName
	}
	t := lease.Timings{Duration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod}.WithDefaults()
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = t.Duration, t.RenewDeadline, t.RetryPeriod
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	token, err := meshcontrol.ReplicaToken(ctx, *cfg.Control.Postgres)
	if err != nil {
		return nil, fmt.Errorf("meshleader: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg.Kube)
	if err != nil {
		return nil, fmt.Errorf("meshleader: kubernetes client: %w", err)
	}
	l := newLeader(cfg)
	l.token = token
	l.elector, err = lease.NewElector(lease.Election{Client: cs, Namespace: cfg.Namespace, Name: cfg.LeaseName, Identity: cfg.PeerURL, Timings: t,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: l.lead,
			OnStoppedLeading: func() {},
			OnNewLeader:      l.setLeader,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("meshleader: %w", err)
	}
	if l.client, err = meshcontrol.DialFunc(l.dialAPI); err != nil {
		return nil, fmt.Errorf("meshleader: %w", err)
	}
	l.leadMu.Lock()
	l.serveSTUN()
	l.leadMu.Unlock()
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel = cancel
	go l.run(rctx)
	l.log.Info("joined the mesh control election", "lease", cfg.Namespace+"/"+cfg.LeaseName, "identity", cfg.PeerURL)
	return l, nil
}

// newLeader is a Leader of cfg (its defaults set) before it joins the
// election.
func newLeader(cfg Config) *Leader {
	return &Leader{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "meshleader"),
		conns:   map[net.Conn]struct{}{},
		done:    make(chan struct{}),
		changed: make(chan struct{}),
		// Forwarded requests are few and long-lived (control streams,
		// DERP): no idle pool worth keeping towards a leader that changes.
		transport: &http.Transport{DisableKeepAlives: true, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext},
	}
}

// run takes part in election rounds until ctx ends: a round ends when this
// replica loses the leadership (or gives it up).
func (l *Leader) run(ctx context.Context) {
	defer close(l.done)
	for ctx.Err() == nil {
		rctx, resign := context.WithCancel(ctx)
		l.mu.Lock()
		l.resign = resign
		l.mu.Unlock()
		l.elector.Run(rctx)
		resign()
		select {
		case <-ctx.Done():
		case <-time.After(l.cfg.RetryPeriod):
		}
	}
}

// lead runs the control server while ctx (this replica's leadership) lasts.
func (l *Leader) lead(ctx context.Context) {
	l.leadMu.Lock()
	defer l.leadMu.Unlock()
	if ctx.Err() != nil {
		return
	}
	l.log.Info("leading: starting the mesh control server")
	start := time.Now()
	l.stopSTUN() // the control server binds the address itself
	c, err := meshcontrol.Start(ctx, l.cfg.Control)
	if err != nil {
		l.serveSTUN()
		// Holding the Lease without serving would stall the mesh: give it
		// to another replica.
		l.log.Error("leading: the mesh control server did not start; giving up the leadership", "err", err)
		l.mu.Lock()
		l.resign()
		l.mu.Unlock()
		return
	}
	l.stunHeld = true
	if ctx.Err() != nil || !l.serving(c) {
		l.stop(c)
		return
	}
	l.log.Info("leading: the mesh control server serves", "took", time.Since(start).Round(time.Millisecond))
	<-ctx.Done()
	l.log.Info("leadership lost: stopping the mesh control server")
	l.stopped(c)
	l.stop(c)
}

// serving makes c the control server this replica leads with; false once
// closed.
func (l *Leader) serving(c *meshcontrol.Control) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.control, l.leader = c, l.cfg.PeerURL
	l.closeConnsLocked()
	l.notifyLocked()
	return true
}

// stopped records that c no longer serves: this replica no longer leads.
func (l *Leader) stopped(c *meshcontrol.Control) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.control == c {
		l.control = nil
		if l.leader == l.cfg.PeerURL {
			l.leader = ""
		}
	}
	l.closeConnsLocked()
	l.notifyLocked()
}

// serveSTUN starts answering STUN on the control server's STUN address,
// unless this process's control server holds it or its port is 0 (any
// port: no address the replicas share). Called with leadMu held.
func (l *Leader) serveSTUN() {
	addr := cmp.Or(l.cfg.Control.STUNAddr, meshcontrol.DefaultSTUNAddr)
	if l.stun != nil || l.stunHeld {
		return
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
		l.log.Debug("not serving STUN while not leading: no fixed STUN port", "stun", addr)
		return
	}
	s, err := listenSTUN(addr, l.log)
	if err != nil {
		l.log.Warn("not serving STUN while not leading", "stun", addr, "err", err)
		return
	}
	l.stun = s
	l.log.Info("serving STUN while not leading", "stun", addr)
}

// stopSTUN stops the STUN server of serveSTUN. Called with leadMu held.
func (l *Leader) stopSTUN() {
	if l.stun != nil {
		l.stun.Close()
		l.stun = nil
	}
}

// stop closes a control server within 5s.
func (l *Leader) stop(c *meshcontrol.Control) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		l.log.Warn("stopping the mesh control server", "err", err)
	}
}

// setLeader records the Lease's holder.
func (l *Leader) setLeader(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id == l.leader {
		return
	}
	l.log.Info("mesh control leader", "leader", id, "self", id == l.cfg.PeerURL)
	if id != l.cfg.PeerURL || l.control != nil {
		// Connections forwarded to the previous leader (or served by this
		// replica's control server) go; nodes reconnect to the new one.
		l.leader = id
		l.closeConnsLocked()
		l.notifyLocked()
	}
	// Leading but the control server not yet started: leader is set once
	// it serves (lead).
}

// notifyLocked closes changed if Leader's answer changed since it was last
// closed. Called with mu held, after every change of leader or control.
func (l *Leader) notifyLocked() {
	now := leadership{l.leader, l.control != nil}
	if now == l.told {
		return
	}
	l.told = now
	close(l.changed)
	l.changed = make(chan struct{})
}

// Changed returns a channel closed at the next change of what Leader
// answers (the leader seen, or whether it is this replica), then never
// again: take a new one each time. It never blocks the election, and a
// change is never missed by taking the channel before asking Leader:
//
//	for {
//		changed := l.Changed()
//		if l.Leading() {
//			// start what runs on the leader only, if not running
//		} else {
//			// stop it, if running
//		}
//		select {
//		case <-changed:
//		case <-ctx.Done():
//			return
//		}
//	}
//
// Changes that come quickly after another may be told as one; Leader
// then answers the latest. After Close, the last change told is to no
// longer lead.
func (l *Leader) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// Leading is whether this replica leads: its control server serves
// (Leader's self).
func (l *Leader) Leading() bool {
	_, self := l.Leader()
	return self
}

func (l *Leader) closeConnsLocked() {
	for c := range l.conns {
		c.Close()
	}
	clear(l.conns)
}

func (l *Leader) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Leader) untrack(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, c)
}

// state is the leader's URL and, while this replica leads, its control
// server.
func (l *Leader) state() (string, *meshcontrol.Control) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leader, l.control
}

// Leader is the current leader's PeerURL ("" while none is known) and
// whether it is this replica (its control server serving).
func (l *Leader) Leader() (peerURL string, self bool) {
	leader, c := l.state()
	return leader, c != nil
}

// Control is this replica's control server while it leads, else nil.
func (l *Leader) Control() *meshcontrol.Control {
	_, c := l.state()
	return c
}

// Client reaches the headscale API of whichever replica leads; its calls
// fail with gRPC's Unavailable while no leader serves. Close closes it.
func (l *Leader) Client() *meshcontrol.Client { return l.client }

// connKey is the context key of the client connection (ConnContext).
type connKey struct{}

// ConnContext is an http.Server ConnContext hook: it lets the handlers
// close the connections they upgraded when the leader changes. Set it on
// the server Mount serves on.
func (l *Leader) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// Mount registers on mux the control server's paths and the tunnel to the
// headscale API (APIPath).
func (l *Leader) Mount(mux *http.ServeMux) {
	h := http.HandlerFunc(l.serveControl)
	for _, p := range meshcontrol.HandledPaths() {
		mux.Handle(p, h)
	}
	mux.HandleFunc(APIPath, l.serveAPI)
}

// serveControl serves a control path with the local control server while
// leading, and forwards it to the leader otherwise.
func (l *Leader) serveControl(w http.ResponseWriter, r *http.Request) {
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok && r.Header.Get("Upgrade") != "" {
		// The request may become a long-lived upgraded connection.
		if !l.track(c) {
			http.Error(w, "mesh control: shutting down", http.StatusServiceUnavailable)
			return
		}
		defer l.untrack(c)
	}
	leader, c := l.state()
	switch {
	case c != nil:
		c.Handler().ServeHTTP(w, r)
	case leader == "" || leader == l.cfg.PeerURL:
		http.Error(w, "mesh control: no leader serves yet", http.StatusServiceUnavailable)
	default:
		target, err := url.Parse(leader)
		if err != nil {
			http.Error(w, "mesh control: bad leader URL", http.StatusBadGateway)
			return
		}
		p := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.Out.Host = pr.In.Host
			},
			Transport: l.transport,
			ErrorLog:  slog.NewLogLogger(l.log.Handler(), slog.LevelDebug),
			ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
				l.log.Debug("forwarding to the mesh control leader", "leader", leader, "err", err)
				http.Error(w, "mesh control: leader unreachable", http.StatusBadGateway)
			},
		}
		p.ServeHTTP(w, r)
	}
}

// serveAPI is the leader's end of the tunnel to its headscale API: after
// the token is checked, the connection becomes a byte stream to the API's
// unix socket.
func (l *Leader) serveAPI(w http.ResponseWriter, r *http.Request) {
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+l.token)) != 1 {
		http.Error(w, "mesh api: unauthorized", http.StatusUnauthorized)
		return
	}
	if r.Header.Get("Upgrade") != apiUpgrade {
		http.Error(w, "mesh api: Upgrade: "+apiUpgrade+" required", http.StatusBadRequest)
		return
	}
	_, c := l.state()
	if c == nil {
		http.Error(w, "mesh api: this replica does not lead", http.StatusServiceUnavailable)
		return
	}
	back, err := (&net.Dialer{}).DialContext(r.Context(), "unix", c.SocketPath())
	if err != nil {
		http.Error(w, "mesh api: "+err.Error(), http.StatusBadGateway)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		back.Close()
		http.Error(w, "mesh api: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if !l.track(conn) || !l.track(back) {
		conn.Close()
		back.Close()
		return
	}
	defer l.untrack(conn)
	defer l.untrack(back)
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+apiUpgrade+"\r\n\r\n"); err != nil {
		conn.Close()
		back.Close()
		return
	}
	pipe(conn, brw.Reader, back)
}

// pipe copies between a client connection (read through r, which holds
// what was buffered) and back until either side ends, then closes both.
func pipe(conn net.Conn, r io.Reader, back net.Conn) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(back, r); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, back); done <- struct{}{} }()
	<-done
	conn.Close()
	back.Close()
	<-done
}

// errNoLeader fails API calls while no leader serves.
var errNoLeader = errors.New("meshleader: no mesh control leader yet")

// dialAPI connects to the leader's headscale API: its unix socket while
// this replica leads, else the tunnel on the leader's listener.
func (l *Leader) dialAPI(ctx context.Context) (net.Conn, error) {
	leader, c := l.state()
	var conn net.Conn
	var err error
	switch {
	case c != nil:
		conn, err = (&net.Dialer{}).DialContext(ctx, "unix", c.SocketPath())
	case leader == "" || leader == l.cfg.PeerURL:
		return nil, errNoLeader
	default:
		conn, err = l.tunnel(ctx, leader)
	}
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: conn, l: l}
	if !l.track(tc) {
		conn.Close()
		return nil, errors.New("meshleader: closed")
	}
	return tc, nil
}

// tunnel opens the tunnel to the headscale API of the leader at peerURL.
func (l *Leader) tunnel(ctx context.Context, peerURL string) (net.Conn, error) {
	u, err := url.Parse(peerURL)
	if err != nil {
		return nil, fmt.Errorf("meshleader: leader URL: %w", err)
	}
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("meshleader: dial leader: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+u.Host+APIPath, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", apiUpgrade)
	req.Header.Set("Authorization", "Bearer "+l.token)
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("meshleader: tunnel to leader: %w", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("meshleader: tunnel to leader: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		conn.Close()
		return nil, fmt.Errorf("meshleader: tunnel to leader %s: %s", peerURL, resp.Status)
	}
	_ = conn.SetDeadline(time.Time{})
	return &bufferedConn{Conn: conn, r: br}, nil
}

// bufferedConn reads through the reader that parsed the tunnel's answer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// trackedConn leaves the tracked set when closed.
type trackedConn struct {
	net.Conn
	l    *Leader
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { go c.l.untrack(c) })
	return c.Conn.Close()
}

// shutLocked marks the Leader closed and returns the control server it
// ran (nil if none), which no longer serves. Called with mu held.
func (l *Leader) shutLocked() *meshcontrol.Control {
	l.closed = true
	c := l.control
	l.control = nil
	l.closeConnsLocked()
	l.notifyLocked()
	return c
}

// Close stops the control server if this replica runs it, gives up the
// Lease so another replica takes over at once, and closes the client.
func (l *Leader) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	c := l.shutLocked()
	l.mu.Unlock()
	if c != nil {
		l.stop(c)
	}
	l.leadMu.Lock()
	l.stopSTUN()
	l.leadMu.Unlock()
	// The control server has stopped: the Lease may go (ReleaseOnCancel).
	l.cancel()
	var err error
	select {
	case <-l.done:
	case <-ctx.Done():
		err = fmt.Errorf("meshleader: close: %w", ctx.Err())
	}
	return errors.Join(err, l.client.Close())
}
