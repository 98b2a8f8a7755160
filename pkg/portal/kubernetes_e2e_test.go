//go:build !race

// The mesh harness embeds Headscale, whose own data races fail any -race
// run (see the Makefile): the tests of this file run in the plain run only.

package portal_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/capitest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/tenantkube"
)

// TestBrowserKubernetes runs tests/kubernetes.test.mjs against the mesh
// harness (zone alpha with 2 nodes, real agents) whose orchestrator has
// managed Kubernetes over a real kube-apiserver (pkg/dev/kubetest) with
// Cluster API's CRDs and flexplane's providers', Cluster API's own
// controllers and flexplane's provider running in the orchestrator, and
// capitest's stand-in for the hosted control plane (ready at once; the
// real one's pods need pkg/dev/podrun): a member of VDC red creates a
// cluster on red's network "lan" (a bad name refused on its field), sees
// its control plane ready, downloads a kubeconfig, creates a node pool of
// 2 (size 11 and a reserved label refused on their fields) and sees 2
// workers ready, scales it to 3 and sees 3; a viewer of red sees them with
// no button to change them and downloads a read-only kubeconfig; the
// member upgrades the cluster v1.36.4 → v1.37.2 and sees the control plane
// and the pool move to it, then deletes the pool and the cluster. Checked here: the kubeconfigs
// were the member's cluster-admin one and the viewer's read-only one, and
// afterwards red has no cluster and no worker VM left.
func TestBrowserKubernetes(t *testing.T) {
	t.Parallel()
	root, public := browserPrerequisites(t)
	begin := time.Now()
	m := capitest.Start(t)
	kubeconfig, cp := m.Kubeconfig, m.ControlPlane
	t.Logf("kube-apiserver with Cluster API's CRDs up in %s", time.Since(begin).Round(time.Millisecond))

	h, issuer := portalMesh(t, public, slog.DiscardHandler,
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2, Snippets: true}),
		meshtest.WithAPI(meshtest.APISpec{Users: redUsers(),
			Kube: orchestrator.KubeConfig{Kubeconfig: kubeconfig},
			Kubernetes: orchestrator.ManagedKubernetesConfig{Enabled: true, WorkerImage: "tiny", WorkerDiskGiB: 4, Versions: []string{"v1.36.4", "v1.37.2"},
				Poll: 250 * time.Millisecond, ControlPlane: cp}}),
	)
	h.WaitOnline(t, 30*time.Second)
	image, sum := vmtest.ImageServer(t, 1<<20)
	h.GraphQL(t, "admin", "", `mutation($u: String!, $c: String!) {
	  createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name }
	  createStorageProfile(input: {name: "ssd", tier: "ssd", pools: [{zone: "alpha", pool: "local-lvm"}]}) { name }
	  createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name } }`,
		map[string]any{"u": image, "c": sum}).OK(t)
	h.GraphQL(t, "alice", "red", `mutation { createNetwork(input: {name: "lan", zone: "alpha", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`, nil).OK(t)
	// The zone's external network: a cluster's workers reach its API server
	// through red's edge gateway, which takes an address of it.
	h.GraphQL(t, "admin", "", `mutation { createExternalNetwork(input: {zone: "alpha", bridge: "vmbr0", cidr: "203.0.113.0/24",
	  gateway: "203.0.113.254", poolStart: "203.0.113.10", poolEnd: "203.0.113.50"}) { zone } }`, nil).OK(t)
	t.Logf("harness up and seeded in %s", time.Since(begin).Round(time.Millisecond))

	artifacts := filepath.Join(root, "test-artifacts", "kubernetes")
	start := browsertest.Run(t, root, 5*time.Minute, redEnv(h, issuer, artifacts), "tests/kubernetes.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "kubernetes", "kubernetes-scaled", "kubernetes-viewer", "kubernetes-upgrading", "kubernetes-deleted")
	t.Logf("browser done %s after the start", time.Since(begin).Round(time.Millisecond))

	// The kubeconfigs the browser saved: the member's binds cluster-admin,
	// the viewer's the read-only group, each for its own user.
	for file, want := range map[string][]string{
		"kubeconfig-member": {"alice\ngroups: " + tenantkube.AdminGroup + "\n"},
		"kubeconfig-viewer": {"vera\ngroups: " + tenantkube.ReadOnlyGroup + "\n"},
	} {
		b, err := os.ReadFile(filepath.Join(artifacts, file))
		if err != nil {
			t.Errorf("the browser saved no %s: %v", file, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s has no %q:\n%s", file, w, b)
			}
		}
	}

	// What the browser did, through the API: red has no cluster, and its
	// workers' VMs go (Cluster API deletes them in the background).
	var clusters struct{ TotalCount int }
	h.GraphQL(t, "alice", "red", `{ kubernetesClusters { totalCount } }`, nil).OK(t).Into(t, "kubernetesClusters", &clusters)
	if clusters.TotalCount != 0 {
		t.Errorf("after the browser: red has %d Kubernetes clusters", clusters.TotalCount)
	}
	poll.Until(t, 90*time.Second, "red's workers gone after the browser deleted its cluster", func() error {
		var vms struct{ TotalCount int }
		h.GraphQL(t, "alice", "red", `{ vmsConnection(first: 1) { totalCount } }`, nil).OK(t).Into(t, "vmsConnection", &vms)
		if vms.TotalCount != 0 {
			return fmt.Errorf("red still has %d VMs", vms.TotalCount)
		}
		return nil
	})
	t.Logf("TestBrowserKubernetes took %s in all", time.Since(begin).Round(time.Millisecond))
}
