// Package tracing holds what flexplane's OpenTelemetry tracing shares
// between the orchestrator and the agent: the OTLP exporter both send their
// spans with, and the gRPC stats handlers that carry the W3C trace context
// from the orchestrator's calls to the agents' spans. Nothing here touches
// OpenTelemetry's global providers: every provider is passed explicitly.
package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/stats"
)

// Config configures the OTLP exporter.
type Config struct {
	// Endpoint is the OTLP/gRPC collector, a URL (http:// for plaintext,
	// https:// for TLS, e.g. "http://otel-collector:4317"). Empty falls
	// back to the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and
	// OTEL_EXPORTER_OTLP_ENDPOINT variables; with neither set, tracing is
	// off.
	Endpoint string
	// Service is the service.name of the spans ("flexplane-orchestrator",
	// "flexplane-agent").
	Service string
	// Version is the service.version of the spans.
	Version string
	// Instance is the service.instance.id (e.g. the node name); optional.
	Instance string
}

// Enabled reports whether cfg (or the environment) names a collector.
func (cfg Config) Enabled() bool {
	return cfg.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// Start returns a tracer provider exporting to the configured collector in
// batches, or a no-op provider when none is configured; the returned
// function flushes and stops it.
func Start(ctx context.Context, cfg Config) (trace.TracerProvider, func(context.Context) error, error) {
	if !cfg.Enabled() {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	var opts []otlptracegrpc.Option
	if cfg.Endpoint != "" {
		if !strings.Contains(cfg.Endpoint, "://") {
			return nil, nil, fmt.Errorf("tracing: endpoint %q is not a URL (http://host:4317 or https://host:4317)", cfg.Endpoint)
		}
		opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	res := resource.NewSchemaless(semconv.ServiceName(cfg.Service), semconv.ServiceVersion(cfg.Version), semconv.ServiceInstanceID(cfg.Instance))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}

// Propagator is the propagator of trace context between flexplane's
// processes: W3C trace context.
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// untraced are the agent methods called in the background every few
// seconds for every agent: tracing them would bury the spans of requests.
var untraced = map[string]bool{
	"/flexplane.agent.v1.AgentService/Health":  true,
	"/flexplane.agent.v1.AgentService/Info":    true,
	"/flexplane.agent.v1.AgentService/Metrics": true,
}

func options(tp trace.TracerProvider) []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(OrNoop(tp)),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool { return !untraced[info.FullMethodName] }),
	}
}

// ClientHandler is the stats handler of the orchestrator's gRPC clients of
// agents: a span per call, its context sent along. A nil tp traces nothing.
func ClientHandler(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewClientHandler(options(tp)...)
}

// ServerHandler is the stats handler of the agent's gRPC server: a span per
// call, a child of the caller's. A nil tp traces nothing.
func ServerHandler(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewServerHandler(options(tp)...)
}

// OrNoop returns tp, or a no-op provider when tp is nil.
func OrNoop(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return noop.NewTracerProvider()
	}
	return tp
}
