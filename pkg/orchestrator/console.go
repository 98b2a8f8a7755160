package orchestrator

import (
	"context"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/console"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/support/rfb"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// consoleAgents reach the consoles of VMs through the agent of each VM's
// node (console.Agents): its IssueConsoleTicket and Console RPCs over the
// mesh.
type consoleAgents struct{ r *fleet.Registry }

func (d consoleAgents) agent(zoneID, node string) (agentv1.AgentServiceClient, error) {
	agent, _, ok := d.r.AgentOfNode(zoneID, node)
	if !ok {
		return nil, fmt.Errorf("orchestrator: console: no online agent on %s", node)
	}
	return agent, nil
}

// IssueTicket implements console.Agents.
func (d consoleAgents) IssueTicket(ctx context.Context, t console.Target, ttl time.Duration) (string, time.Time, error) {
	agent, err := d.agent(t.ZoneID, t.Node)
	if err != nil {
		return "", time.Time{}, err
	}
	resp, err := agent.IssueConsoleTicket(ctx, &agentv1.IssueConsoleTicketRequest{Node: t.Node, Vmid: uint32(t.VMID), TtlSeconds: uint32(ttl / time.Second)})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("orchestrator: console ticket of VM %d on %s: %w", t.VMID, t.Node, err)
	}
	return resp.GetTicket(), time.Unix(resp.GetExpiresUnix(), 0), nil
}

// Open implements console.Agents. It waits for the console's first bytes,
// so that a ticket the agent refuses, or a VM it cannot open a console
// of, fails here.
func (d consoleAgents) Open(ctx context.Context, zoneID, node, ticket string) (io.ReadWriteCloser, error) {
	agent, err := d.agent(zoneID, node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	st, err := agent.Console(ctx)
	if err == nil {
		err = st.Send(&agentv1.ConsoleRequest{Ticket: ticket})
	}
	var first *agentv1.ConsoleResponse
	if err == nil {
		first, err = st.Recv()
	}
	if status.Code(err) == codes.PermissionDenied {
		cancel()
		return nil, console.ErrUnknownTicket
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("orchestrator: console on %s: %w", node, err)
	}
	return agentConsole{cancel: cancel, Messages: &rfb.Messages{
		Recv: func() ([]byte, error) {
			msg, err := st.Recv()
			return msg.GetData(), err
		},
		Send:    func(p []byte) error { return st.Send(&agentv1.ConsoleRequest{Data: p}) },
		Pending: first.GetData(),
	}}, nil
}

// agentConsole is a Console stream as a byte stream; Close cancels the
// stream.
type agentConsole struct {
	*rfb.Messages
	cancel context.CancelFunc
}

func (c agentConsole) Close() error {
	c.cancel()
	return nil
}
