package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/support/metrics"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// agentMetrics are the agent's Prometheus metrics, in a registry of its own
// that the Metrics RPC serves.
type agentMetrics struct {
	reg *prometheus.Registry

	rpcs          *prometheus.CounterVec   // method, code
	requests      *prometheus.CounterVec   // method, path, code
	requestTime   *prometheus.HistogramVec // method, path
	taskTime      *prometheus.HistogramVec // type, result
	proxmoxUp     prometheus.Gauge
	taskTypes     *metrics.BoundedLabel
	finishedTasks *recentSet
}

func newAgentMetrics(version, node string) *agentMetrics {
	ns := metrics.Namespace
	m := &agentMetrics{
		reg: prometheus.NewRegistry(),
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "agent", Name: "rpcs_total",
			Help: "Agent API calls served, by gRPC method and status code."}, []string{"method", "code"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "agent", Name: "proxmox_requests_total",
			Help: "Requests the agent sent to its Proxmox API, by method, path template and HTTP status (\"error\" when no answer came)."},
			[]string{"method", "path", "code"}),
		requestTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: "agent", Name: "proxmox_request_duration_seconds",
			Help:    "Time the agent's Proxmox API requests took, by method and path template.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"method", "path"}),
		taskTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: "agent", Name: "proxmox_task_duration_seconds",
			Help:    "Duration of the Proxmox tasks the orchestrator waited for, by task type and result (ok or failed), from their start until a status poll saw them stopped.",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}}, []string{"type", "result"}),
		proxmoxUp: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: "agent", Name: "proxmox_up",
			Help: "1 when the agent's last health check reached its Proxmox API with its token, else 0."}),
		taskTypes:     metrics.NewBoundedLabel(64),
		finishedTasks: newRecentSet(4096),
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: "agent", Name: "build_info",
		Help: "Always 1; its labels name the agent's version and Proxmox node.", ConstLabels: prometheus.Labels{"version": version, "node": node}})
	info.Set(1)
	m.reg.MustRegister(m.rpcs, m.requests, m.requestTime, m.taskTime, m.proxmoxUp, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// count is a unary interceptor counting every call by method and code.
func (m *agentMetrics) count(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	m.rpcs.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
	return resp, err
}

// proxmoxRequest records one request to Proxmox; tmpl is the allowlist
// template its path matched (never the raw path: ids would make the series
// unbounded) and code the HTTP status, or 0 when no answer came.
func (m *agentMetrics) proxmoxRequest(method, tmpl string, code int, took time.Duration) {
	c := "error"
	if code != 0 {
		c = strconv.Itoa(code)
	}
	m.requests.WithLabelValues(method, tmpl, c).Inc()
	m.requestTime.WithLabelValues(method, tmpl).Observe(took.Seconds())
}

// taskStatus records the duration of a task the first time a status poll
// (GET /nodes/{node}/tasks/{upid}/status) sees it stopped.
func (m *agentMetrics) taskStatus(key string, body []byte, now time.Time) {
	var env struct {
		Data struct {
			Status     string `json:"status"`
			ExitStatus string `json:"exitstatus"`
			Type       string `json:"type"`
			StartTime  int64  `json:"starttime"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &env) != nil || env.Data.Status != "stopped" || env.Data.StartTime == 0 {
		return
	}
	if !m.finishedTasks.add(key) {
		return
	}
	result := "ok"
	if env.Data.ExitStatus != "OK" {
		result = "failed"
	}
	took := now.Sub(time.Unix(env.Data.StartTime, 0))
	m.taskTime.WithLabelValues(m.taskTypes.Value(env.Data.Type), result).Observe(max(took.Seconds(), 0))
}

// text renders the registry in the Prometheus text format.
func (m *agentMetrics) text() (*agentv1.MetricsResponse, error) {
	families, err := m.reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	var buf bytes.Buffer
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	enc := expfmt.NewEncoder(&buf, format)
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return nil, fmt.Errorf("encode metrics: %w", err)
		}
	}
	return &agentv1.MetricsResponse{Text: buf.Bytes(), ContentType: string(format)}, nil
}

// recentSet remembers the last n strings added.
type recentSet struct {
	mu    sync.Mutex
	seen  map[string]bool // protected by mu
	order []string        // ring of seen's keys, protected by mu
	next  int             // protected by mu
}

func newRecentSet(n int) *recentSet {
	return &recentSet{seen: make(map[string]bool, n), order: make([]string, n)}
}

// add adds s and reports whether it was new; the oldest entry makes room.
func (r *recentSet) add(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[s] {
		return false
	}
	if old := r.order[r.next]; old != "" {
		delete(r.seen, old)
	}
	r.order[r.next], r.seen[s] = s, true
	r.next = (r.next + 1) % len(r.order)
	return true
}

// Calls returns how many gRPC calls (unary: one question, one answer) the
// agent has served, by full method name, as its rpcs_total counter has them:
// what the orchestrator costs an agent.
func (a *Agent) Calls() (map[string]float64, error) {
	return a.metrics.sum("rpcs_total", "method")
}

// ProxmoxRequests returns how many requests the agent has sent to its
// Proxmox API, by "METHOD path-template" (its proxmox_requests_total): what
// the Proxy calls of Calls asked.
func (a *Agent) ProxmoxRequests() (map[string]float64, error) {
	return a.metrics.sum("proxmox_requests_total", "method", "path")
}

// sum adds up the agent counter name by the values of labels, joined by a
// space.
func (m *agentMetrics) sum(name string, labels ...string) (map[string]float64, error) {
	families, err := m.reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("agent: %s: %w", name, err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != metrics.Namespace+"_agent_"+name {
			continue
		}
		for _, mm := range f.GetMetric() {
			var key []string
			for _, want := range labels {
				for _, l := range mm.GetLabel() {
					if l.GetName() == want {
						key = append(key, l.GetValue())
					}
				}
			}
			out[strings.Join(key, " ")] += mm.GetCounter().GetValue()
		}
	}
	return out, nil
}
