package orchestrator

import (
	"context"
	"fmt"
	"io"

	"github.com/flexplane/flexplane/pkg/console"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
	"github.com/flexplane/flexplane/pkg/support/rfb"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// consoleDialer opens VM consoles through the agent of the VM's node
// (console.Dialer): its Console RPC over the mesh.
type consoleDialer struct{ r *zones.Registry }

// DialConsole implements console.Dialer. It waits for the console's first
// bytes, so that a VM the agent cannot open a console of fails here.
func (d consoleDialer) DialConsole(ctx context.Context, t console.Target) (io.ReadWriteCloser, error) {
	agent, _, ok := d.r.AgentOfNode(t.ZoneID, t.Node)
	if !ok {
		return nil, fmt.Errorf("orchestrator: console: no online agent on %s", t.Node)
	}
	ctx, cancel := context.WithCancel(ctx)
	st, err := agent.Console(ctx)
	if err == nil {
		err = st.Send(&agentv1.ConsoleRequest{Node: t.Node, Vmid: uint32(t.VMID)})
	}
	var first *agentv1.ConsoleResponse
	if err == nil {
		first, err = st.Recv()
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("orchestrator: console of VM %d on %s: %w", t.VMID, t.Node, err)
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
