// Command pvesim serves a simulated Proxmox VE cluster:
//
//	echo 'USER@REALM!ID=SECRET' > tokens && chmod 600 tokens
//	go run ./cmd/pvesim --listen 127.0.0.1:8006 --cluster NAME --nodes N --token-file tokens
//
// The API tokens come from --token-file (one per line) and the environment
// variable PVESIM_TOKENS (separated by whitespace), never from the command
// line, which any local user can read.
//
// With --cert-dir and --state-file it comes back after a restart with the same identity
// and the same guests, storage, pools, SDN, IPAM and task history.
//
// With --file-root DIR the nodes have file systems (DIR/pve1, ...): a storage's
// snippets are the files of its directory there, as on a Proxmox node.
//
// With --control PATH it also serves a fault control on that unix socket (owner-only),
// apart from the Proxmox API: POST /nodes/NODE/offline and /nodes/NODE/online.
//
// It prints the URL and the SHA-256 fingerprint of its certificate (the first node's),
// the cluster identity and every node's own endpoint, then serves until interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/pvesim/simnet"
	"github.com/flexplane/flexplane/pkg/support/unixsock"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// failRule is one --fail "METHOD PATH STATUS COUNT" rule.
type failRule struct {
	method, path  string
	status, count int
}

func parseFail(s string) (failRule, error) {
	f := strings.Fields(s)
	if len(f) != 4 {
		return failRule{}, fmt.Errorf("--fail %q: want \"METHOD PATH STATUS COUNT\"", s)
	}
	status, err1 := strconv.Atoi(f[2])
	count, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || status < 400 || status > 599 || count < 1 {
		return failRule{}, fmt.Errorf("--fail %q: STATUS must be 400-599 and COUNT >= 1", s)
	}
	method := strings.ToUpper(f[0])
	if method == "*" {
		method = ""
	}
	return failRule{method: method, path: f[1], status: status, count: count}, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pvesim:", err)
		os.Exit(1)
	}
}

// tokensEnv is the environment variable with API tokens.
const tokensEnv = "PVESIM_TOKENS"

// readTokens returns the tokens of the files (one per line, blank lines
// skipped) and of the environment's tokensEnv (separated by whitespace).
func readTokens(files []string, getenv func(string) string) ([]string, error) {
	tokens := strings.Fields(getenv(tokensEnv))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		tokens = append(tokens, strings.Fields(string(b))...)
	}
	return tokens, nil
}

