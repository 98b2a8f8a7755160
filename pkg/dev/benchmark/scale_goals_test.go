package benchmark_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/benchmark"
)

func TestNewScaleStepIsPerAgent(t *testing.T) {
	t.Parallel()
	// 64 agents over 10 s: 64 ms of CPU, 32 calls, 32 MiB more RSS.
	s := benchmark.NewScaleStep(64, 10, 64, 32, 132, 100)
	if s.IdleCPU != 0.1 || s.IdleCalls != 0.05 || s.RSSPerAgent != 0.5 {
		t.Fatalf("step = %+v, want 0.1 ms/s, 0.05 calls/s and 0.5 MiB per agent", s)
	}
	if z := benchmark.NewScaleStep(0, 10, 64, 32, 132, 100); z.IdleCPU != 0 || z.RSSPerAgent != 0 {
		t.Fatalf("no agents: %+v, want zero rates", z)
	}
}

func TestScaleGoalsJudgeTheLargestStep(t *testing.T) {
	t.Parallel()
	lat := func(p99, maxMS float64) *benchmark.Latencies {
		return &benchmark.Latencies{Samples: 3, P50: p99 / 2, P99: p99, Max: maxMS}
	}
	s := &benchmark.Scale{
		Steps: []benchmark.ScaleStep{
			benchmark.NewScaleStep(64, 10, 1, 1, 101, 100),       // passes everything
			benchmark.NewScaleStep(256, 10, 1024, 512, 400, 100), // misses cpu, calls, rss
		},
		Offline:     lat(3000, 4000),
		Enroll:      lat(1000, 2000),
		VMs:         lat(50, 60),
		ProxyPerVMs: 2,
	}
	got := map[string]benchmark.Goal{}
	for _, g := range benchmark.ScaleGoals(s) {
		for _, key := range []string{"idle calls", "idle cpu", "rss", "gateway change", "zones asked", "offline", "enrollment"} {
			if strings.Contains(g.Name, key) {
				if _, dup := got[key]; dup {
					t.Fatalf("two goals carry %q", key)
				}
				got[key] = g
			}
		}
		if !strings.Contains(g.Name, "256 agents") {
			t.Errorf("goal %q is not judged at the largest step", g.Name)
		}
	}
	want := map[string]struct {
		measured float64
		pass     bool
	}{
		"idle calls":     {0.2, false},
		"idle cpu":       {0.4, false},
		"rss":            {300.0 / 256, false},
		"gateway change": {-1, false}, // not measured
		"zones asked":    {2, true},
		"offline":        {4000, true},
		"enrollment":     {2000, false},
	}
	for key, w := range want {
		g, ok := got[key]
		if !ok {
			t.Errorf("no goal carries %q", key)
			continue
		}
		if g.Pass != w.pass || g.Measured < w.measured-0.001 || g.Measured > w.measured+0.001 {
			t.Errorf("goal %q: measured %v pass %v, want %v %v", g.Name, g.Measured, g.Pass, w.measured, w.pass)
		}
	}
	s.ProxyPerVMs = 3
	for _, g := range benchmark.ScaleGoals(s) {
		if strings.Contains(g.Name, "zones asked") && g.Pass {
			t.Errorf("3 Proxy calls for a VDC in 2 zones pass: %+v", g)
		}
	}

	rep := &benchmark.Report{Scale: s, Goals: benchmark.ScaleGoals(s)}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"256", "gateway change → applied: not measured", "MISS", "pass"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}
