package gateway

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// caddyHTTPNetwork is the Caddy network type of HTTP and HTTPS listeners:
// "flexgateway-http/host:port" is a socket the gateway holds whose
// connections a front serves.
//
// A Caddy HTTP server that stops at a reload closes its idle keep-alive
// connections, and a client may be sending its next request on one at
// that very moment: the request fails. So connections of HTTP listeners
// never reach Caddy's own http.Server: the gateway serves them with a
// front, an http.Server of its own that lives as long as the socket, and
// hands each request to the handler of the Caddy server in force for
// the address (Caddy's active config). A reload then changes which
// handler the next request meets and closes no connection.
const caddyHTTPNetwork = "flexgateway-http"

// Timeouts of a front's connections.
const (
	frontReadHeaderTimeout = time.Minute
	frontIdleTimeout       = 5 * time.Minute
	// frontDrain is how long a front whose socket closes waits for its
	// requests in flight before it closes their connections.
	frontDrain = 30 * time.Second
)

// front serves the connections of one HTTP(S) socket.
type front struct {
	addr   string
	laddr  net.Addr
	srv    *http.Server
	conns  chan net.Conn // unbuffered: the front's Accept takes them
	done   chan struct{} // closed by close
	once   sync.Once
	cached atomic.Pointer[frontTarget]
}

// frontTarget is the Caddy server serving a front's address in one Caddy
// config.
type frontTarget struct {
	app any               // the config's http app, the cache's key
	srv *caddyhttp.Server // nil: no server of the config listens there
	tls *tls.Config       // nil: plain HTTP
}

func newFront(addr string, laddr net.Addr, log *slog.Logger) *front {
	f := &front{addr: addr, laddr: laddr, conns: make(chan net.Conn), done: make(chan struct{})}
	f.srv = &http.Server{
		Handler:           f,
		ReadHeaderTimeout: frontReadHeaderTimeout,
		IdleTimeout:       frontIdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go func() { _ = f.srv.Serve(frontListener{f}) }()
	return f
}

// deliver hands c to the front, or closes it if the front is closed.
func (f *front) deliver(c net.Conn) {
	select {
	case f.conns <- c:
	case <-f.done:
		c.Close()
	}
}

// close stops accepting and lets the requests in flight finish, for up
// to frontDrain, before it closes every connection.
func (f *front) close() {
	f.once.Do(func() {
		close(f.done)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), frontDrain)
			defer cancel()
			if f.srv.Shutdown(ctx) != nil {
				_ = f.srv.Close()
			}
		}()
	})
}

// target is the Caddy server in force for the front's address.
func (f *front) target() *frontTarget {
	ctx := caddy.ActiveContext()
	app, err := ctx.AppIfConfigured("http")
	if err != nil {
		return &frontTarget{}
	}
	if t := f.cached.Load(); t != nil && t.app == app {
		return t
	}
	t := &frontTarget{app: app}
	if h, ok := app.(*caddyhttp.App); ok {
		for _, s := range h.Servers {
			if slices.Contains(s.Listen, caddyHTTPNetwork+"/"+f.addr) {
				t.srv = s
				if len(s.TLSConnPolicies) > 0 {
					t.tls = s.TLSConnPolicies.TLSConfig(ctx)
				}
				break
			}
		}
	}
	f.cached.Store(t)
	return t
}

// ServeHTTP hands r to the Caddy server in force; with none (the
// listener went away or became a TCP one), it answers 503 and closes the
// connection.
func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := f.target()
	if t.srv == nil {
		w.Header().Set("Connection", "close")
		http.Error(w, "no listener", http.StatusServiceUnavailable)
		return
	}
	t.srv.ServeHTTP(w, r)
}

// frontListener is the net.Listener a front's http.Server accepts from:
// the socket's connections, with TLS when the Caddy server in force
// terminates it.
type frontListener struct{ f *front }

func (l frontListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.f.conns:
		if t := l.f.target(); t.tls != nil {
			return tls.Server(c, t.tls), nil
		}
		return c, nil
	case <-l.f.done:
		return nil, net.ErrClosed
	}
}

func (l frontListener) Close() error { return nil }

func (l frontListener) Addr() net.Addr { return l.f.laddr }
