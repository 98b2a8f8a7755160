// Package tcpfront is what a Kubernetes Service is to a set of replicas,
// for the dev stack and the tests: one TCP listener whose connections are
// spread over backend addresses, round robin, each to the next backend
// that accepts it (a dead replica is skipped). Bytes are copied both ways
// with half-closes passed on.
package tcpfront

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// DialTimeout bounds the dial of one backend.
const DialTimeout = 5 * time.Second

// Front forwards the connections of one listener to its backends.
type Front struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint32
}

// Serve forwards every connection ln accepts to one of backends
// ("host:port"), until ln is closed (Close).
func Serve(ln net.Listener, backends ...string) *Front {
	f := &Front{ln: ln, backends: backends}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.forward(c)
		}
	}()
	return f
}

// Listen listens on addr ("127.0.0.1:0" for any port) and Serves it.
func Listen(addr string, backends ...string) (*Front, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return Serve(ln, backends...), nil
}

// Addr is the address the front listens on.
func (f *Front) Addr() string { return f.ln.Addr().String() }

// URL is "http://" + Addr.
func (f *Front) URL() string { return "http://" + f.Addr() }

// Close stops accepting; forwarded connections stay until either side
// closes them.
func (f *Front) Close() error { return f.ln.Close() }

func (f *Front) forward(c net.Conn) {
	defer c.Close()
	start := int(f.next.Add(1))
	for i := range f.backends {
		b, err := net.DialTimeout("tcp", f.backends[(start+i)%len(f.backends)], DialTimeout)
		if err != nil {
			continue
		}
		defer b.Close()
		done := make(chan struct{})
		go func() {
			_, _ = io.Copy(b, c)
			closeWrite(b)
			close(done)
		}()
		_, _ = io.Copy(c, b)
		closeWrite(c)
		<-done
		return
	}
}

// closeWrite passes on the end of one direction.
func closeWrite(c net.Conn) {
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
}
