package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// TestTCPAcrossTwoBackends sends TCP connections through a TCP listener
// to a pool of two backends: both receive connections.
func TestTCPAcrossTwoBackends(t *testing.T) {
	t.Parallel()
	gw := startGateway(t)
	a, b := tcpBackend(t, "a"), tcpBackend(t, "b")
	addr := freeAddr(t)
	gw.apply(t, lbconfig.Config{Revision: "1", Balancers: []lbconfig.Balancer{{
		ID: "lb", VDC: "prod",
		Listeners: []lbconfig.Listener{{Name: "tcp", Protocol: lbconfig.ProtocolTCP, Address: addr, Pool: "p"}},
		Pools:     []lbconfig.Pool{{Name: "p", Backends: []lbconfig.Backend{{ID: "a", Address: a}, {ID: "b", Address: b}}}},
	}}})
	seen := map[string]int{}
	for range 20 {
		name, err := tcpHello(addr)
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
	}
	if seen["a"] == 0 || seen["b"] == 0 || len(seen) != 2 {
		t.Errorf("20 connections reached %v, want both a and b", seen)
	}
}

// TestHTTPPathRouting routes by the longest path prefix to two pools, the
// rest to the default pool.
func TestHTTPPathRouting(t *testing.T) {
	t.Parallel()
	gw := startGateway(t)
	web, api, v2 := newHTTPBackend(t, "web"), newHTTPBackend(t, "api"), newHTTPBackend(t, "v2")
	addr := freeAddr(t)
	gw.apply(t, lbconfig.Config{Revision: "1", Balancers: []lbconfig.Balancer{{
		ID: "lb", VDC: "prod",
		Listeners: []lbconfig.Listener{{Name: "http", Protocol: lbconfig.ProtocolHTTP, Address: addr, Pool: "web",
			Routes: []lbconfig.Route{{PathPrefix: "/api", Pool: "api"}, {PathPrefix: "/api/v2", Pool: "v2"}}}},
		Pools: []lbconfig.Pool{
			{Name: "web", Backends: []lbconfig.Backend{{ID: "w", Address: web.addr}}},
			{Name: "api", Backends: []lbconfig.Backend{{ID: "a", Address: api.addr}}},
			{Name: "v2", Backends: []lbconfig.Backend{{ID: "v", Address: v2.addr}}},
		},
	}}})
	client := &http.Client{Timeout: 10 * time.Second}
	for path, want := range map[string]string{
		"/": "web /", "/index.html": "web /index.html", "/api": "api /api", "/api/users": "api /api/users",
		"/api/v2/users": "v2 /api/v2/users", "/apiary": "api /apiary",
	} {
		got, err := get(client, "http://"+addr+path)
		if err != nil || got != want {
			t.Errorf("GET %s = %q, %v; want %q", path, got, err, want)
		}
	}
}

// TestHTTPSTerminated terminates TLS with the certificates of the Config,
// chosen by SNI; the client verifies them against the test CA. A client
// asking for a name no certificate holds gets the first certificate (a
// verification error on its side, never a handshake alert).
func TestHTTPSTerminated(t *testing.T) {
	t.Parallel()
	gw := startGateway(t)
	web, shop := newHTTPBackend(t, "web"), newHTTPBackend(t, "shop")
	addr := freeAddr(t)
	gw.apply(t, lbconfig.Config{Revision: "1", Balancers: []lbconfig.Balancer{{
		ID: "lb", VDC: "prod",
		Listeners: []lbconfig.Listener{{Name: "https", Protocol: lbconfig.ProtocolHTTPS, Address: addr, Pool: "web",
			Routes: []lbconfig.Route{{PathPrefix: "/shop", Pool: "shop"}}, Certificates: []string{"web", "shop"}}},
		Pools: []lbconfig.Pool{
			{Name: "web", Backends: []lbconfig.Backend{{ID: "w", Address: web.addr}}},
			{Name: "shop", Backends: []lbconfig.Backend{{ID: "s", Address: shop.addr}}},
		},
		Certificates: []lbconfig.Certificate{testCert(t, "web", "web"), testCert(t, "shop", "shop")},
	}}})
	for _, c := range []struct{ sni, path, want string }{
		{"web.example.test", "/", "web /"},
		{"www.web.example.test", "/x", "web /x"},
		{"shop.example.test", "/shop/cart", "shop /shop/cart"},
	} {
		got, err := get(tlsClient(t, addr, c.sni), "https://"+c.sni+c.path)
		if err != nil || got != c.want {
			t.Errorf("GET https://%s%s = %q, %v; want %q", c.sni, c.path, got, err, c.want)
		}
	}
	// An unknown name, and no name at all, get the first certificate on
	// every handshake (caddy's own choice among several is random).
	for i := range 20 {
		sni := "unknown.example.test"
		if i%2 == 1 {
			sni = ""
		}
		conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("a handshake for the name %q: %v", sni, err)
		}
		names := conn.ConnectionState().PeerCertificates[0].DNSNames
		conn.Close()
		if names[0] != "web.example.test" {
			t.Fatalf("handshake %d, for the name %q, got the certificate of %v, want web.example.test's", i, sni, names)
		}
	}
	// Caddy wrote nothing outside the data directory.
	if left, _ := os.ReadDir(gw.Home); len(left) != 0 {
		t.Errorf("the gateway wrote into HOME: %v", left)
	}
}

