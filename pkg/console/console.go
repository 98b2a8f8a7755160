// Package console is the orchestrator's edge for VM consoles: it hands out
// one-use console tickets (Broker.Issue, called by the GraphQL mutation
// openConsole after it checked the caller's VDC) and serves the websocket
// a browser (noVNC) opens with one (Broker.Handler), relaying its bytes to
// the agent of the VM's node (the agent's Console RPC over the mesh).
// Every request without a good ticket gets the same 403 answer before any
// upgrade, whether or not the agent or VM it names exists.
//
// The ticket is the agent's: the agent of the VM's node mints it (256
// random bits, valid for Config.TTL) and opens the console once for it.
// What the browser gets names that agent beside its secret, so whichever
// orchestrator replica the websocket reaches relays it, with no state
// shared between replicas, and a ticket still works only once. The Proxmox
// ticket and token stay with the agent.
package console

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
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
	// VDC is the VM's VDC: the ticket is bound to it.
	VDC string
	// VM is the VM's flexplane id and Subject who asked: for the logs.
	VM, Subject string
}

// Agents reach the agents' console services.
type Agents interface {
	// IssueTicket has the agent of t's node mint a ticket for t's VM,
	// valid for ttl and bound to the guest t.VMID names now, of t.VDC: a
	// later guest with that VMID (another VDC's, after this one was
	// deleted) is not opened with it.
	IssueTicket(ctx context.Context, t Target, ttl time.Duration) (ticket string, expires time.Time, err error)
	// Open opens the console a ticket of the agent of node in zone stands
	// for: RFB 3.8 from its server side, starting with the server's
	// version (the agent relays with no authentication). Whatever fails
	// before the agent accepted the ticket is ErrUnknownTicket: a ticket
	// it does not know (made up, used, expired) or whose guest is no
	// longer the one it was issued for, and an agent that is not there
	// or cannot be reached; the other errors are of a console the agent
	// could not open for a good ticket. Closing the stream ends the
	// session.
	Open(ctx context.Context, zoneID, node, ticket string) (io.ReadWriteCloser, error)
}

// ErrUnknownTicket is a ticket never issued, already used or expired.
var ErrUnknownTicket = errors.New("console: unknown, used or expired ticket")

// Config configures a Broker.
type Config struct {
	// Agents reach the VMs' consoles. Required.
	Agents Agents
	// TTL is how long a ticket stays valid (1 s to 5 min). Default
	// DefaultTTL.
	TTL time.Duration
	// Logger receives session starts and ends. Default slog.Default().
	Logger *slog.Logger
}

// Broker issues tickets and serves the consoles they open. It keeps no
// state: any number of Brokers (one per replica) serve each other's
// tickets.
type Broker struct {
	cfg Config
	log *slog.Logger
}

// New returns a Broker.
func New(cfg Config) (*Broker, error) {
	if cfg.Agents == nil {
		return nil, errors.New("console: Agents are required")
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < time.Second || cfg.TTL > 5*time.Minute {
		return nil, fmt.Errorf("console: a TTL of %v is not 1s-5m", cfg.TTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Broker{cfg: cfg, log: cfg.Logger}, nil
}

// Issue returns a new one-use ticket for t and when it expires.
func (b *Broker) Issue(ctx context.Context, t Target) (string, time.Time, error) {
	secret, exp, err := b.cfg.Agents.IssueTicket(ctx, t, b.cfg.TTL)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("console: ticket: %w", err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	ticket := enc([]byte(t.ZoneID)) + "." + enc([]byte(t.Node)) + "." + secret
	b.log.Info("console: ticket issued", "ticket", fingerprint(secret), "vm", t.VM, "vdc", t.VDC, "subject", t.Subject,
		"node", t.Node, "vmid", t.VMID)
	return ticket, exp, nil
}

// parse splits a ticket of Issue into its agent and the agent's secret.
func parse(ticket string) (zoneID, node, secret string, ok bool) {
	parts := strings.Split(ticket, ".")
	if len(parts) != 3 || parts[2] == "" {
		return "", "", "", false
	}
	z, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	n, err2 := base64.RawURLEncoding.DecodeString(parts[1])
	if err1 != nil || err2 != nil || len(z) == 0 || len(n) == 0 {
		return "", "", "", false
	}
	return string(z), string(n), parts[2], true
}

// fingerprint names a ticket in the logs without its secret.
func fingerprint(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:6])
}

// PathPrefix is where Handler serves: PathPrefix + ticket.
const PathPrefix = "/console/"

// Handler serves GET PathPrefix{ticket}: it has the ticket's agent open
// the console, upgrades to a websocket (subprotocol "binary" when asked
// for; same origin only) and relays binary messages to and from the VM's
// console until either side closes. A ticket that is not one, names no
// agent there is, or that the agent refuses answers 403 with the same body
// before any upgrade; a console that cannot be opened for a good ticket
// closes the websocket with status 1011 and the reason.
func (b *Broker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathPrefix+"{ticket}", b.serve)
	return mux
}

func (b *Broker) serve(w http.ResponseWriter, r *http.Request) {
	zoneID, node, secret, ok := parse(r.PathValue("ticket"))
	ctx := r.Context()
	var vm io.ReadWriteCloser
	err := ErrUnknownTicket
	if ok {
		vm, err = b.cfg.Agents.Open(ctx, zoneID, node, secret)
	}
	if errors.Is(err, ErrUnknownTicket) {
		b.log.Warn("console: refused", "err", err, "remote", r.RemoteAddr)
		http.Error(w, "console ticket unknown, used or expired", http.StatusForbidden)
		return
	}
	log := b.log.With("ticket", fingerprint(secret), "node", node)
	ws, aerr := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
	if aerr != nil {
		log.Warn("console: upgrade", "err", aerr)
		if vm != nil {
			vm.Close()
		}
		return
	}
	ws.SetReadLimit(1 << 20)
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
