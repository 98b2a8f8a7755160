package benchmark

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// EdgeKernel stands in for a node's privileged helper (the agent's
// HelperSocket) where the agent's edge gateways end: it serves the helper's
// EdgeService on a unix socket and keeps each applied gateway in memory
// with the time it arrived, instead of building network namespaces. The
// agent in front of it is the real one (its mesh gRPC, its WatchGateways
// stream), so the time from a change in the API to ApplyGateway reaching
// this kernel is the time to the agent applying it, less the kernel's own
// work. The helper's other services answer Unimplemented.
type EdgeKernel struct {
	edgev1.UnimplementedEdgeServiceServer
	srv  *grpc.Server
	done chan struct{}

	mu      sync.Mutex
	applied map[string]kernelGateway // by VDC, protected by mu
	changed chan struct{}            // closed at the next apply, protected by mu
}

// kernelGateway is a gateway as applied, with its revision and when.
type kernelGateway struct {
	gw       *edgev1.Gateway
	revision string
	at       time.Time
}

// StartEdgeKernel serves an EdgeKernel on the unix socket path.
func StartEdgeKernel(path string) (*EdgeKernel, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("benchmark: edge kernel: %w", err)
	}
	k := &EdgeKernel{srv: grpc.NewServer(), done: make(chan struct{}), applied: map[string]kernelGateway{}, changed: make(chan struct{})}
	edgev1.RegisterEdgeServiceServer(k.srv, k)
	go func() {
		defer close(k.done)
		_ = k.srv.Serve(ln)
	}()
	return k, nil
}

// Close stops serving.
func (k *EdgeKernel) Close() {
	k.srv.Stop()
	<-k.done
}

// ApplyGateway implements edgev1.EdgeServiceServer.
func (k *EdgeKernel) ApplyGateway(_ context.Context, req *edgev1.ApplyGatewayRequest) (*edgev1.ApplyGatewayResponse, error) {
	vdc := req.GetGateway().GetVdc()
	if vdc == "" {
		return nil, status.Error(codes.InvalidArgument, "benchmark: edge kernel: a gateway without a VDC")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.applied[vdc] = kernelGateway{gw: proto.CloneOf(req.GetGateway()), revision: req.GetRevision(), at: time.Now()}
	close(k.changed)
	k.changed = make(chan struct{})
	return &edgev1.ApplyGatewayResponse{State: &edgev1.GatewayState{Namespace: kernelNamespace(vdc)}}, nil
}

// RemoveGateway implements edgev1.EdgeServiceServer.
func (k *EdgeKernel) RemoveGateway(_ context.Context, req *edgev1.RemoveGatewayRequest) (*edgev1.RemoveGatewayResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.applied, req.GetVdc())
	return &edgev1.RemoveGatewayResponse{}, nil
}

// GatewayStatus implements edgev1.EdgeServiceServer.
func (k *EdgeKernel) GatewayStatus(_ context.Context, req *edgev1.GatewayStatusRequest) (*edgev1.GatewayStatusResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.applied[req.GetVdc()]; !ok {
		return nil, status.Errorf(codes.NotFound, "benchmark: edge kernel: no gateway of %q", req.GetVdc())
	}
	return &edgev1.GatewayStatusResponse{State: &edgev1.GatewayState{Namespace: kernelNamespace(req.GetVdc())}}, nil
}

// ListGateways implements edgev1.EdgeServiceServer.
func (k *EdgeKernel) ListGateways(context.Context, *edgev1.ListGatewaysRequest) (*edgev1.ListGatewaysResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	resp := &edgev1.ListGatewaysResponse{}
	for _, vdc := range slices.Sorted(maps.Keys(k.applied)) {
		resp.Gateways = append(resp.Gateways, &edgev1.RunningGateway{Vdc: vdc, Namespace: kernelNamespace(vdc), Revision: k.applied[vdc].revision})
	}
	return resp, nil
}

// WaitApplied waits until vdc's gateway as applied satisfies ok, and
// returns when it was applied.
func (k *EdgeKernel) WaitApplied(ctx context.Context, vdc string, ok func(*edgev1.Gateway) bool) (time.Time, error) {
	for {
		k.mu.Lock()
		g, has := k.applied[vdc]
		changed := k.changed
		k.mu.Unlock()
		if has && ok(g.gw) {
			return g.at, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("benchmark: edge kernel: gateway of %s not applied as wanted: %w", vdc, errors.Join(ctx.Err(), context.Cause(ctx)))
		}
	}
}

func kernelNamespace(vdc string) string { return "fpbench-" + vdc }
