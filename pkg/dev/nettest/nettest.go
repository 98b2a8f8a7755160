//go:build linux

// Package nettest gives tests TCP services and clients inside network namespaces
// (pkg/support/nsnet), polled with deadlines: a service that answers with a name, a
// reachability probe, and waits for namespaces to appear or go.
package nettest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/support/nsnet"
)

// NeedRoot fails (never skips) a test that needs root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test builds network namespaces: run it as root")
	}
}

// WaitNS polls until the namespace exists (or, with exists false, is gone), failing
// the test after timeout.
func WaitNS(t testing.TB, ns string, exists bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for nsnet.Exists(ns) != exists {
		if time.Now().After(deadline) {
			t.Fatalf("nettest: namespace %s exists=%v, want %v after %s", ns, !exists, exists, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Serve listens on port of every address in ns (waiting up to 20 s for ns) and
// answers each connection with answer, then the peer's address as it saw it
// ("ANSWER from IP:PORT"); t.Cleanup stops it.
func Serve(t testing.TB, ns string, port int, answer string) {
	t.Helper()
	WaitNS(t, ns, true, 20*time.Second)
	ln, err := nsnet.Listen(context.Background(), ns, "tcp4", fmt.Sprintf("0.0.0.0:%d", port))
	if err != nil {
		t.Fatalf("nettest: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, answer+" from "+c.RemoteAddr().String())
			c.Close()
		}
	}()
}

// Reach dials addr from ns and returns what the service said, "" when it did not
// answer within timeout.
func Reach(ns, addr string, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := nsnet.Dial(ctx, ns, "tcp4", addr)
	if err != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	b, _ := io.ReadAll(conn)
	return string(b)
}

// WaitReach polls until ns reaches addr and returns the answer (whose peer address
// shows the source the service saw), failing the test after timeout.
func WaitReach(t testing.TB, ns, addr string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if got := Reach(ns, addr, time.Second); got != "" {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("nettest: %s does not reach %s within %s", ns, addr, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// PeerIP is the address in an answer of Serve.
func PeerIP(answer string) string {
	var name, from, hostport string
	if _, err := fmt.Sscan(answer, &name, &from, &hostport); err != nil {
		return ""
	}
	host, _, _ := net.SplitHostPort(hostport)
	return host
}

// Echo listens on port of every address in ns and echoes what each connection sends;
// t.Cleanup stops it.
func Echo(t testing.TB, ns string, port int) {
	t.Helper()
	WaitNS(t, ns, true, 20*time.Second)
	ln, err := nsnet.Listen(context.Background(), ns, "tcp4", fmt.Sprintf("0.0.0.0:%d", port))
	if err != nil {
		t.Fatalf("nettest: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
}

// Meter counts the bytes a Sink received.
type Meter struct{ n atomic.Int64 }

// Sink listens on port of every address in ns and counts and discards what it
// receives; t.Cleanup stops it.
func Sink(t testing.TB, ns string, port int) *Meter {
	t.Helper()
	WaitNS(t, ns, true, 20*time.Second)
	ln, err := nsnet.Listen(context.Background(), ns, "tcp4", fmt.Sprintf("0.0.0.0:%d", port))
	if err != nil {
		t.Fatalf("nettest: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	m := &Meter{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					m.n.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return m
}

// Throughput sends from ns to the Sink of m at addr and returns the rate of TCP
// payload the sink received during d, in Mbit/s, measured after 1.5 s of warm-up
// (the token bucket's burst, TCP's slow start, the socket buffers filling).
func Throughput(t testing.TB, ns, addr string, m *Meter, d time.Duration) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := nsnet.Dial(ctx, ns, "tcp4", addr)
	if err != nil {
		t.Fatalf("nettest: throughput to %s: %v", addr, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	defer func() { c.Close(); <-done }()
	time.Sleep(1500 * time.Millisecond) // measuring: the warm-up is part of the method
	b0, t0 := m.n.Load(), time.Now()
	time.Sleep(d)
	b1, t1 := m.n.Load(), time.Now()
	return float64((b1-b0)*8) / t1.Sub(t0).Seconds() / 1e6
}
