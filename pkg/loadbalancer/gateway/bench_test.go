package gateway

import (
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/benchmark"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// BenchmarkAddedLatency measures the latency flexgateway adds to an HTTP
// request: at a fixed rate (BENCH_LB_RATE requests a second, default 200;
// BENCH_LB_REQUESTS of each kind, default 1000) it alternates a request
// straight to the backend with one through an HTTP listener of a gateway
// to the same backend, each over its own keep-alive connection, and
// reports both p50/p99 and the difference, measured in the same run.
func BenchmarkAddedLatency(b *testing.B) {
	rate, n := envInt("BENCH_LB_RATE", 200), envInt("BENCH_LB_REQUESTS", 1000)
	gw := startGateway(b)
	backend := newHTTPBackend(b, "web")
	addr := freeAddr(b)
	gw.apply(b, lbconfig.Config{Revision: "bench", Balancers: []lbconfig.Balancer{{
		ID: "lb", VDC: "bench",
		Listeners: []lbconfig.Listener{{Name: "http", Protocol: lbconfig.ProtocolHTTP, Address: addr, Pool: "web"}},
		Pools:     []lbconfig.Pool{{Name: "web", Backends: []lbconfig.Backend{{ID: "w", Address: backend.addr}}}},
	}}})
	direct := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	via := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	// Warm both paths' connections.
	for range 20 {
		if _, err := get(direct, "http://"+backend.addr+"/"); err != nil {
			b.Fatal(err)
		}
		if _, err := get(via, "http://"+addr+"/"); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		var d, v []time.Duration
		tick := time.NewTicker(time.Second / time.Duration(rate))
		for i := range 2 * n {
			<-tick.C
			client, url, into := direct, "http://"+backend.addr+"/", &d
			if i%2 == 1 {
				client, url, into = via, "http://"+addr+"/", &v
			}
			start := time.Now()
			if _, err := get(client, url); err != nil {
				b.Fatal(err)
			}
			*into = append(*into, time.Since(start))
		}
		tick.Stop()
		ds, vs := benchmark.Summarize(d), benchmark.Summarize(v)
		b.ReportMetric(ds.P50, "direct-p50-ms")
		b.ReportMetric(ds.P99, "direct-p99-ms")
		b.ReportMetric(vs.P50, "lb-p50-ms")
		b.ReportMetric(vs.P99, "lb-p99-ms")
		b.ReportMetric(vs.P50-ds.P50, "added-p50-ms")
		b.ReportMetric(vs.P99-ds.P99, "added-p99-ms")
		b.ReportMetric(benchmark.Ratio(vs.P50, ds.P50), "p50-ratio")
		b.ReportMetric(benchmark.Ratio(vs.P99, ds.P99), "p99-ratio")
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
