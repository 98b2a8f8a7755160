package charts

import (
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/netns"
)

// The node of TestChartsRun adds a bridge, routes and iptables rules: the
// package's tests run in a network namespace of their own.
func TestMain(m *testing.M) { netns.Main(m) }
