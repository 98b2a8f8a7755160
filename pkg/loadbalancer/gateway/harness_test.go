package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// childEnv set makes the test binary run a Gateway instead of the tests:
// Caddy's config is process-wide, so every test runs its own gateway
// process and the tests run in parallel.
const childEnv = "FLEXGATEWAY_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

// runChild runs a Gateway on 127.0.0.1:0 with the token and data
// directory of its environment, writes "admin ADDR" on stdout and serves
// until SIGTERM or until its stdin closes (the test process is gone).
func runChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	g, err := New(Config{
		AdminAddr:     "127.0.0.1:0",
		Token:         os.Getenv("FLEXGATEWAY_TOKEN"),
		DataDir:       os.Getenv("FLEXGATEWAY_DATA_DIR"),
		CaddyLogLevel: os.Getenv("FLEXGATEWAY_CADDY_LOG_LEVEL"),
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("admin %s\n", g.AdminAddr())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	if err := g.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// gatewayProc is a gateway in a process of its own.
type gatewayProc struct {
	*lbconfig.Client
	admin   string // admin base URL
	dataDir string
	home    string // the process's HOME: must stay empty
}

const testToken = "test-token-0123456789"

// startGateway runs a gateway process for t and stops it at t's end.
func startGateway(t testing.TB) *gatewayProc {
	t.Helper()
	dir := t.TempDir()
	p := &gatewayProc{dataDir: filepath.Join(dir, "data"), home: filepath.Join(dir, "home")}
	if err := os.MkdirAll(p.home, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{childEnv + "=1", "FLEXGATEWAY_TOKEN=" + testToken, "FLEXGATEWAY_DATA_DIR=" + p.dataDir,
		"HOME=" + p.home, "PATH=" + os.Getenv("PATH"), "FLEXGATEWAY_CADDY_LOG_LEVEL=" + os.Getenv("FLEXGATEWAY_CADDY_LOG_LEVEL")}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gateway process: %v\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("the gateway process did not stop within 30s after SIGTERM\n%s", stderr.String())
		}
		_ = stdin.Close()
		if t.Failed() {
			t.Logf("gateway stderr:\n%s", stderr.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("gateway process: %v\n%s", err, stderr.String())
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "admin ")
	if !ok {
		t.Fatalf("gateway process said %q", line)
	}
	p.admin = "http://" + addr
	p.Client = &lbconfig.Client{BaseURL: p.admin, Token: testToken}
	return p
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder // protected by mu
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
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

// eventually polls cond until it returns nil or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
