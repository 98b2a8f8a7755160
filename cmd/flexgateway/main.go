// Command flexgateway is the load balancers' data plane (package gateway):
// Caddy with caddy-l4, configured only through its admin API by the
// orchestrator.
//
//	flexgateway [-admin-addr ADDR] -token-file FILE -tls-cert-file FILE -tls-key-file FILE
//	    -client-ca-file FILE -data-dir DIR [-log-level LEVEL] [-caddy-log-level LEVEL]
//
// The admin API is served over TLS with -tls-cert-file and answers only
// clients whose certificate chains to -client-ca-file and who bear the
// token of -token-file, the token of the replica's zone.
//
// Every flag has an environment variable (FLEXGATEWAY_ADMIN_ADDR,
// FLEXGATEWAY_TOKEN_FILE, FLEXGATEWAY_TLS_CERT_FILE,
// FLEXGATEWAY_TLS_KEY_FILE, FLEXGATEWAY_CLIENT_CA_FILE,
// FLEXGATEWAY_DATA_DIR, FLEXGATEWAY_LOG_LEVEL,
// FLEXGATEWAY_CADDY_LOG_LEVEL); a flag wins over its variable.
//
//	flexgateway probe [-ca-file FILE] [-server-name NAME] [-timeout 5s] [-status 200] [-plain-http] URL
//
// checks a replica from inside the cluster (the flexgateway chart's `helm
// test` runs it): GET URL (an https URL, e.g. the zone Service's /readyz)
// must answer 200, over TLS verified against -ca-file (default the
// system's roots) for -server-name (default the URL's host). It exits 0
// when it did, 1 with the reason otherwise.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/flexplane/flexplane/pkg/loadbalancer/gateway"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
	"github.com/flexplane/flexplane/pkg/support/httpsprobe"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run parses args (with getenv for defaults) and runs the gateway until
// ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "probe" {
		return httpsprobe.Main(ctx, "flexgateway probe", args[1:], stderr)
	}
	cfg, level, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	g, err := gateway.New(cfg)
	if err != nil {
		return err
	}
	cfg.Logger.Info("flexgateway admin API listening", "addr", g.AdminAddr().String(), "data_dir", cfg.DataDir)
	return g.Run(ctx)
}

// parse turns flags and environment into a gateway.Config and the log
// level.
func parse(args []string, getenv func(string) string, stderr io.Writer) (gateway.Config, slog.Level, error) {
	fs := flag.NewFlagSet("flexgateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		adminAddr  = fs.String("admin-addr", cmp.Or(getenv("FLEXGATEWAY_ADMIN_ADDR"), ":9443"), "host:port of the admin API, /healthz, /readyz and /metrics, all over TLS")
		tokenFile  = fs.String("token-file", getenv("FLEXGATEWAY_TOKEN_FILE"), "file holding the admin API's bearer token: the token of this replica's zone (required)")
		certFile   = fs.String("tls-cert-file", getenv("FLEXGATEWAY_TLS_CERT_FILE"), "PEM file of the admin listener's certificate chain, read at every handshake (required)")
		keyFile    = fs.String("tls-key-file", getenv("FLEXGATEWAY_TLS_KEY_FILE"), "PEM file of the admin listener's private key, read at every handshake (required)")
		clientCA   = fs.String("client-ca-file", getenv("FLEXGATEWAY_CLIENT_CA_FILE"), "PEM file of the CA the orchestrator's client certificate must chain to, read at every handshake (required)")
		dataDir    = fs.String("data-dir", getenv("FLEXGATEWAY_DATA_DIR"), "the only directory written to (required)")
		logLevel   = fs.String("log-level", cmp.Or(getenv("FLEXGATEWAY_LOG_LEVEL"), "info"), "debug, info, warn or error")
		caddyLevel = fs.String("caddy-log-level", cmp.Or(getenv("FLEXGATEWAY_CADDY_LOG_LEVEL"), "warn"), "Caddy's own log level: debug, info, warn or error")
	)
	var level slog.Level
	if err := fs.Parse(args); err != nil {
		return gateway.Config{}, level, err
	}
	if fs.NArg() > 0 {
		return gateway.Config{}, level, fmt.Errorf("flexgateway: unexpected arguments %q", fs.Args())
	}
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return gateway.Config{}, level, fmt.Errorf("flexgateway: -log-level: %w", err)
	}
	switch strings.ToUpper(*caddyLevel) {
	case "DEBUG", "INFO", "WARN", "ERROR":
	default:
		return gateway.Config{}, level, fmt.Errorf("flexgateway: -caddy-log-level %q: want debug, info, warn or error", *caddyLevel)
	}
	if *tokenFile == "" || *dataDir == "" {
		return gateway.Config{}, level, errors.New("flexgateway: -token-file and -data-dir are required")
	}
	if *certFile == "" || *keyFile == "" || *clientCA == "" {
		return gateway.Config{}, level, errors.New("flexgateway: -tls-cert-file, -tls-key-file and -client-ca-file are required")
	}
	tok, err := os.ReadFile(*tokenFile)
	if err != nil {
		return gateway.Config{}, level, fmt.Errorf("flexgateway: token: %w", err)
	}
	token := strings.TrimSpace(string(tok))
	if len(token) < 16 {
		return gateway.Config{}, level, fmt.Errorf("flexgateway: the token in %s is shorter than 16 characters", *tokenFile)
	}
	return gateway.Config{
		AdminAddr:     *adminAddr,
		TLS:           lbconfig.TLSFiles{CertFile: *certFile, KeyFile: *keyFile, CAFile: *clientCA},
		Token:         token,
		DataDir:       *dataDir,
		CaddyLogLevel: strings.ToUpper(*caddyLevel),
	}, level, nil
}
