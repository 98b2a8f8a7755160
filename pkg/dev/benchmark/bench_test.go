package benchmark_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/dev/benchmark"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Parameters of BenchmarkStack, from the environment (see
// docs/performance/index.md).
type params struct {
	out        string        // BENCH_OUT: JSON report path
	scales     []int         // BENCH_SCALES: zone counts, ascending
	hosts      int           // BENCH_HOSTS: hosts per zone up to 8 zones
	hostsLarge int           // BENCH_HOSTS_LARGE: hosts per zone beyond 8 zones
	vms        int           // BENCH_VMS: guests per zone
	samples    int           // BENCH_SAMPLES: latency samples per query and scale
	budget     time.Duration // BENCH_BUDGET: time cap per query and scale
	runFor     time.Duration // BENCH_THROUGHPUT: duration of each throughput run
	clients    int           // BENCH_CLIENTS: concurrent clients of the throughput run
	rounds     int           // BENCH_ENROLL_ROUNDS: enrollment rounds
	profileDir string        // BENCH_PROFILE: "" none, "1" bench-results/profiles, else a directory
	memLimit   string        // BENCH_MEMORY_LIMIT: the orchestrator's -memory-limit
	// The tenant figure: BENCH_TENANT_ZONES zones (0: not measured) of
	// BENCH_TENANT_HOSTS hosts, a VDC of BENCH_TENANT_VMS guests per zone,
	// amid BENCH_TENANT_OTHERS guests of another tenant per zone.
	tenantZones, tenantHosts, tenantVMs, tenantOthers int
	// The zone-set figure: a VDC in 2 of BENCH_ZONESET_ZONES zones (0:
	// not measured) of one host each.
	zoneSetZones int
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(key string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

func loadParams(b *testing.B, moduleDir string) params {
	p := params{
		out:        os.Getenv("BENCH_OUT"),
		hosts:      envInt("BENCH_HOSTS", 4),
		hostsLarge: envInt("BENCH_HOSTS_LARGE", 4),
		vms:        envInt("BENCH_VMS", 1000),
		samples:    envInt("BENCH_SAMPLES", 40),
		budget:     envDuration("BENCH_BUDGET", 15*time.Second),
		runFor:     envDuration("BENCH_THROUGHPUT", 8*time.Second),
		clients:    envInt("BENCH_CLIENTS", 8),
		rounds:     envInt("BENCH_ENROLL_ROUNDS", 3),
		memLimit:   os.Getenv("BENCH_MEMORY_LIMIT"),

		tenantZones:  envInt("BENCH_TENANT_ZONES", 8),
		tenantHosts:  envInt("BENCH_TENANT_HOSTS", 1),
		tenantVMs:    envInt("BENCH_TENANT_VMS", 100),
		tenantOthers: envInt("BENCH_TENANT_OTHERS", 10000),
		zoneSetZones: envInt("BENCH_ZONESET_ZONES", 64),
	}
	if os.Getenv("BENCH_TENANT_ZONES") == "0" {
		p.tenantZones = 0
	}
	if p.out == "" {
		p.out = filepath.Join(moduleDir, "bench-results", "latest.json")
	}
	switch v := os.Getenv("BENCH_PROFILE"); v {
	case "", "0":
	case "1":
		p.profileDir = filepath.Join(filepath.Dir(p.out), "profiles")
	default:
		p.profileDir = v
	}
	scales := os.Getenv("BENCH_SCALES")
	if scales == "" {
		scales = "1,8,32"
	}
	for f := range strings.SplitSeq(scales, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("BENCH_SCALES: %q is not a list of zone counts", scales)
		}
		p.scales = append(p.scales, n)
	}
	slices.Sort(p.scales)
	p.scales = slices.Compact(p.scales)
	return p
}

// query is one GraphQL query and its floor: the same data asked of every
// simulated cluster directly with go-proxmox, in parallel.
type query struct {
	name      string
	user      string
	vdc       bool
	text      string
	floorCall string
	// check validates a GraphQL answer at zones zones of hosts hosts.
	check func(r *benchmark.GraphQLResult, zones, hosts int) error
	// floor asks one cluster and returns what it counted.
	floor func(ctx context.Context, c *benchmark.Cluster) (int, error)
	// floorWant is what the floor must count at zones zones of hosts hosts.
	floorWant func(zones, hosts int) int
	// rawPath is the Proxmox path (below /api2/json) of the answers the
	// orchestrator reads for the query: the raw floor fetches it.
	rawPath string
}

func countField(r *benchmark.GraphQLResult, field string) (int, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(r.Data[field], &items); err != nil {
		return 0, fmt.Errorf("data.%s: %w", field, err)
	}
	return len(items), nil
}

func wantCount(r *benchmark.GraphQLResult, field string, want int) error {
	n, err := countField(r, field)
	if err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("data.%s has %d items, want %d", field, n, want)
	}
	return nil
}

// vmsPage is the page size of the vms query: the API's default complexity
// limit (1000) allows about 140 VMs with these fields.
const vmsPage = 100

func queries(p params) []query {
	return []query{
		{
			name: "vms", user: benchmark.MemberUser, vdc: true,
			text:      fmt.Sprintf(`{ vms(first: %d) { id name status zone { name } host { name } } }`, vmsPage),
			floorCall: "GET /pools?poolid=&type=qemu (the VDC's guests, decoded)",
			rawPath:   pveapi.PoolGuestsPath(tenancy.PoolID(benchmark.VDC)),
			check: func(r *benchmark.GraphQLResult, zones, _ int) error {
				return wantCount(r, "vms", min(vmsPage, zones*benchmark.ManagedGuests(p.vms)))
			},
			floor: func(ctx context.Context, c *benchmark.Cluster) (int, error) {
				gs, err := pveapi.PoolGuests(ctx, c.Direct, tenancy.PoolID(benchmark.VDC))
				return len(gs), err
			},
			floorWant: func(zones, _ int) int { return zones * benchmark.ManagedGuests(p.vms) },
		},
		{
			name: "zones", user: benchmark.AdminUser,
			text:      `{ zones(first: 32) { name status hosts { name status } capacity { cpus memoryTotal memoryUsed storageTotal storageUsed } } }`,
			floorCall: "GET /cluster/resources (nodes, storage and guests: what capacity sums)",
			rawPath:   "/cluster/resources",
			check: func(r *benchmark.GraphQLResult, zones, _ int) error {
				var zs []struct {
					Status   string
					Capacity *struct{ Cpus int }
				}
				if err := json.Unmarshal(r.Data["zones"], &zs); err != nil {
					return err
				}
				if len(zs) != zones {
					return fmt.Errorf("%d zones, want %d", len(zs), zones)
				}
				for _, z := range zs {
					if z.Status != "ONLINE" || z.Capacity == nil || z.Capacity.Cpus == 0 {
						return fmt.Errorf("zone not online or without capacity: %+v", z)
					}
				}
				return nil
			},
			floor: func(ctx context.Context, c *benchmark.Cluster) (int, error) {
				rs, err := (&proxmox.Cluster{}).New(c.Direct).Resources(ctx)
				return len(rs), err
			},
			floorWant: nil, // resource count depends on storage; checked > 0
		},
		{
			name: "hosts", user: benchmark.AdminUser,
			text:      `{ hosts(first: 128) { name status uptime cpuUsage memoryUsed memoryTotal } }`,
			floorCall: "GET /cluster/resources?type=node",
			rawPath:   "/cluster/resources?type=node",
			check: func(r *benchmark.GraphQLResult, _, hosts int) error {
				return wantCount(r, "hosts", min(128, hosts))
			},
			floor: func(ctx context.Context, c *benchmark.Cluster) (int, error) {
				rs, err := (&proxmox.Cluster{}).New(c.Direct).Resources(ctx, "node")
				return len(rs), err
			},
			floorWant: func(_, hosts int) int { return hosts },
		},
	}
}

