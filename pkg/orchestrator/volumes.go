package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// volumeMover moves disk volumes between zones agent to agent
// (compute.VolumeMover): the source agent offers the volume to the target
// agent, which pulls it over the mesh; the orchestrator only passes the
// capability and follows the progress.
type volumeMover struct{ r *fleet.Registry }

// NewVolumeMover returns the VolumeMover of the zones of r (the one the
// orchestrator's compute service uses).
func NewVolumeMover(r *fleet.Registry) compute.VolumeMover { return volumeMover{r} }

// MoveVolume implements compute.VolumeMover.
func (m volumeMover) MoveVolume(ctx context.Context, from, to compute.VolumeRef, progress func(done, total int64)) (string, error) {
	src, _, ok := m.r.AgentOfNode(from.ZoneID, from.Node)
	if !ok {
		return "", fmt.Errorf("orchestrator: move volume: no online agent on %s", from.Node)
	}
	dst, dstHost, ok := m.r.AgentOfNode(to.ZoneID, to.Node)
	if !ok {
		return "", fmt.Errorf("orchestrator: move volume: no online agent on %s", to.Node)
	}
	o, err := src.OfferVolume(ctx, &agentv1.OfferVolumeRequest{Volume: from.Volume, Reader: dstHost.MeshName})
	if err != nil {
		return "", fmt.Errorf("orchestrator: offer volume %s: %w", from.Volume, err)
	}
	st, err := dst.PullVolume(ctx, &agentv1.PullVolumeRequest{SourceAddr: o.GetAddr(), Capability: o.GetCapability(), Volume: to.Volume,
		ChecksumAlgorithms: []string{"blake3", "sha256"}})
	if err != nil {
		return "", fmt.Errorf("orchestrator: pull volume %s: %w", to.Volume, err)
	}
	for {
		p, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("orchestrator: pull volume %s: ended without a checksum", to.Volume)
		}
		if err != nil {
			return "", fmt.Errorf("orchestrator: pull volume %s: %w", to.Volume, err)
		}
		if progress != nil {
			progress(int64(p.GetBytesDone()), int64(max(p.GetBytesTotal(), o.GetSize())))
		}
		// An agent that knows no checksum_algorithms sets sha256 alone.
		if sum := cmp.Or(p.GetChecksum(), p.GetSha256()); sum != "" {
			return sum, nil
		}
	}
}
