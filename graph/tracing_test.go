package graph_test

import (
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
)

// TestTraceChain records the spans of a real orchestrator→agent→simulator
// path in memory: a createNetwork mutation is one trace from its GraphQL
// operation through the gRPC call to the agent (its context carried over the
// mesh) to the Proxmox request that applied the SDN, which names its task's
// UPID.
func TestTraceChain(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{}), meshtest.WithTracerProvider(tp))
	h.WaitOnline(t, 30*time.Second)

	h.GraphQL(t, "alice", "red", `mutation AddLan { createNetwork(input: {name: "lan", zone: "alpha", cidr: "10.9.0.0/24", gateway: "10.9.0.1"}) { id } }`, nil).OK(t)

	spans := exp.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	var apply *tracetest.SpanStub
	for i, s := range spans {
		if s.Name == "proxmox PUT /cluster/sdn" {
			apply = &spans[i]
		}
	}
	if apply == nil {
		t.Fatalf("no span of the SDN apply among %d spans", len(spans))
	}
	upid := ""
	for _, a := range apply.Attributes {
		if a.Key == "proxmox.upid" {
			upid = a.Value.AsString()
		}
	}
	if !strings.HasPrefix(upid, "UPID:") {
		t.Errorf("the SDN apply's span has proxmox.upid %q", upid)
	}
	// Walk up from the Proxmox request to the root.
	want := []struct {
		name string
		kind trace.SpanKind
	}{
		{"proxmox PUT /cluster/sdn", trace.SpanKindClient},
		{"flexplane.agent.v1.AgentService/Proxy", trace.SpanKindServer},
		{"flexplane.agent.v1.AgentService/Proxy", trace.SpanKindClient},
		{"graphql.mutation AddLan", trace.SpanKindServer},
	}
	var chain []tracetest.SpanStub
	for s, ok := *apply, true; ok; s, ok = byID[s.Parent.SpanID()] {
		chain = append(chain, s)
		if s.SpanContext.TraceID() != apply.SpanContext.TraceID() {
			t.Errorf("span %s is in trace %s, not %s", s.Name, s.SpanContext.TraceID(), apply.SpanContext.TraceID())
		}
	}
	var got []string
	for _, s := range chain {
		got = append(got, s.Name+"/"+s.SpanKind.String())
	}
	if len(chain) != len(want) {
		t.Fatalf("parent chain of the SDN apply: %v", got)
	}
	for i, w := range want {
		if chain[i].Name != w.name || chain[i].SpanKind != w.kind {
			t.Errorf("parent chain of the SDN apply: %v, want %s/%s at %d", got, w.name, w.kind, i)
		}
	}
	if root := chain[len(chain)-1]; root.Parent.IsValid() {
		t.Errorf("the GraphQL span has a parent: %v", root.Parent)
	}
}
