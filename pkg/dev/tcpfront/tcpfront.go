// Package tcpfront is what a Kubernetes Service is to a set of replicas,
// for the dev stack and the tests: one TCP listener whose connections are
// spread over backend addresses, round robin, each to the next backend
// that accepts it (a dead replica is skipped). With a readiness path, as a
// Service's endpoints follow the pods' readiness probes, only backends
// answering it 200 get new connections (all of them while none does).
// Bytes are copied both ways with half-closes passed on.
package tcpfront

import (
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// DialTimeout bounds the dial of one backend.
const DialTimeout = 5 * time.Second

// ProbeInterval is how often WatchReady asks each backend.
const ProbeInterval = 500 * time.Millisecond

// Front forwards the connections of one listener to its backends.
type Front struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint32
	done     chan struct{} // closed by Close

	mu    sync.Mutex
	ready map[string]bool // nil: no readiness probe; protected by mu
}

// WatchReady probes http://BACKEND+path every ProbeInterval until Close:
// from the first probe on, new connections go only to the backends that
// answered it 200 the last time, or to all of them while none did.
func (f *Front) WatchReady(path string) {
	f.mu.Lock()
	f.ready = map[string]bool{}
	f.mu.Unlock()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, b := range f.backends {
		go func() {
			t := time.NewTicker(ProbeInterval)
			defer t.Stop()
			for {
				ok := false
				if resp, err := hc.Get("http://" + b + path); err == nil {
					ok = resp.StatusCode == http.StatusOK
					resp.Body.Close()
				}
				f.mu.Lock()
				f.ready[b] = ok
				f.mu.Unlock()
				select {
				case <-f.done:
					return
				case <-t.C:
				}
			}
		}()
	}
}

// candidates are the backends a new connection may go to, in the order
// to try them.
func (f *Front) candidates() []string {
	start := int(f.next.Add(1))
	var all, ready []string
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.backends {
		b := f.backends[(start+i)%len(f.backends)]
		all = append(all, b)
		if f.ready[b] {
			ready = append(ready, b)
		}
	}
	if len(ready) > 0 {
		return ready
	}
	return all
}

// Serve forwards every connection ln accepts to one of backends
// ("host:port"), until ln is closed (Close).
func Serve(ln net.Listener, backends ...string) *Front {
	f := &Front{ln: ln, backends: backends, done: make(chan struct{})}
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

// Close stops accepting and probing; forwarded connections stay until
// either side closes them. Call it once.
func (f *Front) Close() error {
	close(f.done)
	return f.ln.Close()
}

func (f *Front) forward(c net.Conn) {
	defer c.Close()
	for _, addr := range f.candidates() {
		b, err := net.DialTimeout("tcp", addr, DialTimeout)
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
