package graph_test

import (
	"os"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/lbtest"
	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/shared"
	"github.com/flexplane/flexplane/pkg/loadbalancer/gateway"
)

// TestMain runs the tests in a network namespace whose only interface is
// loopback: the mesh nodes they start bind on all interfaces (pkg/dev/netns);
// after them it stops the harness they share (sharedMesh).
// Started as a flexgateway (lbtest.StartGateway), it runs one instead:
// Caddy's config is process-wide, and the gateway must live in the zone's
// internet namespace.
func TestMain(m *testing.M) {
	if code, child := lbtest.GatewayChild(func(c lbtest.ChildConfig) (lbtest.Gateway, error) {
		g, err := gateway.New(gateway.Config{AdminAddr: c.AdminAddr, TLS: c.TLS, Token: c.Token, DataDir: c.DataDir, CaddyLogLevel: c.CaddyLogLevel, Logger: c.Logger})
		if err != nil {
			return nil, err
		}
		return g, nil
	}); child {
		os.Exit(code)
	}
	netns.Main(shared.ThenClose(m, sharedMesh))
}
