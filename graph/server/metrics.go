package server

import (
	"context"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/flexplane/flexplane/pkg/support/metrics"
)

// Operation name label values that are not the client's operation name.
const (
	// AnonymousOperation labels operations without a name.
	AnonymousOperation = "anonymous"
	// maxOperationNames bounds the distinct operation names in the metrics;
	// names past it are labelled metrics.Other.
	maxOperationNames = 200
)

// opMetrics is the HandlerExtension counting and timing GraphQL operations
// by operation name (bounded), type and the code of their first error ("OK"
// without errors).
type opMetrics struct {
	ops      *prometheus.CounterVec   // operation, type, code
	duration *prometheus.HistogramVec // operation, type
	names    *metrics.BoundedLabel
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationInterceptor
} = (*opMetrics)(nil)

func newOpMetrics(reg prometheus.Registerer) (*opMetrics, error) {
	m := &opMetrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "graphql", Name: "operations_total",
			Help: "GraphQL operations answered, by operation name (\"anonymous\" without one, \"other\" past the first 200 names), type and the code of the first error (\"OK\" without errors)."},
			[]string{"operation", "type", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metrics.Namespace, Subsystem: "graphql", Name: "operation_duration_seconds",
			Help:    "Time from receiving a query or mutation to its answer, by operation name and type.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"operation", "type"}),
		names: metrics.NewBoundedLabel(maxOperationNames),
	}
	for _, c := range []prometheus.Collector{m.ops, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (*opMetrics) ExtensionName() string                   { return "Metrics" }
func (*opMetrics) Validate(graphql.ExecutableSchema) error { return nil }

func (m *opMetrics) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	start := oc.Stats.OperationStart
	if start.IsZero() {
		start = time.Now()
	}
	name, typ := AnonymousOperation, "unknown"
	if oc.OperationName != "" {
		name = m.names.Value(oc.OperationName)
	} else if oc.Operation != nil && oc.Operation.Name != "" {
		name = m.names.Value(oc.Operation.Name)
	}
	if oc.Operation != nil {
		typ = string(oc.Operation.Operation)
	}
	rh := next(ctx)
	var once sync.Once
	return func(ctx context.Context) *graphql.Response {
		resp := rh(ctx)
		// A subscription answers many times: it is counted once, with
		// its first answer, and not timed.
		once.Do(func() {
			code := "OK"
			if resp != nil && len(resp.Errors) > 0 {
				if c, ok := resp.Errors[0].Extensions["code"].(string); ok {
					code = c
				} else {
					code = "UNKNOWN"
				}
			}
			m.ops.WithLabelValues(name, typ, code).Inc()
			if typ != string(ast.Subscription) {
				m.duration.WithLabelValues(name, typ).Observe(time.Since(start).Seconds())
			}
		})
		return resp
	}
}
