package meshtest_test

import (
	"os"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/netns"
)

// TestMain runs the tests in a network namespace whose only interface is
// loopback: the mesh nodes they start bind on all interfaces (pkg/dev/netns).
func TestMain(m *testing.M) { netns.Main(m) }

// TestMeshListensOnLoopbackOnly: a harness's mesh nodes (the orchestrator's
// and an agent's; tsnet binds their WireGuard and peer API sockets on all
// interfaces) and everything else the harness serves are reachable from this
// machine only.
func TestMeshListensOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "solo", Nodes: 1}))
	h.WaitOnline(t, 30*time.Second)
	socks, err := netns.ListeningSockets([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	wildcard := 0
	for _, s := range socks {
		if !s.LoopbackOnly() {
			t.Errorf("reachable from outside the machine: %s", s)
		}
		if s.Local.Addr().IsUnspecified() {
			wildcard++
		}
	}
	// Two mesh nodes, each with UDP sockets on all interfaces: what the
	// namespace makes harmless is there.
	if wildcard < 4 {
		t.Errorf("%d sockets on all interfaces, want the mesh nodes' (at least 4): %v", wildcard, socks)
	}
	t.Logf("%d listening sockets, %d of them on all interfaces of a namespace with only lo", len(socks), wildcard)
}
