package benchmark_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/dev/benchmark"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// proxyMethod is the agents' Proxmox proxy call.
const proxyMethod = "/flexplane.agent.v1.AgentService/Proxy"

// BenchmarkScale is `make bench-scale`: BENCH_SCALE_AGENTS full agents
// (one simulated single-node cluster each, BENCH_SCALE_GUESTS guests) added
// in steps of 64 and 256 up to the largest count; at each step the
// orchestrator's idle CPU, RSS and the agents' idle calls per agent over
// BENCH_SCALE_IDLE; at the largest, enrollment and offline detection of one
// more agent and the vms query of a VDC in 2 zones. The JSON report goes
// to BENCH_SCALE_OUT (see docs/performance/index.md). BENCH_SCALE_PROFILE
// names a directory for the orchestrator's CPU profile of each step's
// idle window and its heap profile after it.
func BenchmarkScale(b *testing.B) {
	_, file, _, _ := runtime.Caller(0)
	moduleDir := filepath.Join(filepath.Dir(file), "..", "..", "..")
	largest := envInt("BENCH_SCALE_AGENTS", 64)
	guests := envInt("BENCH_SCALE_GUESTS", 4)
	idleFor := envDuration("BENCH_SCALE_IDLE", 20*time.Second)
	rounds := envInt("BENCH_SCALE_ROUNDS", 3)
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
	st, err := benchmark.Start(ctx, benchmark.Config{Dir: filepath.Join(dir, "main"), ModuleDir: moduleDir, BinDir: binDir, Logger: quiet, Profiling: profDir != ""})
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
	var cs []*benchmark.Cluster
	for _, n := range steps {
		added, err := addZones(ctx, st, len(cs), n-len(cs), guests)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := st.StartAgents(ctx, added...); err != nil {
			b.Fatal(err)
		}
		cs = append(cs, added...)
		if err := waitZones(ctx, st, len(cs), len(cs), 10*time.Minute); err != nil {
			b.Fatal(err)
		}
		log.Info("bench-scale: agents online", "agents", len(cs), "took", time.Since(start).Round(time.Second))
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
		"gateway change → applied and Headscale's netmap update time are not measured by this harness yet (reported as -1, MISS)",
		"no control-plane-only nodes are registered with Headscale yet: every node is a full agent",
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
