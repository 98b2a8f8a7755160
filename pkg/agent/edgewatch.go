package agent

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// edgeWatch serves the node's edge service (the helper's, or the agent's
// own) and adds WatchGateways to it: every apply or removal through the agent
// signals the open streams, which read the node's list again and send it
// when it differs from what they sent last.
type edgeWatch struct {
	edgev1.EdgeServiceServer

	mu   sync.Mutex
	subs map[chan struct{}]struct{} // protected by mu
}

func newEdgeWatch(inner edgev1.EdgeServiceServer) *edgeWatch {
	return &edgeWatch{EdgeServiceServer: inner, subs: map[chan struct{}]struct{}{}}
}

// changed signals every stream; it never blocks (a signal waiting is enough).
func (w *edgeWatch) changed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// ApplyGateway implements edgev1.EdgeServiceServer.
func (w *edgeWatch) ApplyGateway(ctx context.Context, req *edgev1.ApplyGatewayRequest) (*edgev1.ApplyGatewayResponse, error) {
	defer w.changed() // a failed apply may have changed the node too
	return w.EdgeServiceServer.ApplyGateway(ctx, req)
}

// RemoveGateway implements edgev1.EdgeServiceServer.
func (w *edgeWatch) RemoveGateway(ctx context.Context, req *edgev1.RemoveGatewayRequest) (*edgev1.RemoveGatewayResponse, error) {
	defer w.changed()
	return w.EdgeServiceServer.RemoveGateway(ctx, req)
}

// WatchGateways implements edgev1.EdgeServiceServer: the node's list when
// the stream opens, then again after each change, until the caller leaves.
func (w *edgeWatch) WatchGateways(_ *edgev1.WatchGatewaysRequest, stream edgev1.EdgeService_WatchGatewaysServer) error {
	ctx := stream.Context()
	ch := make(chan struct{}, 1)
	ch <- struct{}{} // the first report
	w.mu.Lock()
	w.subs[ch] = struct{}{}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.subs, ch)
		w.mu.Unlock()
	}()
	var last *edgev1.WatchGatewaysResponse
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
		}
		list, err := w.ListGateways(ctx, &edgev1.ListGatewaysRequest{})
		if err != nil {
			return fmt.Errorf("agent: watch gateways: %w", err)
		}
		// In one order, so that the same list read twice compares equal.
		gs := slices.Clone(list.GetGateways())
		slices.SortFunc(gs, func(a, b *edgev1.RunningGateway) int {
			return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetVdc(), b.GetVdc()))
		})
		resp := &edgev1.WatchGatewaysResponse{Gateways: gs}
		if last != nil && proto.Equal(last, resp) {
			continue
		}
		if err := stream.Send(resp); err != nil {
			return fmt.Errorf("agent: watch gateways: %w", err)
		}
		last = resp
	}
}
