// Package snippets is the orchestrator's compute.SnippetWriter and
// compute.VolumeUploader: the agent of a snippet's node writes and
// deletes it (agent RPCs WriteSnippet, DeleteSnippet), and the agent of an
// upload's node stores the file (UploadVolume over the mesh,
// or a PUT to its data listener with a ticket of IssueUploadTicket,
// direct.go). It is wiring: the VM lifecycle (pkg/compute) names the
// snippets it needs, the fleet (pkg/mesh/fleet) finds the agents, and this
// package joins them, so that neither imports the other.
package snippets

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/flexplane/flexplane/pkg/compute"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// AgentFinder returns the agent client of a node of a zone (false when no
// agent of it is online).
type AgentFinder func(zoneID, node string) (agentv1.AgentServiceClient, bool)

// snippetWriter is a compute.SnippetWriter whose snippets the agent of
// their node writes.
type snippetWriter struct{ agent AgentFinder }

// NewWriter returns the compute.SnippetWriter over the agents agent finds.
func NewWriter(agent AgentFinder) compute.SnippetWriter { return snippetWriter{agent} }

func (w snippetWriter) client(ref compute.SnippetRef) (agentv1.AgentServiceClient, error) {
	c, ok := w.agent(ref.ZoneID, ref.Node)
	if !ok {
		return nil, fmt.Errorf("snippets: %s: no online agent on %s", ref.Volume(), ref.Node)
	}
	return c, nil
}

// WriteSnippet implements compute.SnippetWriter.
func (w snippetWriter) WriteSnippet(ctx context.Context, ref compute.SnippetRef, data []byte) error {
	c, err := w.client(ref)
	if err != nil {
		return err
	}
	if _, err := c.WriteSnippet(ctx, &agentv1.WriteSnippetRequest{Storage: ref.Storage, Name: ref.Name, Data: data}); err != nil {
		return fmt.Errorf("snippets: write snippet %s on %s: %w", ref.Volume(), ref.Node, err)
	}
	return nil
}

// DeleteSnippet implements compute.SnippetWriter.
func (w snippetWriter) DeleteSnippet(ctx context.Context, ref compute.SnippetRef) error {
	c, err := w.client(ref)
	if err != nil {
		return err
	}
	if _, err := c.DeleteSnippet(ctx, &agentv1.DeleteSnippetRequest{Storage: ref.Storage, Name: ref.Name}); err != nil {
		return fmt.Errorf("snippets: delete snippet %s on %s: %w", ref.Volume(), ref.Node, err)
	}
	return nil
}

// volumeUploader is a compute.VolumeUploader whose uploads the agent of
// their node stores (into a file storage's directory itself, or through
// its Proxmox's upload endpoint), the bytes reaching it directly over TLS
// to the agent's data listener when it has one (agent RPC
// IssueUploadTicket, direct.go), else over the mesh (agent RPC
// UploadVolume).
type volumeUploader struct {
	agent AgentFinder
	log   *slog.Logger
	// directTimeout bounds asking for a ticket and connecting to the data
	// listener, before any byte of the file is read.
	directTimeout time.Duration
}

// NewUploader returns the compute.VolumeUploader over the agents agent
// finds; log receives a warning for each upload that falls back to the
// mesh because the agent's data listener could not be reached (nil:
// slog.Default()).
func NewUploader(agent AgentFinder, log *slog.Logger) compute.VolumeUploader {
	if log == nil {
		log = slog.Default()
	}
	return volumeUploader{agent: agent, log: log, directTimeout: defaultDirectTimeout}
}

// uploadChunk is the size of an UploadVolume message's data.
const uploadChunk = 1 << 20

// UploadVolume implements compute.VolumeUploader: it sends r to the agent
// of ref's node, on its data listener when the agent has one that
// answers within directTimeout, else over the mesh. Either way an error
// reading r aborts the upload, so that Proxmox stores nothing.
func (u volumeUploader) UploadVolume(ctx context.Context, ref compute.UploadRef, size int64, r io.Reader) (compute.UploadResult, error) {
	c, ok := u.agent(ref.ZoneID, ref.Node)
	if !ok {
		return compute.UploadResult{}, fmt.Errorf("snippets: upload %s: no online agent on %s", ref.Filename, ref.Node)
	}
	if conn, tk, ok := u.dialDirect(ctx, c, ref, size); ok {
		return u.uploadDirect(ctx, conn, tk, ref, size, r)
	}
	return uploadOverMesh(ctx, c, ref, size, r)
}

// uploadOverMesh streams r to the agent over the mesh (UploadVolume) in
// chunks, holding one at a time. An error reading r cancels the stream,
// which makes the agent abort the upload.
func uploadOverMesh(ctx context.Context, c agentv1.AgentServiceClient, ref compute.UploadRef, size int64, r io.Reader) (compute.UploadResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.UploadVolume(ctx)
	if err != nil {
		return compute.UploadResult{}, fmt.Errorf("snippets: upload %s on %s: %w", ref.Filename, ref.Node, err)
	}
	msg := &agentv1.UploadVolumeRequest{Storage: ref.Storage, Content: ref.Content, Filename: ref.Filename, Size: size}
	buf := make([]byte, uploadChunk)
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 || msg.Storage != "" {
			msg.Data = buf[:n]
			if err := stream.Send(msg); err != nil {
				if _, rerr := stream.CloseAndRecv(); rerr != nil {
					err = rerr // the agent's reason
				}
				return compute.UploadResult{}, fmt.Errorf("snippets: upload %s on %s: %w", ref.Filename, ref.Node, err)
			}
			msg = &agentv1.UploadVolumeRequest{}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			cancel() // the agent aborts: Proxmox stores nothing
			return compute.UploadResult{}, fmt.Errorf("snippets: upload %s: read: %w", ref.Filename, rerr)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return compute.UploadResult{}, fmt.Errorf("snippets: upload %s on %s: %w", ref.Filename, ref.Node, err)
	}
	return compute.UploadResult{UPID: resp.GetUpid(), SHA256: resp.GetSha256(), Size: resp.GetSize(), Volume: resp.GetVolume()}, nil
}
