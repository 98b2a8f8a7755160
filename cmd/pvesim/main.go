// Command pvesim serves a simulated Proxmox VE cluster:
//
//	go run ./cmd/pvesim --listen 127.0.0.1:8006 --cluster NAME --nodes N --token 'USER@REALM!ID=SECRET'
//
// It prints the URL and the SHA-256 fingerprint of its certificate, then serves until
// interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// failFlag is one --fail "METHOD PATH STATUS COUNT" rule.
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
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pvesim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("pvesim", flag.ContinueOnError)
	var (
		tokens, offline, fails listFlag
		cfg                    pvesim.Config
		timing, logLevel       string
		latency                time.Duration
	)
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:8006", "address to serve HTTPS on")
	fs.StringVar(&cfg.Cluster, "cluster", "", "cluster name (empty: a standalone node in no cluster)")
	fs.IntVar(&cfg.Nodes, "nodes", 1, "number of nodes, named pve1..pveN")
	fs.Var(&tokens, "token", "API token USER@REALM!ID=SECRET with full privileges (repeatable)")
	fs.StringVar(&timing, "timing", "fast", "task duration model: fast (tests) or realistic (dev stack)")
	fs.DurationVar(&latency, "latency", 0, "latency added to every request")
	fs.Var(&offline, "offline", "node to start offline (repeatable)")
	fs.Var(&fails, "fail", "fail the next COUNT requests matching METHOD PATH with STATUS: \"POST /nodes/*/qemu/*/clone 500 2\" (repeatable; METHOD * matches all)")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
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
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	if len(tokens) == 0 {
		return errors.New("at least one --token USER@REALM!ID=SECRET is required")
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
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

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

	fmt.Printf("url: %s/api2/json\n", c.URL())
	fmt.Printf("fingerprint: %s\n", c.Fingerprint())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return c.Close()
}
