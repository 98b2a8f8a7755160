// Command egressproxy stands in for the orchestrator binary where podrun
// runs a hosted control plane's pods: it has the orchestrator's
// `egress-proxy` subcommand only (the same code, package
// pkg/tenantkube/egress), so podrun runs the flexkube chart's egress-proxy
// container without linking the whole orchestrator.
//
//	egressproxy egress-proxy [-listen ADDR] [-allow CIDR,...] [-max-conns N] [-dial-timeout D]
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/flexplane/flexplane/pkg/tenantkube/egress"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "egress-proxy" {
		fmt.Fprintln(os.Stderr, "usage: egressproxy egress-proxy [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := egress.Main(ctx, os.Args[2:], os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
