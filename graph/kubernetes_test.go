package graph_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flexplane/flexplane/pkg/dev/capitest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider/v1alpha1"
)

// kubeStack is an orchestrator with managed Kubernetes over its own real
// kube-apiserver (Cluster API's CRDs installed from the module; Cluster
// API's controllers and flexplane's providers run by the orchestrator, it
// being the only replica and so the leader) and one simulated zone, with
// a network "lan" in blue and in red. Its storage "local" takes snippets,
// which the agent writes: a worker's cloud-init user-data. The hosted
// control plane is capitest's stand-in, ready at once, unless the stack
// is hosted (newHostedKubeStack).
type kubeStack struct {
	h         *meshtest.Harness
	kc        client.Client
	cp        *capitest.ControlPlane // the stand-in; nil when hosted
	hosted    *capitest.Hosted       // the real control planes' processes; nil with the stand-in
	blue, red string                 // the networks' ids
}

// newKubeStack is a kubeStack with capitest's stand-in control plane.
func newKubeStack(t testing.TB) *kubeStack { return startKubeStack(t, false) }

// createExternal makes the zone's external network of a kubeStack, where the VDCs'
// edge gateways have their addresses (203.0.113.254 is the router, the
// internet namespace of a data plane).
const createExternal = `mutation { createExternalNetwork(input: {zone: "alpha", bridge: "vmbr0", cidr: "203.0.113.0/24",
  gateway: "203.0.113.254", poolStart: "203.0.113.10", poolEnd: "203.0.113.50"}) { zone } }`

// newHostedKubeStack is a kubeStack whose hosted control planes are the
// real ones: the orchestrator's controlplane.Manager installs each
// cluster's flexkube release with Helm, and podrun runs its pods as
// processes (capitest.Hosted supplies the chart values that give each
// cluster its loopback ports, through the orchestrator's
// ControlPlaneValues and TenantAddress).
func newHostedKubeStack(t testing.TB) *kubeStack { return startKubeStack(t, true) }

func startKubeStack(t testing.TB, hosted bool, opts ...meshtest.Option) *kubeStack {
	t.Helper()
	m := capitest.Start(t)
	path := m.Kubeconfig
	s := &kubeStack{kc: m.Client}
	kcfg := orchestrator.ManagedKubernetesConfig{Enabled: true, WorkerImage: "tiny", WorkerDiskGiB: 4, Poll: 250 * time.Millisecond}
	if hosted {
		s.hosted = m.Hosted(t)
		kcfg.ControlPlaneValues, kcfg.TenantAddress = s.hosted.Values, s.hosted.TenantAddress
	} else {
		s.cp = m.ControlPlane
		kcfg.ControlPlane = s.cp
	}
	api := meshtest.APISpec{Kube: orchestrator.KubeConfig{Kubeconfig: path, Namespace: "flexplane"}, Kubernetes: kcfg}
	if hosted {
		// alice's token claims vera's email address (a user may set any):
		// the kubeconfigs the hosted tests check name each by her subject.
		api.Users = meshtest.DefaultUsers()
		for i, u := range api.Users {
			if u.Username == "alice" || u.Username == "vera" {
				api.Users[i].Email = "vera@example.test"
			}
		}
	}
	s.h = meshtest.New(t, append([]meshtest.Option{meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1, Snippets: true}),
		meshtest.WithAPI(api)}, opts...)...)
	s.h.WaitOnline(t, 30*time.Second)
	s.h.GraphQL(t, "admin", "", createExternal, nil).OK(t)
	url, sum := vmtest.ImageServer(t, 3<<20)
	s.h.GraphQL(t, "admin", "", `mutation($u: String!, $c: String!) {
	  createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name }
	  createStorageProfile(input: {name: "ssd", tier: "ssd", readMBps: 200, writeMBps: 100, pools: [{zone: "alpha", pool: "local-lvm"}]}) { name }
	  createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name }
	  stageImage(name: "tiny", zone: "alpha") { state } }`, map[string]any{"u": url, "c": sum}).OK(t)
	poll.True(t, 2*time.Minute, "image tiny staged in alpha", func() bool {
		var imgs []struct{ Zones []struct{ State string } }
		s.h.GraphQL(t, "admin", "", `{ images { zones(zone: "alpha") { state } } }`, nil).OK(t).Into(t, "images", &imgs)
		return len(imgs) == 1 && len(imgs[0].Zones) == 1 && imgs[0].Zones[0].State == "STAGED"
	})
	for _, c := range []struct {
		user, vdc string
		id        *string
	}{{"bob", "blue", &s.blue}, {"alice", "red", &s.red}} {
		var n struct{ ID string }
		s.h.GraphQL(t, c.user, c.vdc, `mutation { createNetwork(input: {name: "lan", zone: "alpha", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`, nil).
			OK(t).Into(t, "createNetwork", &n)
		*c.id = n.ID
	}
	return s
}

