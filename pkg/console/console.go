// Package console is the orchestrator's edge for VM consoles: it hands out
// one-use console tickets (Broker.Issue, called by the GraphQL mutation
// openConsole after it checked the caller's VDC) and serves the websocket
// a browser (noVNC) opens with one (Broker.Handler), relaying its bytes to
// the agent of the VM's node (a Dialer, the agent's Console RPC over the
// mesh). A ticket is a random 256-bit secret, works once, and expires
// after Config.TTL; the Proxmox ticket and token stay with the agent.
package console

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// DefaultTTL is how long a ticket waits for its websocket.
const DefaultTTL = 30 * time.Second

// Target is the VM a console session is for.
type Target struct {
	// ZoneID and Node name the agent that relays it.
	ZoneID, Node string
	// VMID is the VM's Proxmox id; VMName its name.
	VMID   int
	VMName string
	// VM is the VM's flexplane id, VDC its VDC and Subject who asked: for
	// the logs.
	VM, VDC, Subject string
}

// Dialer opens the byte stream of a VM's console: RFB 3.8 from its server
// side, starting with the server's version (the agent relays with no
// authentication). Closing it ends the session.
type Dialer interface {
	DialConsole(ctx context.Context, t Target) (io.ReadWriteCloser, error)
}

// Config configures a Broker.
type Config struct {
	// Dialer reaches the VMs' consoles. Required.
	Dialer Dialer
	// TTL is how long a ticket stays valid. Default DefaultTTL.
	TTL time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger receives session starts and ends. Default slog.Default().
	Logger *slog.Logger
}

// Ticket errors (Redeem).
var (
	// ErrUnknownTicket is a ticket never issued or already used.
	ErrUnknownTicket = errors.New("console: unknown or used ticket")
	// ErrExpiredTicket is a ticket issued longer than TTL ago.
	ErrExpiredTicket = errors.New("console: expired ticket")
)

// Broker issues tickets and serves the consoles they open.
type Broker struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	tickets map[string]issued // protected by mu
}

type issued struct {
	target  Target
	expires time.Time
}

// New returns a Broker.
func New(cfg Config) (*Broker, error) {
	if cfg.Dialer == nil {
		return nil, errors.New("console: a Dialer is required")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Broker{cfg: cfg, log: cfg.Logger, tickets: map[string]issued{}}, nil
}

// Issue returns a new one-use ticket for t and when it expires.
func (b *Broker) Issue(t Target) (string, time.Time, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", time.Time{}, fmt.Errorf("console: ticket: %w", err)
	}
	ticket := base64.RawURLEncoding.EncodeToString(raw[:])
	now := b.cfg.Now()
	exp := now.Add(b.cfg.TTL)
	b.mu.Lock()
	defer b.mu.Unlock()
	// Expired tickets go as new ones come: the map holds at most the
	// tickets of one TTL.
	for k, v := range b.tickets {
		if !now.Before(v.expires) {
			delete(b.tickets, k)
		}
	}
	b.tickets[ticket] = issued{target: t, expires: exp}
	return ticket, exp, nil
}

// Redeem uses up ticket and returns its target.
func (b *Broker) Redeem(ticket string) (Target, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	is, ok := b.tickets[ticket]
	if !ok {
		return Target{}, ErrUnknownTicket
	}
	delete(b.tickets, ticket)
	if !b.cfg.Now().Before(is.expires) {
		return Target{}, ErrExpiredTicket
	}
	return is.target, nil
}

// PathPrefix is where Handler serves: PathPrefix + ticket.
const PathPrefix = "/console/"

// Handler serves GET PathPrefix{ticket}: it redeems the ticket, upgrades
// to a websocket (subprotocol "binary" when asked for; same origin only)
// and relays binary messages to and from the VM's console until either
// side closes. A bad ticket answers 403 before any upgrade; a console
// that cannot be opened closes the websocket with status 1011 and the
// reason.
func (b *Broker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathPrefix+"{ticket}", b.serve)
	return mux
}

func (b *Broker) serve(w http.ResponseWriter, r *http.Request) {
	t, err := b.Redeem(r.PathValue("ticket"))
	if err != nil {
		b.log.Warn("console: refused", "err", err, "remote", r.RemoteAddr)
		http.Error(w, "console ticket unknown, used or expired", http.StatusForbidden)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		b.log.Warn("console: upgrade", "err", err, "vm", t.VM)
		return
	}
	ws.SetReadLimit(1 << 20)
	ctx := r.Context()
	log := b.log.With("vm", t.VM, "vdc", t.VDC, "subject", t.Subject, "node", t.Node, "vmid", t.VMID)
	vm, err := b.cfg.Dialer.DialConsole(ctx, t)
	if err != nil {
		log.Warn("console: open", "err", err)
		ws.Close(websocket.StatusInternalError, truncate(err.Error(), 120))
		return
	}
	log.Info("console: session open")
	start := time.Now()
	browser := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	fromVM := make(chan error, 1)
	go func() { _, err := io.Copy(browser, vm); fromVM <- err }()
	toVM := make(chan error, 1)
	go func() { _, err := io.Copy(vm, browser); toVM <- err }()
	select {
	case err = <-fromVM:
	case err = <-toVM:
	}
	vm.Close()
	browser.Close()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && websocket.CloseStatus(err) == -1 {
		log.Info("console: session ended", "err", err, "duration", time.Since(start))
		return
	}
	log.Info("console: session closed", "duration", time.Since(start))
}

// truncate keeps a close reason within the websocket's 123 bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
