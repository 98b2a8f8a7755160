package meshtest_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/zeebo/blake3"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// TestVolumeChecksums: a volume's copy between the agents of two zones is
// checked with BLAKE3 when the caller of PullVolume names it, and with
// SHA-256 (in PullVolumeResponse.sha256) when it names no algorithm, as an
// orchestrator of before checksum_algorithms does: the target then names
// none to its source either, which sends no first message (as an agent of
// before does) and reads SHA-256 from its end. A volume with runs of zeros
// (not sent) arrives byte-identical each time.
func TestVolumeChecksums(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}, meshtest.ClusterSpec{Name: "beta", Nodes: 1}))
	h.WaitOnline(t, 30*time.Second)
	ctx := t.Context()
	const size = 8 << 20
	data := make([]byte, size)
	_, _ = rand.Read(data[:3<<20])
	_, _ = rand.Read(data[5<<20 : 6<<20]) // zeros between, and at the end
	src := benchDisk(t, ctx, h.Clusters[0], "pve1", 9101, size, "fp-leaving")
	dst := benchDisk(t, ctx, h.Clusters[1], "pve1", 9102, size, "fp-incoming")
	if err := os.WriteFile(src.path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	b3 := blake3.Sum256(data)
	s2 := sha256.Sum256(data)
	wantB3, wantSHA := hex.EncodeToString(b3[:]), hex.EncodeToString(s2[:])
	srcAgent, _, ok := h.Orchestrator.Zones().AgentOfNode(h.Zone(t, h.Clusters[0]).ID, "pve1")
	dstAgent, dstHost, ok2 := h.Orchestrator.Zones().AgentOfNode(h.Zone(t, h.Clusters[1]).ID, "pve1")
	if !ok || !ok2 {
		t.Fatal("no agents")
	}
	for _, tc := range []struct {
		algs          []string
		alg, sum, sha string // the last response's checksum_algorithm, checksum and sha256
	}{
		{[]string{"blake3", "sha256"}, "blake3", wantB3, ""},
		{nil, "sha256", wantSHA, wantSHA},
		{[]string{"sha256"}, "sha256", wantSHA, wantSHA},
		{[]string{"md5", "blake3"}, "blake3", wantB3, ""},
	} {
		if err := os.WriteFile(dst.path, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		o, err := srcAgent.OfferVolume(ctx, &agentv1.OfferVolumeRequest{Volume: src.volid, Reader: dstHost.MeshName})
		if err != nil {
			t.Fatal(err)
		}
		st, err := dstAgent.PullVolume(ctx, &agentv1.PullVolumeRequest{SourceAddr: o.GetAddr(), Capability: o.GetCapability(), Volume: dst.volid, ChecksumAlgorithms: tc.algs})
		if err != nil {
			t.Fatal(err)
		}
		var last *agentv1.PullVolumeResponse
		for last == nil || (last.GetChecksum() == "" && last.GetSha256() == "") {
			if last, err = st.Recv(); err != nil {
				t.Fatalf("%v: %v", tc.algs, err)
			}
		}
		if last.GetChecksumAlgorithm() != tc.alg || last.GetChecksum() != tc.sum || last.GetSha256() != tc.sha {
			t.Errorf("%v: the end says %s %s, sha256 %q; want %s %s, sha256 %q", tc.algs,
				last.GetChecksumAlgorithm(), last.GetChecksum(), last.GetSha256(), tc.alg, tc.sum, tc.sha)
		}
		got, err := os.ReadFile(dst.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			i := 0
			for i < min(len(got), len(data)) && got[i] == data[i] {
				i++
			}
			t.Errorf("%v: the volume arrived different (%d bytes, first difference at %d)", tc.algs, len(got), i)
		}
	}
}
