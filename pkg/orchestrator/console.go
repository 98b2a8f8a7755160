package orchestrator

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/flexplane/flexplane/pkg/console"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/support/rfb"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// consoleAgents reach the consoles of VMs through the agent of each VM's
// node (console.Agents): its IssueConsoleTicket and Console RPCs over the
// mesh.
type consoleAgents struct{ r *fleet.Registry }

// IssueTicket implements console.Agents: the ticket is bound to the guest
// t.VMID names now, of t.VDC (the agent checks both).
func (d consoleAgents) IssueTicket(ctx context.Context, t console.Target, ttl time.Duration) (string, time.Time, error) {
	agent, _, ok := d.r.AgentOfNode(t.ZoneID, t.Node)
	if !ok {
		return "", time.Time{}, fmt.Errorf("orchestrator: console: no online agent on %s", t.Node)
	}
	resp, err := agent.IssueConsoleTicket(ctx, &agentv1.IssueConsoleTicketRequest{Node: t.Node, Vmid: uint32(t.VMID), Vdc: t.VDC,
		TtlSeconds: uint32(ttl / time.Second)})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("orchestrator: console ticket of VM %d on %s: %w", t.VMID, t.Node, err)
	}
	return resp.GetTicket(), time.Unix(resp.GetExpiresUnix(), 0), nil
}

// Open implements console.Agents. Whatever fails before the agent says
// it accepted the ticket (no online agent of that name, a ticket the
// agent refuses, a stream that breaks first) is console.ErrUnknownTicket,
// so a caller without a good ticket learns nothing of which agents or VMs
// exist. It then waits for the console's first bytes, so that a VM the
// agent cannot open a console of fails here.
func (d consoleAgents) Open(ctx context.Context, zoneID, node, ticket string) (io.ReadWriteCloser, error) {
	agent, _, ok := d.r.AgentOfNode(zoneID, node)
	if !ok {
		return nil, console.ErrUnknownTicket
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
	// An agent of an earlier version says nothing before the console's
	// first bytes, which mean it accepted the ticket too.
	if err != nil || !first.GetAccepted() && len(first.GetData()) == 0 {
		cancel()
		return nil, console.ErrUnknownTicket
	}
	if first.GetAccepted() {
		if first, err = st.Recv(); err != nil {
			cancel()
			return nil, fmt.Errorf("orchestrator: console on %s: %w", node, err)
		}
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
