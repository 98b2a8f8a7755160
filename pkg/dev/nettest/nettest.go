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
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flexplane/flexplane/pkg/dev/poll"
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
	poll.True(t, timeout, fmt.Sprintf("namespace %s exists=%v", ns, exists), func() bool { return nsnet.Exists(ns) == exists })
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
	var got string
	poll.True(t, timeout, fmt.Sprintf("%s to reach %s", ns, addr), func() bool {
		got = Reach(ns, addr, time.Second)
		return got != ""
	})
	return got
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

// Meter counts the bytes a Sink received, as the kernel's TCP counts them
// (TCP_INFO's bytes_received: in order, whether or not the sink has read
// them yet), so that a sink held back by a busy machine does not skew a rate.
type Meter struct {
	mu    sync.Mutex
	conns map[*net.TCPConn]bool // the open connections; protected by mu
	done  uint64                // bytes received by the connections closed; protected by mu
}

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
	m := &Meter{conns: map[*net.TCPConn]bool{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*net.TCPConn)
			m.mu.Lock()
			m.conns[tc] = true
			m.mu.Unlock()
			go func() {
				_, _ = io.Copy(io.Discard, c)
				m.mu.Lock()
				n, _ := received(tc)
				m.done += n
				delete(m.conns, tc)
				m.mu.Unlock()
				c.Close()
			}()
		}
	}()
	return m
}

// received is the bytes the kernel received on c.
func received(c *net.TCPConn) (uint64, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var info *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) { info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	return info.Bytes_received, nil
}

// sample is the bytes received so far and the instant they were counted: the
// middle of the quickest of up to 100 readings, the first to take at most 1 ms
// (a busy machine may preempt one).
func (m *Meter) sample(t testing.TB) (uint64, time.Time) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var (
		best  uint64
		at    time.Time
		quick = time.Duration(1<<63 - 1)
	)
	for range 100 {
		start := time.Now()
		n := m.done
		for c := range m.conns {
			b, err := received(c)
			if err != nil {
				t.Fatalf("nettest: TCP_INFO: %v", err)
			}
			n += b
		}
		took := time.Since(start)
		if took < quick {
			best, at, quick = n, start.Add(took/2), took
		}
		if took <= time.Millisecond {
			break
		}
	}
	return best, at
}

// Throughput sends from ns to the Sink of m at addr and returns the rate of TCP
// payload the sink's kernel received during d, in Mbit/s, measured after 1.5 s
// of warm-up (the token bucket's burst, TCP's slow start, the socket buffers
// filling). The bytes are the kernel's count at instants read within about 1 ms, so
// neither the sink's reads nor the test's wake-ups, late on a busy machine,
// move the rate.
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
	b0, t0 := m.sample(t)
	time.Sleep(d)
	b1, t1 := m.sample(t)
	return float64((b1-b0)*8) / t1.Sub(t0).Seconds() / 1e6
}
