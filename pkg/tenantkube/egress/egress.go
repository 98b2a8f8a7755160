// Package egress is the egress proxy of a hosted control plane: a small
// HTTP CONNECT proxy that runs beside a tenant's kube-apiserver (a
// container of its pod) and carries the API server's outbound connections
// of its egress selector's "cluster" and "controlplane" selections (node,
// pod and service proxy, logs and exec on kubelets, webhooks, aggregated
// APIs; see docs/use/kubernetes.md). It opens a tunnel only to an address
// inside the allowed networks (the cluster's VDC networks) and refuses
// every other destination with 403, so a tenant who is cluster-admin on
// its API server cannot make it reach into the management network.
//
// Destinations must be IP literals: a host name is refused, never
// resolved, so the address checked is always the address dialled and the
// proxy never queries the management cluster's DNS for a tenant.
package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"
)

// Config configures a Proxy.
type Config struct {
	// Network is "unix" (Listen is a socket's path) or "tcp" (Listen is
	// host:port). Beside a kube-apiserver it is a unix socket in a volume
	// of the pod that only its containers mount: kube-apiserver speaks
	// HTTP CONNECT without TLS to a unix socket only. Default "tcp".
	Network string
	// Listen is where the proxy listens. Required.
	Listen string
	// Allow are the networks a tunnel may lead to. A destination outside
	// every one of them is refused; none: every destination is refused.
	Allow []netip.Prefix
	// MaxConns bounds the tunnels open at once; a CONNECT beyond it is
	// answered 503. Default 256.
	MaxConns int
	// DialTimeout bounds the dial of a tunnel's destination. Default 10 s.
	DialTimeout time.Duration
	// HeaderTimeout bounds how long a client may take to send its CONNECT
	// request. Default 10 s.
	HeaderTimeout time.Duration
	// Log receives refusals (warn) and tunnels (debug). Default
	// slog.Default().
	Log *slog.Logger
}

// Errors of New, matched with errors.Is.
var ErrInvalid = errors.New("invalid")

// Proxy is an HTTP CONNECT proxy to the allowed networks.
type Proxy struct {
	cfg   Config
	log   *slog.Logger
	srv   *http.Server
	slots chan struct{} // one token per open tunnel

	mu      sync.Mutex
	ln      net.Listener          // protected by mu
	tunnels map[net.Conn]struct{} // client sides of open tunnels; protected by mu
	closed  bool                  // protected by mu
	wg      sync.WaitGroup        // the tunnels' copying goroutines
	ready   chan struct{}         // closed once ln is set (or Run failed)
}

// New checks cfg and returns a Proxy that Run starts.
func New(cfg Config) (*Proxy, error) {
	if cfg.Listen == "" {
		return nil, fmt.Errorf("egress: new: Config.Listen is required: %w", ErrInvalid)
	}
	switch cfg.Network {
	case "":
		cfg.Network = "tcp"
	case "tcp", "unix":
	default:
		return nil, fmt.Errorf("egress: new: Config.Network %q: want tcp or unix: %w", cfg.Network, ErrInvalid)
	}
	for _, p := range cfg.Allow {
		if !p.IsValid() {
			return nil, fmt.Errorf("egress: new: allowed network %v: %w", p, ErrInvalid)
		}
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 256
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	p := &Proxy{cfg: cfg, log: cfg.Log, slots: make(chan struct{}, cfg.MaxConns),
		tunnels: map[net.Conn]struct{}{}, ready: make(chan struct{})}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serveHTTP), ReadHeaderTimeout: cfg.HeaderTimeout,
		MaxHeaderBytes: 16 << 10, ErrorLog: slog.NewLogLogger(cfg.Log.Handler(), slog.LevelDebug)}
	return p, nil
}

// Run listens on Config.Listen (a unix socket with mode 0660: the pod's
// group) and serves until ctx ends or Shutdown is called; then it shuts
// the proxy down (as Shutdown, with a grace of 5 s when ctx ended) and
// returns nil. A failure to listen is returned. Run is called once.
//
// A connection has Config.HeaderTimeout to send its request (so does an
// idle one between requests); a tunnel lives until both directions are
// done, the second at most 30 s after the first.
// Tunnels are bounded by Config.MaxConns.
func (p *Proxy) Run(ctx context.Context) error {
	if p.cfg.Network == "unix" {
		// A socket left by a proxy that did not exit cleanly (the
		// container restarted) is replaced; any other file is not.
		if fi, err := os.Lstat(p.cfg.Listen); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(p.cfg.Listen)
		}
	}
	ln, err := net.Listen(p.cfg.Network, p.cfg.Listen)
	if err != nil {
		close(p.ready)
		return fmt.Errorf("egress: run: %w", err)
	}
	if p.cfg.Network == "unix" {
		if err := os.Chmod(p.cfg.Listen, 0o660); err != nil {
			ln.Close()
			close(p.ready)
			return fmt.Errorf("egress: run: %w", err)
		}
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	close(p.ready)
	p.log.Info("egress proxy listening", "addr", ln.Addr().String(), "allow", fmt.Sprint(p.cfg.Allow))
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = p.Shutdown(sctx)
		case <-done:
		}
	}()
	if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("egress: run: %w", err)
	}
	return nil
}

