// Package snippets is the orchestrator's compute.SnippetWriter: the agent
// of a snippet's node writes and deletes it (agent RPCs WriteSnippet,
// DeleteSnippet). It is wiring: the VM lifecycle (pkg/compute) names the
// snippets it needs, the fleet (pkg/mesh/fleet) finds the agents, and this
// package joins them, so that neither imports the other.
package snippets

import (
	"context"
	"fmt"

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
