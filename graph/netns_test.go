package graph_test

import (
	"os"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/netns"
)

// TestMain runs the tests in a network namespace whose only interface is
// loopback: the mesh nodes they start bind on all interfaces (pkg/dev/netns).
// Started as a flexgateway (gatewayChildEnv), it runs one instead.
func TestMain(m *testing.M) {
	if os.Getenv(gatewayChildEnv) != "" {
		os.Exit(runGatewayChild())
	}
	netns.Main(m)
}