// TestTLSPassthroughBySNI routes TLS connections by SNI, unterminated, to
// backends holding their own certificates.
func TestTLSPassthroughBySNI(t *testing.T) {
	t.Parallel()
	gw := startGateway(t)
	backend := func(name, file string) string {
		c := testCert(t, name, file)
		pair, err := tls.X509KeyPair([]byte(c.CertPEM), []byte(c.KeyPEM))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s", name, r.TLS.ServerName)
		}))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	a, b := backend("a", "pass-a"), backend("b", "pass-b")
	addr := freeAddr(t)
	gw.apply(t, lbconfig.Config{Revision: "1", Balancers: []lbconfig.Balancer{{
		ID: "lb", VDC: "prod",
		Listeners: []lbconfig.Listener{{Name: "tls", Protocol: lbconfig.ProtocolTLSPassthrough, Address: addr,
			SNIRoutes: []lbconfig.SNIRoute{{ServerName: "a.pass.example.test", Pool: "a"}, {ServerName: "b.pass.example.test", Pool: "b"}}}},
		Pools: []lbconfig.Pool{
			{Name: "a", Backends: []lbconfig.Backend{{ID: "a", Address: a}}},
			{Name: "b", Backends: []lbconfig.Backend{{ID: "b", Address: b}}},
		},
	}}})
	for sni, want := range map[string]string{"a.pass.example.test": "a a.pass.example.test", "b.pass.example.test": "b b.pass.example.test"} {
		got, err := get(tlsClient(t, addr, sni), "https://"+sni+"/")
		if err != nil || got != want {
			t.Errorf("GET https://%s/ = %q, %v; want %q", sni, got, err, want)
		}
	}
	// A name no route has is closed, not sent anywhere.
	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "c.pass.example.test", RootCAs: testCA(t)})
	if err == nil {
		c.Close()
		t.Error("a TLS connection for an unrouted name was answered")
	}
}

