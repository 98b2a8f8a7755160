package graph_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// createVMs creates n VMs name-0..name-(n-1) in red through GraphQL and
// waits until they all run.
func (s *kubeStack) createVMs(b *testing.B, name string, n int) {
	b.Helper()
	for i := range n {
		s.h.GraphQL(b, "alice", "red", createVM, map[string]any{"in": map[string]any{"name": fmt.Sprintf("%s-%d", name, i), "zone": "alpha",
			"image": "tiny", "computeProfile": "small", "storageProfile": "ssd", "diskGiB": 4,
			"nics": []any{map[string]any{"network": s.red}}, "user": "kube"}}).OK(b)
	}
	s.waitRunning(b, "alice", "red", name+"-", n)
}

// waitRunning waits until vdc has n running VMs whose name starts with
// prefix.
func (s *kubeStack) waitRunning(b *testing.B, user, vdc, prefix string, n int) {
	b.Helper()
	poll.True(b, 8*time.Minute, fmt.Sprintf("%d running VMs %s*", n, prefix), func() bool {
		running := 0
		for _, st := range s.workerVMs(b, user, vdc, prefix) {
			if st == "RUNNING" {
				running++
			}
		}
		return running == n
	})
}

// createCluster creates cluster name in blue through GraphQL and returns
// its id once its control plane is ready and Cluster API has provisioned it.
func (s *kubeStack) createCluster(b *testing.B, name string) string {
	b.Helper()
	var c gqlKubeCluster
	s.h.GraphQL(b, "bob", "blue", `mutation($n: ID!, $name: String!) { createKubernetesCluster(input: {name: $name, zone: "alpha", version: "v1.37.2", network: $n}) { id } }`,
		map[string]any{"n": s.blue, "name": name}).OK(b).Into(b, "createKubernetesCluster", &c)
	if s.hosted != nil {
		return s.waitHostedReady(b, "bob", "blue", c.ID, 5*time.Minute).ID
	}
	poll.True(b, 5*time.Minute, "cluster "+name+" ready", func() bool {
		s.h.GraphQL(b, "bob", "blue", `query($id: ID!) { kubernetesCluster(id: $id) { id phase controlPlaneReady } }`, map[string]any{"id": c.ID}).
			OK(b).Into(b, "kubernetesCluster", &c)
		return c.ControlPlaneReady && c.Phase == "PROVISIONED"
	})
	return c.ID
}

// BenchmarkClusterReadyThroughAPI measures createKubernetesCluster
// through GraphQL until the cluster reads controlPlaneReady (its four
// components ready) and PROVISIONED: the orchestrator's Cluster API
// controllers and provider over a real kube-apiserver, its Manager
// installing the flexkube release with Helm, and the real control plane
// (etcd, kube-apiserver, controller manager, scheduler) run as processes
// by podrun until their readiness probes pass. The baseline, in the same
// run: one createVM through GraphQL until the VM runs. Reported: ready-s,
// vm-s and their ratio.
func BenchmarkClusterReadyThroughAPI(b *testing.B) {
	s := newHostedKubeStack(b)
	i := 0
	for b.Loop() {
		start := time.Now()
		s.createVMs(b, fmt.Sprintf("base%d", i), 1)
		vm := time.Since(start)
		start = time.Now()
		s.createCluster(b, fmt.Sprintf("bench%d", i))
		ready := time.Since(start)
		i++
		b.ReportMetric(ready.Seconds(), "ready-s")
		b.ReportMetric(vm.Seconds(), "vm-s")
		b.ReportMetric(ready.Seconds()/vm.Seconds(), "ready/vm")
	}
}

// BenchmarkPoolWorkers0To10ThroughAPI measures scaleNodePool 0 → 10
// through GraphQL until the ten worker VMs run with their bootstrap data
// in place (ten snippets, Cluster API's kubeadm join as their cloud-init
// user-data), against a baseline in the same run: ten createVMs through
// GraphQL until they run. Reported: pool-s, direct-s and their ratio.
func BenchmarkPoolWorkers0To10ThroughAPI(b *testing.B) {
	s := newKubeStack(b)
	id := s.createCluster(b, "bench")
	i := 0
	for b.Loop() {
		start := time.Now()
		s.createVMs(b, fmt.Sprintf("base%d", i), 10)
		direct := time.Since(start)
		var pool gqlNodePool
		name := fmt.Sprintf("w%d", i)
		s.h.GraphQL(b, "bob", "blue", `mutation($c: ID!, $name: String!) { createNodePool(input: {cluster: $c, name: $name, computeProfile: "small", storageProfile: "ssd", size: 0}) { id } }`,
			map[string]any{"c": id, "name": name}).OK(b).Into(b, "createNodePool", &pool)
		start = time.Now()
		s.h.GraphQL(b, "bob", "blue", `mutation($p: ID!) { scaleNodePool(id: $p, size: 10) { size } }`, map[string]any{"p": pool.ID}).OK(b)
		prefix := "bench-" + name + "-"
		s.waitRunning(b, "bob", "blue", prefix, 10)
		poll.True(b, 2*time.Minute, "ten snippets", func() bool { return len(s.snippets(b)) == 10*(i+1) })
		took := time.Since(start)
		for vm, data := range s.workerUserData(b, prefix) {
			if !strings.Contains(data, "kubeadm join") {
				b.Fatalf("worker %s: no kubeadm join in its user-data:\n%s", vm, data)
			}
		}
		i++
		b.ReportMetric(took.Seconds(), "pool-s")
		b.ReportMetric(direct.Seconds(), "direct-s")
		b.ReportMetric(took.Seconds()/direct.Seconds(), "pool/direct")
	}
}
