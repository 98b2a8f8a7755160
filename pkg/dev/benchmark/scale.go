package benchmark

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Targets of the scale harness (`make bench-scale`).
const (
	// ScaleIdleCallsGoal is the most gRPC calls per second an agent may
	// serve while nothing changes.
	ScaleIdleCallsGoal = 0.05
	// ScaleIdleCPUGoal is the most orchestrator CPU time per second per
	// agent while nothing changes, in ms.
	ScaleIdleCPUGoal = 0.2
	// ScaleRSSGoal is the most orchestrator resident memory per agent, in
	// MiB.
	ScaleRSSGoal = 0.5
	// ScaleGatewayGoal is the p99 from a gateway change to the agent
	// applying it, in ms.
	ScaleGatewayGoal = 1000
	// ScaleZonesAskedGoal is the Proxy calls one vms request of a VDC in
	// two zones may make.
	ScaleZonesAskedGoal = 2
	// ScaleOfflineGoal and ScaleEnrollGoal are offline detection and
	// enrollment at the largest count, in ms.
	ScaleOfflineGoal = 5000
	ScaleEnrollGoal  = 1500
)

// Scale is the result of the scale harness: the orchestrator's cost per
// agent at each agent count, and latencies at the largest count.
type Scale struct {
	// Steps are the agent counts measured, ascending.
	Steps []ScaleStep `json:"steps"`
	// ControlNodes is the number of control-plane-only nodes registered
	// with Headscale beside the agents (0: none).
	ControlNodes int `json:"control_only_nodes"`
	// ControlRSS is the orchestrator's RSS once they are registered (before
	// any agent), ControlRSSPerNode its growth per node over the RSS before
	// them (MiB), ControlIdleCPU the orchestrator's idle CPU per node while
	// only they are there (ms per second), ControlRegister how long they
	// took to register and receive their first netmap (seconds).
	ControlRSS        float64 `json:"orchestrator_rss_mib_with_control_nodes,omitempty"`
	ControlRSSPerNode float64 `json:"orchestrator_rss_mib_per_control_node,omitempty"`
	ControlIdleCPU    float64 `json:"idle_cpu_ms_per_s_per_control_node,omitempty"`
	ControlRegister   float64 `json:"control_nodes_register_seconds,omitempty"`
	// GuestsPerZone is the simulated guests of each agent's cluster.
	GuestsPerZone int `json:"guests_per_zone"`
	// Enroll is in-process agent start to its host ONLINE in the API,
	// Offline the agent killed to its host OFFLINE, at the largest count.
	Enroll  *Latencies `json:"enroll,omitempty"`
	Offline *Latencies `json:"offline,omitempty"`
	// VMs is the latency of `vms` for a VDC whose guests are in 2 zones
	// out of all of them; ProxyPerVMs the agents' Proxy calls per such
	// request.
	VMs         *Latencies `json:"vms_vdc_2_zones,omitempty"`
	ProxyPerVMs float64    `json:"proxy_calls_per_vms"`
	// GatewayChange is a gateway change to the agent applying it, and
	// NetmapUpdate Headscale's netmap update when a node joins; nil when
	// the run did not measure them (see the report's notes).
	GatewayChange *Latencies `json:"gateway_change,omitempty"`
	NetmapUpdate  *Latencies `json:"netmap_update,omitempty"`
	// JoinRegister is the joined node's registration alone (part of
	// NetmapUpdate).
	JoinRegister *Latencies `json:"join_registration,omitempty"`
	// NetmapMissed counts the control nodes whose map stream had not
	// carried a joined node within the wait (left out of NetmapUpdate).
	NetmapMissed int `json:"netmap_update_missed"`
}

// ScaleStep is the orchestrator's idle cost with Agents agents enrolled.
type ScaleStep struct {
	Agents int `json:"agents"`
	// Seconds is the length of the quiet while measured.
	Seconds float64 `json:"seconds"`
	// IdleCPU is orchestrator CPU ms per second per agent; IdleCalls the
	// gRPC calls per second per agent (counted at the agents).
	IdleCPU   float64 `json:"idle_cpu_ms_per_s_per_agent"`
	IdleCalls float64 `json:"idle_calls_per_s_per_agent"`
	// RSS is the orchestrator's resident memory, BaseRSS the same before
	// any agent enrolled, RSSPerAgent their difference per agent (MiB).
	RSS         float64 `json:"orchestrator_rss_mib"`
	BaseRSS     float64 `json:"orchestrator_base_rss_mib"`
	RSSPerAgent float64 `json:"orchestrator_rss_mib_per_agent"`
}

