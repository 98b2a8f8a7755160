// Command egressproxy stands in for the orchestrator binary where podrun
// runs a hosted control plane's pods: it has the orchestrator's
// `egress-proxy` and `probe` subcommands only (the same code, packages
// pkg/tenantkube/egress and pkg/support/httpsprobe), so podrun runs the
// flexkube chart's egress-proxy container, and a test's node the chart's
// test hook, without linking the whole orchestrator.
//
//	egressproxy egress-proxy [-listen ADDR] [-allow CIDR,...] [-max-conns N] [-dial-timeout D]
//	egressproxy probe [-ca-file FILE] [-server-name NAME] [-timeout D] URL
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/flexplane/flexplane/pkg/support/httpsprobe"
	"github.com/flexplane/flexplane/pkg/tenantkube/egress"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "egress-proxy" && os.Args[1] != "probe" {
		fmt.Fprintln(os.Stderr, "usage: egressproxy egress-proxy|probe [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if os.Args[1] == "probe" {
		err = httpsprobe.Main(ctx, "orchestrator probe", os.Args[2:], os.Stderr)
	} else {
		err = egress.Main(ctx, os.Args[2:], os.Stderr)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