type gqlKubeCluster struct {
	ID, Name, Version, Phase, NetworkID string
	Endpoint                            *string
	ControlPlaneReady                   bool
	ControlPlane                        []struct {
		Name  string
		Ready bool
	}
	NodePools []gqlNodePool
}

type gqlNodePool struct {
	ID, Name, ComputeProfile    string
	Size, Workers, ReadyWorkers int
	Version                     string
	UpToDateWorkers             int
	Labels                      []struct{ Key, Value string }
	Taints                      []struct{ Key, Value, Effect string }
}

const (
	kubeClusterFields = `id name version phase networkId endpoint controlPlaneReady controlPlane { name ready } nodePools { ` + nodePoolFields + ` }`
	nodePoolFields    = `id name computeProfile size workers readyWorkers version upToDateWorkers labels { key value } taints { key value effect }`
)

// workerVMs returns the names and statuses of vdc's VMs whose name starts
// with prefix.
func (s *kubeStack) workerVMs(t testing.TB, user, vdc, prefix string) map[string]string {
	t.Helper()
	var vms []struct{ Name, Status string }
	s.h.GraphQL(t, user, vdc, `{ vms { name status } }`, nil).OK(t).Into(t, "vms", &vms)
	out := map[string]string{}
	for _, vm := range vms {
		if strings.HasPrefix(vm.Name, prefix) {
			out[vm.Name] = vm.Status
		}
	}
	return out
}

// workerUserData returns the cloud-init user-data Proxmox gives each guest
// whose name starts with prefix (GET .../cloudinit/dump?type=user), by name.
func (s *kubeStack) workerUserData(t testing.TB, prefix string) map[string]string {
	t.Helper()
	px := s.h.Clusters[0].Proxmox(t)
	var rs []struct {
		VMID       int
		Name, Node string
	}
	if err := px.Get(t.Context(), "/cluster/resources?type=vm", &rs); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range rs {
		if !strings.HasPrefix(r.Name, prefix) {
			continue
		}
		var data string
		if err := px.Get(t.Context(), fmt.Sprintf("/nodes/%s/qemu/%d/cloudinit/dump?type=user", r.Node, r.VMID), &data); err != nil {
			t.Fatalf("user-data of %s: %v", r.Name, err)
		}
		out[r.Name] = data
	}
	return out
}

// snippets lists the snippets of storage local in the zone (volids).
func (s *kubeStack) snippets(t testing.TB) []string {
	t.Helper()
	px := s.h.Clusters[0].Proxmox(t)
	var out []string
	for _, node := range s.h.Clusters[0].Sim.NodeNames() {
		var vols []struct{ VolID string }
		if err := px.Get(t.Context(), "/nodes/"+node+"/storage/local/content?content=snippets", &vols); err != nil {
			t.Fatal(err)
		}
		for _, v := range vols {
			out = append(out, v.VolID)
		}
	}
	return out
}

// createCIDRs creates a cluster "ranges" on network $n with the Service
// and Pod ranges $svc and $pod (null: the defaults).
const createCIDRs = `mutation($n: ID!, $svc: String, $pod: String) {
  createKubernetesCluster(input: {name: "ranges", zone: "alpha", version: "v1.37.2", network: $n, serviceCidr: $svc, podCidr: $pod}) { id } }`

// errorOf returns the code and field of the only error of r.
func errorOf(t *testing.T, r *meshtest.GraphQLResponse) (code, field string) {
	t.Helper()
	code = r.Code(t)
	field, _ = r.Errors[0].Extensions["field"].(string)
	return code, field
}

