package rollout_test

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/agent/selfupdate"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
)

// EnvBenchProbation sets the agents' probation in BenchmarkAgentUpdate
// (a Go duration); default selfupdate.DefaultProbation, what agents use
// unless configured otherwise.
const EnvBenchProbation = "BENCH_UPDATE_PROBATION"

// rollbackGoal is issue 16's goal for a bad release rolled back.
const rollbackGoal = 60 * time.Second

// BenchmarkAgentUpdate times, with real agent processes built at two
// versions under a supervisor like systemd, against the orchestrator's
// production zone refresh (2 s) and rollout poll (500 ms), per host:
//
//   - restart (the baseline): SIGTERM to the agent, as systemctl restart,
//     until the orchestrator has a Health answer of the new process;
//   - update: updateAgents of one host to a good release until the
//     rollout reports the host DONE at the new version;
//   - crash-rollback: updateAgents to a release that exits at start until
//     the rollout halted with the host rolled back and the host is online
//     at the old version;
//   - hang-rollback: the same with a release that runs but never gets
//     healthy (rolled back at the probation's deadline, BENCH_UPDATE_PROBATION).
//
// Each is reported in seconds and as a ratio to the restart of the same
// run (medians over b.N hosts; -benchtime 1x is one host).
func BenchmarkAgentUpdate(b *testing.B) {
	probation := selfupdate.DefaultProbation
	if v := os.Getenv(EnvBenchProbation); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("%s=%q: want a positive duration like 40s", EnvBenchProbation, v)
		}
		probation = d
	}
	bin := b.TempDir()
	v1 := meshtest.BuildAgent(b, bin, "v1.0.0")
	v11 := meshtest.BuildAgent(b, bin, "v1.1.0")
	const badagent = "github.com/flexplane/flexplane/pkg/rollout/testdata/badagent"
	crasher := meshtest.BuildProgram(b, bin, "crasher", badagent, "-X main.version=v1.2.0 -X main.mode=crash")
	hanger := meshtest.BuildProgram(b, bin, "hanger", badagent, "-X main.version=v1.3.0 -X main.mode=hang")

	n := b.N
	k := meshtest.NewReleaseKey(b)
	h := meshtest.New(b, meshtest.WithoutAgents(), meshtest.WithAPI(meshtest.APISpec{}),
		meshtest.WithReleases(k.Public, probation+2*time.Minute), meshtest.WithRefreshInterval(2*time.Second),
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: n}))
	agents := h.StartProcessAgents(b, h.Clusters[0], v1, agent.EnvReleaseKey+"="+k.Public, agent.EnvProbation+"="+probation.String())
	online := func(p *meshtest.ProcessAgent, version string) func() bool {
		return func() bool {
			host, _, ok := h.ProcessHost(p)
			return ok && host.Status == fleet.StatusOnline && host.AgentVersion == version
		}
	}
	for _, p := range agents {
		poll.True(b, 2*time.Minute, p.MeshName+" online at v1.0.0", online(p, "v1.0.0"))
	}
	k.Publish(b, h, v11, "v1.1.0")
	k.Publish(b, h, crasher, "v1.2.0")
	k.Publish(b, h, hanger, "v1.3.0")

	// update runs a rollout of version to p's host and returns how long it
	// took to end and to have the host online at want.
	update := func(p *meshtest.ProcessAgent, version, wantState, want string) time.Duration {
		var id string
		for _, x := range hosts(b, h) {
			if x.Name == p.Node {
				id = x.ID
			}
		}
		start := time.Now()
		var op opJSON
		h.GraphQL(b, "admin", "", `mutation($id: ID!, $v: String!) { updateAgents(input: {version: $v, hosts: [$id]}) { `+opFields+` } }`,
			map[string]any{"id": id, "v": version}).OK(b).Into(b, "updateAgents", &op)
		op = follow(b, h, op.ID, probation+3*time.Minute)
		poll.True(b, time.Minute, p.MeshName+" online at "+want, online(p, want))
		took := time.Since(start)
		if op.State != wantState || len(op.Hosts) != 1 {
			b.Fatalf("rollout of %s: %s %q %+v, want %s", version, op.State, op.Error, op.Hosts, wantState)
		}
		if wantState == "FAILED" && !strings.Contains(op.Hosts[0].Reason, "rolled-back") {
			b.Fatalf("rollout of %s: host %s %q, want rolled back", version, op.Hosts[0].State, op.Hosts[0].Reason)
		}
		return took
	}

	var restarts, updates, crashes, hangs []time.Duration
	b.ResetTimer()
	for i := range n {
		p := agents[i]
		before := time.Now()
		if err := p.Restart(); err != nil {
			b.Fatal(err)
		}
		poll.True(b, 2*time.Minute, p.MeshName+" healthy after a restart", func() bool {
			host, _, ok := h.ProcessHost(p)
			started := p.StartedAt()
			return ok && started.After(before) && host.Status == fleet.StatusOnline && host.LastHealthy.After(started)
		})
		restarts = append(restarts, time.Since(before))
		updates = append(updates, update(p, "v1.1.0", "SUCCEEDED", "v1.1.0"))
		crashes = append(crashes, update(p, "v1.2.0", "FAILED", "v1.1.0"))
		hangs = append(hangs, update(p, "v1.3.0", "FAILED", "v1.1.0"))
		b.Logf("%s: restart %s, update %s, crash rolled back %s, never healthy rolled back %s (probation %s)", p.MeshName,
			restarts[i].Round(time.Millisecond), updates[i].Round(time.Millisecond), crashes[i].Round(time.Millisecond),
			hangs[i].Round(time.Millisecond), probation)
	}
	b.StopTimer()

	base := medianOf(restarts).Seconds()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(base, "restart-s")
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"update", updates}, {"crash-rollback", crashes}, {"hang-rollback", hangs}} {
		s := medianOf(m.ds).Seconds()
		b.ReportMetric(s, m.name+"-s")
		b.ReportMetric(s/base, m.name+"/restart")
	}
	b.ReportMetric(probation.Seconds(), "probation-s")
	for _, m := range []struct {
		name string
		d    time.Duration
	}{{"a release crashing at start", slices.Max(crashes)}, {"a release never healthy", slices.Max(hangs)}} {
		verdict := "pass"
		if m.d >= rollbackGoal {
			verdict = "MISS"
		}
		b.Logf("goal: %s rolled back in under %s: %s (%s)", m.name, rollbackGoal, verdict, m.d.Round(time.Millisecond))
	}
}

func medianOf(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
