package server

import (
	"context"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of the API's spans.
const TracerName = "github.com/flexplane/flexplane/graph/server"

// opTracing is the HandlerExtension starting a span per GraphQL operation:
// the root of the trace of everything the operation causes (the calls to
// the agents and, on them, the Proxmox requests).
type opTracing struct {
	tracer trace.Tracer
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationInterceptor
} = opTracing{}

func (opTracing) ExtensionName() string                   { return "Tracing" }
func (opTracing) Validate(graphql.ExecutableSchema) error { return nil }

func (t opTracing) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	typ, name := "unknown", oc.OperationName
	if oc.Operation != nil {
		typ = string(oc.Operation.Operation)
		if name == "" {
			name = oc.Operation.Name
		}
	}
	spanName := "graphql." + typ
	if name != "" {
		spanName += " " + name
	}
	ctx, span := t.tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("graphql.operation.type", typ), attribute.String("graphql.operation.name", name)))
	rh := next(ctx)
	var once sync.Once
	return func(ctx context.Context) *graphql.Response {
		resp := rh(ctx)
		// A subscription's span covers its start only: it may live for
		// hours.
		once.Do(func() {
			if resp != nil && len(resp.Errors) > 0 {
				code, _ := resp.Errors[0].Extensions["code"].(string)
				span.SetAttributes(attribute.String("graphql.error.code", code))
				span.SetStatus(codes.Error, resp.Errors[0].Message)
			}
			span.End()
		})
		return resp
	}
}
