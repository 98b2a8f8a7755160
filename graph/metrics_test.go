package graph_test

import (
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
)

// families is one scrape of metrics, by family name.
type families map[string]*dto.MetricFamily

// value is the sum of the samples (counters, gauges; histograms: their
// count) of family name whose labels include want.
func (f families) value(name string, want map[string]string) float64 {
	var sum float64
	for _, m := range f[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// labelValues is every value of label in family name.
func (f families) labelValues(name, label string) map[string]bool {
	out := map[string]bool{}
	for _, m := range f[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out[l.GetValue()] = true
			}
		}
	}
	return out
}

func (f families) gatherer() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		return slices.Collect(maps.Values(f)), nil
	})
}

// scrape GETs url and parses its Prometheus text.
func scrape(t *testing.T, url string) families {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return fams
}

// lint fails the test for every problem promlint finds in g.
func lint(t *testing.T, what string, g prometheus.Gatherer) {
	t.Helper()
	problems, err := testutil.GatherAndLint(g)
	if err != nil {
		t.Fatalf("lint %s: %v", what, err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s: %s", what, p.Metric, p.Text)
	}
}

// TestMetrics scrapes the orchestrator's metrics address and, through it, an
// agent's metrics (read over the mesh): every family is lint-clean, and
// after known GraphQL operations and a createVM the counters moved by
// exactly those operations; Proxmox paths are templates, never raw ids.
func TestMetrics(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}), meshtest.WithAPI(meshtest.APISpec{}))
	h.WaitOnline(t, 30*time.Second)
	base := "http://" + h.Orchestrator.MetricsAddr().String()
	nets := seedVMs(t, h, "alpha")

	const ops = "flexplane_graphql_operations_total"
	before := scrape(t, base+"/metrics")
	for range 3 {
		h.GraphQL(t, "alice", "red", `query Me { me { name } }`, nil).OK(t)
	}
	if r := h.GraphQL(t, "bob", "red", `query Me { me { name } }`, nil); r.Code(t) != "NOT_FOUND" {
		t.Fatalf("bob in red: %s", r.Raw)
	}
	var created struct{ Operation gqlOp }
	h.GraphQL(t, "bob", "blue", `mutation CreateVM($in: CreateVMInput!) { createVM(input: $in) { operation { id } } }`,
		map[string]any{"in": map[string]any{"name": "m-1", "zone": "alpha", "image": "tiny", "computeProfile": "small",
			"storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": nets["alpha"]}}, "user": "bob"}}).OK(t).Into(t, "createVM", &created)
	after := scrape(t, base+"/metrics")
	for _, c := range []struct {
		labels map[string]string
		delta  float64
	}{
		{map[string]string{"operation": "Me", "type": "query", "code": "OK"}, 3},
		{map[string]string{"operation": "Me", "type": "query", "code": "NOT_FOUND"}, 1},
		{map[string]string{"operation": "CreateVM", "type": "mutation", "code": "OK"}, 1},
		{map[string]string{"operation": "CreateVM", "code": "NOT_FOUND"}, 0},
	} {
		if d := after.value(ops, c.labels) - before.value(ops, c.labels); d != c.delta {
			t.Errorf("%s%v moved by %v, want %v", ops, c.labels, d, c.delta)
		}
	}
	if d := after.value("flexplane_graphql_operation_duration_seconds", map[string]string{"operation": "Me"}) -
		before.value("flexplane_graphql_operation_duration_seconds", map[string]string{"operation": "Me"}); d != 4 {
		t.Errorf("durations of Me observed %v times, want 4", d)
	}
	if after.value(ops, map[string]string{"operation": "anonymous", "type": "mutation"}) == 0 {
		t.Errorf("the seeding's anonymous mutations are not counted as anonymous")
	}
	awaitCreate(t, h, "bob", "blue", created.Operation.ID)

	orch := scrape(t, base+"/metrics")
	lint(t, "orchestrator", h.Orchestrator.Metrics())
	if v := orch.value("flexplane_host_up", map[string]string{"zone": "alpha", "host": "alpha-pve1"}); v != 1 {
		t.Errorf("flexplane_host_up of alpha-pve1 = %v", v)
	}
	if v := orch.value("flexplane_agent_info", map[string]string{"host": "alpha-pve1", "agent_version": "meshtest"}); v != 1 {
		t.Errorf("flexplane_agent_info of alpha-pve1 = %v", v)
	}
	if v := orch.value("flexplane_mesh_peers", map[string]string{"state": "online"}); v != 1 {
		t.Errorf("flexplane_mesh_peers online = %v", v)
	}
	if v := orch.value("flexplane_zone_proxmox_requests_total", map[string]string{"zone": "alpha", "method": "POST"}); v == 0 {
		t.Errorf("no POST fanned out to zone alpha")
	}

	ag := scrape(t, base+"/metrics/agents/alpha-pve1")
	lint(t, "agent", ag.gatherer())
	const reqs = "flexplane_agent_proxmox_requests_total"
	if v := ag.value(reqs, map[string]string{"method": "POST", "path": "/nodes/{node}/qemu/{vmid}/clone", "code": "200"}); v != 1 {
		t.Errorf("%s of the clone = %v, want 1", reqs, v)
	}
	rawID := regexp.MustCompile(`/(\d+|UPID:[^/]*)(/|$)`)
	for p := range ag.labelValues(reqs, "path") {
		if rawID.MatchString(p) || !strings.HasPrefix(p, "/") {
			t.Errorf("%s has path %q: not a template", reqs, p)
		}
	}
	if v := ag.value("flexplane_agent_proxmox_task_duration_seconds", map[string]string{"type": "qmclone", "result": "ok"}); v != 1 {
		t.Errorf("qmclone task durations observed %v times, want 1", v)
	}
	if v := ag.value("flexplane_agent_proxmox_up", nil); v != 1 {
		t.Errorf("flexplane_agent_proxmox_up = %v", v)
	}
	if v := ag.value("flexplane_agent_rpcs_total", map[string]string{"method": "/flexplane.agent.v1.AgentService/Proxy", "code": "OK"}); v < 1 {
		t.Errorf("the Proxy RPCs are not counted")
	}

	resp, err := http.Get(base + "/metrics/agents/nosuch")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown agent's metrics: %d", resp.StatusCode)
	}
}