// TestKubernetesThroughGraphQL: a member creates a cluster and a pool of 2
// through GraphQL; Cluster API's controllers, run by the orchestrator,
// drive flexplane's provider into two running worker VMs in the VDC; the
// pool scales 2 → 1 → 5 → 0; bad input (size 11, an unknown profile, the
// network of another VDC, Service and Pod ranges that are no IPv4
// prefixes, out of bounds or overlapping each other or the network) is
// refused with its field and changes nothing; so are a cluster of another
// VDC in the zone while it is dedicated to the member's VDC (which may
// create its own), the pool's scale up and a new pool once the zone is
// dedicated to another VDC (as a zone that does not exist; a scale down
// works, and so does scaling once the zone is dedicated to the member's
// VDC), and a second cluster over the VDC's kubernetesClusters
// quota of 1, which its usage counts; another VDC gets NOT_FOUND for all
// of it; delete leaves no VM, Cluster
// API object or namespace. Each worker's cloud-init user-data, as
// Proxmox gives it, is Cluster API's kubeadm join, in a snippet the
// agent wrote; the snippets go with the VMs.
func TestKubernetesThroughGraphQL(t *testing.T) {
	t.Parallel()
	s := newKubeStack(t)
	h := s.h

	var versions []string
	h.GraphQL(t, "bob", "blue", `{ kubernetesVersions }`, nil).OK(t).Into(t, "kubernetesVersions", &versions)
	if len(versions) == 0 {
		t.Fatal("no Kubernetes version offered")
	}
	// alpha dedicated to blue: blue's member creates its cluster there,
	// red's is refused as for a zone that does not exist, and red has no
	// cluster.
	dedicate := func(to []string) {
		h.GraphQL(t, "admin", "", `mutation($to: [String!]) { updateZone(input: {name: "alpha", dedicatedTo: $to}) { name } }`, map[string]any{"to": to}).OK(t)
	}
	dedicate([]string{"blue"})
	var c gqlKubeCluster
	h.GraphQL(t, "bob", "blue", `mutation($v: String!, $n: ID!) { createKubernetesCluster(input: {name: "dev", zone: "alpha", version: $v, network: $n}) { `+kubeClusterFields+` } }`,
		map[string]any{"v": versions[len(versions)-1], "n": s.blue}).OK(t).Into(t, "createKubernetesCluster", &c)
	if c.Name != "dev" || c.NetworkID != s.blue || c.ID == "" {
		t.Fatalf("created %+v", c)
	}
	r := h.GraphQL(t, "alice", "red", `mutation($n: ID!) { createKubernetesCluster(input: {name: "dev", zone: "alpha", version: "v1.37.2", network: $n}) { id } }`,
		map[string]any{"n": s.red})
	if code, field := errorOf(t, r); code != "BAD_USER_INPUT" || field != "input.zone" {
		t.Errorf("red's cluster in alpha, dedicated to blue: %s", r.Raw)
	}
	// How a zone dedicated to other VDCs is worded: as one that does not exist.
	noZone := strings.TrimPrefix(r.Errors[0].Message, "input.zone: ")
	var redClusters corev1.NamespaceList
	if err := s.kc.List(t.Context(), &redClusters, client.MatchingLabels{v1alpha1.VDCLabel: "red"}); err != nil || len(redClusters.Items) != 0 {
		t.Errorf("red's cluster namespaces after the refusal: %v %v", redClusters.Items, err)
	}
	dedicate([]string{})
	poll.True(t, 2*time.Minute, "the control plane ready and the cluster provisioned", func() bool {
		h.GraphQL(t, "bob", "blue", `query($id: ID!) { kubernetesCluster(id: $id) { `+kubeClusterFields+` } }`, map[string]any{"id": c.ID}).
			OK(t).Into(t, "kubernetesCluster", &c)
		return c.ControlPlaneReady && c.Phase == "PROVISIONED" && c.Endpoint != nil && len(c.ControlPlane) > 0
	})

	var pool gqlNodePool
	h.GraphQL(t, "bob", "blue", `mutation($c: ID!) { createNodePool(input: {cluster: $c, name: "workers", computeProfile: "small", storageProfile: "ssd", size: 2,
	  labels: [{key: "tier", value: "web"}], taints: [{key: "dedicated", value: "web", effect: NO_SCHEDULE}]}) { `+nodePoolFields+` } }`,
		map[string]any{"c": c.ID}).OK(t).Into(t, "createNodePool", &pool)
	if pool.Size != 2 || len(pool.Labels) != 1 || pool.Labels[0].Key != "tier" || len(pool.Taints) != 1 || pool.Taints[0].Effect != "NO_SCHEDULE" {
		t.Fatalf("created pool %+v", pool)
	}
	expectWorkers := func(n int) {
		t.Helper()
		var state string
		poll.True(t, 3*time.Minute, fmt.Sprintf("%d running workers", n), func() bool {
			vms := s.workerVMs(t, "bob", "blue", "dev-workers-")
			running := 0
			for _, st := range vms {
				if st == "RUNNING" {
					running++
				}
			}
			h.GraphQL(t, "bob", "blue", `query($id: ID!) { nodePool(id: $id) { `+nodePoolFields+` } }`, map[string]any{"id": pool.ID}).
				OK(t).Into(t, "nodePool", &pool)
			state = fmt.Sprintf("VMs %v, pool %d/%d ready of %d", vms, pool.ReadyWorkers, pool.Workers, pool.Size)
			return len(vms) == n && running == n && pool.Size == n && pool.Workers == n && pool.ReadyWorkers == n
		})
		t.Logf("%d workers: %s", n, state)
	}
	expectWorkers(2)

	// Each worker's cloud-init user-data is CABPK's kubeadm join of the
	// cluster's endpoint with the pool's labels and taints, in a snippet
	// the agent wrote.
	userData := s.workerUserData(t, "dev-workers-")
	for name, data := range userData {
		for _, want := range []string{"#cloud-config", "kubeadm join", "kind: JoinConfiguration", "apiServerEndpoint: " + *c.Endpoint,
			"tier=web", "key: dedicated", "effect: NoSchedule", "caCertHashes:", "token: "} {
			if !strings.Contains(data, want) {
				t.Errorf("worker %s: cloud-init user-data lacks %q:\n%s", name, want, data)
			}
		}
	}
	if snips := s.snippets(t); len(userData) != 2 || len(snips) != 2 {
		t.Errorf("user-data of %d workers, snippets %v", len(userData), snips)
	}

	// Bad input changes nothing.
	for _, bad := range []struct {
		name, query string
		vars        map[string]any
		code, field string
	}{
		{"pool size 11", `mutation($c: ID!) { createNodePool(input: {cluster: $c, name: "big", computeProfile: "small", storageProfile: "ssd", size: 11}) { id } }`,
			map[string]any{"c": c.ID}, "BAD_USER_INPUT", "input.size"},
		{"unknown compute profile", `mutation($c: ID!) { createNodePool(input: {cluster: $c, name: "odd", computeProfile: "nosuch", storageProfile: "ssd", size: 1}) { id } }`,
			map[string]any{"c": c.ID}, "BAD_USER_INPUT", "input.computeProfile"},
		{"scale to 11", `mutation($p: ID!) { scaleNodePool(id: $p, size: 11) { id } }`, map[string]any{"p": pool.ID}, "BAD_USER_INPUT", "size"},
		{"network of another VDC", `mutation($n: ID!) { createKubernetesCluster(input: {name: "other", zone: "alpha", version: "v1.37.2", network: $n}) { id } }`,
			map[string]any{"n": s.red}, "NOT_FOUND", "input.network"},
		{"unknown version", `mutation($n: ID!) { createKubernetesCluster(input: {name: "old", zone: "alpha", version: "v1.20.0", network: $n}) { id } }`,
			map[string]any{"n": s.blue}, "BAD_USER_INPUT", "input.version"},
		{"upgrade to a version not offered", `mutation($c: ID!) { upgradeKubernetesCluster(id: $c, version: "v1.99.0") { id } }`,
			map[string]any{"c": c.ID}, "BAD_USER_INPUT", "version"},
		{"a service CIDR with host bits", createCIDRs, map[string]any{"n": s.blue, "svc": "10.96.0.1/12"}, "BAD_USER_INPUT", "input.serviceCidr"},
		{"an IPv6 service CIDR", createCIDRs, map[string]any{"n": s.blue, "svc": "fd00::/108"}, "BAD_USER_INPUT", "input.serviceCidr"},
		{"a pod CIDR that is no prefix", createCIDRs, map[string]any{"n": s.blue, "pod": "banana"}, "BAD_USER_INPUT", "input.podCidr"},
		{"a pod CIDR too small for a node each", createCIDRs, map[string]any{"n": s.blue, "pod": "10.244.0.0/24"}, "BAD_USER_INPUT", "input.podCidr"},
		{"a service CIDR too small", createCIDRs, map[string]any{"n": s.blue, "svc": "10.96.0.0/28"}, "BAD_USER_INPUT", "input.serviceCidr"},
		{"overlapping CIDRs", createCIDRs, map[string]any{"n": s.blue, "svc": "10.96.0.0/12", "pod": "10.100.0.0/16"}, "BAD_USER_INPUT", "input.podCidr"},
		{"a service CIDR over the network", createCIDRs, map[string]any{"n": s.blue, "svc": "10.1.0.0/16"}, "BAD_USER_INPUT", "input.serviceCidr"},
		{"a pod CIDR over the network", createCIDRs, map[string]any{"n": s.blue, "pod": "10.0.0.0/12"}, "BAD_USER_INPUT", "input.podCidr"},
	} {
		r := h.GraphQL(t, "bob", "blue", bad.query, bad.vars)
		if code, field := errorOf(t, r); code != bad.code || field != bad.field || r.Errors[0].Message == "" {
			t.Errorf("%s: %s, want %s on %s", bad.name, r.Raw, bad.code, bad.field)
		}
	}
	// blue's kubernetesClusters quota of 1 refuses a second cluster; its
	// usage counts the one it has.
	var blue struct {
		Quotas map[string]any
		Usage  struct{ KubernetesClusters int }
	}
	h.GraphQL(t, "admin", "", `{ vdc(name: "blue") { quotas { vcpus memoryMiB storageGiB vms publicAddresses } } }`, nil).OK(t).Into(t, "vdc", &blue)
	blue.Quotas["kubernetesClusters"] = 1
	h.GraphQL(t, "admin", "", `mutation($q: VDCQuotasInput!) { updateVDC(input: {name: "blue", quotas: $q}) { name } }`, map[string]any{"q": blue.Quotas}).OK(t)
	r = h.GraphQL(t, "bob", "blue", createCIDRs, map[string]any{"n": s.blue})
	if code, field := errorOf(t, r); code != "QUOTA_EXCEEDED" || field != "quotas.kubernetesClusters" {
		t.Errorf("a second cluster over the quota of 1: %s", r.Raw)
	}
	h.GraphQL(t, "bob", "blue", `{ currentVDC { quotas { kubernetesClusters } usage { kubernetesClusters } } }`, nil).OK(t).Into(t, "currentVDC", &blue)
	if blue.Usage.KubernetesClusters != 1 || blue.Quotas["kubernetesClusters"] != float64(1) {
		t.Errorf("blue's quota and usage: %+v", blue)
	}

	var list struct {
		TotalCount int
		Nodes      []gqlKubeCluster
	}
	h.GraphQL(t, "bob", "blue", `{ kubernetesClusters { totalCount nodes { `+kubeClusterFields+` } } }`, nil).OK(t).Into(t, "kubernetesClusters", &list)
	if list.TotalCount != 1 || len(list.Nodes) != 1 || len(list.Nodes[0].NodePools) != 1 || list.Nodes[0].NodePools[0].Size != 2 ||
		list.Nodes[0].NodePools[0].Version != "v1.37.2" || list.Nodes[0].NodePools[0].UpToDateWorkers != 2 {
		t.Errorf("after the refusals: %+v", list)
	}

	// Another VDC sees none of it, and cannot touch it.
	h.GraphQL(t, "alice", "red", `{ kubernetesClusters { totalCount } }`, nil).OK(t).Into(t, "kubernetesClusters", &list)
	if list.TotalCount != 0 {
		t.Errorf("red sees %d clusters", list.TotalCount)
	}
	if vms := s.workerVMs(t, "alice", "red", "dev-"); len(vms) != 0 {
		t.Errorf("red sees workers %v", vms)
	}
	for _, q := range []string{
		`query($c: ID!) { kubernetesCluster(id: $c) { id } }`,
		`query($p: ID!) { nodePool(id: $p) { id } }`,
		`mutation($p: ID!) { scaleNodePool(id: $p, size: 0) { id } }`,
		`mutation($c: ID!) { createNodePool(input: {cluster: $c, name: "x", computeProfile: "small", storageProfile: "ssd", size: 1}) { id } }`,
		`mutation($c: ID!) { issueKubeconfig(cluster: $c) { kubeconfig } }`,
		`mutation($p: ID!) { deleteNodePool(id: $p) { id } }`,
		`mutation($c: ID!) { upgradeKubernetesCluster(id: $c, version: "v1.37.2") { id } }`,
		`mutation($c: ID!) { deleteKubernetesCluster(id: $c) { id } }`,
	} {
		vars := map[string]any{}
		if strings.Contains(q, "$c") {
			vars["c"] = c.ID
		}
		if strings.Contains(q, "$p") {
			vars["p"] = pool.ID
		}
		if r := h.GraphQL(t, "alice", "red", q, vars); r.Code(t) != "NOT_FOUND" {
			t.Errorf("red: %s: %s", q, r.Raw)
		}
	}

	// alpha dedicated to red after blue's pool was made there: no more
	// workers of blue's may go there, refused as createKubernetesCluster
	// refuses the zone and changing nothing: a scale up (the pool still
	// wants 2), a new pool (none made); a scale down places nothing and
	// works. Once alpha is dedicated to blue, blue scales as before.
	dedicate([]string{"red"})
	scale := `mutation($p: ID!, $n: Int!) { scaleNodePool(id: $p, size: $n) { size } }`
	for _, refused := range []struct {
		name, query string
		vars        map[string]any
		field       string
	}{
		{"scale up", scale, map[string]any{"p": pool.ID, "n": 3}, "id"},
		{"a new pool", `mutation($c: ID!) { createNodePool(input: {cluster: $c, name: "more", computeProfile: "small", storageProfile: "ssd", size: 1}) { id } }`,
			map[string]any{"c": c.ID}, "input.cluster"},
	} {
		r := h.GraphQL(t, "bob", "blue", refused.query, refused.vars)
		if code, field := errorOf(t, r); code != "BAD_USER_INPUT" || field != refused.field || r.Errors[0].Message != refused.field+": "+noZone {
			t.Errorf("%s in alpha, dedicated to red: %s, want BAD_USER_INPUT on %s: %s", refused.name, r.Raw, refused.field, noZone)
		}
	}
	var mds clusterv1.MachineDeploymentList
	if err := s.kc.List(t.Context(), &mds, client.InNamespace(c.ID)); err != nil || len(mds.Items) != 1 || *mds.Items[0].Spec.Replicas != 2 {
		t.Errorf("node pools after the refusals: %v %v", mds.Items, err)
	}
	h.GraphQL(t, "bob", "blue", scale, map[string]any{"p": pool.ID, "n": 1}).OK(t)
	expectWorkers(1)
	dedicate([]string{"blue"})
	for _, n := range []int{5, 0} {
		h.GraphQL(t, "bob", "blue", scale, map[string]any{"p": pool.ID, "n": n}).OK(t)
		expectWorkers(n)
		poll.True(t, time.Minute, fmt.Sprintf("%d snippets", n), func() bool { return len(s.snippets(t)) == n })
	}

	// A member's kubeconfig is the cluster's admin; the stand-in's
	// kubeconfig names the groups it was issued for.
	var kcfg struct {
		Kubeconfig string
		ReadOnly   bool
		ExpiresAt  time.Time
	}
	h.GraphQL(t, "bob", "blue", `mutation($c: ID!) { issueKubeconfig(cluster: $c) { kubeconfig readOnly expiresAt } }`, map[string]any{"c": c.ID}).
		OK(t).Into(t, "issueKubeconfig", &kcfg)
	if kcfg.ReadOnly || !strings.Contains(kcfg.Kubeconfig, "groups: cluster-admin\n") || time.Until(kcfg.ExpiresAt) > 25*time.Hour || time.Until(kcfg.ExpiresAt) < time.Hour {
		t.Errorf("member's kubeconfig: %+v", kcfg)
	}

	h.GraphQL(t, "bob", "blue", `mutation($c: ID!) { deleteKubernetesCluster(id: $c) { id } }`, map[string]any{"c": c.ID}).OK(t)
	poll.True(t, 4*time.Minute, "the cluster, its objects, namespace and VMs gone", func() bool {
		h.GraphQL(t, "bob", "blue", `{ kubernetesClusters { totalCount } }`, nil).OK(t).Into(t, "kubernetesClusters", &list)
		var ms clusterv1.MachineList
		var fms v1alpha1.FlexMachineList
		if err := s.kc.List(t.Context(), &ms); err != nil || len(ms.Items) > 0 {
			return false
		}
		if err := s.kc.List(t.Context(), &fms); err != nil || len(fms.Items) > 0 {
			return false
		}
		err := s.kc.Get(t.Context(), client.ObjectKey{Name: c.ID}, &corev1.Namespace{})
		return list.TotalCount == 0 && len(s.workerVMs(t, "bob", "blue", "dev-")) == 0 && (apierrors.IsNotFound(err) || namespaceTerminating(t, s, c.ID))
	})
	if !s.cp.Deleted(c.ID) {
		t.Error("the control plane was not deleted")
	}
	if r := h.GraphQL(t, "bob", "blue", `query($id: ID!) { kubernetesCluster(id: $id) { id } }`, map[string]any{"id": c.ID}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("the deleted cluster: %s", r.Raw)
	}
}

