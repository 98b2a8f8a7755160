package lbtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/syncbuf"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// GatewayChildEnv set makes a test binary whose TestMain calls
// GatewayChild run a flexgateway instead of its tests: Caddy's config is
// process-wide, so every gateway a test starts is a process of its own
// (StartGateway), and tests using one run in parallel.
const GatewayChildEnv = "FLEXPLANE_TEST_FLEXGATEWAY"

// Gateway is what a gateway child runs: package gateway's *Gateway (this
// package does not import it, so that package's own tests can use this
// one).
type Gateway interface {
	// AdminAddr is the admin API's address once listening.
	AdminAddr() net.Addr
	// Run serves until ctx ends.
	Run(ctx context.Context) error
}

// ChildConfig is what StartGateway gives the child, for its gateway.
type ChildConfig struct {
	// AdminAddr is where the admin API listens: 127.0.0.1:0 of the child's
	// network namespace.
	AdminAddr string
	// TLS are the admin listener's certificate, key and client CA.
	TLS lbconfig.TLSFiles
	// Token is the admin API's bearer token.
	Token string
	// DataDir is the gateway's data directory.
	DataDir string
	// CaddyLogLevel is Caddy's log level (FLEXGATEWAY_CADDY_LOG_LEVEL of the
	// test's environment; empty for the gateway's default).
	CaddyLogLevel string
	// Logger writes warnings and errors to the child's stderr, which
	// StartGateway logs when the test fails.
	Logger *slog.Logger
}

// GatewayChild, called first in TestMain, runs the gateway newGateway
// makes when the process is a child StartGateway started, and returns its
// exit code and true; otherwise it returns 0, false at once. The child
// writes "admin ADDR" on stdout and serves until SIGTERM or until its
// stdin closes (the test process is gone).
func GatewayChild(newGateway func(ChildConfig) (Gateway, error)) (code int, child bool) {
	if os.Getenv(GatewayChildEnv) == "" {
		return 0, false
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	g, err := newGateway(ChildConfig{
		AdminAddr: "127.0.0.1:0",
		TLS: lbconfig.TLSFiles{CertFile: os.Getenv("FLEXGATEWAY_TLS_CERT_FILE"), KeyFile: os.Getenv("FLEXGATEWAY_TLS_KEY_FILE"),
			CAFile: os.Getenv("FLEXGATEWAY_CLIENT_CA_FILE")},
		Token:         os.Getenv("FLEXGATEWAY_TOKEN"),
		DataDir:       os.Getenv("FLEXGATEWAY_DATA_DIR"),
		CaddyLogLevel: os.Getenv("FLEXGATEWAY_CADDY_LOG_LEVEL"),
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, true
	}
	fmt.Printf("admin %s\n", g.AdminAddr())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	if err := g.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, true
	}
	return 0, true
}

// GatewayOptions configures StartGateway.
type GatewayOptions struct {
	// Token is the admin API's bearer token (required).
	Token string
	// PKI is the admin API's mutual TLS; nil makes one (NewPKI).
	PKI *PKI
	// Start starts the child's command; nil is cmd.Start. A test that needs
	// the gateway in a network namespace starts it from a thread there.
	Start func(cmd *exec.Cmd) error
}

// GatewayProcess is a flexgateway in a child process of the test binary.
type GatewayProcess struct {
	// Client talks to its admin API with the PKI's client certificate.
	*lbconfig.Client
	// PKI is the admin API's mutual TLS.
	PKI *PKI
	// AdminAddr is the admin API's host:port (in the child's namespace).
	AdminAddr string
	// DataDir is its data directory; Home its HOME, which it leaves empty.
	DataDir, Home string
}

// StartGateway runs the test binary (whose TestMain calls GatewayChild) as
// a flexgateway for t and stops it with SIGTERM when t ends, failing t
// when it exits with an error or does not stop within 30 s. Its stderr is
// logged when t fails.
func StartGateway(t testing.TB, o GatewayOptions) *GatewayProcess {
	t.Helper()
	dir := t.TempDir()
	pki := o.PKI
	if pki == nil {
		pki = NewPKI(t)
	}
	p := &GatewayProcess{PKI: pki, DataDir: filepath.Join(dir, "data"), Home: filepath.Join(dir, "home")}
	if err := os.MkdirAll(p.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{GatewayChildEnv + "=1", "FLEXGATEWAY_TOKEN=" + o.Token, "FLEXGATEWAY_DATA_DIR=" + p.DataDir,
		"FLEXGATEWAY_TLS_CERT_FILE=" + pki.Server.CertFile, "FLEXGATEWAY_TLS_KEY_FILE=" + pki.Server.KeyFile, "FLEXGATEWAY_CLIENT_CA_FILE=" + pki.Server.CAFile,
		"HOME=" + p.Home, "PATH=" + os.Getenv("PATH"), "FLEXGATEWAY_CADDY_LOG_LEVEL=" + os.Getenv("FLEXGATEWAY_CADDY_LOG_LEVEL")}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	start := o.Start
	if start == nil {
		start = (*exec.Cmd).Start
	}
	if err := start(cmd); err != nil {
		t.Fatalf("flexgateway: start: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("flexgateway: %v\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("flexgateway did not stop within 30s of SIGTERM\n%s", stderr.String())
		}
		_ = stdin.Close()
		if t.Failed() {
			t.Logf("flexgateway stderr:\n%s", stderr.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("flexgateway: %v\n%s", err, stderr.String())
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "admin ")
	if !ok {
		t.Fatalf("flexgateway said %q", line)
	}
	p.AdminAddr = addr
	p.Client = &lbconfig.Client{BaseURL: "https://" + addr, Token: o.Token, HTTP: pki.HTTP(t, 30*time.Second)}
	return p
}
