// Command agent is the flexplane node agent. It runs on every Proxmox node;
// see package agent and the README for its configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	"github.com/flexplane/flexplane/pkg/support/profiling"
	"github.com/flexplane/flexplane/pkg/support/tracing"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	cfg, opts, err := agent.LoadConfig(os.Args[1:], os.Getenv)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: opts.LogLevel}))
	cfg.Version = version()
	meshnode.PrepareProcess(cfg.ControlURL)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if opts.DebugAddr != "" {
		prof, err := profiling.Start(opts.DebugAddr, cfg.Logger)
		if err != nil {
			return err
		}
		defer prof.Close()
	}
	tp, stopTracing, err := tracing.Start(ctx, tracing.Config{Endpoint: opts.OTLPEndpoint, Service: "flexplane-agent", Version: cfg.Version, Instance: cfg.NodeName})
	if err != nil {
		return err
	}
	cfg.TracerProvider = tp
	a, err := agent.Start(ctx, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(a.Shutdown(sctx), stopTracing(sctx))
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
