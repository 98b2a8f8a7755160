package console_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/flexplane/flexplane/pkg/console"
	"github.com/flexplane/flexplane/pkg/support/rfb"
)

// agents stand for the agents: they mint one-use tickets and serve each
// console with an RFB server offering None that names its desktop after
// the ticket's VM, over an in-memory pipe.
type agents struct {
	mu      sync.Mutex
	tickets map[string]console.Target // protected by mu
	opened  []console.Target          // protected by mu
	fail    error
}

func (a *agents) IssueTicket(_ context.Context, t console.Target, ttl time.Duration) (string, time.Time, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tickets == nil {
		a.tickets = map[string]console.Target{}
	}
	secret := fmt.Sprintf("secret-%d", len(a.tickets)+len(a.opened))
	a.tickets[t.ZoneID+"/"+t.Node+"/"+secret] = t
	return secret, time.Now().Add(ttl), nil
}

func (a *agents) Open(_ context.Context, zoneID, node, ticket string) (io.ReadWriteCloser, error) {
	a.mu.Lock()
	t, ok := a.tickets[zoneID+"/"+node+"/"+ticket]
	delete(a.tickets, zoneID+"/"+node+"/"+ticket)
	if ok {
		a.opened = append(a.opened, t)
	}
	a.mu.Unlock()
	if !ok {
		return nil, console.ErrUnknownTicket
	}
	if a.fail != nil {
		return nil, a.fail
	}
	srv, cli := net.Pipe()
	go func() {
		defer srv.Close()
		if rfb.ServeNone(srv) != nil {
			return
		}
		var shared [1]byte
		if _, err := io.ReadFull(srv, shared[:]); err != nil {
			return
		}
		_, _ = srv.Write(rfb.ServerInit{Width: 4, Height: 2, Format: rfb.RGB888, Name: t.VMName}.Marshal())
		_, _ = io.Copy(io.Discard, srv)
	}()
	return cli, nil
}

// start serves a Broker over a; several started on the same a are
// replicas.
func start(t *testing.T, a console.Agents) (*console.Broker, string) {
	t.Helper()
	b, err := console.New(console.Config{Agents: a, TTL: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	return b, "ws" + strings.TrimPrefix(srv.URL, "http")
}

func dial(t *testing.T, base, ticket string) (net.Conn, int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, resp, err := rfb.DialWebsocket(ctx, base+console.PathPrefix+ticket, nil, nil, 0)
	if resp != nil {
		return c, resp.StatusCode, err
	}
	return c, 0, err
}

// TestTickets: a ticket opens one session, relayed to its target, through
// any replica; used again (at either), made up, or naming another agent it
// is refused with 403 before any upgrade.
func TestTickets(t *testing.T) {
	t.Parallel()
	a := &agents{}
	b, base := start(t, a)
	_, other := start(t, a)
	target := console.Target{ZoneID: "z1", Node: "pve1", VMID: 100, VMName: "web-1", VM: "vm-1", VDC: "blue", Subject: "bob"}
	ticket, exp, err := b.Issue(t.Context(), target)
	if err != nil {
		t.Fatal(err)
	}
	if time.Until(exp) < 29*time.Second || time.Until(exp) > 30*time.Second {
		t.Fatalf("ticket %q expires %v", ticket, exp)
	}
	second, _, _ := b.Issue(t.Context(), target)
	if second == ticket {
		t.Fatal("two tickets are the same")
	}
	conn, st, err := dial(t, other, ticket)
	if err != nil {
		t.Fatalf("first use, at the other replica: %d %v", st, err)
	}
	defer conn.Close()
	if err := rfb.ClientNone(conn); err != nil {
		t.Fatal(err)
	}
	si, err := rfb.ClientInit(conn)
	if err != nil || si.Name != "web-1" {
		t.Fatalf("server init %+v, %v", si, err)
	}
	a.mu.Lock()
	if len(a.opened) != 1 || a.opened[0] != target {
		t.Errorf("opened %+v", a.opened)
	}
	a.mu.Unlock()
	parts := strings.Split(second, ".") // zone, node, the agent's secret
	node, secret := parts[1], parts[2]
	otherNode := base64.RawURLEncoding.EncodeToString([]byte("pve2"))
	for name, tk := range map[string]string{
		"second use":           ticket,
		"made up":              "made-up",
		"two parts":            "eg.secret",
		"bad encoding":         "!!." + node + "." + secret,
		"another agent's name": strings.Replace(second, node, otherNode, 1),
		"cut":                  strings.TrimSuffix(second, secret[len(secret)-1:]),
	} {
		for _, at := range []string{base, other} {
			if _, st, err := dial(t, at, tk); err == nil || st != http.StatusForbidden {
				t.Errorf("%s (%q): %d %v", name, tk, st, err)
			}
		}
	}
	if _, st, err := dial(t, base, second); err != nil {
		t.Errorf("the second ticket, still unused: %d %v", st, err)
	}
}

// TestConsoleThatCannotOpen: a console the dialer cannot open closes the
// websocket with 1011 and the reason.
func TestConsoleThatCannotOpen(t *testing.T) {
	t.Parallel()
	b, base := start(t, &agents{fail: errors.New("the VM is not running")})
	ticket, _, err := b.Issue(t.Context(), console.Target{ZoneID: "z1", Node: "pve1", VM: "vm-1"})
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := dial(t, base, ticket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Read(make([]byte, 1))
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusInternalError || !strings.Contains(ce.Reason, "not running") {
		t.Fatalf("read: %v", err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []console.Config{{}, {Agents: &agents{}, TTL: time.Millisecond}, {Agents: &agents{}, TTL: time.Hour}} {
		if _, err := console.New(c); err == nil {
			t.Errorf("a Broker of %+v", c)
		}
	}
}
