package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/caddyserver/caddy/v2"

	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// caddyNetwork is the Caddy network type of the listeners the gateway
// renders: "flexgateway/host:port" is a socket the gateway holds.
//
// Caddy's own TCP listeners bind a new SO_REUSEPORT socket per loaded
// config and close the old one, which resets connections still queued on
// it, and a connection the old server accepts while it stops is closed
// unanswered. So the gateway holds one socket per listener address for as
// long as a listener has it, accepts on it itself and hands every
// connection to the newest config's server only: a reload starts the new
// servers, which take all new connections from then on, before the old
// ones stop.
const caddyNetwork = "flexgateway"

func init() {
	// Caddy's network types are process-wide, like its running config.
	caddy.RegisterNetwork(caddyNetwork, caddyListener)
	caddy.RegisterNetwork(caddyHTTPNetwork, caddyListener)
}

// held is the sockets of the process's Gateway by listener address;
// process-wide because Caddy's network types are.
var held = struct {
	mu      sync.Mutex
	sockets map[string]*socket // protected by mu
}{sockets: map[string]*socket{}}

// socket is a listening socket and the servers of loaded configs that
// accept from it.
type socket struct {
	addr string
	ln   net.Listener
	log  *slog.Logger
	done chan struct{} // closed with ln

	mu      sync.Mutex
	servers []*handoff    // protected by mu; the last is the newest
	changed chan struct{} // protected by mu; closed and replaced when servers change
	front   *front        // protected by mu; made when an HTTP server first takes a connection
}

// handoff is the net.Listener one Caddy server accepts from.
type handoff struct {
	s     *socket
	http  bool          // an HTTP server's: its connections go to the socket's front
	conns chan net.Conn // unbuffered: a conn goes only to a waiting Accept
	done  chan struct{}
	once  sync.Once
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.once.Do(func() {
		close(h.done)
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		for i, o := range h.s.servers {
			if o == h {
				h.s.servers = append(h.s.servers[:i], h.s.servers[i+1:]...)
				break
			}
		}
		close(h.s.changed)
		h.s.changed = make(chan struct{})
	})
	return nil
}

func (h *handoff) Addr() net.Addr { return h.s.ln.Addr() }

// caddyListener is Caddy's listener for "flexgateway/host:port" and
// "flexgateway-http/host:port": a new handoff of the socket held for
// host:port.
func caddyListener(_ context.Context, network, host, port string, _ uint, _ net.ListenConfig) (any, error) {
	addr := net.JoinHostPort(host, port)
	held.mu.Lock()
	s := held.sockets[addr]
	held.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("flexgateway: no socket held for %s", addr)
	}
	h := &handoff{s: s, http: network == caddyHTTPNetwork, conns: make(chan net.Conn), done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.servers = append(s.servers, h)
	close(s.changed)
	s.changed = make(chan struct{})
	return h, nil
}

// serve accepts connections until the socket is closed and hands each to
// the newest server (to the front when it is an HTTP server).
func (s *socket) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.handOff(c)
	}
}

func (s *socket) handOff(c net.Conn) {
	for {
		s.mu.Lock()
		changed := s.changed
		var newest *handoff
		if len(s.servers) > 0 {
			newest = s.servers[len(s.servers)-1]
		}
		s.mu.Unlock()
		if newest == nil {
			select {
			case <-changed:
				continue
			case <-s.done:
				c.Close()
				return
			}
		}
		if newest.http {
			s.frontOf().deliver(c)
			return
		}
		select {
		case newest.conns <- c:
			return
		case <-changed: // a newer server, or this one closed
		}
	}
}

// frontOf is the socket's front, made on first use.
func (s *socket) frontOf() *front {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.front == nil {
		s.front = newFront(s.addr, s.ln.Addr(), s.log)
	}
	return s.front
}

// openSockets listens on every listener address of cfg that holds no
// socket yet and returns the addresses it opened. An address that cannot
// be listened on is an ErrInvalid; nothing is then kept open.
func openSockets(cfg lbconfig.Config, log *slog.Logger) ([]string, error) {
	held.mu.Lock()
	defer held.mu.Unlock()
	var opened []string
	for _, b := range cfg.Balancers {
		for _, l := range b.Listeners {
			if held.sockets[l.Address] != nil {
				continue
			}
			ln, err := net.Listen("tcp", l.Address)
			if err != nil {
				closeSocketsLocked(opened)
				return nil, invalid("balancer %q listener %q: %v", b.ID, l.Name, err)
			}
			s := &socket{addr: l.Address, ln: ln, log: log, done: make(chan struct{}), changed: make(chan struct{})}
			held.sockets[l.Address] = s
			opened = append(opened, l.Address)
			go s.serve()
		}
	}
	return opened, nil
}

// closeSockets closes the sockets of addrs.
func closeSockets(addrs []string) {
	held.mu.Lock()
	defer held.mu.Unlock()
	closeSocketsLocked(addrs)
}

func closeSocketsLocked(addrs []string) {
	for _, a := range addrs {
		if s := held.sockets[a]; s != nil {
			_ = s.ln.Close()
			close(s.done)
			delete(held.sockets, a)
			s.mu.Lock()
			close(s.changed)
			s.changed = make(chan struct{})
			if s.front != nil {
				s.front.close()
			}
			s.mu.Unlock()
		}
	}
}

// closeUnused closes the sockets no listener of cfg has (nil: all).
func closeUnused(cfg *lbconfig.Config) {
	used := map[string]bool{}
	if cfg != nil {
		for _, b := range cfg.Balancers {
			for _, l := range b.Listeners {
				used[l.Address] = true
			}
		}
	}
	held.mu.Lock()
	defer held.mu.Unlock()
	var unused []string
	for a := range held.sockets {
		if !used[a] {
			unused = append(unused, a)
		}
	}
	closeSocketsLocked(unused)
}
