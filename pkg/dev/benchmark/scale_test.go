package benchmark_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/dev/benchmark"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// proxyMethod is the agents' Proxmox proxy call.
const proxyMethod = "/flexplane.agent.v1.AgentService/Proxy"

// BenchmarkScale is `make bench-scale`: first BENCH_SCALE_CP_NODES
// control-plane-only nodes (registered with Headscale through tailscale's
// control client, map streams open, no data plane), then
// BENCH_SCALE_AGENTS full agents (one simulated single-node cluster each,
// BENCH_SCALE_GUESTS guests) added in steps of 64 and 256 up to the
// largest count, BENCH_SCALE_BATCH at a time; at each step the
// orchestrator's idle CPU, RSS and the agents' idle calls per agent over
// BENCH_SCALE_IDLE; at the largest, the vms query of a VDC in 2 zones,
// gateway changes through the API to their agent applying them,
// Headscale's netmap update at every control node when a node joins, and
// enrollment and offline detection of one more agent. The JSON report
// goes to BENCH_SCALE_OUT (see docs/performance/index.md).
// BENCH_SCALE_PROFILE names a directory for the orchestrator's CPU profile
// of the first 30 s of the first agents' joins, of each step's idle window
// and its heap profile after it.
func BenchmarkScale(b *testing.B) {
	_, file, _, _ := runtime.Caller(0)
	moduleDir := filepath.Join(filepath.Dir(file), "..", "..", "..")
	largest := envInt("BENCH_SCALE_AGENTS", 64)
	guests := envInt("BENCH_SCALE_GUESTS", 4)
	idleFor := envDuration("BENCH_SCALE_IDLE", 20*time.Second)
	rounds := envInt("BENCH_SCALE_ROUNDS", 3)
	cpNodes := 512 // 0 leaves them out
	if v, err := strconv.Atoi(os.Getenv("BENCH_SCALE_CP_NODES")); err == nil && v >= 0 {
		cpNodes = v
	}
	batch := max(envInt("BENCH_SCALE_BATCH", 32), 1)
	profDir := os.Getenv("BENCH_SCALE_PROFILE")
	out := os.Getenv("BENCH_SCALE_OUT")
	if out == "" {
		out = filepath.Join(moduleDir, "bench-results", "scale.json")
	}
	var steps []int
	for _, n := range []int{64, 256} {
		if n < largest {
			steps = append(steps, n)
		}
	}
	steps = append(steps, largest)

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx := b.Context()
	began := time.Now()
	rep := &benchmark.Report{
		Started: began.UTC().Format(time.RFC3339),
		Machine: benchmark.Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvg: loadAvg()},
		Setup: benchmark.Setup{
			Orchestrator: "cmd/orchestrator as its own process, production defaults, loopback",
			Agents:       "pkg/agent in the benchmark process, one per single-node simulated cluster, over the real mesh (tsnet)",
		},
		Scale: &benchmark.Scale{GuestsPerZone: guests},
	}
	dir, err := os.MkdirTemp("", "fpscale")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	log.Info("bench-scale: building cmd/orchestrator and cmd/agent")
	binDir := filepath.Join(dir, "bin")
	if err := benchmark.Build(ctx, moduleDir, binDir); err != nil {
		b.Fatal(err)
	}
	st, err := benchmark.Start(ctx, benchmark.Config{Dir: filepath.Join(dir, "main"), ModuleDir: moduleDir, BinDir: binDir, Logger: quiet, EdgeKernels: true, Profiling: profDir != ""})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	pid := st.OrchestratorPID()
	if _, err := settle(ctx, pid, 30*time.Second); err != nil {
		b.Fatal(err)
	}
	base, err := benchmark.ReadMemory(pid)
	if err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	// The control-plane-only nodes, before any agent: tag:orchestrator, so
	// that every agent's netmap carries them and each of theirs every agent
	// (the mesh policy), while the orchestrator's registry, which knows
	// agents by tag:agent, does not wait for them to answer as agents.
	var cps *benchmark.ControlNodes
	if cpNodes > 0 {
		key, err := st.CreateKey(ctx, meshcontrol.KeyOptions{Reusable: true, TTL: 2 * time.Hour, Tags: []string{meshcontrol.TagOrchestrator}})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		cps, err = benchmark.StartControlNodes(ctx, benchmark.ControlNodesConfig{ServerURL: st.URL(), AuthKey: key, Count: cpNodes, Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		defer cps.Close()
		took := time.Since(start)
		log.Info("bench-scale: control-plane-only nodes registered", "nodes", cpNodes, "took", took.Round(time.Millisecond))
		if _, err := settle(ctx, pid, time.Minute); err != nil {
			b.Fatal(err)
		}
		idle, err := cpuOver(pid, func() error { time.Sleep(idleFor); return nil })
		if err != nil {
			b.Fatal(err)
		}
		mem, err := benchmark.ReadMemory(pid)
		if err != nil {
			b.Fatal(err)
		}
		rep.Scale.ControlNodes, rep.Scale.ControlRegister = cpNodes, took.Seconds()
		rep.Scale.ControlRSS = mem.RSS
		rep.Scale.ControlRSSPerNode = benchmark.Ratio(max(mem.RSS-base.RSS, 0), float64(cpNodes))
		rep.Scale.ControlIdleCPU = benchmark.Ratio(float64(idle.cpu)/float64(time.Millisecond), float64(cpNodes)*idle.took.Seconds())
		log.Info("bench-scale: control-plane-only nodes idle", "rss_mib", mem.RSS, "rss_mib_per_node", rep.Scale.ControlRSSPerNode, "idle_cpu_ms_per_s_per_node", rep.Scale.ControlIdleCPU)
		// The agents' figures are over what the orchestrator holds with
		// the control nodes.
		base = mem
	}
	var cs []*benchmark.Cluster
	for _, n := range steps {
		added, err := addZones(ctx, st, len(cs), n-len(cs), guests)
		if err != nil {
			b.Fatal(err)
		}
		start, self0 := time.Now(), benchmark.SelfCPUTime()
		orch0, err := benchmark.CPUTime(pid)
		if err != nil {
			b.Fatal(err)
		}
		maps0 := 0
		if cps != nil {
			maps0 = cps.Maps()
		}
		var profiled chan error
		joinProfile := filepath.Join(profDir, fmt.Sprintf("join-cpu-%d.pprof", len(added)))
		if profDir != "" && len(cs) == 0 {
			// The orchestrator's CPU while the first agents join.
			profiled = make(chan error, 1)
			go func() { profiled <- st.OrchestratorProfile(ctx, "profile", "seconds=30", joinProfile) }()
		}
		// In batches, each online before the next starts (see
		// docs/performance/index.md#scale-harness: Headscale's map
		// responses per node grow with the nodes joining at once).
		for i := 0; i < len(added); i += batch {
			part := added[i:min(i+batch, len(added))]
			if err := st.StartAgents(ctx, part...); err != nil {
				b.Fatal(err)
			}
			cs = append(cs, part...)
			if err := waitZones(ctx, st, len(cs), len(cs), 10*time.Minute); err != nil {
				b.Fatal(err)
			}
		}
		orch1, err := benchmark.CPUTime(pid)
		if err != nil {
			b.Fatal(err)
		}
		log.Info("bench-scale: agents online", "agents", len(cs), "took", time.Since(start).Round(time.Second),
			"orchestrator_cpu", (orch1 - orch0).Round(time.Millisecond), "benchmark_process_cpu", (benchmark.SelfCPUTime() - self0).Round(time.Millisecond))
		if profiled != nil {
			if err := <-profiled; err != nil {
				b.Fatal(err)
			}
			log.Info("bench-scale: the orchestrator's CPU profile while the first agents joined", "path", joinProfile)
		}
		if cps != nil {
			log.Info("bench-scale: control nodes' map responses while the agents joined", "per_node", benchmark.Ratio(float64(cps.Maps()-maps0), float64(cps.Len())),
				"per_node_per_agent", benchmark.Ratio(float64(cps.Maps()-maps0), float64(cps.Len()*len(added))))
		}
		if _, err := settle(ctx, pid, time.Minute); err != nil {
			b.Fatal(err)
		}
		calls0, agents, err := agentCalls(cs, (*agent.Agent).Calls)
		if err != nil {
			b.Fatal(err)
		}
		idle, err := cpuOver(pid, func() error {
			if profDir == "" {
				time.Sleep(idleFor)
				return nil
			}
			// The CPU profile of the idle window is the window.
			return st.OrchestratorProfile(ctx, "profile", fmt.Sprintf("seconds=%d", int(idleFor.Seconds())),
				filepath.Join(profDir, fmt.Sprintf("idle-cpu-%d.pprof", len(cs))))
		})
		if err != nil {
			b.Fatal(err)
		}
		if profDir != "" {
			if err := st.OrchestratorProfile(ctx, "heap", "", filepath.Join(profDir, fmt.Sprintf("heap-%d.pprof", len(cs)))); err != nil {
				b.Fatal(err)
			}
		}
		calls1, _, err := agentCalls(cs, (*agent.Agent).Calls)
		if err != nil {
			b.Fatal(err)
		}
		mem, err := benchmark.ReadMemory(pid)
		if err != nil {
			b.Fatal(err)
		}
		all, _, _ := idleCallRates(calls0, calls1, agents, idle.took)
		step := benchmark.NewScaleStep(agents, idle.took.Seconds(), float64(idle.cpu)/float64(time.Millisecond), all*float64(agents)*idle.took.Seconds(), mem.RSS, base.RSS)
		rep.Scale.Steps = append(rep.Scale.Steps, step)
		if cps != nil {
			lo, hi := cps.Peers()
			log.Info("bench-scale: control nodes' netmaps", "peers_min", lo, "peers_max", hi)
		}
		log.Info("bench-scale: step", "agents", agents, "idle_calls_per_s_per_agent", step.IdleCalls, "idle_cpu_ms_per_s_per_agent", step.IdleCPU, "rss_mib", step.RSS, "rss_mib_per_agent", step.RSSPerAgent)
	}

	// The vms query of the VDC, whose guests are in the first 2 zones only.
	for _, c := range cs[:min(2, len(cs))] {
		if err := c.AddGuests(ctx, guests, 5000, benchmark.VDC); err != nil {
			b.Fatal(err)
		}
	}
	vms, proxy, err := vdcVMs(ctx, st, cs, min(2, len(cs))*guests, rounds*10)
	if err != nil {
		b.Fatal(err)
	}
	rep.Scale.VMs, rep.Scale.ProxyPerVMs = vms, proxy

	// Gateway changes through the API, each timed to its agent applying it.
	if rep.Scale.GatewayChange, err = gatewayChanges(ctx, st, cs[0], rounds*10); err != nil {
		b.Fatal(err)
	}

	// A node joins, rounds times: how long until each control node's map
	// stream carries it. It is a bare control client too, with an agent key
	// (the control nodes see agents); deleted once timed.
	if cps != nil {
		var took, reg []time.Duration
		for i := range rounds {
			key, err := st.CreateKey(ctx, meshcontrol.KeyOptions{TTL: 10 * time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			name := fmt.Sprintf("join%02d", i+1)
			j, err := cps.Join(ctx, name, key, time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			took, reg = append(took, j.Seen...), append(reg, j.Register)
			rep.Scale.NetmapMissed += j.Missed
			if err := st.DeleteMeshNode(ctx, name); err != nil {
				b.Fatal(err)
			}
			l := benchmark.Summarize(j.Seen)
			log.Info("bench-scale: netmap update on join", "node", name, "register", j.Register.Round(time.Millisecond), "p50_ms", l.P50, "p99_ms", l.P99, "max_ms", l.Max, "missed", j.Missed)
		}
		l, r := benchmark.Summarize(took), benchmark.Summarize(reg)
		rep.Scale.NetmapUpdate, rep.Scale.JoinRegister = &l, &r
	}

	// Enrollment and offline detection of one more agent at the largest
	// count, rounds times.
	var online, offline []time.Duration
	for i := range rounds {
		added, err := addZones(ctx, st, len(cs)+i, 1, guests)
		if err != nil {
			b.Fatal(err)
		}
		c := added[0]
		start := time.Now()
		if err := st.StartAgents(ctx, c); err != nil {
			b.Fatal(err)
		}
		if err := waitHost(ctx, st, c.Name, "ONLINE", 2*time.Minute, nil); err != nil {
			b.Fatal(err)
		}
		online = append(online, time.Since(start))
		if _, err := settle(ctx, pid, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if err := c.Agents[0].KillForTest(); err != nil {
			b.Fatal(err)
		}
		if err := waitHost(ctx, st, c.Name, "OFFLINE", 2*time.Minute, nil); err != nil {
			b.Fatal(err)
		}
		offline = append(offline, time.Since(start))
	}
	b.StopTimer()
	on, off := benchmark.Summarize(online), benchmark.Summarize(offline)
	rep.Scale.Enroll, rep.Scale.Offline = &on, &off

	rep.Goals = benchmark.ScaleGoals(rep.Scale)
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("%d control-plane-only nodes (tailscale's control client, tag:orchestrator: in every agent's netmap, not in the orchestrator's own), registered before the agents; the agents' RSS per agent is over the RSS with them", rep.Scale.ControlNodes),
		fmt.Sprintf("gateway change: %d updateEdgeGateway mutations of the bench VDC in zone %s, each from its request to ApplyGateway reaching the agent's helper (an in-memory edge kernel)", rounds*10, cs[0].Name),
		fmt.Sprintf("netmap update: %d joins of a bare control client (tag:agent), from the start of its registration to each control node's map stream carrying it (join registration: its registration alone)", rounds),
		fmt.Sprintf("enrollment and offline: %d rounds of one more in-process agent (KillForTest) at the largest count", rounds),
	)
	rep.Duration = time.Since(began).Seconds()
	rep.Machine.LoadAvgEnd = loadAvg()
	if err := rep.WriteJSON(out); err != nil {
		b.Fatal(err)
	}
	if err := rep.WriteTable(os.Stdout); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("\nreport: %s\n", out)
}

// addZones adds n single-node clusters named s0001… from first, each with
// guests guests of another tenant.
func addZones(ctx context.Context, st *benchmark.Stack, first, n, guests int) ([]*benchmark.Cluster, error) {
	cs := make([]*benchmark.Cluster, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range cs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if cs[i], errs[i] = st.AddCluster(ctx, fmt.Sprintf("s%04d", first+i+1), 1, 0); errs[i] == nil {
				errs[i] = cs[i].AddGuests(ctx, guests, 1000, "others")
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("add zones: %w", err)
	}
	return cs, nil
}

// gatewayChanges gives zone c an external network, makes the bench VDC's
// gateway there, then changes its egress limit n times through the API,
// one after another, and returns how long each took from the request to
// ApplyGateway reaching the agent's edge kernel.
func gatewayChanges(ctx context.Context, st *benchmark.Stack, c *benchmark.Cluster, n int) (*benchmark.Latencies, error) {
	kernel := st.Kernel(c, c.Sim.NodeNames()[0])
	if kernel == nil {
		return nil, errors.New("gateway changes: the zone's agent has no edge kernel")
	}
	if _, err := st.GraphQL(ctx, benchmark.AdminUser, false, `mutation($in: CreateExternalNetworkInput!) { createExternalNetwork(input: $in) { zone } }`,
		map[string]any{"in": map[string]any{"zone": c.Name, "bridge": "vmbr0", "cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "poolStart": "203.0.113.10", "poolEnd": "203.0.113.200"}}); err != nil {
		return nil, fmt.Errorf("gateway changes: %w", err)
	}
	change := func(mbps int) (time.Duration, error) {
		began := time.Now()
		if _, err := st.GraphQL(ctx, benchmark.MemberUser, true, `mutation($in: UpdateEdgeGatewayInput!) { updateEdgeGateway(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"zone": c.Name, "egressMbps": mbps}}); err != nil {
			return 0, err
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		at, err := kernel.WaitApplied(wctx, benchmark.VDC, func(g *edgev1.Gateway) bool { return g.GetEgressMbps() == uint32(mbps) })
		return at.Sub(began), err
	}
	// The gateway's first apply (its creation) is not counted.
	if _, err := change(1); err != nil {
		return nil, fmt.Errorf("gateway changes: the first: %w", err)
	}
	var ds []time.Duration
	for i := range n {
		d, err := change(2 + i)
		if err != nil {
			return nil, fmt.Errorf("gateway changes: change %d: %w", i+1, err)
		}
		ds = append(ds, d)
	}
	l := benchmark.Summarize(ds)
	return &l, nil
}

// vdcVMs measures the VDC's vms query n times: its latency and the
// agents' Proxy calls per request.
func vdcVMs(ctx context.Context, st *benchmark.Stack, cs []*benchmark.Cluster, want, n int) (*benchmark.Latencies, float64, error) {
	text := fmt.Sprintf(`{ vms(first: %d) { id name zone { name } } }`, max(want, 1))
	q := func() error {
		r, err := st.GraphQL(ctx, benchmark.MemberUser, true, text, nil)
		if err != nil {
			return err
		}
		return wantCount(r, "vms", want)
	}
	// The orchestrator's caches see the new guests.
	wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := poll.Context(wait, q); err != nil {
		return nil, 0, err
	}
	calls0, _, err := agentCalls(cs, (*agent.Agent).Calls)
	if err != nil {
		return nil, 0, err
	}
	var ds []time.Duration
	for range n {
		d, err := timed(q)
		if err != nil {
			return nil, 0, err
		}
		ds = append(ds, d)
	}
	calls1, _, err := agentCalls(cs, (*agent.Agent).Calls)
	if err != nil {
		return nil, 0, err
	}
	l := benchmark.Summarize(ds)
	return &l, benchmark.Ratio(calls1[proxyMethod]-calls0[proxyMethod], float64(n)), nil
}
