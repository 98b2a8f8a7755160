package agent

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// nodeGateways stands for the node's kernel behind the edge service: what
// ApplyGateway and RemoveGateway leave, as ListGateways reads it.
type nodeGateways struct {
	edgev1.UnimplementedEdgeServiceServer
	mu   sync.Mutex
	runs map[string]string // protected by mu
}

func (n *nodeGateways) ApplyGateway(_ context.Context, req *edgev1.ApplyGatewayRequest) (*edgev1.ApplyGatewayResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.runs[req.GetGateway().GetVdc()] = req.GetRevision()
	return &edgev1.ApplyGatewayResponse{}, nil
}

func (n *nodeGateways) RemoveGateway(_ context.Context, req *edgev1.RemoveGatewayRequest) (*edgev1.RemoveGatewayResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.runs, req.GetVdc())
	return &edgev1.RemoveGatewayResponse{}, nil
}

func (n *nodeGateways) ListGateways(context.Context, *edgev1.ListGatewaysRequest) (*edgev1.ListGatewaysResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := &edgev1.ListGatewaysResponse{}
	for vdc, rev := range n.runs {
		out.Gateways = append(out.Gateways, &edgev1.RunningGateway{Vdc: vdc, Revision: rev})
	}
	return out, nil
}

// TestWatchGatewaysFollowsChanges: a stream reports the node's gateways
// when it opens (what a restarted agent found), then after changes through
// the agent, up to the last of a burst made by concurrent callers, and
// never the same list twice in a row; two streams see the same.
func TestWatchGatewaysFollowsChanges(t *testing.T) {
	t.Parallel()
	node := &nodeGateways{runs: map[string]string{"left": "r0"}}
	w := newEdgeWatch(node)
	srv := grpc.NewServer()
	edgev1.RegisterEdgeServiceServer(srv, w)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := edgev1.NewEdgeServiceClient(conn)
	ctx := t.Context()

	var streams []edgev1.EdgeService_WatchGatewaysClient
	for range 2 {
		st, err := c.WatchGateways(ctx, &edgev1.WatchGatewaysRequest{})
		if err != nil {
			t.Fatal(err)
		}
		first, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if gs := first.GetGateways(); len(gs) != 1 || gs[0].GetVdc() != "left" || gs[0].GetRevision() != "r0" {
			t.Fatalf("the first report is %v, want what the node runs", gs)
		}
		streams = append(streams, st)
	}

	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if _, err := c.ApplyGateway(ctx, &edgev1.ApplyGatewayRequest{Gateway: &edgev1.Gateway{Vdc: fmt.Sprint("vdc", i)}, Revision: "r1"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if _, err := c.RemoveGateway(ctx, &edgev1.RemoveGatewayRequest{Vdc: "left"}); err != nil {
		t.Fatal(err)
	}
	for i, st := range streams {
		var last string
		for {
			r, err := st.Recv()
			if err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			key := fmt.Sprint(r.GetGateways())
			if key == last {
				t.Fatalf("stream %d sent the same list twice: %v", i, r.GetGateways())
			}
			last = key
			if len(r.GetGateways()) == 50 && !strings.Contains(key, `"left"`) {
				break // every apply and the removal seen
			}
		}
	}
}
