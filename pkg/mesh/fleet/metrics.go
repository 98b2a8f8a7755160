package fleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flexplane/flexplane/pkg/support/metrics"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// ErrUnknownHost is returned (wrapped) by AgentMetrics for a mesh name no
// reachable agent has.
var ErrUnknownHost = errors.New("no such agent")

// registryMetrics are the registry's metrics: the requests fanned out to
// each zone and, read at each scrape, the hosts and mesh peers.
type registryMetrics struct {
	requests    *prometheus.CounterVec   // zone, method, code
	requestTime *prometheus.HistogramVec // zone, method
	mapResyncs  prometheus.Counter       // the orchestrator's map asked for again
	// healthChecks counts the agents' Health checks by outcome; healthCalls
	// and healthSkipped are its two series.
	healthChecks               *prometheus.CounterVec
	healthCalls, healthSkipped prometheus.Counter
	// livenessTimeouts counts the agents marked offline for answering
	// nothing over the mesh within Config.LivenessTimeout.
	livenessTimeouts prometheus.Counter
}

func newRegistryMetrics() *registryMetrics {
	m := &registryMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "zone", Name: "proxmox_requests_total",
			Help: "Proxmox API requests the orchestrator sent to a zone's agents, by zone name, method and HTTP status (\"error\" when no agent answered)."},
			[]string{"zone", "method", "code"}),
		requestTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metrics.Namespace, Subsystem: "zone", Name: "proxmox_request_duration_seconds",
			Help:    "Time a Proxmox API request to a zone took through the mesh, by zone name and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"zone", "method"}),
		mapResyncs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "mesh", Name: "map_resyncs_total",
			Help: "Times the orchestrator asked the mesh control server for its whole map again, having found agents online there missing from its own view."}),
		healthChecks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "zone", Name: "agent_health_checks_total",
			Help: "Agent checks at the registry's refreshes, by outcome: \"called\" (a Health call was sent) or \"skipped\" (the mesh showed the agent online and its sampled Health was not due)."},
			[]string{"outcome"}),
		livenessTimeouts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "zone", Name: "agent_liveness_timeouts_total",
			Help: "Agents that were online marked offline for answering neither a mesh ping nor their Health within the liveness timeout."}),
	}
	m.healthCalls = m.healthChecks.WithLabelValues("called")
	m.healthSkipped = m.healthChecks.WithLabelValues("skipped")
	return m
}

var (
	descHostUp = prometheus.NewDesc(metrics.Namespace+"_host_up",
		"1 when the host's agent is online (in the mesh and reaching Proxmox), else 0.", []string{"zone", "host"}, nil)
	descHostStatus = prometheus.NewDesc(metrics.Namespace+"_hosts",
		"Hosts per zone and status (online, degraded, offline).", []string{"zone", "status"}, nil)
	descAgentInfo = prometheus.NewDesc(metrics.Namespace+"_agent_info",
		"Always 1; its labels name the version of a host's agent and of its Proxmox VE.", []string{"host", "agent_version", "proxmox_version"}, nil)
	descMeshPeers = prometheus.NewDesc(metrics.Namespace+"_mesh_peers",
		"Agents known to the mesh control server, by whether they are connected to it.", []string{"state"}, nil)
)

// Describe implements prometheus.Collector.
func (r *Registry) Describe(ch chan<- *prometheus.Desc) {
	r.metrics.requests.Describe(ch)
	r.metrics.requestTime.Describe(ch)
	r.metrics.mapResyncs.Describe(ch)
	r.metrics.healthChecks.Describe(ch)
	r.metrics.livenessTimeouts.Describe(ch)
	for _, d := range []*prometheus.Desc{descHostUp, descHostStatus, descAgentInfo, descMeshPeers} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the request metrics, and the
// hosts, agents and mesh peers as the registry sees them now.
func (r *Registry) Collect(ch chan<- prometheus.Metric) {
	r.metrics.requests.Collect(ch)
	r.metrics.requestTime.Collect(ch)
	r.metrics.mapResyncs.Collect(ch)
	r.metrics.healthChecks.Collect(ch)
	r.metrics.livenessTimeouts.Collect(ch)
	for _, z := range r.Zones() {
		counts := map[HostStatus]int{StatusOnline: 0, StatusDegraded: 0, StatusOffline: 0}
		for _, h := range z.Hosts {
			counts[h.Status]++
			up := 0.0
			if h.Status == StatusOnline {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(descHostUp, prometheus.GaugeValue, up, z.Name, h.MeshName)
			ch <- prometheus.MustNewConstMetric(descAgentInfo, prometheus.GaugeValue, 1, h.MeshName, h.AgentVersion, h.ProxmoxVersion)
		}
		for st, n := range counts {
			ch <- prometheus.MustNewConstMetric(descHostStatus, prometheus.GaugeValue, float64(n), z.Name, string(st))
		}
	}
	r.mu.Lock()
	online, offline := 0, 0
	for _, a := range r.agents {
		if a.node.Online {
			online++
		} else {
			offline++
		}
	}
	r.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descMeshPeers, prometheus.GaugeValue, float64(online), "online")
	ch <- prometheus.MustNewConstMetric(descMeshPeers, prometheus.GaugeValue, float64(offline), "offline")
}

// request records one request of Transport to a zone; code is the HTTP
// status, 0 when no agent answered.
func (r *Registry) request(zoneID, method string, code int, took time.Duration) {
	name := zoneID
	if z, ok := r.Zone(zoneID); ok {
		name = z.Name
	}
	c := "error"
	if code != 0 {
		c = strconv.Itoa(code)
	}
	r.metrics.requests.WithLabelValues(name, method, c).Inc()
	r.metrics.requestTime.WithLabelValues(name, method).Observe(took.Seconds())
}

// AgentMetrics returns the metrics of the agent named meshName in the mesh,
// in the Prometheus text format, and their content type.
func (r *Registry) AgentMetrics(ctx context.Context, meshName string) ([]byte, string, error) {
	var client agentv1.AgentServiceClient
	r.mu.Lock()
	for _, a := range r.agents {
		if a.node.Name == meshName && a.client != nil {
			client = a.client
		}
	}
	r.mu.Unlock()
	if client == nil {
		return nil, "", fmt.Errorf("zones: agent metrics: %s: %w", meshName, ErrUnknownHost)
	}
	resp, err := client.Metrics(ctx, &agentv1.MetricsRequest{})
	if err != nil {
		return nil, "", fmt.Errorf("zones: agent metrics: %s: %w", meshName, err)
	}
	return resp.GetText(), resp.GetContentType(), nil
}

// EdgeClient is the edge gateway API (flexplane.edge.v1) of the agent named
// meshName, over its mesh connection.
func (r *Registry) EdgeClient(meshName string) (edgev1.EdgeServiceClient, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	members := r.snapshot().members
	for _, a := range r.agents {
		if a.node.Name == meshName && a.conn != nil && members[a.node.ID] {
			return edgev1.NewEdgeServiceClient(a.conn), nil
		}
	}
	return nil, fmt.Errorf("zones: edge client: %s: %w", meshName, ErrUnknownHost)
}
