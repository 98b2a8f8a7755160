package egress_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/tenantkube/egress"
)

func listen(t *testing.T, addr string) *nettest.Counter { return nettest.CountConns(t, addr, true) }

func start(t *testing.T, cfg egress.Config) *egress.Proxy {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	p, err := egress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	if p.Addr() == nil {
		t.Fatal("the proxy does not listen")
	}
	return p
}

// connect sends CONNECT target to the proxy and returns the status and,
// on 200, the tunnel.
func connect(t *testing.T, p *egress.Proxy, target string) (int, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// As kube-apiserver's egress dialer writes it: its Host header is not
	// the target.
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return resp.StatusCode, nil
	}
	if br.Buffered() > 0 {
		t.Fatalf("CONNECT %s: %d bytes after the response", target, br.Buffered())
	}
	t.Cleanup(func() { c.Close() })
	return resp.StatusCode, c
}

func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("echo %q: %q, %v", msg, buf, err)
	}
}

// TestTunnelsOnlyToAllowedNetworks: a CONNECT to an address of the
// allowed networks is a tunnel to it; every other target (an address
// outside them, in any spelling, a name, a bad port, another method) is
// refused and the listener there sees no connection.
func TestTunnelsOnlyToAllowedNetworks(t *testing.T) {
	t.Parallel()
	inside := listen(t, "127.0.0.2:0")
	outside := listen(t, "127.0.0.1:0")
	p := start(t, egress.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}})

	code, c := connect(t, p, inside.Addr().String())
	if code != http.StatusOK {
		t.Fatalf("CONNECT to the allowed network: %d", code)
	}
	echo(t, c, "hello through the tunnel")
	if n := inside.Count(); n != 1 {
		t.Errorf("the allowed listener accepted %d connections, want 1", n)
	}

	_, port, _ := net.SplitHostPort(outside.Addr().String())
	_, inPort, _ := net.SplitHostPort(inside.Addr().String())
	for _, target := range []string{
		outside.Addr().String(),
		"[::ffff:127.0.0.1]:" + port,
		"localhost:" + port,
		"127.0.0.1.nip.io:" + port,
		"127.0.0.2:0",
		"127.0.0.2",
		"2130706433:" + port, // 127.0.0.1 as a number
		"[::1]:" + port,
		"[fe80::1%25lo]:" + inPort,
	} {
		if code, _ := connect(t, p, target); code != http.StatusForbidden {
			t.Errorf("CONNECT %s: %d, want 403", target, code)
		}
	}
	resp, err := http.Get("http://" + p.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", resp.StatusCode)
	}
	if n := outside.Count(); n != 0 {
		t.Errorf("the listener outside the allowed networks accepted %d connections", n)
	}
}

// TestNoNetworkAllowsNothing: a proxy without allowed networks refuses
// every target.
func TestNoNetworkAllowsNothing(t *testing.T) {
	t.Parallel()
	l := listen(t, "127.0.0.1:0")
	p := start(t, egress.Config{})
	if code, _ := connect(t, p, l.Addr().String()); code != http.StatusForbidden {
		t.Errorf("CONNECT: %d, want 403", code)
	}
	if n := l.Count(); n != 0 {
		t.Errorf("listener accepted %d", n)
	}
}

// TestTunnelsAreBounded: beyond MaxConns open tunnels a CONNECT is
// answered 503; once one closes, another opens.
func TestTunnelsAreBounded(t *testing.T) {
	t.Parallel()
	l := listen(t, "127.0.0.1:0")
	p := start(t, egress.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, MaxConns: 2})
	_, a := connect(t, p, l.Addr().String())
	_, b := connect(t, p, l.Addr().String())
	if a == nil || b == nil {
		t.Fatal("two tunnels within the bound refused")
	}
	if code, _ := connect(t, p, l.Addr().String()); code != http.StatusServiceUnavailable {
		t.Errorf("a third tunnel: %d, want 503", code)
	}
	a.Close()
	poll.True(t, 10*time.Second, "a tunnel opens once another closed", func() bool {
		code, c := connect(t, p, l.Addr().String())
		if c != nil {
			c.Close()
		}
		return code == http.StatusOK
	})
}

// TestShutdownClosesTunnels: Shutdown stops new connections and closes
// the tunnels still open when its context ends.
func TestShutdownClosesTunnels(t *testing.T) {
	t.Parallel()
	l := listen(t, "127.0.0.1:0")
	p := start(t, egress.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	_, c := connect(t, p, l.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with an open tunnel: %v, want the deadline", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the tunnel is still open after Shutdown")
	}
	if c, err := net.DialTimeout("tcp", p.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("the proxy accepts connections after Shutdown")
	}
}

// TestParseArgs: the command line's networks must be CIDRs in canonical
// form; the bound at least 1.
func TestParseArgs(t *testing.T) {
	t.Parallel()
	cfg, err := egress.ParseArgs([]string{"-listen=127.0.0.1:9", "-allow=10.0.0.0/24, 192.168.1.0/24", "-max-conns=3"}, io.Discard)
	if err != nil || cfg.Listen != "127.0.0.1:9" || len(cfg.Allow) != 2 || cfg.MaxConns != 3 {
		t.Errorf("ParseArgs: %+v, %v", cfg, err)
	}
	if cfg, err := egress.ParseArgs([]string{"-allow="}, io.Discard); err != nil || len(cfg.Allow) != 0 {
		t.Errorf("no networks: %+v, %v", cfg, err)
	}
	for _, bad := range [][]string{{"-allow=10.0.0.1/24"}, {"-allow=10.0.0.0"}, {"-allow=example.com/24"}, {"-max-conns=0"}, {"extra"}} {
		if _, err := egress.ParseArgs(bad, io.Discard); err == nil || !strings.Contains(err.Error(), "egress") {
			t.Errorf("ParseArgs(%v): %v, want an error", bad, err)
		}
	}
}

// TestUnixSocket: on a unix socket (as beside kube-apiserver) the proxy
// replaces a socket a previous run left, and tunnels as on TCP.
func TestUnixSocket(t *testing.T) {
	t.Parallel()
	l := listen(t, "127.0.0.2:0")
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	p, err := egress.New(egress.Config{Network: "unix", Listen: sock, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if p.Addr() == nil {
		t.Fatal("the proxy does not listen on the socket a previous run left")
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "CONNECT "+l.Addr().String()+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT over the socket: %v, %v", resp, err)
	}
	echo(t, c, "over a unix socket")
}
