// Command agent is the flexplane node agent. It runs on every Proxmox node;
// see package agent and docs/install/agents.md for its configuration.
//
// The process a supervisor starts is the launcher (package selfupdate): it
// runs the agent as its child, the installed binary or a newer version the
// agent staged, and switches back to the previous version when a new one
// fails its probation. `agent -version` prints the version and exits.
//
// `agent helper` runs the agent's privileged helper instead (package
// privhelper): the small root process that does the node's privileged
// work for an agent running as an unprivileged user. It is a subcommand of
// the one binary so that a node installs one file and the helper speaks
// exactly the agent's version of the helper API; it never runs the
// launcher or joins the mesh.
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
	"github.com/flexplane/flexplane/pkg/agent/privhelper"
	"github.com/flexplane/flexplane/pkg/agent/selfupdate"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	"github.com/flexplane/flexplane/pkg/release"
	"github.com/flexplane/flexplane/pkg/support/profiling"
	"github.com/flexplane/flexplane/pkg/support/tracing"
)

// buildVersion is set at build time: go build -ldflags "-X main.buildVersion=v1.2.3".
var buildVersion string

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "-version" || os.Args[1] == "--version") {
		fmt.Println(version())
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == "helper" {
		if err := runHelper(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run() (int, error) {
	cfg, opts, err := agent.LoadConfig(os.Args[1:], os.Getenv)
	if err != nil {
		return 1, err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: opts.LogLevel}))
	cfg.Version = version()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if os.Getenv(selfupdate.EnvLaunched) == "" && !opts.NoLauncher {
		return launch(ctx, cfg, opts)
	}
	meshnode.PrepareProcess(cfg.ControlURL)
	if opts.DebugAddr != "" {
		prof, err := profiling.Start(opts.DebugAddr, cfg.Logger)
		if err != nil {
			return 1, err
		}
		defer prof.Close()
	}
	tp, stopTracing, err := tracing.Start(ctx, tracing.Config{Endpoint: opts.OTLPEndpoint, Service: "flexplane-agent", Version: cfg.Version, Instance: cfg.NodeName})
	if err != nil {
		return 1, err
	}
	cfg.TracerProvider = tp
	a, err := agent.Start(ctx, cfg)
	if err != nil {
		return 1, err
	}
	code := 0
	select {
	case <-ctx.Done():
	case <-a.RestartRequested():
		code = selfupdate.RestartExitCode
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return code, errors.Join(a.Shutdown(sctx), stopTracing(sctx))
}

// runHelper runs the privileged helper until SIGINT or SIGTERM.
func runHelper(args []string) error {
	cfg, level, err := privhelper.LoadConfig(args)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	h, err := privhelper.Start(cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.Shutdown(sctx)
	return nil
}

// launch runs the agent under the launcher.
func launch(ctx context.Context, cfg agent.Config, opts agent.Options) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 1, fmt.Errorf("agent: launcher: %w", err)
	}
	dir, err := selfupdate.OpenDir(cfg.StateDir)
	if err != nil {
		return 1, err
	}
	var verifier *release.Verifier
	if cfg.ReleaseKey != "" {
		if verifier, err = release.NewVerifier(cfg.ReleaseKey); err != nil {
			return 1, fmt.Errorf("agent: launcher: %w", err)
		}
	}
	return selfupdate.Launch(ctx, selfupdate.LaunchConfig{
		Dir: dir, Self: self, SelfVersion: cfg.Version, Args: os.Args[1:], Verifier: verifier,
		Probation: opts.Probation, Logger: cfg.Logger.With("node", cfg.NodeName),
	})
}

func version() string {
	if buildVersion != "" {
		return buildVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