// namespaceTerminating says whether namespace ns is being deleted with no
// Secret left in it (the API server has no namespace controller: its
// objects are not swept).
func namespaceTerminating(t *testing.T, s *kubeStack, ns string) bool {
	t.Helper()
	n := &corev1.Namespace{}
	if err := s.kc.Get(t.Context(), client.ObjectKey{Name: ns}, n); err != nil {
		return apierrors.IsNotFound(err)
	}
	var secrets corev1.SecretList
	if err := s.kc.List(t.Context(), &secrets, client.InNamespace(ns)); err != nil {
		return false
	}
	return !n.DeletionTimestamp.IsZero() && len(secrets.Items) == 0
}

// TestKubeconfigOfAViewer: a viewer of the VDC reads its clusters and gets
// a read-only kubeconfig, never the admin's, and cannot change anything.
func TestKubeconfigOfAViewer(t *testing.T) {
	t.Parallel()
	s := newKubeStack(t)
	h := s.h
	var c gqlKubeCluster
	h.GraphQL(t, "alice", "red", `mutation($n: ID!) { createKubernetesCluster(input: {name: "ops", zone: "alpha", version: "v1.37.2", network: $n}) { id name } }`,
		map[string]any{"n": s.red}).OK(t).Into(t, "createKubernetesCluster", &c)
	poll.True(t, 2*time.Minute, "the control plane ready", func() bool {
		h.GraphQL(t, "vera", "red", `query($id: ID!) { kubernetesCluster(id: $id) { `+kubeClusterFields+` } }`, map[string]any{"id": c.ID}).
			OK(t).Into(t, "kubernetesCluster", &c)
		return c.ControlPlaneReady
	})
	var kcfg struct {
		Kubeconfig string
		ReadOnly   bool
	}
	h.GraphQL(t, "vera", "red", `mutation($c: ID!) { issueKubeconfig(cluster: $c) { kubeconfig readOnly } }`, map[string]any{"c": c.ID}).
		OK(t).Into(t, "issueKubeconfig", &kcfg)
	if !kcfg.ReadOnly || !strings.Contains(kcfg.Kubeconfig, "groups: view\n") || strings.Contains(kcfg.Kubeconfig, "cluster-admin") {
		t.Errorf("viewer's kubeconfig: %+v", kcfg)
	}
	for _, q := range []string{
		`mutation($c: ID!) { createNodePool(input: {cluster: $c, name: "x", computeProfile: "small", storageProfile: "ssd", size: 1}) { id } }`,
		`mutation($c: ID!) { deleteKubernetesCluster(id: $c) { id } }`,
	} {
		if r := h.GraphQL(t, "vera", "red", q, map[string]any{"c": c.ID}); r.Code(t) != "FORBIDDEN" {
			t.Errorf("viewer: %s: %s", q, r.Raw)
		}
	}
	h.GraphQL(t, "alice", "red", `{ kubernetesClusters { totalCount } }`, nil).OK(t)
}

// TestKubernetesUnavailable: without a management cluster the Kubernetes
// fields answer UNAVAILABLE, and no version is offered. (The shared harness
// has none.)
func TestKubernetesUnavailable(t *testing.T) {
	t.Parallel()
	h, tn := sharedVDCs(t, "kubeless")
	var versions []string
	h.GraphQL(t, tn.bob, tn.blue, `{ kubernetesVersions }`, nil).OK(t).Into(t, "kubernetesVersions", &versions)
	if len(versions) != 0 {
		t.Errorf("versions %v offered", versions)
	}
	for _, q := range []string{`{ kubernetesClusters { totalCount } }`, `mutation { deleteKubernetesCluster(id: "kc-x") { id } }`} {
		if r := h.GraphQL(t, tn.bob, tn.blue, q, nil); r.Code(t) != "UNAVAILABLE" || !strings.Contains(r.Errors[0].Message, "management cluster") {
			t.Errorf("%s: %s", q, r.Raw)
		}
	}
}
