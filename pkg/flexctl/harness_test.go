//go:build !race

package flexctl_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/capitest"
	"github.com/flexplane/flexplane/pkg/dev/cmdrun"
	"github.com/flexplane/flexplane/pkg/dev/gobin"
	"github.com/flexplane/flexplane/pkg/dev/lbtest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbsync"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/portal"
)

// stack is a mesh harness (one zone "alpha", of one node by default, the
// API with meshtest's default users, the portal's configuration document
// on the orchestrator's origin, naming flexctl's own client) with a
// catalog of one image ("tiny"), compute profile ("small"), storage
// profile ("ssd") and backup storage profile ("backups"), load balancers pushed to a stand-in flexgateway
// replica of zone alpha (whose backends' health the test sets) with
// addresses from an external network, and flexctl built from this module.
type stack struct {
	h       *meshtest.Harness
	replica *lbtest.Replica
	bin     string
}

// startStack is the harness of TestFlexctlEndToEnd, with managed
// Kubernetes: a management cluster (a real kube-apiserver with Cluster
// API's resources) whose control planes are capitest's stand-in, ready at
// once.
func startStack(t testing.TB) *stack {
	t.Helper()
	m := capitest.Start(t)
	return startStackWith(t, meshtest.APISpec{Kube: orchestrator.KubeConfig{Kubeconfig: m.Kubeconfig, Namespace: "flexplane"},
		Kubernetes: orchestrator.ManagedKubernetesConfig{Enabled: true, WorkerImage: "tiny", WorkerDiskGiB: 4, Poll: 250 * time.Millisecond,
			ControlPlane: m.ControlPlane}}, 1)
}

// startStackWith is startStack with the API of spec (and its load
// balancers) and zone alpha of nodes nodes.
func startStackWith(t testing.TB, spec meshtest.APISpec, nodes int) *stack {
	t.Helper()
	bin := buildFlexctl(t)
	pki := lbtest.NewPKI(t)
	replica := lbtest.NewReplica(t, pki, "lb-token")
	spec.LoadBalancers = orchestrator.LoadBalancersConfig{Tokens: map[string]string{"alpha": "lb-token"}, TLS: pki.Client,
		Zones: map[string]lbsync.Zone{"alpha": {Replicas: []string{replica.URL}}}}
	web := &meshtest.LateHandler{}
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: nodes}),
		meshtest.WithAPI(spec), meshtest.WithHandler(web))
	p, err := portal.New(portal.Config{Issuer: h.IDP(t).Issuer(), ClientID: meshtest.APIClientID, CLIClientID: meshtest.CLIClientID, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	web.Set(p)
	h.WaitOnline(t, 30*time.Second)
	url, sum := vmtest.ImageServer(t, 3<<20)
	h.GraphQL(t, "admin", "", `mutation($u: String!, $c: String!) {
	  createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name }
	  large: createComputeProfile(input: {name: "large", vcpus: 2, memoryMiB: 1024}) { name }
	  createStorageProfile(input: {name: "ssd", tier: "ssd", readMBps: 200, writeMBps: 100, pools: [{zone: "alpha", pool: "local-lvm"}]}) { name }
	  backups: createStorageProfile(input: {name: "backups", tier: "backup", kind: BACKUP, pools: [{zone: "alpha", pool: "local"}]}) { name }
	  createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name }
	  createExternalNetwork(input: {zone: "alpha", bridge: "vmbr0", cidr: "203.0.113.0/24", gateway: "203.0.113.254",
	    poolStart: "203.0.113.10", poolEnd: "203.0.113.20"}) { zone } }`,
		map[string]any{"u": url, "c": sum}).OK(t)
	return &stack{h: h, replica: replica, bin: bin}
}

// buildFlexctl builds cmd/flexctl into a temporary directory.
func buildFlexctl(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "flexctl")
	gobin.Build(t, filepath.Join("..", ".."), bin, "./cmd/flexctl")
	return bin
}

// result is what a run of flexctl did.
type result struct {
	stdout, stderr string
	code           int
}

// run runs flexctl with args and the environment env (KEY=VALUE; HOME and
// XDG_CONFIG_HOME are home) and returns what it printed and its exit code.
func (s *stack) run(t testing.TB, home string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = append([]string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "PATH=" + os.Getenv("PATH")}, env...)
	r := cmdrun.Run(t, cmd)
	return result{r.Stdout, r.Stderr, r.Code}
}