// TestHealthCheckTakesBackendOut fails a backend's HTTP health check, and
// a TCP backend's listener: each stops receiving traffic and Status says
// so; healed, each receives traffic again.
func TestHealthCheckTakesBackendOut(t *testing.T) {
	t.Parallel()
	gw := startGateway(t)
	a, b := newHTTPBackend(t, "a"), newHTTPBackend(t, "b")
	httpAddr, tcpAddr := freeAddr(t), freeAddr(t)
	tcpA := tcpBackend(t, "ta")
	tcpB := freeAddr(t) // nothing listens yet: the TCP check fails
	gw.apply(t, lbconfig.Config{Revision: "1", Balancers: []lbconfig.Balancer{{
		ID: "lb", VDC: "prod",
		Listeners: []lbconfig.Listener{
			{Name: "http", Protocol: lbconfig.ProtocolHTTP, Address: httpAddr, Pool: "web"},
			{Name: "tcp", Protocol: lbconfig.ProtocolTCP, Address: tcpAddr, Pool: "db"},
		},
		Pools: []lbconfig.Pool{
			{Name: "web", HealthCheck: healthCheck(lbconfig.HealthCheckHTTP, "/health"),
				Backends: []lbconfig.Backend{{ID: "a", Address: a.addr}, {ID: "b", Address: b.addr}}},
			{Name: "db", HealthCheck: healthCheck(lbconfig.HealthCheckTCP, ""),
				Backends: []lbconfig.Backend{{ID: "ta", Address: tcpA}, {ID: "tb", Address: tcpB}}},
		},
	}}})
	client := &http.Client{Timeout: 5 * time.Second}
	// hits sends n requests and counts the backends that answered.
	hits := func(n int) (map[string]int, error) {
		seen := map[string]int{}
		for range n {
			body, err := get(client, "http://"+httpAddr+"/")
			if err != nil {
				return seen, err
			}
			seen[strings.Fields(body)[0]]++
		}
		return seen, nil
	}
	status := func(backend string) (lbconfig.BackendStatus, error) {
		st, err := gw.Status(t.Context())
		if err != nil {
			return lbconfig.BackendStatus{}, err
		}
		for _, s := range st.Backends {
			if s.Backend == backend {
				return s, nil
			}
		}
		return lbconfig.BackendStatus{}, fmt.Errorf("no status of %s in %+v", backend, st)
	}
	wantHealth := func(backend string, healthy bool) func() error {
		return func() error {
			s, err := status(backend)
			if err != nil {
				return err
			}
			if s.Healthy != healthy {
				return fmt.Errorf("%s: %+v", backend, s)
			}
			return nil
		}
	}
	poll.Until(t, 10*time.Second, "tb taken out", wantHealth("tb", false))
	if s, _ := status("tb"); s.LastError == "" || s.Checked.IsZero() {
		t.Errorf("tb's status %+v has no error or check time", s)
	}
	// The status flips when the check fails; the reload that takes tb out
	// of Caddy's config follows it (on a busy machine, a while later).
	// Once out, tb stays out: every connection reaches ta.
	tenToTA := func() error {
		for range 10 {
			if name, err := tcpHello(tcpAddr); err != nil || name != "ta" {
				return fmt.Errorf("a TCP connection with tb down reached %q, %v", name, err)
			}
		}
		return nil
	}
	poll.Until(t, 10*time.Second, "tb out of rotation", tenToTA)
	if err := tenToTA(); err != nil {
		t.Fatal(err)
	}
	if seen, err := hits(10); err != nil || seen["a"] == 0 || seen["b"] == 0 {
		t.Fatalf("both healthy: %v, %v", seen, err)
	}

	b.setSick(true)
	poll.Until(t, 10*time.Second, "b taken out", wantHealth("b", false))
	poll.Until(t, 10*time.Second, "only a answers", func() error {
		seen, err := hits(10)
		if err != nil || seen["b"] != 0 {
			return fmt.Errorf("%v, %v", seen, err)
		}
		return nil
	})
	b.setSick(false)
	poll.Until(t, 10*time.Second, "b back", func() error {
		seen, err := hits(10)
		if err != nil || seen["b"] == 0 {
			return fmt.Errorf("%v, %v", seen, err)
		}
		return nil
	})
	// The TCP backend comes up: it receives connections again.
	ln, err := net.Listen("tcp", tcpB)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "tb\n")
			c.Close()
		}
	}()
	poll.Until(t, 10*time.Second, "tb back", func() error {
		for range 4 {
			if name, err := tcpHello(tcpAddr); err == nil && name == "tb" {
				return nil
			}
		}
		return errNotYet
	})
	if err := wantHealth("tb", true)(); err != nil {
		t.Error(err)
	}
}

// TestInvalidConfigRefused pushes broken configs: each is refused with 400
// (ErrInvalid) and a reason, and the config in force and its traffic are
// unchanged.
func TestInvalidConfigRefused(t *testing.T) {
	t.Parallel()
	gw := startGateway(t)
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)}
	backend := tcpBackend(t, "a")
	base := validBase(t, func(i int) string { return addrs[i] })
	base.Balancers[0].Pools[0].Backends[0].Address = backend
	gw.apply(t, base)
	for name, c := range invalidConfigs(t, func(i int) string { return addrs[i] }) {
		cfg := validBase(t, func(i int) string { return addrs[i] })
		cfg.Revision = "broken"
		c.edit(&cfg.Balancers[0])
		err := gw.Apply(t.Context(), cfg)
		if !errors.Is(err, lbconfig.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid naming %q", name, err, c.want)
		}
	}
	st, err := gw.Status(t.Context())
	if err != nil || st.Revision != "base" {
		t.Errorf("after the refusals the revision is %q (%v), want base", st.Revision, err)
	}
	if name, err := tcpHello(addrs[0]); err != nil || name != "a" {
		t.Errorf("after the refusals the TCP listener answers %q, %v", name, err)
	}
}
