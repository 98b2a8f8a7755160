// Command devstack runs the whole of flexplane on one machine: `make dev`.
//
//	DEV_ADDR=127.0.0.1:8080 DEV_DIR=.dev go run ./cmd/devstack
//
// It builds what it needs, starts the orchestrator, two simulated Proxmox
// clusters with one agent per node, the development OpenID provider and a
// local image server, creates the demo data and prints
// "flexplane dev ready: http://ADDR". A child that exits is restarted (the stack
// gives up only on one that keeps failing); Ctrl-C or SIGTERM stops everything.
//
// With a command it acts on the stack running in DEV_DIR instead, through its
// control socket, to cause failures:
//
//	devstack agent stop|start|kill NAME
//	devstack node offline|online ZONE NODE
//	devstack partition|heal ZONE
//	devstack status
//
// A bad command line exits 2, a failed command 1.
// See package devstack.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/flexplane/flexplane/pkg/dev/devstack"
)

func main() {
	fs := flag.NewFlagSet("devstack", flag.ExitOnError)
	addr := fs.String("addr", env("DEV_ADDR", "127.0.0.1:8080"), "address of the portal, API and mesh control (env DEV_ADDR)")
	dir := fs.String("dir", env("DEV_DIR", ".dev"), "state, binaries, logs and tokens (env DEV_DIR)")
	level := fs.String("log-level", env("DEV_LOG_LEVEL", "info"), "log level of the processes (env DEV_LOG_LEVEL)")
	portal := fs.String("portal-dir", env("DEV_PORTAL_DIR", ""), "built portal; default portal/.output/public of the module (env DEV_PORTAL_DIR)")
	// The restart policy (see devstack.Config), each also from the
	// environment.
	delay := fs.Duration("restart-delay", devstack.DefaultRestartDelay, "first delay before a child that exited is started again (env DEV_RESTART_DELAY)")
	delayMax := fs.Duration("restart-delay-max", devstack.DefaultRestartDelayMax, "bound of the doubling restart delay (env DEV_RESTART_DELAY_MAX)")
	burst := fs.Int("start-limit-burst", devstack.DefaultStartLimitBurst, "a child started this many times within -start-limit-interval that exits again stops the stack (env DEV_START_LIMIT_BURST)")
	interval := fs.Duration("start-limit-interval", devstack.DefaultStartLimitInterval, "the start limit's window (env DEV_START_LIMIT_INTERVAL)")
	recoverAfter := fs.Duration("vm-recover-after", 0, "the orchestrator's -vm-recover-after; 0 keeps its default (env DEV_VM_RECOVER_AFTER)")
	timing := fs.String("pve-timing", "realistic", "the simulated clusters' task timing: realistic or fast (env DEV_PVE_TIMING)")
	kube := fs.Bool("kube", false, "run 2 orchestrator replicas behind -addr on a real kube-apiserver (the catalog in CRDs) with the mesh state in PostgreSQL; with a Kubernetes node running pods; needs root, make kube-bin, make kube-node and make postgres (env DEV_KUBE=1)")
	for _, f := range []string{"restart-delay", "restart-delay-max", "start-limit-burst", "start-limit-interval", "vm-recover-after", "pve-timing", "kube"} {
		key := "DEV_" + strings.ToUpper(strings.ReplaceAll(f, "-", "_"))
		if v := os.Getenv(key); v != "" {
			if err := fs.Set(f, v); err != nil {
				fmt.Fprintf(os.Stderr, "devstack: %s=%q: %v\n", key, v, err)
				os.Exit(2)
			}
		}
	}
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, devstack.Usage)
		fmt.Fprintln(os.Stderr, "\nflags:")
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:])
	if *delay <= 0 || *delayMax < *delay || *burst < 1 || *interval <= 0 || *recoverAfter < 0 {
		fmt.Fprintln(os.Stderr, "devstack: the restart delays, -start-limit-burst and -start-limit-interval must be positive, -restart-delay-max at least -restart-delay")
		os.Exit(2)
	}
	if *timing != "realistic" && *timing != "fast" {
		fmt.Fprintf(os.Stderr, "devstack: -pve-timing %q: want realistic or fast\n", *timing)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if fs.NArg() > 0 {
		err := devstack.Command(ctx, *dir, fs.Args(), os.Stdout)
		stop()
		var ue *devstack.UsageError
		switch {
		case errors.As(err, &ue):
			fmt.Fprintf(os.Stderr, "devstack: %s\n\n%s\n", ue.Msg, devstack.Usage)
			os.Exit(2)
		case err != nil:
			fmt.Fprintln(os.Stderr, "devstack:", err)
			os.Exit(1)
		}
		return
	}
	err := devstack.Run(ctx, devstack.Config{Addr: *addr, Dir: *dir, LogLevel: *level, PortalDir: *portal,
		RestartDelay: *delay, RestartDelayMax: *delayMax, StartLimitBurst: *burst, StartLimitInterval: *interval,
		VMRecoverAfter: *recoverAfter, PVETiming: *timing, Kube: *kube})
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
