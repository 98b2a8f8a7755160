package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/lbtest"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// TestMain runs a Gateway instead of the tests in a child StartGateway
// started (lbtest.GatewayChild): Caddy's config is process-wide, so every
// test runs its own gateway process and the tests run in parallel.
func TestMain(m *testing.M) {
	if code, child := lbtest.GatewayChild(func(c lbtest.ChildConfig) (lbtest.Gateway, error) {
		g, err := New(Config{AdminAddr: c.AdminAddr, TLS: c.TLS, Token: c.Token, DataDir: c.DataDir, CaddyLogLevel: c.CaddyLogLevel, Logger: c.Logger})
		if err != nil {
			return nil, err
		}
		return g, nil
	}); child {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// gatewayProc is a gateway in a process of its own.
type gatewayProc struct {
	*lbtest.GatewayProcess
	admin string // admin base URL
}

const testToken = "test-token-0123456789"

// startGateway runs a gateway process for t and stops it at t's end.
func startGateway(t testing.TB) *gatewayProc {
	t.Helper()
	p := lbtest.StartGateway(t, lbtest.GatewayOptions{Token: testToken})
	return &gatewayProc{GatewayProcess: p, admin: "https://" + p.AdminAddr}
}

// freeAddr is a loopback address with a port free a moment ago (Caddy
// must be told the port to listen on).
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// apply pushes cfg and fails t if it is refused.
func (p *gatewayProc) apply(t testing.TB, cfg lbconfig.Config) {
	t.Helper()
	if err := p.Apply(t.Context(), cfg); err != nil {
		t.Fatalf("apply %s: %v", cfg.Revision, err)
	}
}

// httpBackend is an HTTP server on loopback answering "<name> <path>" on
// every path, and 500 on /health while unhealthy is set.
type httpBackend struct {
	name string
	addr string
	mu   sync.Mutex
	sick bool // protected by mu
}

func newHTTPBackend(t testing.TB, name string) *httpBackend {
	t.Helper()
	b := &httpBackend{name: name}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			b.mu.Lock()
			sick := b.sick
			b.mu.Unlock()
			if sick {
				http.Error(w, "sick", http.StatusInternalServerError)
				return
			}
		}
		fmt.Fprintf(w, "%s %s", b.name, r.URL.Path)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return b
}

func (b *httpBackend) setSick(v bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sick = v
}

// tcpBackend is a TCP server on loopback that writes "<name>\n" to every
// connection, then echoes what it reads.
func tcpBackend(t testing.TB, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.WriteString(c, name+"\n"); err != nil {
					return
				}
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// tcpHello connects to addr and returns the first line it reads.
func tcpHello(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// get GETs url with client and returns the body of a 200 answer.
func get(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	return string(body), nil
}

// testCA is the pool of testdata/certs/ca.pem.
func testCA(t testing.TB) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join("testdata", "certs", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("ca.pem holds no certificate")
	}
	return pool
}

// tlsClient is an HTTP client trusting only the test CA, asking for
// serverName, dialing addr whatever the URL's host.
func tlsClient(t testing.TB, addr, serverName string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: testCA(t), ServerName: serverName},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}}
}

var errNotYet = errors.New("not yet")
