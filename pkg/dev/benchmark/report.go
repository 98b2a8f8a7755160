package benchmark

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// Report is the machine-readable result of one run. Every figure that
// compares flexplane with something is a ratio against a baseline measured
// in the same run.
type Report struct {
	Started  string  `json:"started"`
	Duration float64 `json:"duration_s"`
	Machine  Machine `json:"machine"`
	Setup    Setup   `json:"setup"`
	// Queries compare a GraphQL query with the direct floor at each scale.
	Queries []QueryResult `json:"queries"`
	// Scaling is latency at the largest scale over latency at one zone.
	Scaling    []Scaling    `json:"scaling"`
	Throughput []Throughput `json:"throughput"`
	Simulator  []SimRate    `json:"simulator"`
	Enrollment *Enrollment  `json:"enrollment,omitempty"`
	// Tenant is the cost of a VDC's reads amid other tenants' guests.
	Tenant *Tenant `json:"tenant,omitempty"`
	// ZoneSet is the zone-set figure (nil when not measured).
	ZoneSet *ZoneSet `json:"zone_set,omitempty"`
	Memory  Memory   `json:"memory"`
	// Scale holds the figures of the scale harness (`make bench-scale`).
	Scale *Scale `json:"scale,omitempty"`
	Goals []Goal `json:"goals"`
	// Notes says what was scaled down or left out, and why.
	Notes []string `json:"notes"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs       int    `json:"cpus"`
	GoVersion  string `json:"go"`
	LoadAvg    string `json:"loadavg_at_start"`
	LoadAvgEnd string `json:"loadavg_at_end"`
}

// Setup is what was run.
type Setup struct {
	Scales       []int  `json:"zone_scales"`
	HostsPerZone []int  `json:"hosts_per_zone"`
	VMsPerZone   int    `json:"vms_per_zone"`
	VDCVMsPerZ   int    `json:"vdc_vms_per_zone"`
	Orchestrator string `json:"orchestrator"`
	Agents       string `json:"agents"`
}

// QueryResult is one query at one scale against its floor.
type QueryResult struct {
	Query string `json:"query"`
	Zones int    `json:"zones"`
	Hosts int    `json:"hosts"`
	// GraphQL is the query through the whole path; Floor the direct calls.
	GraphQL  Latencies `json:"graphql"`
	Floor    Latencies `json:"floor"`
	RatioP50 float64   `json:"ratio_p50"`
	RatioP99 float64   `json:"ratio_p99"`
	// FloorCall says what the floor asks each cluster.
	FloorCall string `json:"floor_call"`
	// Raw is the raw floor: the same Proxmox answers fetched over HTTPS
	// from every cluster in parallel, read but not decoded; RawRatioP50 is
	// GraphQL p50 over it.
	Raw         Latencies `json:"raw_floor"`
	RawRatioP50 float64   `json:"ratio_raw_p50"`
	// Failed counts GraphQL answers with errors (not in the latencies);
	// FirstError is the first of them.
	Failed     int    `json:"failed"`
	FirstError string `json:"first_error,omitempty"`
}

// ZoneSet is the vms query of a VDC whose guests are in VDCZones of Zones
// zones, against the same VDC in a deployment of VDCZones zones.
type ZoneSet struct {
	// Zones is the zones of the many-zone deployment; VDCZones those the
	// VDC has guests in (its zone set), with Guests guests in each.
	Zones    int `json:"zones"`
	VDCZones int `json:"vdc_zones"`
	Guests   int `json:"guests_per_zone"`
	// Many is vms in the many-zone deployment, Few in a deployment of
	// the VDC's zones only; Ratio is Many.P50 / Few.P50.
	Many  Latencies `json:"many_zones"`
	Few   Latencies `json:"few_zones"`
	Ratio float64   `json:"ratio_p50"`
	// ProxyCalls is the agents' reads of the VDC's pool (the Proxy calls
	// of a vms request) per request in the many-zone deployment.
	ProxyCalls float64 `json:"proxy_calls_per_request"`
}

// Tenant is the vms query of a VDC with VDCGuests guests in each of Zones
// zones, alone and amid OtherGuests guests of another tenant per zone.
type Tenant struct {
	Zones       int `json:"zones"`
	VDCGuests   int `json:"vdc_guests_per_zone"`
	OtherGuests int `json:"other_guests_per_zone"`
	// Alone and Amid are the GraphQL latencies; Ratio is Amid p50 over
	// Alone p50 (1 = the other guests cost nothing).
	Alone Latencies `json:"alone"`
	Amid  Latencies `json:"amid"`
	Ratio float64   `json:"ratio_p50"`
	// Requests were answered by a run of concurrent clients amid the
	// others; OrchestratorCPU is the orchestrator's CPU time per request
	// over it (/proc/PID/stat delta, less its idle rate over as long a
	// while just before), GrossCPU the same without subtracting, in ms.
	Requests        int     `json:"requests"`
	OrchestratorCPU float64 `json:"orchestrator_cpu_ms_per_req"`
	GrossCPU        float64 `json:"orchestrator_gross_cpu_ms_per_req"`
	// IdleCPU is the orchestrator's CPU time per second with no requests
	// (its zone refresh and the mesh), in ms.
	IdleCPU float64 `json:"orchestrator_idle_cpu_ms_per_s"`
	// IdleCalls are the gRPC calls each agent served per second over the
	// same quiet while (counted at the agents); IdleNoHealth the same
	// without the zone registry's health checks (Health, Info, Prove);
	// IdleEdgeCalls those of the edge gateways' sync (flexplane.edge.v1).
	IdleCalls     float64 `json:"idle_calls_per_s_per_agent"`
	IdleNoHealth  float64 `json:"idle_calls_but_health_per_s_per_agent"`
	IdleEdgeCalls float64 `json:"idle_edge_calls_per_s_per_agent"`
}

// Scaling compares the largest scale with one zone.
type Scaling struct {
	Query      string  `json:"query"`
	Zones      int     `json:"zones"`
	GraphQLP50 float64 `json:"graphql_p50_ratio"`
	FloorP50   float64 `json:"floor_p50_ratio"`
	// Relative is GraphQLP50/FloorP50: how much worse the API scales than
	// asking directly on the same machine (1 = as well).
	Relative float64 `json:"relative"`
}

// Throughput is the rate of a query with concurrent clients.
type Throughput struct {
	Query   string `json:"query"`
	Zones   int    `json:"zones"`
	Clients int    `json:"clients"`
	// Requests answered in Seconds, and the rate.
	Requests    int     `json:"requests"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"req_per_s"`
	FloorPerSec float64 `json:"floor_req_per_s"`
	Ratio       float64 `json:"ratio_to_floor"`
	// OrchestratorCPU is the orchestrator process's user+system CPU time
	// (/proc/PID/stat delta over the run) per request, in ms.
	OrchestratorCPU float64 `json:"orchestrator_cpu_ms_per_req"`
	// RestCPU is the benchmark process's CPU time (getrusage delta: the
	// agents, the simulators and the client) per request, in ms.
	RestCPU float64 `json:"agents_sims_client_cpu_ms_per_req"`
	P50     float64 `json:"p50_ms"`
	P99     float64 `json:"p99_ms"`
	// Failed counts answers with errors (not in Requests or the
	// latencies); FirstError is the first of them.
	Failed     int    `json:"failed"`
	FirstError string `json:"first_error,omitempty"`
}

// SimRate is the simulator's own rate for the floor's call.
type SimRate struct {
	Call      string  `json:"call"`
	Clients   int     `json:"clients"`
	PerSecond float64 `json:"req_per_s"`
	P50       float64 `json:"p50_ms"`
	// Needed is the rate the busiest measured GraphQL run asked of one
	// cluster; Headroom is PerSecond/Needed.
	Needed   float64 `json:"needed_req_per_s"`
	Headroom float64 `json:"headroom"`
}

// Enrollment is agent process start to host ONLINE in the API, and agent
// killed (SIGKILL) to host OFFLINE in the API.
type Enrollment struct {
	Rounds  int       `json:"rounds"`
	Online  Latencies `json:"online"`
	Offline Latencies `json:"offline"`
}

// Memory is resident memory of the processes.
type Memory struct {
	// Orchestrator RSS by number of agents enrolled.
	Orchestrator []OrchestratorMemory `json:"orchestrator"`
	// Agent is one agent process's RSS (cmd/agent, enrolled and serving).
	Agent *ProcessMemory `json:"agent,omitempty"`
	// Harness is the benchmark process (in-process agents and simulators
	// sharing one heap): RSS and Go heap in use, with the agents running.
	Harness HarnessMemory `json:"harness"`
}

// OrchestratorMemory is the orchestrator's RSS with Agents agents.
type OrchestratorMemory struct {
	Agents int `json:"agents"`
	// When is the moment of the reading.
	When string `json:"when"`
	ProcessMemory
}

// HarnessMemory is the benchmark process's memory.
type HarnessMemory struct {
	Agents     int     `json:"agents"`
	Clusters   int     `json:"clusters"`
	RSS        float64 `json:"rss_mib"`
	HeapInUse  float64 `json:"go_heap_inuse_mib"`
	Goroutines int     `json:"goroutines"`
}

// Goal is one target of issue 7 and how the run did.
type Goal struct {
	Name     string  `json:"name"`
	Target   string  `json:"target"`
	Measured float64 `json:"measured"`
	Unit     string  `json:"unit"`
	Pass     bool    `json:"pass"`
}

// WriteJSON writes r to path, creating its directory.
func (r *Report) WriteJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("benchmark: write report: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("benchmark: write report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("benchmark: write report: %w", err)
	}
	return nil
}

// WriteTable prints the short table.
func (r *Report) WriteTable(w io.Writer) error {
	if r.Scale != nil {
		if err := writeScale(w, r.Scale); err != nil {
			return err
		}
		r.writeGoals(w)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	p := func(format string, a ...any) { fmt.Fprintf(tw, format, a...) }
	p("query\tzones\thosts\tgraphql p50\tp99\tfloor p50\tp99\tratio p50\tp99\traw floor p50\tratio\tn\tfailed\t\n")
	for _, q := range r.Queries {
		p("%s\t%d\t%d\t%.1fms\t%.1fms\t%.1fms\t%.1fms\t%.2f×\t%.2f×\t%.1fms\t%.2f×\t%d\t%d\t\n",
			q.Query, q.Zones, q.Hosts, q.GraphQL.P50, q.GraphQL.P99, q.Floor.P50, q.Floor.P99, q.RatioP50, q.RatioP99, q.Raw.P50, q.RawRatioP50, q.GraphQL.Samples, q.Failed)
	}
	p("\n")
	p("scaling (p50 at N zones / 1 zone)\tzones\tgraphql\tfloor\tgraphql/floor\t\n")
	for _, s := range r.Scaling {
		p("%s\t%d\t%.2f×\t%.2f×\t%.2f\t\n", s.Query, s.Zones, s.GraphQLP50, s.FloorP50, s.Relative)
	}
	p("\n")
	p("throughput\tzones\tclients\treq/s\tfloor req/s\tratio\tp50\tp99\torch CPU/req\tagents+sims CPU/req\tfailed\t\n")
	for _, t := range r.Throughput {
		p("%s\t%d\t%d\t%.1f\t%.1f\t%.2f×\t%.1fms\t%.1fms\t%.2fms\t%.2fms\t%d\t\n",
			t.Query, t.Zones, t.Clients, t.PerSecond, t.FloorPerSec, t.Ratio, t.P50, t.P99, t.OrchestratorCPU, t.RestCPU, t.Failed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, s := range r.Simulator {
		fmt.Fprintf(w, "simulator %s, %d clients: %.0f req/s, p50 %.1fms; the busiest run needed %.1f req/s per cluster (headroom %.0f×)\n", s.Call, s.Clients, s.PerSecond, s.P50, s.Needed, s.Headroom)
	}
	if t := r.Tenant; t != nil {
		fmt.Fprintf(w, "tenant: vms of a VDC of %d guests per zone at %d zones: p50 %.1fms alone, %.1fms amid %d other guests per zone (%.2f×); orchestrator CPU %.2fms per request over %d requests (%.2fms before subtracting its idle %.1fms/s)\n",
			t.VDCGuests, t.Zones, t.Alone.P50, t.Amid.P50, t.OtherGuests, t.Ratio, t.OrchestratorCPU, t.Requests, t.GrossCPU, t.IdleCPU)
		fmt.Fprintf(w, "tenant: idle calls per second per agent %.3f (health checks included), %.3f without the registry's health checks, %.3f of the edge gateways' sync\n", t.IdleCalls, t.IdleNoHealth, t.IdleEdgeCalls)
	}
	if e := r.Enrollment; e != nil {
		fmt.Fprintf(w, "enrollment (%d rounds, cmd/agent process): start → ONLINE p50 %.0fms max %.0fms; SIGKILL → OFFLINE p50 %.0fms max %.0fms\n", e.Rounds, e.Online.P50, e.Online.Max, e.Offline.P50, e.Offline.Max)
	}
	for _, m := range r.Memory.Orchestrator {
		fmt.Fprintf(w, "orchestrator RSS with %d agents, %s: %.0f MiB (peak %.0f MiB)\n", m.Agents, m.When, m.RSS, m.HWM)
	}
	if a := r.Memory.Agent; a != nil {
		fmt.Fprintf(w, "agent process RSS: %.0f MiB (peak %.0f MiB)\n", a.RSS, a.HWM)
	}
	h := r.Memory.Harness
	fmt.Fprintf(w, "benchmark process (%d in-process agents, %d simulated clusters): RSS %.0f MiB, Go heap in use %.0f MiB, %d goroutines\n", h.Agents, h.Clusters, h.RSS, h.HeapInUse, h.Goroutines)
	fmt.Fprintln(w)
	r.writeGoals(w)
	return nil
}

// writeGoals prints the goals and the notes.
func (r *Report) writeGoals(w io.Writer) {
	for _, g := range r.Goals {
		verdict := "MISS"
		if g.Pass {
			verdict = "pass"
		}
		fmt.Fprintf(w, "goal %-60s %-22s measured %8.2f %-3s %s\n", g.Name, g.Target, g.Measured, g.Unit, verdict)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintf(w, "\nnotes:\n  %s\n", strings.Join(r.Notes, "\n  "))
	}
}
