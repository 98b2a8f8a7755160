package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// TestReloadsKeepConnections makes 100 config changes (each routes a new
// path prefix to another pool) while a TCP stream echoes through the
// gateway and two HTTP keep-alive clients send requests: the stream sees
// no reset and no lost byte, no request fails, and each change is seen by
// a client within 1 s of its push, and the clients' connections are never
// closed under them: each keeps the one it opened.
func TestReloadsKeepConnections(t *testing.T) {
	t.Parallel()
	gw := startGateway(t)
	web, api := newHTTPBackend(t, "web"), newHTTPBackend(t, "api")
	echo := tcpBackend(t, "echo")
	tcpAddr, httpAddr := freeAddr(t), freeAddr(t)
	config := func(i int) lbconfig.Config {
		return lbconfig.Config{Revision: fmt.Sprint(i), Balancers: []lbconfig.Balancer{{
			ID: "lb", VDC: "prod",
			Listeners: []lbconfig.Listener{
				{Name: "tcp", Protocol: lbconfig.ProtocolTCP, Address: tcpAddr, Pool: "echo"},
				{Name: "http", Protocol: lbconfig.ProtocolHTTP, Address: httpAddr, Pool: "web",
					Routes: []lbconfig.Route{{PathPrefix: fmt.Sprintf("/r%d/", i), Pool: "api"}}},
			},
			Pools: []lbconfig.Pool{
				{Name: "echo", Backends: []lbconfig.Backend{{ID: "e", Address: echo}}},
				{Name: "web", Backends: []lbconfig.Backend{{ID: "w", Address: web.addr}}},
				{Name: "api", Backends: []lbconfig.Backend{{ID: "a", Address: api.addr}}},
			},
		}}}
	}
	gw.apply(t, config(0))

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	errs := make(chan error, 16)

	// The long TCP stream: 1 KiB out, the same 1 KiB back, again and again.
	stream, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var echoed atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		hello := make([]byte, len("echo\n"))
		if _, err := io.ReadFull(stream, hello); err != nil {
			errs <- fmt.Errorf("stream hello: %w", err)
			return
		}
		out, in := bytes.Repeat([]byte("0123456789abcdef"), 64), make([]byte, 1024)
		for ctx.Err() == nil {
			_ = stream.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := stream.Write(out); err != nil {
				errs <- fmt.Errorf("stream write after %d KiB: %w", echoed.Load(), err)
				return
			}
			if _, err := io.ReadFull(stream, in); err != nil || !bytes.Equal(in, out) {
				errs <- fmt.Errorf("stream read after %d KiB: %v", echoed.Load(), err)
				return
			}
			echoed.Add(1)
		}
	}()

	// The HTTP keep-alive clients.
	transport := &http.Transport{MaxIdleConnsPerHost: 4}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	var requests, conns atomic.Int64
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			conns.Add(1)
		}
	}}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var reused, wrote bool
				tr := *trace
				tr.GotConn = func(info httptrace.GotConnInfo) { reused = info.Reused; trace.GotConn(info) }
				tr.WroteRequest = func(httptrace.WroteRequestInfo) { wrote = true }
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, &tr), http.MethodGet, "http://"+httpAddr+"/", nil)
				resp, err := client.Do(req)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					errs <- fmt.Errorf("keep-alive request %d (reused connection %t, written %t): %w", requests.Load(), reused, wrote, err)
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || string(body) != "web /" {
					errs <- fmt.Errorf("keep-alive request %d: %s %q %v", requests.Load(), resp.Status, body, err)
					return
				}
				requests.Add(1)
			}
		}()
	}

	probe := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	var took []time.Duration
	for i := 1; i <= 100; i++ {
		start := time.Now()
		gw.apply(t, config(i))
		path := fmt.Sprintf("/r%d/x", i)
		deadline := start.Add(time.Second)
		// poll:own-loop: it measures how soon the change is in effect, at
		// a fixed 5 ms resolution, not a growing interval.
		for {
			body, err := get(probe, "http://"+httpAddr+path)
			if err == nil && body == "api "+path {
				took = append(took, time.Since(start))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("change %d not in effect 1 s after its push: %q, %v", i, body, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		select {
		case err := <-errs:
			t.Fatalf("during change %d: %v", i, err)
		default:
		}
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	slices.Sort(took)
	t.Logf("100 changes: in effect after p50 %s, max %s; the stream echoed %d KiB, keep-alive clients sent %d requests over %d connections",
		took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), echoed.Load(), requests.Load(), conns.Load())
	if c := conns.Load(); c > 2 {
		t.Errorf("the 2 keep-alive clients opened %d connections: the gateway closed some under them", c)
	}
	if echoed.Load() == 0 || requests.Load() == 0 {
		t.Error("no traffic ran during the changes")
	}
}
