package console_test

import (
	"context"
	"errors"
	"io"
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

// pipeDialer serves each console with an RFB server offering None that
// names its desktop after the target's VM, over an in-memory pipe.
type pipeDialer struct {
	mu      sync.Mutex
	targets []console.Target // protected by mu
	fail    error
}

func (d *pipeDialer) DialConsole(_ context.Context, t console.Target) (io.ReadWriteCloser, error) {
	if d.fail != nil {
		return nil, d.fail
	}
	d.mu.Lock()
	d.targets = append(d.targets, t)
	d.mu.Unlock()
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

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time // protected by mu
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func start(t *testing.T, d console.Dialer) (*console.Broker, *clock, string) {
	t.Helper()
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	b, err := console.New(console.Config{Dialer: d, TTL: 30 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	return b, clk, "ws" + strings.TrimPrefix(srv.URL, "http")
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

// TestTickets: a ticket opens one session, relayed to its target; used
// again, made up or expired it is refused with 403 before any upgrade.
func TestTickets(t *testing.T) {
	t.Parallel()
	d := &pipeDialer{}
	b, clk, base := start(t, d)
	target := console.Target{ZoneID: "z1", Node: "pve1", VMID: 100, VMName: "web-1", VM: "vm-1", VDC: "blue", Subject: "bob"}
	ticket, exp, err := b.Issue(target)
	if err != nil {
		t.Fatal(err)
	}
	if len(ticket) < 40 || !exp.Equal(clk.Now().Add(30*time.Second)) {
		t.Fatalf("ticket %q expires %v", ticket, exp)
	}
	other, _, _ := b.Issue(target)
	if other == ticket {
		t.Fatal("two tickets are the same")
	}
	clk.add(29 * time.Second)
	conn, st, err := dial(t, base, ticket)
	if err != nil {
		t.Fatalf("first use: %d %v", st, err)
	}
	defer conn.Close()
	if err := rfb.ClientNone(conn); err != nil {
		t.Fatal(err)
	}
	si, err := rfb.ClientInit(conn)
	if err != nil || si.Name != "web-1" {
		t.Fatalf("server init %+v, %v", si, err)
	}
	d.mu.Lock()
	if len(d.targets) != 1 || d.targets[0] != target {
		t.Errorf("dialed %+v", d.targets)
	}
	d.mu.Unlock()
	if _, st, err := dial(t, base, ticket); err == nil || st != http.StatusForbidden {
		t.Errorf("second use: %d %v", st, err)
	}
	if _, st, err := dial(t, base, "made-up"); err == nil || st != http.StatusForbidden {
		t.Errorf("made-up ticket: %d %v", st, err)
	}
	clk.add(time.Second) // other is 30 s old
	if _, st, err := dial(t, base, other); err == nil || st != http.StatusForbidden {
		t.Errorf("expired ticket: %d %v", st, err)
	}
	if _, err := b.Redeem(other); !errors.Is(err, console.ErrUnknownTicket) {
		t.Errorf("an expired ticket, once tried: %v", err)
	}
	late, _, _ := b.Issue(target)
	clk.add(31 * time.Second)
	if _, err := b.Redeem(late); !errors.Is(err, console.ErrExpiredTicket) {
		t.Errorf("redeem after the TTL: %v", err)
	}
}

// TestConsoleThatCannotOpen: a console the dialer cannot open closes the
// websocket with 1011 and the reason.
func TestConsoleThatCannotOpen(t *testing.T) {
	t.Parallel()
	b, _, base := start(t, &pipeDialer{fail: errors.New("the VM is not running")})
	ticket, _, err := b.Issue(console.Target{VM: "vm-1"})
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

func TestNewNeedsDialer(t *testing.T) {
	t.Parallel()
	if _, err := console.New(console.Config{}); err == nil {
		t.Fatal("a Broker without a Dialer")
	}
}
