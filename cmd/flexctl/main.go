// Command flexctl is the command-line client of the flexplane API (see
// docs/use/flexctl.md): VMs, networks, images, load balancers and managed
// Kubernetes, with contexts, device login and shell completion. The
// commands are package flexctl's.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/flexplane/flexplane/pkg/flexctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := flexctl.Main(ctx, flexctl.Env{Args: os.Args[1:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
