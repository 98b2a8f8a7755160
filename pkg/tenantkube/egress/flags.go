package egress

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
)

// ParseArgs reads a Config from the command line of the egress-proxy
// command (the orchestrator binary's `egress-proxy` subcommand, which the
// flexkube chart runs beside each API server):
//
//	-socket PATH       the unix socket to listen on (as the chart runs it)
//	-listen ADDR       host:port to listen on, without -socket (default 127.0.0.1:8131)
//	-allow CIDR,...    the networks tunnels may lead to (default none)
//	-max-conns N       tunnels open at once (default 256)
//	-dial-timeout D    bound of a destination's dial (default 10s)
//
// A network that is not a CIDR in its canonical form is an error.
func ParseArgs(args []string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("egress-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	var allow, socket string
	fs.StringVar(&socket, "socket", "", "the unix socket to listen on (instead of -listen)")
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:8131", "host:port to listen on")
	fs.StringVar(&allow, "allow", "", "comma-separated CIDRs tunnels may lead to (none: every destination is refused)")
	fs.IntVar(&cfg.MaxConns, "max-conns", 256, "tunnels open at once")
	fs.DurationVar(&cfg.DialTimeout, "dial-timeout", 0, "bound of a destination's dial (default 10s)")
	if err := fs.Parse(args); err != nil {
		return Config{}, fmt.Errorf("egress: flags: %w", err)
	}
	if socket != "" {
		cfg.Network, cfg.Listen = "unix", socket
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("egress: flags: unexpected argument %q: %w", fs.Arg(0), ErrInvalid)
	}
	for _, s := range strings.Split(allow, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Masked() != p {
			return Config{}, fmt.Errorf("egress: flags: -allow %q: want a network in CIDR form, such as 10.0.0.0/24: %w", s, ErrInvalid)
		}
		cfg.Allow = append(cfg.Allow, p)
	}
	if cfg.MaxConns <= 0 {
		return Config{}, fmt.Errorf("egress: flags: -max-conns %d: want at least 1: %w", cfg.MaxConns, ErrInvalid)
	}
	return cfg, nil
}

// Main runs the egress-proxy command with args until ctx ends, logging to
// log (JSON lines on stderr in the command).
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := ParseArgs(args, stderr)
	if err != nil {
		return err
	}
	cfg.Log = slog.New(slog.NewJSONHandler(stderr, nil))
	p, err := New(cfg)
	if err != nil {
		return err
	}
	return p.Run(ctx)
}
