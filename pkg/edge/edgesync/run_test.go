package edgesync_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/edge/edgesync"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
)

// watched is a desired state whose changes are signalled through the
// catalog's notifier, as a store's writes are.
type watched struct {
	desired
	notes catalog.Notifier
}

func (w *watched) change(gws ...edgesync.Desired) {
	w.set(gws...)
	w.notes.Notify()
}

// running runs s (Interval an hour: only changes start passes) until the
// test ends, and counts its passes.
func running(t *testing.T, reg *fleet.Registry, w *watched, changes func(context.Context) <-chan struct{}) (*edgesync.Syncer, *atomic.Int64) {
	t.Helper()
	if changes == nil {
		changes = w.notes.Subscribe
	}
	passes := &atomic.Int64{}
	s := edgesync.New(edgesync.Config{Zones: reg, Desired: w.get, Changes: changes, Interval: time.Hour,
		Passed: func(time.Duration, error) { passes.Add(1) }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, passes
}

// redRunning is a lab whose syncer runs over w's desired state (on the
// catalog watch changes, nil w's own) with red's gateway applied.
func redRunning(t *testing.T, w *watched, changes func(context.Context) <-chan struct{}) (*mesh, fleet.Zone, *edgesync.Syncer, *atomic.Int64) {
	t.Helper()
	reg, m := lab(t)
	z := zone(t, reg)
	w.set(gateway(z.ID, "red", 1))
	s, passes := running(t, reg, w, changes)
	applied(t, m, z, s, []edgesync.Desired{gateway(z.ID, "red", 1)}, 10*time.Second)
	return m, z, s, passes
}

// applied waits until every gateway of want runs at its desired revision on
// the host it is placed on, and on no other host.
func applied(t *testing.T, m *mesh, z fleet.Zone, s *edgesync.Syncer, want []edgesync.Desired, within time.Duration) {
	t.Helper()
	poll.Until(t, within, "the desired gateways applied", func() error {
		runs := map[string]map[string]string{}
		for _, a := range m.agents {
			runs[a.name] = a.running()
		}
		for _, d := range want {
			h, _ := edgesync.Choose(z, d.Gateway.GetVdc())
			rev, ok := runs[h.MeshName][d.Gateway.GetVdc()]
			if !ok {
				return fmt.Errorf("%s does not run %s", h.MeshName, d.Gateway.GetVdc())
			}
			if rev != edgesync.RevisionForTest(t, d.Gateway) {
				return fmt.Errorf("%s runs %s at an old revision", h.MeshName, d.Gateway.GetVdc())
			}
			delete(runs[h.MeshName], d.Gateway.GetVdc())
		}
		for host, rest := range runs {
			if len(rest) > 0 {
				return fmt.Errorf("%s runs %v, not desired there", host, slices.Sorted(maps.Keys(rest)))
			}
		}
		return nil
	})
}

// A change reaches its agent through the catalog's notification, with no
// question to the agents: what they run comes from their streams. A burst of
// 500 changes over 100 gateways is applied without losing any, in far fewer
// passes than changes.
func TestBurstOfChangesAppliedWithoutLoss(t *testing.T) {
	t.Parallel()
	w := &watched{}
	m, z, s, passes := redRunning(t, w, nil)
	// The streams are open once each host's first report is in: then a pass
	// asks no host.
	poll.True(t, 10*time.Second, "every host's stream open", func() bool { return edgesync.StreamsForTest(s) == 3 })
	for _, a := range m.agents {
		a.listed()
	}

	w.change(gateway(z.ID, "red", 2))
	applied(t, m, z, s, []edgesync.Desired{gateway(z.ID, "red", 2)}, 10*time.Second)
	for _, a := range m.agents {
		if n := a.listed(); n != 0 {
			t.Errorf("a change asked %s %d times what it runs; its stream says it", a.name, n)
		}
	}

	before := passes.Load()
	var want []edgesync.Desired
	for i := range 500 {
		// 100 gateways; each changed five times, the last one wins.
		want = nil
		for g := range 100 {
			rules := 1
			if g <= i%100 || i >= 100 {
				rules = 1 + (i+100-g)/100
			}
			want = append(want, gateway(z.ID, fmt.Sprintf("vdc%03d", g), rules))
		}
		w.change(want...)
	}
	applied(t, m, z, s, want, 30*time.Second)
	n := passes.Load() - before
	t.Logf("500 changes applied in %d passes", n)
	if n >= 250 {
		t.Errorf("500 changes made %d passes: triggers are not coalesced", n)
	}
}

// Each change is applied on its agent soon after the catalog signals it;
// the latencies' p50 and p99 are logged (BenchmarkGatewayChange reports
// them; the goal is 1 s p99).
func TestGatewayChangeFollows(t *testing.T) {
	t.Parallel()
	reg, m := lab(t)
	z := zone(t, reg)
	w := &watched{}
	running(t, reg, w, nil)
	lat := changes(t, m, z, w, 1, 20)
	t.Logf("a gateway change applied on its agent: p50 %s, p99 %s over %d changes", pct(lat, 50), pct(lat, 99), len(lat))
}

// changes makes n changes of red's gateway one after another (to from,
// from+1... rules) and returns how long each took to run on its host.
func changes(t testing.TB, m *mesh, z fleet.Zone, w *watched, from, n int) []time.Duration {
	h, _ := edgesync.Choose(z, "red")
	a := m.agent(h.MeshName)
	var lat []time.Duration
	for i := range n {
		gw := gateway(z.ID, "red", from+i)
		rev := edgesync.RevisionForTest(t, gw.Gateway)
		began := time.Now()
		w.change(gw)
		// poll:own-loop: it measures the latency at a 1 ms resolution.
		for a.running()["red"] != rev {
			if time.Since(began) > 10*time.Second {
				t.Fatalf("change %d not applied on %s within 10s", i, h.MeshName)
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(began))
	}
	return lat
}

func pct(d []time.Duration, p int) time.Duration {
	d = slices.Clone(d)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[min(len(d)-1, len(d)*p/100)]
}

// BenchmarkGatewayChange reports the time from a catalog change to its
// agent running it: p50 and p99 (goal: 1 s p99).
func BenchmarkGatewayChange(b *testing.B) {
	reg, m := lab(b)
	z := reg.Zones()[0]
	w := &watched{}
	s := edgesync.New(edgesync.Config{Zones: reg, Desired: w.get, Changes: w.notes.Subscribe, Interval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var lat []time.Duration
	for b.Loop() {
		lat = append(lat, changes(b, m, z, w, len(lat)+1, 1)...)
	}
	b.ReportMetric(pct(lat, 50).Seconds()*1000, "p50-ms")
	b.ReportMetric(pct(lat, 99).Seconds()*1000, "p99-ms")
}

// A restarted agent reports what it runs when its stream opens again: a
// node that rebooted (its kernel empty) gets its gateway back with no pass
// of Interval and no change of the catalog.
func TestAgentRestartReportsItsState(t *testing.T) {
	t.Parallel()
	m, z, s, _ := redRunning(t, &watched{}, nil)
	red := []edgesync.Desired{gateway(z.ID, "red", 1)}
	h, _ := edgesync.Choose(z, "red")
	a := m.agent(h.MeshName)
	a.calls()
	// The agent restarts on a rebooted node, faster than the registry
	// notices: only its new stream's report tells.
	a.stop()
	a.run("red", "", false)
	a.start(t)
	applied(t, m, z, s, red, 15*time.Second)
	if got, _ := a.calls(); !slices.Equal(got, []string{"red"}) {
		t.Errorf("the restarted agent was applied %v, want [red]", got)
	}
}

// A catalog watch that breaks (changes may have been missed) makes a full
// pass at once, and the syncer watches again: a change the broken watch never
// signalled is applied, with no pass of Interval.
func TestBrokenWatchResyncs(t *testing.T) {
	t.Parallel()
	w := &watched{}
	var (
		mu    sync.Mutex
		cut   context.CancelFunc // ends the current watch; protected by mu
		taken int                // watches taken; protected by mu
	)
	watch := func(ctx context.Context) <-chan struct{} {
		wctx, cancel := context.WithCancel(ctx)
		mu.Lock()
		cut = cancel
		taken++
		mu.Unlock()
		return w.notes.Subscribe(wctx)
	}
	m, z, s, _ := redRunning(t, w, watch)

	missed := []edgesync.Desired{gateway(z.ID, "red", 2), gateway(z.ID, "blue", 1)}
	w.set(missed...) // no signal: the watch lost it
	mu.Lock()
	cut()
	mu.Unlock()
	applied(t, m, z, s, missed, 10*time.Second)

	poll.True(t, 10*time.Second, "a new watch taken", func() bool { mu.Lock(); defer mu.Unlock(); return taken == 2 })
	again := []edgesync.Desired{gateway(z.ID, "red", 3)}
	w.change(again...)
	applied(t, m, z, s, again, 10*time.Second)
}
