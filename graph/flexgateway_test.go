package graph_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/flexplane/flexplane/pkg/loadbalancer/gateway"
)

// gatewayChildEnv set makes the test binary run a flexgateway (package
// gateway) instead of the tests: Caddy's config is process-wide, and the
// gateway must live in the zone's internet namespace.
const gatewayChildEnv = "FLEXPLANE_TEST_FLEXGATEWAY"

// runGatewayChild runs a gateway with its admin API on 127.0.0.1:0 of its
// namespace, writes "admin ADDR" on stdout and serves until SIGTERM or
// until its stdin closes.
func runGatewayChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	g, err := gateway.New(gateway.Config{AdminAddr: "127.0.0.1:0", Token: os.Getenv("FLEXGATEWAY_TOKEN"),
		DataDir: os.Getenv("FLEXGATEWAY_DATA_DIR"), Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("admin %s\n", g.AdminAddr())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	if err := g.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