// NewScaleStep computes a step's per-agent figures: cpu is the
// orchestrator's CPU time in ms over seconds, calls the agents' calls
// over the same while, rss and baseRSS in MiB.
func NewScaleStep(agents int, seconds, cpuMS, calls, rss, baseRSS float64) ScaleStep {
	s := ScaleStep{Agents: agents, Seconds: round(seconds), RSS: round(rss), BaseRSS: round(baseRSS)}
	if agents > 0 && seconds > 0 {
		per := float64(agents) * seconds
		s.IdleCPU = Ratio(cpuMS, per)
		s.IdleCalls = Ratio(calls, per)
		s.RSSPerAgent = Ratio(max(rss-baseRSS, 0), float64(agents))
	}
	return s
}

// ScaleGoals are the harness's goals, judged at the largest step. A figure
// the run did not measure is a MISS with Measured -1.
func ScaleGoals(s *Scale) []Goal {
	var last ScaleStep
	if len(s.Steps) > 0 {
		last = s.Steps[len(s.Steps)-1]
	}
	at := fmt.Sprintf(" (%d agents)", last.Agents)
	atMost := func(name string, measured, target float64, unit string, measuredOK bool) Goal {
		g := Goal{Name: name, Target: fmt.Sprintf("≤ %g %s", target, unit), Unit: unit, Measured: -1}
		if measuredOK {
			g.Measured = measured
			g.Pass = measured <= target
		}
		return g
	}
	p99 := func(l *Latencies) (float64, bool) {
		if l == nil || l.Samples == 0 {
			return 0, false
		}
		return l.P99, true
	}
	maxOf := func(l *Latencies) (float64, bool) {
		if l == nil || l.Samples == 0 {
			return 0, false
		}
		return l.Max, true
	}
	stepOK := len(s.Steps) > 0 && last.Agents > 0
	gw, gwOK := p99(s.GatewayChange)
	off, offOK := maxOf(s.Offline)
	enr, enrOK := maxOf(s.Enroll)
	zones := Goal{Name: "zones asked: Proxy calls per vms request, VDC in 2 zones" + at, Target: fmt.Sprintf("= %d", ScaleZonesAskedGoal), Unit: "", Measured: -1}
	if s.VMs != nil && s.VMs.Samples > 0 {
		zones.Measured = s.ProxyPerVMs
		zones.Pass = s.ProxyPerVMs == ScaleZonesAskedGoal
	}
	return []Goal{
		atMost("idle calls per agent per second"+at, last.IdleCalls, ScaleIdleCallsGoal, "/s", stepOK),
		atMost("idle cpu of the orchestrator per agent"+at, last.IdleCPU, ScaleIdleCPUGoal, "ms/s", stepOK),
		atMost("rss of the orchestrator per agent"+at, last.RSSPerAgent, ScaleRSSGoal, "MiB", stepOK),
		atMost("gateway change applied by the agent, p99"+at, gw, ScaleGatewayGoal, "ms", gwOK),
		zones,
		atMost("offline detection, max"+at, off, ScaleOfflineGoal, "ms", offOK),
		atMost("enrollment to ONLINE, max"+at, enr, ScaleEnrollGoal, "ms", enrOK),
	}
}

// writeScale prints the scale figures.
func writeScale(w io.Writer, s *Scale) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "agents\tseconds\tidle calls/s/agent\tidle cpu ms/s/agent\torch RSS MiB\tbase MiB\tRSS MiB/agent\t\n")
	for _, st := range s.Steps {
		fmt.Fprintf(tw, "%d\t%.0f\t%.4f\t%.4f\t%.0f\t%.0f\t%.3f\t\n", st.Agents, st.Seconds, st.IdleCalls, st.IdleCPU, st.RSS, st.BaseRSS, st.RSSPerAgent)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	lat := func(name string, l *Latencies) {
		if l == nil || l.Samples == 0 {
			fmt.Fprintf(w, "%s: not measured\n", name)
			return
		}
		fmt.Fprintf(w, "%s: p50 %.0fms p99 %.0fms max %.0fms (%d samples)\n", name, l.P50, l.P99, l.Max, l.Samples)
	}
	fmt.Fprintf(w, "control-plane-only nodes: %d\n", s.ControlNodes)
	if s.ControlNodes > 0 {
		fmt.Fprintf(w, "  registered in %.1fs; orchestrator RSS with them %.0f MiB (%.3f MiB per node), idle cpu %.4f ms/s per node\n",
			s.ControlRegister, s.ControlRSS, s.ControlRSSPerNode, s.ControlIdleCPU)
	}
	lat("enrollment (start → ONLINE)", s.Enroll)
	lat("offline detection (killed → OFFLINE)", s.Offline)
	lat("vms of a VDC in 2 zones", s.VMs)
	fmt.Fprintf(w, "Proxy calls per vms request: %.2f\n", s.ProxyPerVMs)
	lat("gateway change → applied", s.GatewayChange)
	lat("Headscale netmap update on join (registration start → each peer's map)", s.NetmapUpdate)
	lat("  of which the join's registration", s.JoinRegister)
	if s.NetmapMissed > 0 {
		fmt.Fprintf(w, "  %d control nodes' map streams did not carry a joined node in time\n", s.NetmapMissed)
	}
	fmt.Fprintln(w)
	return nil
}
