package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flexplane/flexplane/pkg/support/metrics"
)

// gatewayMetrics are the gateway's Prometheus metrics.
type gatewayMetrics struct {
	applies       *prometheus.CounterVec
	applySeconds  prometheus.Histogram
	healthReloads prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, g *Gateway) *gatewayMetrics {
	const sub = "flexgateway"
	m := &gatewayMetrics{
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: sub, Name: "config_applies_total",
			Help: "Configs pushed to the admin API, by result (applied, invalid, failed).",
		}, []string{"result"}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: sub, Name: "config_apply_seconds",
			Help:    "Time to validate, render and load an applied config.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		healthReloads: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: sub, Name: "health_reloads_total",
			Help: "Reloads of the config in force after a backend's health changed.",
		}),
	}
	for _, r := range []string{"applied", "invalid", "failed"} {
		m.applies.WithLabelValues(r)
	}
	reg.MustRegister(m.applies, m.applySeconds, m.healthReloads, statusCollector{g})
	return m
}

var (
	backendHealthyDesc = prometheus.NewDesc(metrics.Namespace+"_flexgateway_backend_healthy",
		"1 while a backend with a health check receives traffic, 0 while it is taken out.",
		[]string{"balancer", "pool", "backend"}, nil)
	appliedDesc = prometheus.NewDesc(metrics.Namespace+"_flexgateway_config_applied_timestamp_seconds",
		"When the config in force was applied (Unix time; absent before the first).", nil, nil)
)

// statusCollector reports the gateway's Status as metrics: one series per
// backend of the config in force, none left over from an older one.
type statusCollector struct{ g *Gateway }

func (c statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- backendHealthyDesc
	ch <- appliedDesc
}

func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.Status()
	if st.Applied.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(appliedDesc, prometheus.GaugeValue, float64(st.Applied.UnixNano())/1e9)
	for _, b := range st.Backends {
		v := 0.0
		if b.Healthy {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(backendHealthyDesc, prometheus.GaugeValue, v, b.Balancer, b.Pool, b.Backend)
	}
}