// run parses flags, starts the simulated cluster, prints its URL and certificate
// fingerprint to stdout and serves until ctx ends. getenv reads the environment.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pvesim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		tokenFiles, offline, fails, nodeListen listFlag
		cfg                                    pvesim.Config
		timing, logLevel, control, dataPlane   string
		upstream                               listFlag
		latency, fenceDelay, haCycle           time.Duration
	)
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:8006", "address to serve HTTPS on")
	fs.StringVar(&cfg.Cluster, "cluster", "", "cluster name (empty: a standalone node in no cluster)")
	fs.IntVar(&cfg.Nodes, "nodes", 1, "number of nodes, named pve1..pveN")
	fs.Var(&nodeListen, "node-listen", "NODE=ADDR: serve NODE's own API endpoint on ADDR (repeatable; other nodes get a random port)")
	fs.Var(&tokenFiles, "token-file", "file of API tokens USER@REALM!ID=SECRET with full privileges, one per line (repeatable; also $"+tokensEnv+")")
	fs.StringVar(&cfg.CertDir, "cert-dir", "", "directory keeping the cluster CA and node certificates across restarts (empty: fresh ones each start)")
	fs.StringVar(&cfg.StateFile, "state-file", "", "file keeping the cluster's guests, storage, pools, SDN, IPAM and task history across restarts (empty: in memory only)")
	fs.StringVar(&cfg.FileRoot, "file-root", "", "directory of the nodes' file systems (DIR/NODE): storages' snippets, import and iso content are the files there, which the nodes' agents write (empty: no files, no snippets)")
	fs.StringVar(&timing, "timing", "fast", "task duration model: fast (tests) or realistic (dev stack)")
	fs.DurationVar(&latency, "latency", 0, "latency added to every request")
	fs.DurationVar(&fenceDelay, "fence-delay", 0, "how long a node stays offline before the HA manager fences it and recovers its HA guests elsewhere (0: the timing's, 60s fast, 20s realistic)")
	fs.DurationVar(&haCycle, "ha-cycle", -1, "how long the HA manager takes to act on a queued start, stop or migration of an HA guest (negative: the timing's, 0 fast, 2s realistic)")
	fs.Var(&offline, "offline", "node to start offline (repeatable)")
	fs.Var(&fails, "fail", "fail the next COUNT requests matching METHOD PATH with STATUS: \"POST /nodes/*/qemu/*/clone 500 2\" (repeatable; METHOD * matches all)")
	fs.StringVar(&control, "control", "", "unix socket serving the fault control: POST /nodes/NODE/offline, /nodes/NODE/online (empty: none)")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&dataPlane, "dataplane", "", "build the data plane (package simnet; root only) as network namespaces named PREFIX-... (empty: none)")
	fs.Var(&upstream, "upstream", "CIDR: a further address of the data plane's internet namespace, e.g. an external network's router 203.0.113.254/24 (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch timing {
	case "fast":
	case "realistic":
		cfg.Timing = pvesim.RealisticTiming()
	default:
		return fmt.Errorf("--timing %q: want fast or realistic", timing)
	}
	if fenceDelay < 0 {
		return fmt.Errorf("--fence-delay %v: must not be negative", fenceDelay)
	}
	if fenceDelay > 0 {
		cfg.Timing.FenceDelay = fenceDelay
	}
	if haCycle >= 0 {
		cfg.Timing.HACycle = haCycle
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	tokens, err := readTokens(tokenFiles, getenv)
	if err != nil {
		return err
	}
	if len(tokens) == 0 {
		return errors.New("at least one API token USER@REALM!ID=SECRET is required, in --token-file or $" + tokensEnv)
	}
	rules := make([]failRule, 0, len(fails))
	for _, f := range fails {
		r, err := parseFail(f)
		if err != nil {
			return err
		}
		rules = append(rules, r)
	}
	cfg.Tokens = tokens
	for _, nl := range nodeListen {
		node, addr, ok := strings.Cut(nl, "=")
		if !ok || node == "" || addr == "" {
			return fmt.Errorf("--node-listen %q: want NODE=ADDR", nl)
		}
		if cfg.NodeListen == nil {
			cfg.NodeListen = map[string]string{}
		}
		cfg.NodeListen[node] = addr
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	var controlLn net.Listener
	if control != "" {
		ln, err := unixsock.Listen(control)
		if err != nil {
			return fmt.Errorf("--control: %w", err)
		}
		defer ln.Close()
		controlLn = ln
	}

	if dataPlane != "" {
		pc := simnet.Config{Prefix: dataPlane, Logger: cfg.Logger}
		for _, u := range upstream {
			p, err := netip.ParsePrefix(u)
			if err != nil {
				return fmt.Errorf("--upstream %q: %w", u, err)
			}
			pc.Upstream = append(pc.Upstream, p)
		}
		p, err := simnet.New(pc)
		if err != nil {
			return fmt.Errorf("--dataplane: %w", err)
		}
		defer p.Close()
		cfg.DataPlane = p
	}
	c, err := pvesim.Start(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	known := map[string]bool{}
	for _, n := range c.NodeNames() {
		known[n] = true
	}
	for _, n := range offline {
		if !known[n] {
			return fmt.Errorf("--offline %q: no such node (have %s)", n, strings.Join(c.NodeNames(), ", "))
		}
		c.SetNodeOnline(n, false)
	}
	for _, r := range rules {
		c.FailRequests(r.method, r.path, r.status, r.count)
	}
	c.SetLatency(latency)
	if controlLn != nil {
		go serveControl(ctx, controlLn, c.ControlHandler(), cfg.Logger)
	}

	fmt.Fprintf(stdout, "url: %s/api2/json\n", c.URL())
	fmt.Fprintf(stdout, "fingerprint: %s\n", c.Fingerprint())
	fmt.Fprintf(stdout, "identity: %s\n", c.Identity())
	for _, n := range c.NodeNames() {
		fmt.Fprintf(stdout, "node %s: %s/api2/json fingerprint %s\n", n, c.NodeURL(n), c.NodeFingerprint(n))
	}

	<-ctx.Done()
	return c.Close()
}
