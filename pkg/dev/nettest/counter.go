package nettest

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// Counter is a TCP listener that counts the connections it accepts: a
// test's witness that something did, or did not, connect to an address.
type Counter struct {
	net.Listener
	n atomic.Int32
}

// CountConns listens on addr (host:port, port 0 for any) and accepts
// connections until the test ends, counting them; with echo it sends each
// back what it reads, else it closes it at once.
func CountConns(t testing.TB, addr string, echo bool) *Counter {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("nettest: %v", err)
	}
	c := &Counter{Listener: l}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.n.Add(1)
			if !echo {
				conn.Close()
				continue
			}
			go func() {
				defer conn.Close()
				_, _ = io.Copy(conn, conn)
			}()
		}
	}()
	return c
}

// Count is how many connections the listener has accepted.
func (c *Counter) Count() int { return int(c.n.Load()) }

// Port is the port the listener listens on.
func (c *Counter) Port() int { return c.Addr().(*net.TCPAddr).Port }
