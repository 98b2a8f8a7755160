package benchmark_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flexplane/flexplane/pkg/dev/benchmark"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// The edge kernel answers the helper's EdgeService on its socket: an
// applied gateway is listed at its revision, WaitApplied returns once the
// state it waits for arrives (not before), and a removed gateway is gone.
func TestEdgeKernelKeepsWhatIsApplied(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "k.sock")
	k, err := benchmark.StartEdgeKernel(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := edgev1.NewEdgeServiceClient(conn)
	ctx := t.Context()
	apply := func(mbps uint32, rev string) {
		t.Helper()
		if _, err := c.ApplyGateway(ctx, &edgev1.ApplyGatewayRequest{Gateway: &edgev1.Gateway{Vdc: "red", EgressMbps: mbps}, Revision: rev}); err != nil {
			t.Fatal(err)
		}
	}
	apply(1, "r1")
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := k.WaitApplied(done, "red", func(g *edgev1.Gateway) bool { return g.GetEgressMbps() == 2 }); err == nil {
		t.Fatal("WaitApplied found a state that was never applied")
	}
	waited := make(chan error, 1)
	began := time.Now()
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		at, err := k.WaitApplied(wctx, "red", func(g *edgev1.Gateway) bool { return g.GetEgressMbps() == 2 })
		if err == nil && at.Before(began) {
			err = fmt.Errorf("applied at %s, before it was sent", at)
		}
		waited <- err
	}()
	apply(2, "r2")
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	l, err := c.ListGateways(ctx, &edgev1.ListGatewaysRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if gs := l.GetGateways(); len(gs) != 1 || gs[0].GetVdc() != "red" || gs[0].GetRevision() != "r2" {
		t.Fatalf("listed %v, want red at r2", gs)
	}
	if _, err := c.RemoveGateway(ctx, &edgev1.RemoveGatewayRequest{Vdc: "red"}); err != nil {
		t.Fatal(err)
	}
	if l, err = c.ListGateways(ctx, &edgev1.ListGatewaysRequest{}); err != nil || len(l.GetGateways()) != 0 {
		t.Fatalf("after the removal: %v, %v; want none", l.GetGateways(), err)
	}
}