// Addr is the address the proxy listens on, once Run has started
// listening (nil if it could not).
func (p *Proxy) Addr() net.Addr {
	<-p.ready
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

// Shutdown stops accepting connections and CONNECT requests, then waits
// for the open tunnels to end until ctx does, when it closes them. It
// returns ctx's error if the tunnels had to be closed. Run returns once
// Shutdown has been called.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.srv.Shutdown(ctx)
	waited := make(chan struct{})
	go func() { p.wg.Wait(); close(waited) }()
	select {
	case <-waited:
		return err
	case <-ctx.Done():
	}
	p.mu.Lock()
	for c := range p.tunnels {
		c.Close()
	}
	p.mu.Unlock()
	<-waited
	return ctx.Err()
}

// Allowed reports whether a tunnel may lead to addr, an IP literal.
func (p *Proxy) Allowed(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, n := range p.cfg.Allow {
		if n.Contains(addr) {
			return true
		}
	}
	return false
}

// destination parses a CONNECT target: host:port with an IP literal host
// (names are refused: see the package doc).
func destination(target string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("want host:port: %w", err)
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || addr.Zone() != "" {
		return netip.AddrPort{}, errors.New("the host is not an IP address (names are not resolved)")
	}
	ap, err := netip.ParseAddrPort(net.JoinHostPort(addr.String(), port))
	if err != nil || ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("bad port %q", port)
	}
	return netip.AddrPortFrom(addr.Unmap(), ap.Port()), nil
}

func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, code int, reason string) {
	p.log.Warn("egress refused", "target", r.URL.Host, "method", r.Method, "remote", r.RemoteAddr, "status", code, "reason", reason)
	http.Error(w, reason, code)
}

func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		p.refuse(w, r, http.StatusMethodNotAllowed, "only CONNECT is served")
		return
	}
	// The request's target (as kube-apiserver sends it, the Host header
	// is another address).
	target := r.URL.Host
	if target == "" {
		target = r.Host
	}
	dst, err := destination(target)
	if err != nil {
		p.refuse(w, r, http.StatusForbidden, err.Error())
		return
	}
	if !p.Allowed(dst.Addr()) {
		p.refuse(w, r, http.StatusForbidden, "destination outside the allowed networks")
		return
	}
	select {
	case p.slots <- struct{}{}:
	default:
		p.refuse(w, r, http.StatusServiceUnavailable, "too many open tunnels")
		return
	}
	release := func() { <-p.slots }
	d := net.Dialer{Timeout: p.cfg.DialTimeout}
	up, err := d.DialContext(r.Context(), "tcp", dst.String())
	if err != nil {
		release()
		p.log.Warn("egress dial failed", "target", dst.String(), "err", err)
		http.Error(w, "dial failed", http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		release()
		up.Close()
		http.Error(w, "cannot tunnel", http.StatusInternalServerError)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		release()
		up.Close()
		return
	}
	if !p.track(down) {
		release()
		up.Close()
		down.Close()
		return
	}
	p.log.Debug("egress tunnel", "target", dst.String(), "remote", r.RemoteAddr)
	go p.tunnel(down, buf, up, release)
}

// track records down as an open tunnel's client side; false once Shutdown
// was called.
func (p *Proxy) track(down net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.tunnels[down] = struct{}{}
	p.wg.Add(1)
	return true
}

// tunnel answers the CONNECT and copies both ways until either side is
// done.
func (p *Proxy) tunnel(down net.Conn, buf *bufio.ReadWriter, up net.Conn, release func()) {
	defer p.wg.Done()
	defer release()
	defer func() {
		p.mu.Lock()
		delete(p.tunnels, down)
		p.mu.Unlock()
	}()
	defer up.Close()
	defer down.Close()
	if _, err := buf.WriteString("HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	if err := buf.Flush(); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		// Bytes the client sent after its request are in buf first.
		_, _ = io.Copy(up, buf.Reader)
		closeWrite(up)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(down, up)
		closeWrite(down)
		done <- struct{}{}
	}()
	<-done
	// One side is done: the other gets a while to finish its half, not
	// forever (a peer that never closes would hold a tunnel's slot).
	deadline := time.Now().Add(halfCloseGrace)
	_ = up.SetDeadline(deadline)
	_ = down.SetDeadline(deadline)
	<-done
}

// halfCloseGrace is how long a tunnel's other direction may go on once one
// has ended.
const halfCloseGrace = 30 * time.Second

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
