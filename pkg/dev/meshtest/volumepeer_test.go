package meshtest_test

import (
	"bytes"
	"crypto/rand"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// TestVolumeReadOnlyByNamedAgent: an offered volume is read only by the
// agent the offer names, proven by its mesh identity (and its agent tag),
// not by the capability alone: another agent of the mesh that presents the
// capability (as a compromised orchestrator could make it do) is refused
// with PERMISSION_DENIED, and the named one then reads it.
func TestVolumeReadOnlyByNamedAgent(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2}, meshtest.ClusterSpec{Name: "beta", Nodes: 1}))
	h.WaitOnline(t, 30*time.Second)
	ctx := t.Context()
	const size = 2 << 20
	data := make([]byte, size)
	_, _ = rand.Read(data)
	src := benchDisk(t, ctx, h.Clusters[0], "pve1", 9301, size, "fp-leaving")
	named := benchDisk(t, ctx, h.Clusters[1], "pve1", 9302, size, "fp-incoming")
	other := benchDisk(t, ctx, h.Clusters[0], "pve2", 9303, size, "fp-incoming")
	if err := os.WriteFile(src.path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	alpha, beta := h.Zone(t, h.Clusters[0]).ID, h.Zone(t, h.Clusters[1]).ID
	srcAgent, _, ok1 := h.Orchestrator.Zones().AgentOfNode(alpha, "pve1")
	otherAgent, _, ok2 := h.Orchestrator.Zones().AgentOfNode(alpha, "pve2")
	namedAgent, namedHost, ok3 := h.Orchestrator.Zones().AgentOfNode(beta, "pve1")
	if !ok1 || !ok2 || !ok3 {
		t.Fatal("no agents")
	}
	o, err := srcAgent.OfferVolume(ctx, &agentv1.OfferVolumeRequest{Volume: src.volid, Reader: namedHost.MeshName})
	if err != nil {
		t.Fatal(err)
	}
	pull := func(agent agentv1.AgentServiceClient, volume string) error {
		st, err := agent.PullVolume(ctx, &agentv1.PullVolumeRequest{SourceAddr: o.GetAddr(), Capability: o.GetCapability(), Volume: volume})
		if err != nil {
			return err
		}
		for {
			p, err := st.Recv()
			if err != nil {
				return err
			}
			if p.GetChecksum() != "" || p.GetSha256() != "" {
				return nil
			}
		}
	}
	if err := pull(otherAgent, other.volid); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a read by an agent the offer does not name: %v, want PERMISSION_DENIED", err)
	}
	if got, _ := os.ReadFile(other.path); bytes.Contains(got, data[:4096]) {
		t.Fatal("the agent the offer does not name got the volume's data")
	}
	if err := pull(namedAgent, named.volid); err != nil {
		t.Fatalf("the named agent's read: %v", err)
	}
	if got, _ := os.ReadFile(named.path); len(got) < size || !bytes.Equal(got[:size], data) {
		t.Fatal("the named agent's copy differs")
	}
}