// floorAll asks every cluster in cs concurrently and sums what they count.
func floorAll(ctx context.Context, q query, cs []*benchmark.Cluster) (int, error) {
	counts := make([]int, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { counts[i], errs[i] = q.floor(ctx, c) })
	}
	wg.Wait()
	total := 0
	for i := range cs {
		if errs[i] != nil {
			return 0, fmt.Errorf("floor %s at %s: %w", q.name, cs[i].Name, errs[i])
		}
		total += counts[i]
	}
	return total, nil
}

// rawAll fetches path from every cluster in cs concurrently over HTTPS and
// reads the answers without decoding them.
func rawAll(ctx context.Context, path string, cs []*benchmark.Cluster) error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { errs[i] = rawGet(ctx, c, path) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// rawGet GETs path of c and reads the body.
func rawGet(ctx context.Context, c *benchmark.Cluster, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Sim.URL()+"/api2/json"+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", c.AuthHeader())
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && (resp.StatusCode != http.StatusOK || n == 0) {
		err = fmt.Errorf("raw GET %s at %s: %s, %d bytes", path, c.Name, resp.Status, n)
	}
	return err
}

func timed(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}

// BenchmarkStack runs the whole report once (use -benchtime 1x): see the
// package documentation and docs/performance/index.md.
func BenchmarkStack(b *testing.B) {
	_, file, _, _ := runtime.Caller(0)
	moduleDir := filepath.Join(filepath.Dir(file), "..", "..", "..")
	p := loadParams(b, moduleDir)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	began := time.Now()
	ctx := b.Context()

	rep := &benchmark.Report{
		Started: began.UTC().Format(time.RFC3339),
		Machine: benchmark.Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvg: loadAvg()},
		Setup: benchmark.Setup{
			Scales: p.scales, VMsPerZone: p.vms, VDCVMsPerZ: benchmark.ManagedGuests(p.vms),
			Orchestrator: "cmd/orchestrator as its own process, production defaults (zone refresh 2s), loopback",
			Agents:       "pkg/agent in the benchmark process, one per simulated node, over the real mesh (tsnet); the enrollment rounds run cmd/agent as a process against an orchestrator of their own (fresh, no other agents)",
		},
	}
	if p.memLimit != "" {
		rep.Setup.Orchestrator += ", -memory-limit " + p.memLimit
	}
	dir, err := os.MkdirTemp("", "fpbench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	log.Info("bench: building cmd/orchestrator and cmd/agent")
	binDir := filepath.Join(dir, "bin")
	if err := benchmark.Build(ctx, moduleDir, binDir); err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// Enrollment first, on an orchestrator of its own (the killed agents'
	// zones stay behind offline): cmd/agent as a process.
	{
		est, err := benchmark.Start(ctx, benchmark.Config{Dir: filepath.Join(dir, "enroll"), ModuleDir: moduleDir, BinDir: binDir, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		enr, agentMem, err := enrollment(ctx, est, p.rounds, filepath.Join(dir, "enroll"), log)
		est.Close()
		if err != nil {
			b.Fatal(err)
		}
		rep.Enrollment, rep.Memory.Agent = enr, agentMem
	}

	log.Info("bench: starting the stack")
	st, err := benchmark.Start(ctx, benchmark.Config{Dir: filepath.Join(dir, "main"), ModuleDir: moduleDir, BinDir: binDir, Logger: quiet, Profiling: p.profileDir != "", MemoryLimit: p.memLimit})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	var prof *profiler
	if p.profileDir != "" {
		if err := os.MkdirAll(p.profileDir, 0o755); err != nil {
			b.Fatal(err)
		}
		prof = &profiler{st: st, dir: p.profileDir}
		log.Info("bench: writing profiles", "dir", p.profileDir)
	}

	var clusters []*benchmark.Cluster
	hostsOf := func(n int) int {
		total := 0
		for i := range n {
			total += len(clusters[i].Sim.NodeNames())
		}
		return total
	}
	qs := queries(p)
	results := map[string]map[int]benchmark.QueryResult{}
	for _, scale := range p.scales {
		// Add and seed the new zones, then start their agents.
		start := time.Now()
		var added []*benchmark.Cluster
		for i := len(clusters); i < scale; i++ {
			hosts := p.hosts
			if i >= 8 {
				hosts = p.hostsLarge
			}
			c, err := st.AddCluster(ctx, fmt.Sprintf("z%02d", i+1), hosts, p.vms)
			if err != nil {
				b.Fatal(err)
			}
			added = append(added, c)
		}
		clusters = append(clusters, added...)
		seeded := time.Since(start)
		if err := st.StartAgents(ctx, added...); err != nil {
			b.Fatal(err)
		}
		if err := waitZones(ctx, st, scale, hostsOf(scale), 5*time.Minute); err != nil {
			b.Fatal(err)
		}
		settle, err := settle(ctx, st.OrchestratorPID(), 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		idle, err := benchmark.ReadMemory(st.OrchestratorPID())
		if err != nil {
			b.Fatal(err)
		}
		rep.Memory.Orchestrator = append(rep.Memory.Orchestrator, benchmark.OrchestratorMemory{Agents: hostsOf(scale), When: "enrolled, before queries", ProcessMemory: idle})
		rep.Setup.HostsPerZone = append(rep.Setup.HostsPerZone, len(added[len(added)-1].Sim.NodeNames()))
		log.Info("bench: zones online", "zones", scale, "hosts", hostsOf(scale), "seed", seeded.Round(time.Millisecond), "agents_online", (time.Since(start) - seeded - settle).Round(time.Millisecond), "settle", settle.Round(time.Millisecond))

		active := clusters[:scale]
		for _, q := range qs {
			var stop func() error
			if q.name == "vms" && (scale == 8 || scale == p.scales[len(p.scales)-1]) {
				stop = prof.cpu(ctx, fmt.Sprintf("vms%d-latency", scale), p.budget)
			}
			r, err := compare(ctx, st, q, active, scale, hostsOf(scale), p)
			if err != nil {
				b.Fatal(err)
			}
			if stop != nil {
				if err := stop(); err != nil {
					b.Fatal(err)
				}
			}
			if results[q.name] == nil {
				results[q.name] = map[int]benchmark.QueryResult{}
			}
			results[q.name][scale] = r
			rep.Queries = append(rep.Queries, r)
			log.Info("bench: query", "query", q.name, "zones", scale, "graphql_p50_ms", r.GraphQL.P50, "floor_p50_ms", r.Floor.P50, "ratio_p50", r.RatioP50, "samples", r.GraphQL.Samples)
		}
		if scale == 8 || (scale == p.scales[len(p.scales)-1] && !slices.Contains(p.scales, 8)) {
			t, err := throughput(ctx, st, qs[0], active, scale, p, prof)
			if err != nil {
				b.Fatal(err)
			}
			if err := prof.heap(ctx, fmt.Sprintf("vms%d-throughput", scale)); err != nil {
				b.Fatal(err)
			}
			rep.Throughput = append(rep.Throughput, t)
			// The simulator's own rate for the vms floor's call on one
			// cluster, in the same conditions.
			sim, err := simRate(ctx, clusters[0], 2, 3*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			sim.Needed = t.PerSecond
			sim.Headroom = benchmark.Ratio(sim.PerSecond, sim.Needed)
			rep.Simulator = append(rep.Simulator, sim)
			log.Info("bench: throughput", "zones", scale, "req_per_s", t.PerSecond, "floor_req_per_s", t.FloorPerSec, "orch_cpu_ms_per_req", t.OrchestratorCPU)
		}
		mem, err := benchmark.ReadMemory(st.OrchestratorPID())
		if err != nil {
			b.Fatal(err)
		}
		rep.Memory.Orchestrator = append(rep.Memory.Orchestrator, benchmark.OrchestratorMemory{Agents: hostsOf(scale), When: "after the queries", ProcessMemory: mem})
		log.Info("bench: orchestrator memory", "agents", hostsOf(scale), "rss_mib", mem.RSS)
	}
	largest := p.scales[len(p.scales)-1]
	for _, q := range qs {
		one, big := results[q.name][p.scales[0]], results[q.name][largest]
		if p.scales[0] != largest && one.GraphQL.Samples > 0 && big.GraphQL.Samples > 0 {
			rep.Scaling = append(rep.Scaling, benchmark.Scaling{
				Query: q.name, Zones: largest,
				GraphQLP50: benchmark.Ratio(big.GraphQL.P50, one.GraphQL.P50),
				FloorP50:   benchmark.Ratio(big.Floor.P50, one.Floor.P50),
				Relative:   benchmark.Ratio(big.GraphQL.P50*one.Floor.P50, one.GraphQL.P50*big.Floor.P50),
			})
		}
	}

	// The harness process with every agent running.
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	self, err := benchmark.ReadMemory(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	rep.Memory.Harness = benchmark.HarnessMemory{
		Agents: hostsOf(largest), Clusters: largest, RSS: self.RSS,
		HeapInUse: float64(ms.HeapInuse) / (1 << 20), Goroutines: runtime.NumGoroutine(),
	}

	if p.tenantZones > 0 {
		st.Close() // the tenant figure runs on a stack of its own
		t, err := tenant(ctx, benchmark.Config{Dir: filepath.Join(dir, "tenant"), ModuleDir: moduleDir, BinDir: binDir, Logger: quiet, MemoryLimit: p.memLimit}, p, log)
		if err != nil {
			b.Fatal(err)
		}
		rep.Tenant = t
	}

	if p.zoneSetZones > 2 {
		zs, err := zoneSet(ctx, benchmark.Config{Dir: filepath.Join(dir, "zoneset"), ModuleDir: moduleDir, BinDir: binDir, Logger: quiet, MemoryLimit: p.memLimit}, p, log)
		if err != nil {
			b.Fatal(err)
		}
		rep.ZoneSet = zs
	}

	rep.Goals = goals(rep, results, p)
	rep.Notes = notes(rep, p)
	rep.Machine.LoadAvgEnd = loadAvg()
	rep.Duration = time.Since(began).Round(time.Second).Seconds()
	if err := rep.WriteJSON(p.out); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "\nflexplane benchmark (%d CPUs, load %s → %s, %.0fs); JSON: %s\n\n", rep.Machine.CPUs, rep.Machine.LoadAvg, rep.Machine.LoadAvgEnd, rep.Duration, p.out)
	if err := rep.WriteTable(os.Stdout); err != nil {
		b.Fatal(err)
	}
}

// tenant measures vms for a VDC of p.tenantVMs guests in each of
// p.tenantZones zones, on a stack of its own: alone, then amid
// p.tenantOthers guests of another tenant added to every zone.
func tenant(ctx context.Context, cfg benchmark.Config, p params, log *slog.Logger) (*benchmark.Tenant, error) {
	st, err := benchmark.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	// This process holds every simulated guest (80,800 by default): its
	// collections would take CPU from the orchestrator on a shared machine,
	// as real Proxmox clusters on their own machines do not. Collect less
	// often here, and before each measurement.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	log.Info("bench: tenant figure", "zones", p.tenantZones, "vdc_guests_per_zone", p.tenantVMs, "other_guests_per_zone", p.tenantOthers)
	cs := make([]*benchmark.Cluster, p.tenantZones)
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i := range cs {
		wg.Go(func() {
			if cs[i], errs[i] = st.AddCluster(ctx, fmt.Sprintf("t%02d", i+1), p.tenantHosts, 0); errs[i] == nil {
				errs[i] = cs[i].AddGuests(ctx, p.tenantVMs, 1000, benchmark.VDC)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := st.StartAgents(ctx, cs...); err != nil {
		return nil, err
	}
	if err := waitZones(ctx, st, len(cs), len(cs)*p.tenantHosts, 5*time.Minute); err != nil {
		return nil, err
	}
	page := min(vmsPage, p.tenantZones*p.tenantVMs)
	text := fmt.Sprintf(`{ vms(first: %d) { id name status zone { name } host { name } } }`, vmsPage)
	sample := func() (benchmark.Latencies, int, error) {
		q := func() error {
			r, err := st.GraphQL(ctx, benchmark.MemberUser, true, text, nil)
			if err != nil {
				return err
			}
			return wantCount(r, "vms", page)
		}
		runtime.GC()
		for range 3 { // warm up
			if err := q(); err != nil {
				return benchmark.Latencies{}, 0, err
			}
		}
		ds, err := sampled(q, p)
		if err != nil {
			return benchmark.Latencies{}, 0, err
		}
		return benchmark.Summarize(ds), len(ds), nil
	}
	if _, err := settle(ctx, st.OrchestratorPID(), 30*time.Second); err != nil {
		return nil, err
	}
	alone, _, err := sample()
	if err != nil {
		return nil, fmt.Errorf("tenant alone: %w", err)
	}
	start := time.Now()
	for i, c := range cs {
		wg.Go(func() { errs[i] = c.AddGuests(ctx, p.tenantOthers, 100000, "others") })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	log.Info("bench: tenant figure: others seeded", "took", time.Since(start).Round(time.Second))
	if _, err := settle(ctx, st.OrchestratorPID(), 30*time.Second); err != nil {
		return nil, err
	}
	amid, _, err := sample()
	if err != nil {
		return nil, fmt.Errorf("tenant amid others: %w", err)
	}
	// CPU per request: p.clients clients for p.runFor, less the
	// orchestrator's own background work (zone refresh, the mesh) over as
	// long a quiet while just before.
	pid := st.OrchestratorPID()
	calls0, agents, err := agentCalls(cs, (*agent.Agent).Calls)
	if err != nil {
		return nil, err
	}
	prox0, _, err := agentCalls(cs, (*agent.Agent).ProxmoxRequests)
	if err != nil {
		return nil, err
	}
	idle, err := cpuOver(pid, func() error { time.Sleep(p.runFor); return nil })
	if err != nil {
		return nil, err
	}
	prox1, _, err := agentCalls(cs, (*agent.Agent).ProxmoxRequests)
	if err != nil {
		return nil, err
	}
	calls1, _, err := agentCalls(cs, (*agent.Agent).Calls)
	if err != nil {
		return nil, err
	}
	idleCalls, idleNoHealth, idleEdge := idleCallRates(calls0, calls1, agents, idle.took)
	byMethod := map[string]float64{}
	for m, n := range calls1 {
		if d := n - calls0[m]; d > 0 {
			byMethod[m] = d
		}
	}
	byPath := map[string]float64{}
	for k, n := range prox1 {
		if d := n - prox0[k]; d > 0 {
			byPath[k] = d
		}
	}
	log.Info("bench: tenant figure: agents' calls while idle", "agents", agents, "seconds", idle.took.Seconds(), "by_method", byMethod, "proxmox_requests", byPath)
	var n int
	busy, err := cpuOver(pid, func() error {
		ds, _, err := run(ctx, p.clients, p.runFor, func() error {
			r, err := st.GraphQL(ctx, benchmark.MemberUser, true, text, nil)
			if err != nil {
				return err
			}
			return wantCount(r, "vms", page)
		})
		n = len(ds)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("tenant amid others, %d clients: %w", p.clients, err)
	}
	idleRate := float64(idle.cpu) / idle.took.Seconds() // CPU ns per second
	net := max(float64(busy.cpu)-idleRate*busy.took.Seconds(), 0)
	t := &benchmark.Tenant{
		Zones: p.tenantZones, VDCGuests: p.tenantVMs, OtherGuests: p.tenantOthers,
		Alone: alone, Amid: amid, Ratio: benchmark.Ratio(amid.P50, alone.P50),
		Requests:        n,
		OrchestratorCPU: benchmark.Ratio(net/float64(time.Millisecond), float64(n)),
		GrossCPU:        benchmark.Ratio(float64(busy.cpu)/float64(time.Millisecond), float64(n)),
		IdleCPU:         benchmark.Ratio(idleRate/float64(time.Millisecond), 1),
		IdleCalls:       idleCalls,
		IdleNoHealth:    idleNoHealth,
		IdleEdgeCalls:   idleEdge,
	}
	log.Info("bench: tenant figure", "alone_p50_ms", alone.P50, "amid_p50_ms", amid.P50, "ratio", t.Ratio, "orch_cpu_ms_per_req", t.OrchestratorCPU)
	return t, nil
}

// sampled times q p.samples times, at least 5 and within p.budget.
func sampled(q func() error, p params) ([]time.Duration, error) {
	var ds []time.Duration
	deadline := time.Now().Add(p.budget)
	for i := 0; i < p.samples && (i < 5 || time.Now().Before(deadline)); i++ {
		d, err := timed(q)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// zoneSet measures vms for a VDC whose guests are in 2 zones of
// p.zoneSetZones (one host each, 10 guests of the VDC in each of its two
// zones), on a stack of its own, against the same VDC on a stack of those
// 2 zones only, and counts the agents' reads of the VDC's pool per request
// (its Proxy calls: the zones asked).
func zoneSet(ctx context.Context, cfg benchmark.Config, p params, log *slog.Logger) (*benchmark.ZoneSet, error) {
	const vdcZones, guests = 2, 10
	measure := func(name string, zones int) (benchmark.Latencies, float64, error) {
		c := cfg
		c.Dir = filepath.Join(cfg.Dir, name)
		st, err := benchmark.Start(ctx, c)
		if err != nil {
			return benchmark.Latencies{}, 0, err
		}
		defer st.Close()
		cs := make([]*benchmark.Cluster, zones)
		errs := make([]error, zones)
		var wg sync.WaitGroup
		for i := range cs {
			wg.Go(func() {
				if cs[i], errs[i] = st.AddCluster(ctx, fmt.Sprintf("s%02d", i+1), 1, 0); errs[i] == nil && i < vdcZones {
					errs[i] = cs[i].AddGuests(ctx, guests, 1000, benchmark.VDC)
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return benchmark.Latencies{}, 0, err
		}
		if err := st.StartAgents(ctx, cs...); err != nil {
			return benchmark.Latencies{}, 0, err
		}
		if err := waitZones(ctx, st, zones, zones, 5*time.Minute); err != nil {
			return benchmark.Latencies{}, 0, err
		}
		q := func() error {
			r, err := st.GraphQL(ctx, benchmark.MemberUser, true, `{ vms(first: 100) { id name status zone { name } host { name } } }`, nil)
			if err != nil {
				return err
			}
			return wantCount(r, "vms", vdcZones*guests)
		}
		for range 3 { // warm up; the first read rebuilds the VDC's zone set
			if err := q(); err != nil {
				return benchmark.Latencies{}, 0, err
			}
		}
		if _, err := settle(ctx, st.OrchestratorPID(), 30*time.Second); err != nil {
			return benchmark.Latencies{}, 0, err
		}
		before, _, err := agentCalls(cs, (*agent.Agent).ProxmoxRequests)
		if err != nil {
			return benchmark.Latencies{}, 0, err
		}
		ds, err := sampled(q, p)
		if err != nil {
			return benchmark.Latencies{}, 0, err
		}
		after, _, err := agentCalls(cs, (*agent.Agent).ProxmoxRequests)
		if err != nil {
			return benchmark.Latencies{}, 0, err
		}
		const poolReads = "GET /pools"
		return benchmark.Summarize(ds), (after[poolReads] - before[poolReads]) / float64(len(ds)), nil
	}
	log.Info("bench: zone-set figure", "zones", p.zoneSetZones, "vdc_zones", vdcZones)
	many, calls, err := measure("many", p.zoneSetZones)
	if err != nil {
		return nil, fmt.Errorf("zone set, %d zones: %w", p.zoneSetZones, err)
	}
	few, _, err := measure("few", vdcZones)
	if err != nil {
		return nil, fmt.Errorf("zone set, %d zones: %w", vdcZones, err)
	}
	z := &benchmark.ZoneSet{Zones: p.zoneSetZones, VDCZones: vdcZones, Guests: guests, Many: many, Few: few,
		Ratio: benchmark.Ratio(many.P50, few.P50), ProxyCalls: calls}
	log.Info("bench: zone-set figure", "many_p50_ms", many.P50, "few_p50_ms", few.P50, "ratio", z.Ratio, "proxy_calls_per_request", calls)
	return z, nil
}

// agentCalls is a counter of every agent of cs so far (count: its calls by
// method, or its Proxmox requests), and the number of agents.
func agentCalls(cs []*benchmark.Cluster, count func(*agent.Agent) (map[string]float64, error)) (map[string]float64, int, error) {
	out := map[string]float64{}
	var agents int
	for _, c := range cs {
		for _, a := range c.Agents {
			agents++
			calls, err := count(a)
			if err != nil {
				return nil, 0, err
			}
			for m, n := range calls {
				out[m] += n
			}
		}
	}
	return out, agents, nil
}

// fleetMethods are the calls of the zone registry's health checks (its
// Health, and the Info and membership proof it reads with them).
var fleetMethods = map[string]bool{
	"/flexplane.agent.v1.AgentService/Health": true,
	"/flexplane.agent.v1.AgentService/Info":   true,
	"/flexplane.agent.v1.AgentService/Prove":  true,
}

// idleCallRates is the calls per second per agent between two counts
// taken over took: all of them, all but the registry's health checks, and
// the edge gateways' sync's (flexplane.edge.v1; the load balancers' sync
// calls no agent).
func idleCallRates(before, after map[string]float64, agents int, took time.Duration) (all, noHealth, edge float64) {
	if agents == 0 || took <= 0 {
		return 0, 0, 0
	}
	var n, nh, ne float64
	for m, c := range after {
		d := c - before[m]
		n += d
		if !fleetMethods[m] {
			nh += d
		}
		if strings.HasPrefix(m, "/flexplane.edge.v1.") {
			ne += d
		}
	}
	per := float64(agents) * took.Seconds()
	return benchmark.Ratio(n, per), benchmark.Ratio(nh, per), benchmark.Ratio(ne, per)
}

// cpuSpent is the CPU time a process used over a while.
type cpuSpent struct{ cpu, took time.Duration }

// cpuOver runs f and returns the CPU time process pid used meanwhile.
func cpuOver(pid int, f func() error) (cpuSpent, error) {
	c0, err := benchmark.CPUTime(pid)
	if err != nil {
		return cpuSpent{}, err
	}
	start := time.Now()
	if err := f(); err != nil {
		return cpuSpent{}, err
	}
	took := time.Since(start)
	c1, err := benchmark.CPUTime(pid)
	if err != nil {
		return cpuSpent{}, err
	}
	return cpuSpent{cpu: c1 - c0, took: took}, nil
}

// settle waits until the orchestrator uses less than a fifth of a CPU over
// half a second (new agents' first netmaps, Info and Health calls done), or
// timeout passes; it returns how long it waited.
func settle(ctx context.Context, pid int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	// poll:own-loop: each pass measures the CPU used over half a second.
	for time.Since(start) < timeout && ctx.Err() == nil {
		c0, err := benchmark.CPUTime(pid)
		if err != nil {
			return 0, err
		}
		time.Sleep(500 * time.Millisecond)
		c1, err := benchmark.CPUTime(pid)
		if err != nil {
			return 0, err
		}
		if c1-c0 < 100*time.Millisecond {
			break
		}
	}
	return time.Since(start), nil
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// waitZones waits until the API shows zones zones, all ONLINE, and hosts
// hosts online.
func waitZones(ctx context.Context, st *benchmark.Stack, zones, hosts int, timeout time.Duration) error {
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var refused error
	err := poll.Context(wait, func() error {
		// Hosts apart from their zones: zone.hosts costs 8 hosts each in
		// the API's complexity, which would refuse some 90 zones and more.
		r, err := st.GraphQL(ctx, benchmark.AdminUser, false, fmt.Sprintf(`{ zones(first: %d) { status } hosts(first: %d) { status } }`, max(32, zones), max(50, hosts)), nil)
		if err == nil {
			var zs, hs []struct{ Status string }
			if err = errors.Join(json.Unmarshal(r.Data["zones"], &zs), json.Unmarshal(r.Data["hosts"], &hs)); err == nil {
				online, hostsOnline := 0, 0
				for _, z := range zs {
					if z.Status == "ONLINE" {
						online++
					}
				}
				for _, h := range hs {
					if h.Status == "ONLINE" {
						hostsOnline++
					}
				}
				if online == zones && len(zs) == zones && hostsOnline == hosts {
					return nil
				}
				err = fmt.Errorf("%d zones (%d online), %d hosts online", len(zs), online, hostsOnline)
			}
		}
		if strings.Contains(err.Error(), "BAD_USER_INPUT") || strings.Contains(err.Error(), "COMPLEXITY_LIMIT_EXCEEDED") {
			refused = err
			cancel()
		}
		return err
	})
	switch {
	case refused != nil:
		return fmt.Errorf("waiting for zones: %w", refused)
	case err != nil:
		return fmt.Errorf("waiting %v for %d zones and %d hosts online: %w", timeout, zones, hosts, err)
	}
	return nil
}

// compare measures q through the API and its floor, alternately.
func compare(ctx context.Context, st *benchmark.Stack, q query, cs []*benchmark.Cluster, zones, hosts int, p params) (benchmark.QueryResult, error) {
	full := func() error {
		r, err := st.GraphQL(ctx, q.user, q.vdc, q.text, nil)
		if err != nil {
			return err
		}
		return q.check(r, zones, hosts)
	}
	floor := func() error {
		n, err := floorAll(ctx, q, cs)
		if err != nil {
			return err
		}
		if q.floorWant != nil && n != q.floorWant(zones, hosts) {
			return fmt.Errorf("floor %s counted %d, want %d", q.name, n, q.floorWant(zones, hosts))
		}
		if n == 0 {
			return fmt.Errorf("floor %s counted nothing", q.name)
		}
		return nil
	}
	raw := func() error { return rawAll(ctx, q.rawPath, cs) }
	// Warm up connections, sessions and caches on every path.
	for range 2 {
		full()
		if err := floor(); err != nil {
			return benchmark.QueryResult{}, err
		}
		if err := raw(); err != nil {
			return benchmark.QueryResult{}, err
		}
	}
	// A failed GraphQL answer (e.g. a zone over its timeout) is counted,
	// not timed; the run goes on.
	var fullD, floorD, rawD []time.Duration
	var failed int
	var firstErr string
	deadline := time.Now().Add(p.budget)
	for i := 0; i < p.samples && (i < 5 || time.Now().Before(deadline)); i++ {
		d, err := timed(full)
		if err != nil {
			failed++
			if firstErr == "" {
				firstErr = err.Error()
			}
		} else {
			fullD = append(fullD, d)
		}
		if d, err = timed(floor); err != nil {
			return benchmark.QueryResult{}, err
		}
		floorD = append(floorD, d)
		if d, err = timed(raw); err != nil {
			return benchmark.QueryResult{}, err
		}
		rawD = append(rawD, d)
	}
	g, f, rf := benchmark.Summarize(fullD), benchmark.Summarize(floorD), benchmark.Summarize(rawD)
	return benchmark.QueryResult{
		Query: q.name, Zones: zones, Hosts: hosts, GraphQL: g, Floor: f, Raw: rf,
		RatioP50: benchmark.Ratio(g.P50, f.P50), RatioP99: benchmark.Ratio(g.P99, f.P99), RawRatioP50: benchmark.Ratio(g.P50, rf.P50),
		FloorCall: q.floorCall, Failed: failed, FirstError: firstErr,
	}, nil
}

// run calls f from clients goroutines for d and returns the latencies.
// The first error ends the run and is returned.
func run(ctx context.Context, clients int, d time.Duration, f func() error) ([]time.Duration, time.Duration, error) {
	ds, took, failed, first := runCounting(ctx, clients, d, f, true)
	if failed > 0 {
		return nil, 0, first
	}
	return ds, took, nil
}

// runCounting calls f from clients goroutines for d and returns the
// latencies of the calls that succeeded, how many failed and the first
// error; stopOnError ends the run at the first error.
func runCounting(ctx context.Context, clients int, d time.Duration, f func() error, stopOnError bool) ([]time.Duration, time.Duration, int, error) {
	var (
		mu     sync.Mutex
		all    []time.Duration
		first  atomic.Value
		failed atomic.Int64
	)
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(end) && ctx.Err() == nil && (!stopOnError || first.Load() == nil) {
				t, err := timed(f)
				if err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err)
					if stopOnError {
						break
					}
					continue
				}
				mine = append(mine, t)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	err, _ := first.Load().(error)
	return all, time.Since(start), int(failed.Load()), err
}

// throughput runs q with concurrent clients, then its floor the same way,
// and measures the orchestrator's CPU time over the GraphQL run.
func throughput(ctx context.Context, st *benchmark.Stack, q query, cs []*benchmark.Cluster, zones int, p params, prof *profiler) (benchmark.Throughput, error) {
	pid := st.OrchestratorPID()
	stop := prof.cpu(ctx, fmt.Sprintf("%s%d-throughput", q.name, zones), p.runFor)
	cpu0, err := benchmark.CPUTime(pid)
	if err != nil {
		return benchmark.Throughput{}, err
	}
	self0 := benchmark.SelfCPUTime()
	// A failed answer (e.g. a zone over its timeout on a loaded machine)
	// is counted, not timed; the run goes on.
	ds, took, failed, firstErr := runCounting(ctx, p.clients, p.runFor, func() error {
		r, err := st.GraphQL(ctx, q.user, q.vdc, q.text, nil)
		if err != nil {
			return err
		}
		return q.check(r, zones, 0)
	}, false)
	if len(ds) == 0 {
		return benchmark.Throughput{}, fmt.Errorf("throughput %s: no request succeeded: %w", q.name, firstErr)
	}
	cpu1, err := benchmark.CPUTime(pid)
	if err != nil {
		return benchmark.Throughput{}, err
	}
	self1 := benchmark.SelfCPUTime()
	if err := stop(); err != nil {
		return benchmark.Throughput{}, err
	}
	fds, ftook, err := run(ctx, p.clients, p.runFor, func() error {
		_, err := floorAll(ctx, q, cs)
		return err
	})
	if err != nil {
		return benchmark.Throughput{}, fmt.Errorf("throughput floor %s: %w", q.name, err)
	}
	n := len(ds)
	lat := benchmark.Summarize(ds)
	perSec := float64(n) / took.Seconds()
	floorPerSec := float64(len(fds)) / ftook.Seconds()
	return benchmark.Throughput{
		Query: q.name, Zones: zones, Clients: p.clients,
		Requests: n, Seconds: benchmark.Ratio(took.Seconds(), 1),
		PerSecond: benchmark.Ratio(perSec, 1), FloorPerSec: benchmark.Ratio(floorPerSec, 1),
		Ratio:           benchmark.Ratio(perSec, floorPerSec),
		OrchestratorCPU: benchmark.Ratio(float64(cpu1-cpu0)/float64(time.Millisecond), float64(n)),
		RestCPU:         benchmark.Ratio(float64(self1-self0)/float64(time.Millisecond), float64(n)),
		P50:             lat.P50, P99: lat.P99,
		Failed: failed, FirstError: errText(firstErr),
	}, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// simRate asks one cluster's /cluster/resources?type=vm over raw HTTPS
// (body read, not decoded) with clients callers for d.
func simRate(ctx context.Context, c *benchmark.Cluster, clients int, d time.Duration) (benchmark.SimRate, error) {
	hc := c.HTTPClient()
	ds, took, err := run(ctx, clients, d, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Sim.URL()+"/api2/json/cluster/resources?type=vm", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", c.AuthHeader())
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("simulator answered %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		return benchmark.SimRate{}, fmt.Errorf("simulator rate: %w", err)
	}
	return benchmark.SimRate{
		Call: "GET /cluster/resources?type=vm (raw HTTPS, one cluster)", Clients: clients,
		PerSecond: benchmark.Ratio(float64(len(ds))/took.Seconds(), 1), P50: benchmark.Summarize(ds).P50,
	}, nil
}

// enrollment runs cmd/agent as a process for a new single-node cluster
// rounds times: process start → host ONLINE in the API, its RSS, then
// SIGKILL → host OFFLINE in the API.
func enrollment(ctx context.Context, st *benchmark.Stack, rounds int, dir string, log *slog.Logger) (*benchmark.Enrollment, *benchmark.ProcessMemory, error) {
	var online, offline []time.Duration
	var mem *benchmark.ProcessMemory
	for i := range rounds {
		name := fmt.Sprintf("enroll%d", i+1)
		c, err := st.AddCluster(ctx, name, 1, 10)
		if err != nil {
			return nil, nil, err
		}
		key, err := st.CreateKey(ctx, meshcontrol.KeyOptions{TTL: time.Hour})
		if err != nil {
			return nil, nil, err
		}
		adir := filepath.Join(dir, name)
		if err := os.MkdirAll(adir, 0o700); err != nil {
			return nil, nil, err
		}
		keyFile, tokenFile := filepath.Join(adir, "key"), filepath.Join(adir, "token")
		if err := os.WriteFile(keyFile, []byte(key), 0o600); err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(tokenFile, []byte(c.Token()), 0o600); err != nil {
			return nil, nil, err
		}
		logFile, err := os.Create(filepath.Join(adir, "agent.log"))
		if err != nil {
			return nil, nil, err
		}
		cmd := exec.Command(st.AgentBinary(),
			"-control-url", st.URL(),
			"-enroll-key-file", keyFile,
			"-state-dir", filepath.Join(adir, "state"),
			"-node", "pve1",
			"-pve-url", c.Sim.NodeURL("pve1"),
			"-pve-token-file", tokenFile,
			"-pve-fingerprint", c.Sim.NodeFingerprint("pve1"),
			"-pve-ssl-key", c.Sim.NodeFiles("pve1").Key,
			"-pve-ssl-cert", c.Sim.NodeFiles("pve1").Cert,
			"-pve-root-ca", c.Sim.NodeFiles("pve1").CA,
			"-log-level", "warn",
		)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		start := time.Now()
		if err := cmd.Start(); err != nil {
			logFile.Close()
			return nil, nil, fmt.Errorf("start agent: %w", err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		kill := func() {
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			logFile.Close()
		}
		if err := waitHost(ctx, st, name, "ONLINE", 60*time.Second, done); err != nil {
			kill()
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		online = append(online, time.Since(start))
		if i == rounds-1 {
			// Let the agent settle (first health checks and proxied calls
			// done), then read its memory.
			for range 5 {
				if _, err := st.GraphQL(ctx, benchmark.AdminUser, false, fmt.Sprintf(`{ zone(name: %q) { capacity { cpus } } }`, name), nil); err != nil {
					kill()
					return nil, nil, err
				}
			}
			m, err := benchmark.ReadMemory(cmd.Process.Pid)
			if err != nil {
				kill()
				return nil, nil, err
			}
			mem = &m
		}
		killed := time.Now()
		kill()
		if err := waitHost(ctx, st, name, "OFFLINE", 60*time.Second, nil); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		offline = append(offline, time.Since(killed))
		log.Info("bench: enrollment round", "round", i+1, "online", online[i].Round(time.Millisecond), "offline", offline[i].Round(time.Millisecond))
	}
	return &benchmark.Enrollment{Rounds: rounds, Online: benchmark.Summarize(online), Offline: benchmark.Summarize(offline)}, mem, nil
}

// waitHost polls the API until the only host of zone has status, or the
// agent process exits (exited closes).
func waitHost(ctx context.Context, st *benchmark.Stack, zone, status string, timeout time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	q := fmt.Sprintf(`{ zone(name: %q) { hosts { status } } }`, zone)
	// poll:own-loop: it measures enrollment and offline detection, at a
	// fixed 20 ms resolution.
	for {
		r, err := st.GraphQL(ctx, benchmark.AdminUser, false, q, nil)
		if err == nil {
			var z struct{ Hosts []struct{ Status string } }
			if json.Unmarshal(r.Data["zone"], &z) == nil && len(z.Hosts) == 1 && z.Hosts[0].Status == status {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("the agent process exited before its host was %s", status)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("host not %s after %v (last error: %v)", status, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// goalOrchestratorMiB is issue 7's 250 MB in MiB.
const goalOrchestratorMiB = 250e6 / (1 << 20)

func goals(rep *benchmark.Report, results map[string]map[int]benchmark.QueryResult, p params) []benchmark.Goal {
	var gs []benchmark.Goal
	if t := rep.Tenant; t != nil && t.Alone.Samples > 0 {
		gs = append(gs, benchmark.Goal{Name: fmt.Sprintf("vms at %d zones amid %d other guests/zone vs alone (p50)", t.Zones, t.OtherGuests), Target: "≤ 1.3×", Measured: t.Ratio, Unit: "×", Pass: t.Ratio <= 1.3})
		gs = append(gs, benchmark.Goal{Name: "idle calls per second per agent from the edge gateways' sync", Target: "≤ 0.05", Measured: t.IdleEdgeCalls, Unit: "calls/s", Pass: t.IdleEdgeCalls <= 0.05})
	}
	cpuGoal := func(measured float64, how string) {
		gs = append(gs, benchmark.Goal{Name: "orchestrator CPU per vms request at 8 zones" + how, Target: "≤ 10 ms", Measured: measured, Unit: "ms", Pass: measured <= 10})
	}
	// The figure of the issue: a VDC of 100 guests per zone amid others
	// (the tenant figure), else the throughput run's.
	if t := rep.Tenant; t != nil && t.Zones == 8 {
		// Gross: subtracting the idle rate measured apart is too noisy on a
		// shared machine (it can exceed the busy rate).
		cpuGoal(t.GrossCPU, fmt.Sprintf(", VDC of %d/zone (gross)", t.VDCGuests))
	} else if i := slices.IndexFunc(rep.Throughput, func(t benchmark.Throughput) bool { return t.Query == "vms" && t.Zones == 8 }); i >= 0 {
		cpuGoal(rep.Throughput[i].OrchestratorCPU, " (throughput run)")
	}
	if r, ok := results["vms"][8]; ok && r.GraphQL.Samples > 0 {
		gs = append(gs, benchmark.Goal{Name: "vms at 8 zones vs floor (p50)", Target: "≤ 1.15×", Measured: r.RatioP50, Unit: "×", Pass: r.RatioP50 <= 1.15})
	}
	for _, s := range rep.Scaling {
		if s.Query == "vms" {
			gs = append(gs, benchmark.Goal{Name: fmt.Sprintf("vms latency(%d)/latency(1) (p50)", s.Zones), Target: "≤ 1.3", Measured: s.GraphQLP50, Unit: "×", Pass: s.GraphQLP50 <= 1.3})
		}
	}
	if z := rep.ZoneSet; z != nil && z.Few.Samples > 0 {
		gs = append(gs,
			benchmark.Goal{Name: fmt.Sprintf("vms of a VDC in %d of %d zones vs a %d-zone deployment (p50)", z.VDCZones, z.Zones, z.VDCZones), Target: "≤ 1.2×", Measured: z.Ratio, Unit: "×", Pass: z.Ratio <= 1.2},
			benchmark.Goal{Name: fmt.Sprintf("Proxy calls per vms request, VDC in %d of %d zones", z.VDCZones, z.Zones), Target: fmt.Sprintf("= %d", z.VDCZones), Measured: z.ProxyCalls, Unit: "calls", Pass: z.ProxyCalls <= float64(z.VDCZones)})
	}
	if e := rep.Enrollment; e != nil {
		gs = append(gs,
			benchmark.Goal{Name: "enrollment (worst round)", Target: "≤ 6 s", Measured: e.Online.Max / 1000, Unit: "s", Pass: e.Online.Max <= 6000},
			benchmark.Goal{Name: "offline detection (worst round)", Target: "≤ 15 s", Measured: e.Offline.Max / 1000, Unit: "s", Pass: e.Offline.Max <= 15000})
	}
	for _, m := range rep.Memory.Orchestrator {
		if m.Agents == 32 {
			gs = append(gs, benchmark.Goal{Name: "orchestrator RSS, 32 agents, " + m.When, Target: "≤ 250 MB (238.4 MiB)", Measured: m.RSS, Unit: "MiB", Pass: m.RSS <= goalOrchestratorMiB})
		}
	}
	_ = p
	return gs
}

func notes(rep *benchmark.Report, p params) []string {
	ns := []string{
		fmt.Sprintf("vms returns the first %d VMs (the API's default complexity limit of 1000 allows no more with these fields); the orchestrator reads, filters and sorts every guest of the VDC's pool in every zone, as the floor reads them all.", vmsPage),
		"Raw floor: the same Proxmox answers the orchestrator reads for the query, fetched over HTTPS from every cluster in parallel and read, not decoded.",
		"Tenant figure: a stack of its own (one host per zone by default); the VDC's guests are in its pool, the others in another tenant's pool, all on the same simulated nodes; the benchmark process, which holds every simulated guest, runs with GOGC 400 meanwhile so that its collections take less CPU from the orchestrator.",
		"All processes (orchestrator, agents, simulators, clients) share the machine's CPUs; at many zones both paths are CPU-bound, so compare ratios, not absolute times.",
		"Latency samples alternate GraphQL and floor; p99 of fewer than 100 samples is close to the maximum.",
		"Scaling: here every zone's simulator and agents run on the same 2 CPUs as the orchestrator, so the work of N zones cannot run in parallel and the floor itself grows with N; graphql/floor isolates what the API adds.",
		"The benchmark process's Go heap in use counts allocated spans whose pages were never written (probably large tsnet/netstack buffers), so it can exceed its RSS.",
		"Orchestrator CPU per request: /proc/PID/stat utime+stime delta over the throughput run divided by requests answered (10 ms resolution). The agents+sims+client figure is getrusage(RUSAGE_SELF) of the benchmark process over the same run.",
	}
	if p.hostsLarge != p.hosts && p.scales[len(p.scales)-1] > 8 {
		ns = append(ns, fmt.Sprintf("Zones beyond the 8th have %d hosts each (not %d): in-process tsnet agents cost memory and start time.", p.hostsLarge, p.hosts))
	}
	for _, t := range rep.Throughput {
		if t.Failed > 0 {
			ns = append(ns, fmt.Sprintf("throughput %s at %d zones: %d answers failed and are neither timed nor counted as requests; first: %.300s", t.Query, t.Zones, t.Failed, t.FirstError))
		}
	}
	for _, q := range rep.Queries {
		if q.Failed > 0 {
			ns = append(ns, fmt.Sprintf("%s at %d zones: %d GraphQL answers failed and are not in the latencies; first: %.300s", q.Query, q.Zones, q.Failed, q.FirstError))
		}
	}
	if !slices.ContainsFunc(rep.Memory.Orchestrator, func(m benchmark.OrchestratorMemory) bool { return m.Agents == 32 }) {
		ns = append(ns, "No scale had exactly 32 agents: the orchestrator memory goal is not judged.")
	}
	return ns
}

// profiler collects profiles (BENCH_PROFILE) of the orchestrator process,
// through its -debug-addr, and of the benchmark process, which runs the
// agents, the simulators and the clients. A nil profiler collects nothing.
type profiler struct {
	st  *benchmark.Stack
	dir string
}

// cpu starts CPU profiles of both processes for about d, written to
// DIR/orchestrator-NAME.cpu.pprof and DIR/agents-NAME.cpu.pprof; stop ends
// the benchmark process's profile and waits for the orchestrator's.
func (pr *profiler) cpu(ctx context.Context, name string, d time.Duration) (stop func() error) {
	if pr == nil {
		return func() error { return nil }
	}
	secs := max(1, int((d+time.Second-1)/time.Second))
	orch := make(chan error, 1)
	go func() {
		orch <- pr.st.OrchestratorProfile(ctx, "profile", "seconds="+strconv.Itoa(secs), filepath.Join(pr.dir, "orchestrator-"+name+".cpu.pprof"))
	}()
	f, err := os.Create(filepath.Join(pr.dir, "agents-"+name+".cpu.pprof"))
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	return func() error {
		if err != nil {
			<-orch
			return fmt.Errorf("profile %s: %w", name, err)
		}
		pprof.StopCPUProfile()
		return errors.Join(f.Close(), <-orch)
	}
}

// heap writes both processes' heap profiles (in use and allocated since
// start) to DIR/orchestrator-NAME.heap.pprof and DIR/agents-NAME.heap.pprof.
func (pr *profiler) heap(ctx context.Context, name string) error {
	if pr == nil {
		return nil
	}
	if err := pr.st.OrchestratorProfile(ctx, "heap", "", filepath.Join(pr.dir, "orchestrator-"+name+".heap.pprof")); err != nil {
		return err
	}
	// The text form ends with the runtime's MemStats (GC count, GC CPU
	// fraction, heap and stack sizes).
	if err := pr.st.OrchestratorProfile(ctx, "heap", "debug=1", filepath.Join(pr.dir, "orchestrator-"+name+".heap.txt")); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(pr.dir, "agents-"+name+".heap.pprof"))
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
