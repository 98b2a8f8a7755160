package controlplane

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/podrun"
)

// BenchmarkControlPlaneReady measures create → control plane ready: Ensure
// (namespace, PKI, Helm install), the rendered containers started as
// processes (podrun) and Status until Ready (etcd, API server, controller
// manager and scheduler all passing their readiness probes). The baseline,
// measured in the same run, is a bare etcd + kube-apiserver pair started
// as kubetest starts it. Reports the medians in seconds and their ratio.
// Run by `make bench` (-benchtime 3x).
func BenchmarkControlPlaneReady(b *testing.B) {
	ports := map[string]processes{}
	m, mgmt := processManager(b, ports)
	ctx := b.Context()
	var baseline, ready []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		bare, err := kubetest.Start(ctx, kubetest.Config{})
		if err != nil {
			b.Fatal(err)
		}
		baseline = append(baseline, time.Since(start))
		_ = bare.Close()

		ns := fmt.Sprintf("kc-bench-%d", i)
		ports[ns] = freePorts(b)
		s := spec(ns, "bench")
		s.Endpoint = ports[ns].endpoint()
		start = time.Now()
		if err := m.Ensure(ctx, s); err != nil {
			b.Fatal(err)
		}
		r, err := podrun.Start(ctx, podrun.Config{Client: mgmt, Namespace: ns, Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		waitReady(ctx, b, m, ns, r)
		ready = append(ready, time.Since(start))
		_ = r.Close()
		if err := m.Delete(ctx, ns); err != nil {
			b.Fatal(err)
		}
		b.Logf("run %d: bare API server %s, hosted control plane ready %s", i,
			baseline[i].Round(time.Millisecond), ready[i].Round(time.Millisecond))
	}
	base, got := median(baseline).Seconds(), median(ready).Seconds()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(base, "bare-apiserver-s")
	b.ReportMetric(got, "control-plane-ready-s")
	b.ReportMetric(got/base, "ready/bare")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
