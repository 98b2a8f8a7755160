package tenantkube_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/agenttest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/tenantkube"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider/v1alpha1"
)

// tokenRE finds the bootstrap token in a kubeadm join configuration.
var tokenRE = regexp.MustCompile(`(?m)^\s*token: "?([a-z0-9]{6})\.([a-z0-9]{16})"?$`)

// expectJoin checks that user-data is Cluster API's kubeadm join of
// endpoint, with the pool's labels and taints, and a bootstrap token the
// cluster's API server (the stand-in's: the test's kube-apiserver)
// authenticates as a joining node.
func expectJoin(t *testing.T, vm, userData, endpoint string) {
	t.Helper()
	for _, want := range []string{"#cloud-config", "kubeadm join", "kind: JoinConfiguration", "apiServerEndpoint: " + endpoint,
		"node-labels", "tier=web", "key: dedicated", "effect: NoSchedule", "caCertHashes:",
		// The kubelet asks for its serving certificate.
		"/etc/kubeadm/patches/kubeletconfiguration0+merge.yaml", "serverTLSBootstrap: true", "directory: /etc/kubeadm/patches"} {
		if !strings.Contains(userData, want) {
			t.Errorf("VM %s: cloud-init user-data lacks %q:\n%s", vm, want, userData)
		}
	}
	m := tokenRE.FindStringSubmatch(userData)
	if m == nil {
		t.Fatalf("VM %s: no bootstrap token in its user-data:\n%s", vm, userData)
	}
	cs, err := kubernetes.NewForConfig(kube.RESTConfigFor(m[1] + "." + m[2]))
	if err != nil {
		t.Fatal(err)
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("VM %s: the bootstrap token does not authenticate: %v", vm, err)
	}
	if u := r.Status.UserInfo; u.Username != "system:bootstrap:"+m[1] || !slices.Contains(u.Groups, "system:bootstrappers:kubeadm:default-node-token") {
		t.Errorf("VM %s: the bootstrap token is %+v", vm, u)
	}
}

// snippets counts the snippets on the zone's nodes.
func (e *env) snippets(t *testing.T) int {
	t.Helper()
	n := 0
	for _, node := range e.zone.Sim.NodeNames() {
		n += len(agenttest.SnippetVolumes(t, e.zone, node))
	}
	return n
}

// TestNodePoolsThroughClusterAPI: a cluster with a pool of 2 becomes two
// worker VMs in the VDC, made by Cluster API's own controllers (core and
// the kubeadm bootstrap provider) driving flexplane's provider: their
// cloud-init user-data, a snippet the agent code wrote on their node, is
// a kubeadm join of the cluster's endpoint with a bootstrap token the
// cluster's API server accepts, and the provider's contract fields are
// set; the pool scales 2 → 5 → 0, taking the snippets with the VMs;
// deleting the cluster leaves no VM, snippet, address, Secret or Cluster
// API object. Another VDC sees none of it.
func TestNodePoolsThroughClusterAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, quotas, true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	c, err := e.svc.CreateKubernetesCluster(ctx, tenantkube.CreateClusterInput{VDC: "blue", Name: "dev", Zone: "alpha", Network: e.blue, Version: "v1.37.2"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "control plane initialized", func() (bool, string) {
		cl := &clusterv1.Cluster{}
		if err := e.kc.Get(ctx, client.ObjectKey{Namespace: c.ID, Name: "dev"}, cl); err != nil {
			return false, err.Error()
		}
		return cl.Status.Initialization.ControlPlaneInitialized != nil && *cl.Status.Initialization.ControlPlaneInitialized &&
			cl.Spec.ControlPlaneEndpoint.Host != "", fmt.Sprintf("%+v endpoint %+v", cl.Status.Initialization, cl.Spec.ControlPlaneEndpoint)
	})
	pool, err := e.svc.CreateNodePool(ctx, tenantkube.NodePoolInput{VDC: "blue", Cluster: c.ID, Name: "workers",
		ComputeProfile: "small", StorageProfile: "ssd", Size: 2, Labels: map[string]string{"tier": "web"},
		Taints: []tenantkube.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}})
	if err != nil {
		t.Fatal(err)
	}
	expectWorkers := func(n int) {
		t.Helper()
		waitFor(t, 90*time.Second, fmt.Sprintf("%d workers", n), func() (bool, string) {
			vms := e.workers(t, "blue", "dev-workers-")
			running := 0
			for _, vm := range vms {
				if vm.Status == compute.StatusRunning {
					running++
				}
			}
			p, err := e.svc.NodePool(ctx, "blue", pool.ID)
			if err != nil {
				return false, err.Error()
			}
			return running == n && len(vms) == n && p.Ready == n && p.Workers == n,
				fmt.Sprintf("%d VMs, %d running, pool %d/%d ready", len(vms), running, p.Ready, p.Workers)
		})
	}
	expectWorkers(2)
	// The pool is a best-effort SPREAD placement group: its two workers
	// are on the zone's two hosts.
	poolGroup := func() *compute.PlacementGroup {
		gs, _, err := e.comp.PlacementGroups().List(ctx, "blue")
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			if g.Name == "k8s-dev-workers" {
				return g
			}
		}
		return nil
	}
	if g := poolGroup(); g == nil || g.Policy != compute.PolicySpread || !g.BestEffort || len(g.VMs) != 2 {
		t.Errorf("the pool's placement group: %+v, want a best-effort SPREAD group of its 2 workers", g)
	}
	if ws := e.workers(t, "blue", "dev-workers-"); len(ws) != 2 || ws[0].Node == ws[1].Node {
		t.Errorf("the pool's two workers on %s and %s, want two hosts", ws[0].Node, ws[1].Node)
	}
	cl := &clusterv1.Cluster{}
	if err := e.kc.Get(ctx, client.ObjectKey{Namespace: c.ID, Name: "dev"}, cl); err != nil {
		t.Fatal(err)
	}
	endpoint := net.JoinHostPort(cl.Spec.ControlPlaneEndpoint.Host, strconv.Itoa(int(cl.Spec.ControlPlaneEndpoint.Port)))
	for _, vm := range e.workers(t, "blue", "dev-workers-") {
		expectJoin(t, vm.Name, agenttest.UserData(t, e.zone, vm.Node, vm.Ref.VMID), endpoint)
		var fm v1alpha1.FlexMachine
		if err := e.kc.Get(ctx, client.ObjectKey{Namespace: c.ID, Name: vm.Name}, &fm); err != nil {
			t.Fatal(err)
		}
		if fm.Spec.ProviderID != capiprovider.ProviderIDPrefix+vm.ID+"/"+vm.Name || fm.Status.FailureDomain != "alpha" ||
			len(fm.Status.Addresses) != 2 || fm.Status.Addresses[1].Address != vm.Addresses[0] {
			t.Errorf("FlexMachine %s: %+v %+v, VM %+v", fm.Name, fm.Spec, fm.Status, vm)
		}
	}
	var machines clusterv1.MachineList
	if err := e.kc.List(ctx, &machines, client.InNamespace(c.ID)); err != nil {
		t.Fatal(err)
	}
	for _, m := range machines.Items {
		if !strings.HasPrefix(m.Spec.ProviderID, capiprovider.ProviderIDPrefix) || m.Status.Phase != string(clusterv1.MachinePhaseProvisioned) {
			t.Errorf("Machine %s: providerID %q phase %s", m.Name, m.Spec.ProviderID, m.Status.Phase)
		}
	}
	got, err := e.svc.Cluster(ctx, "blue", c.ID)
	if err != nil || len(got.Pools) != 1 || got.Pools[0].Size != 2 || got.Pools[0].Labels["tier"] != "web" ||
		len(got.Pools[0].Taints) != 1 || !got.ControlPlaneReady || got.Endpoint != "10.1.0.1:6443" {
		t.Errorf("cluster %+v, %v", got, err)
	}
	// Its API server may reach the workers' network, and only that.
	var fcp v1alpha1.FlexControlPlane
	if err := e.kc.Get(ctx, client.ObjectKey{Namespace: c.ID, Name: "dev"}, &fcp); err != nil {
		t.Fatal(err)
	}
	if n := fcp.Spec.Networks; len(n) != 1 || !netip.MustParsePrefix(n[0]).Contains(netip.MustParseAddr("10.1.0.1")) {
		t.Errorf("the control plane's networks %v, want the workers' network of 10.1.0.1", n)
	}
	// A control plane made before its networks were recorded gets them
	// from its cluster's network.
	recorded := fcp.Spec.Networks
	fcp.Spec.Networks = nil
	if err := e.kc.Update(ctx, &fcp); err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "the control plane's networks recorded again", func() bool {
		var got v1alpha1.FlexControlPlane
		return e.kc.Get(ctx, client.ObjectKeyFromObject(&fcp), &got) == nil && slices.Equal(got.Spec.Networks, recorded)
	})
	// The workers reach it through blue's edge gateway, at a port of their
	// network's gateway address.
	if eps := e.endpoints(t, "blue"); len(eps) != 1 || eps[0].Cluster != c.ID || eps[0].Address != "10.1.0.1" || eps[0].Port != 6443 {
		t.Errorf("blue's gateway's Kubernetes endpoints %+v", eps)
	}

	// Another VDC sees none of it.
	if _, err := e.svc.Cluster(ctx, "red", c.ID); kind(err) != tenantkube.KindNotFound {
		t.Errorf("red reads blue's cluster: %v, want NOT_FOUND", err)
	}
	if _, err := e.svc.ScaleNodePool(ctx, "red", pool.ID, 3); kind(err) != tenantkube.KindNotFound {
		t.Errorf("red scales blue's pool: %v, want NOT_FOUND", err)
	}
	if cs, err := e.svc.Clusters(ctx, "red"); err != nil || len(cs) != 0 {
		t.Errorf("red's clusters: %v, %v", cs, err)
	}
	if vms := e.workers(t, "red", ""); len(vms) != 0 {
		t.Errorf("red's VMs: %v", vms)
	}

	for _, n := range []int{5, 0} {
		if _, err := e.svc.ScaleNodePool(ctx, "blue", pool.ID, n); err != nil {
			t.Fatal(err)
		}
		expectWorkers(n)
		if got := e.snippets(t); got != n {
			t.Errorf("%d workers, %d snippets", n, got)
		}
		if n == 5 {
			// More workers than hosts: the spread is best effort, 3 and 2.
			per := map[string]int{}
			for _, w := range e.workers(t, "blue", "dev-workers-") {
				per[w.Node]++
			}
			if len(per) != 2 || per["pve1"] > 3 || per["pve2"] > 3 {
				t.Errorf("5 workers per host: %v, want 3 and 2", per)
			}
		}
		if n == 0 {
			poll.True(t, time.Minute, "the pool's placement group deleted with its last worker", func() bool { return poolGroup() == nil })
		}
	}
	if _, err := e.svc.ScaleNodePool(ctx, "blue", pool.ID, 1); err != nil {
		t.Fatal(err)
	}
	expectWorkers(1)

	if err := e.svc.DeleteKubernetesCluster(ctx, "blue", c.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "the cluster gone", func() (bool, string) {
		left := 0
		for _, l := range []client.ObjectList{&clusterv1.ClusterList{}, &clusterv1.MachineDeploymentList{}, &clusterv1.MachineSetList{},
			&clusterv1.MachineList{}, &v1alpha1.FlexMachineList{}, &v1alpha1.FlexClusterList{}, &v1alpha1.FlexControlPlaneList{},
			&bootstrapv1.KubeadmConfigList{}} {
			if err := e.kc.List(ctx, l, client.InNamespace(c.ID)); err != nil {
				return false, err.Error()
			}
			left += len(mustItems(l))
		}
		vms := e.workers(t, "blue", "")
		snippets := e.snippets(t)
		return left == 0 && len(vms) == 0 && snippets == 0, fmt.Sprintf("%d objects, %d VMs, %d snippets", left, len(vms), snippets)
	})
	if n, err := e.svc.FinishDeletesOlderThan(ctx, 0); err != nil || n != 1 {
		t.Errorf("finishing the delete: %d, %v", n, err)
	}
	if eps := e.endpoints(t, "blue"); len(eps) != 0 {
		t.Errorf("the deleted cluster's endpoint is kept: %+v", eps)
	}
	ms, err := ipam.Mappings(ctx, e.zone.Client)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if ipam.IsFlexplaneMAC(m.MAC) {
			t.Errorf("address left: %+v", m)
		}
	}
	if !e.cp.Deleted(c.ID) {
		t.Error("the control plane was not deleted")
	}
	if _, err := e.svc.Cluster(ctx, "blue", c.ID); kind(err) != tenantkube.KindNotFound {
		t.Errorf("deleted cluster: %v, want NOT_FOUND", err)
	}
	var secrets corev1.SecretList
	if err := e.kc.List(ctx, &secrets, client.InNamespace(c.ID)); err != nil || len(secrets.Items) != 0 {
		t.Errorf("secrets left: %d, %v", len(secrets.Items), err)
	}
	ns := &corev1.Namespace{}
	if err := e.kc.Get(ctx, client.ObjectKey{Name: c.ID}, ns); err == nil && ns.DeletionTimestamp.IsZero() {
		t.Error("the namespace is not being deleted")
	}
	if cs, err := e.svc.Clusters(ctx, "blue"); err != nil || slices.ContainsFunc(cs, func(o *tenantkube.Cluster) bool { return o.ID == c.ID }) {
		t.Errorf("blue's clusters after delete: %v, %v", cs, err)
	}
}

func kind(err error) tenantkube.ErrorKind {
	var te *tenantkube.Error
	if errors.As(err, &te) {
		return te.Kind
	}
	return -1
}

// field is the field of a *tenantkube.Error ("" for another error).
func field(err error) string {
	var te *tenantkube.Error
	if errors.As(err, &te) {
		return te.Field
	}
	return ""
}

func mustItems(l client.ObjectList) []any {
	switch l := l.(type) {
	case *clusterv1.ClusterList:
		return anys(l.Items)
	case *clusterv1.MachineDeploymentList:
		return anys(l.Items)
	case *clusterv1.MachineSetList:
		return anys(l.Items)
	case *clusterv1.MachineList:
		return anys(l.Items)
	case *v1alpha1.FlexMachineList:
		return anys(l.Items)
	case *v1alpha1.FlexClusterList:
		return anys(l.Items)
	case *v1alpha1.FlexControlPlaneList:
		return anys(l.Items)
	case *bootstrapv1.KubeadmConfigList:
		return anys(l.Items)
	}
	panic(fmt.Sprintf("list %T", l))
}

func anys[T any](s []T) []any {
	out := make([]any, len(s))
	for i := range s {
		out[i] = s[i]
	}
	return out
}

// TestBadInputChangesNothing: a pool of 11, an unknown profile or
// version, a network of another VDC and a pool over the VDC's quota are
// refused with the field at fault, and leave no object behind; so are a
// new pool and a scale up once the cluster's zone is dedicated to another
// VDC, where a scale down still works.
//
// It runs before the parallel tests (whose controllers watch every
// namespace) and leaves its namespace terminating.
func TestBadInputChangesNothing(t *testing.T) {
	e := newEnv(t, catalog.VDCQuotas{VCPUs: 64, MemoryMiB: 1 << 16, StorageGiB: 10000, VMs: 3}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		in    tenantkube.CreateClusterInput
		kind  tenantkube.ErrorKind
		field string
	}{
		{tenantkube.CreateClusterInput{VDC: "blue", Name: "a", Zone: "alpha", Network: e.blue, Version: "v1.20.0"}, tenantkube.KindBadInput, "version"},
		{tenantkube.CreateClusterInput{VDC: "blue", Name: "a", Zone: "alpha", Network: e.red, Version: "v1.37.2"}, tenantkube.KindNotFound, "network"},
		{tenantkube.CreateClusterInput{VDC: "blue", Name: "A_b", Zone: "alpha", Network: e.blue, Version: "v1.37.2"}, tenantkube.KindBadInput, "name"},
	} {
		_, err := e.svc.CreateKubernetesCluster(ctx, tc.in)
		var te *tenantkube.Error
		if !errors.As(err, &te) || te.Kind != tc.kind || te.Field != tc.field {
			t.Errorf("create %+v: %v, want kind %d field %s", tc.in, err, tc.kind, tc.field)
		}
	}
	if cs, err := e.svc.Clusters(ctx, "blue"); err != nil || len(cs) != 0 {
		t.Fatalf("clusters after refused creates: %v, %v", cs, err)
	}
	c, err := e.svc.CreateKubernetesCluster(ctx, tenantkube.CreateClusterInput{VDC: "blue", Name: "bad", Zone: "alpha", Network: e.blue, Version: "v1.37.2"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.kc.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ID}})
	})
	ok := tenantkube.NodePoolInput{VDC: "blue", Cluster: c.ID, Name: "p", ComputeProfile: "small", StorageProfile: "ssd", Size: 2}
	for _, tc := range []struct {
		edit  func(*tenantkube.NodePoolInput)
		kind  tenantkube.ErrorKind
		field string
	}{
		{func(in *tenantkube.NodePoolInput) { in.Size = 11 }, tenantkube.KindBadInput, "size"},
		{func(in *tenantkube.NodePoolInput) { in.Size = -1 }, tenantkube.KindBadInput, "size"},
		{func(in *tenantkube.NodePoolInput) { in.ComputeProfile = "huge" }, tenantkube.KindBadInput, "computeProfile"},
		{func(in *tenantkube.NodePoolInput) { in.StorageProfile = "tape" }, tenantkube.KindBadInput, "storageProfile"},
		{func(in *tenantkube.NodePoolInput) { in.Size = 4 }, tenantkube.KindQuotaExceeded, "size"},
		{func(in *tenantkube.NodePoolInput) { in.VDC = "red" }, tenantkube.KindNotFound, "cluster"},
		{func(in *tenantkube.NodePoolInput) { in.Taints = []tenantkube.Taint{{Key: "k", Effect: "Sometimes"}} }, tenantkube.KindBadInput, "taints"},
	} {
		in := ok
		tc.edit(&in)
		_, err := e.svc.CreateNodePool(ctx, in)
		var te *tenantkube.Error
		if !errors.As(err, &te) || te.Kind != tc.kind || te.Field != tc.field {
			t.Errorf("pool %+v: %v, want kind %d field %s", in, err, tc.kind, tc.field)
		}
	}
	var mds clusterv1.MachineDeploymentList
	if err := e.kc.List(ctx, &mds, client.InNamespace(c.ID)); err != nil || len(mds.Items) != 0 {
		t.Fatalf("pools after refused creates: %d, %v", len(mds.Items), err)
	}
	p, err := e.svc.CreateNodePool(ctx, ok)
	if err != nil {
		t.Fatal(err)
	}
	// 2 wanted (none made: no provider runs here) + 2 more > 3 VMs.
	if _, err := e.svc.ScaleNodePool(ctx, "blue", p.ID, 4); kind(err) != tenantkube.KindQuotaExceeded {
		t.Errorf("scale over the quota: %v", err)
	}
	if _, err := e.svc.ScaleNodePool(ctx, "blue", p.ID, 11); kind(err) != tenantkube.KindBadInput {
		t.Errorf("scale to 11: %v", err)
	}
	if got, err := e.svc.NodePool(ctx, "blue", p.ID); err != nil || got.Size != 2 {
		t.Errorf("pool after refused scales: %+v, %v", got, err)
	}
	// alpha dedicated to red after the pool was made: blue makes no more
	// workers there (bad input on the pool's cluster or id, as a zone that
	// does not exist), but may shrink its pool.
	undedicate := e.dedicate(t, "red")
	in := ok
	in.Name = "q"
	if _, err := e.svc.CreateNodePool(ctx, in); kind(err) != tenantkube.KindBadInput || field(err) != "cluster" || !strings.Contains(err.Error(), `no zone "alpha"`) {
		t.Errorf("a pool in alpha, dedicated to red: %v, want BAD_INPUT on cluster", err)
	}
	if _, err := e.svc.ScaleNodePool(ctx, "blue", p.ID, 3); kind(err) != tenantkube.KindBadInput || field(err) != "id" || !strings.Contains(err.Error(), `no zone "alpha"`) {
		t.Errorf("scale up in alpha, dedicated to red: %v, want BAD_INPUT on id", err)
	}
	if got, err := e.svc.NodePool(ctx, "blue", p.ID); err != nil || got.Size != 2 {
		t.Errorf("pool after the refused scale up: %+v, %v", got, err)
	}
	if got, err := e.svc.ScaleNodePool(ctx, "blue", p.ID, 1); err != nil || got.Size != 1 {
		t.Errorf("scale down in alpha, dedicated to red: %+v, %v", got, err)
	}
	undedicate()
	if _, _, err := e.svc.Kubeconfig(ctx, "red", c.ID, "eve", false); kind(err) != tenantkube.KindNotFound {
		t.Errorf("red's kubeconfig of blue's cluster: %v", err)
	}
	kc, _, err := e.svc.Kubeconfig(ctx, "blue", c.ID, "val", true)
	if err != nil || !strings.Contains(string(kc), "groups: "+tenantkube.ReadOnlyGroup+"\n") {
		t.Errorf("a viewer's kubeconfig: %q, %v", kc, err)
	}
	var nilSvc *tenantkube.Service
	if _, err := nilSvc.Clusters(ctx, "blue"); kind(err) != tenantkube.KindUnavailable {
		t.Errorf("no management cluster: %v", err)
	}
}

// TestClusterEndpoints: a cluster's endpoint is a port of its network's
// gateway address on its VDC's edge gateway in the zone, made with the
// cluster when the VDC has none, within its publicAddresses quota (refused
// over it, changing nothing); a second cluster on the network gets the
// next port; another VDC with the same addresses has a gateway and ports
// of its own; a claim whose cluster never came to be is given back.
//
// It runs before the parallel tests, as TestBadInputChangesNothing.
func TestClusterEndpoints(t *testing.T) {
	none := 0
	q := quotas
	q.PublicAddresses = &none
	e := newEnv(t, q, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	in := tenantkube.CreateClusterInput{VDC: "blue", Name: "one", Zone: "alpha", Network: e.blue, Version: "v1.37.2"}
	if _, err := e.svc.CreateKubernetesCluster(ctx, in); kind(err) != tenantkube.KindQuotaExceeded {
		t.Fatalf("a cluster needing a gateway over the quota: %v", err)
	}
	if has, err := catalog.HasEdgeGateway(ctx, e.store, "blue", "alpha"); err != nil || has {
		t.Fatalf("a refused cluster made a gateway: %v %v", has, err)
	}
	if cs, err := e.svc.Clusters(ctx, "blue"); err != nil || len(cs) != 0 {
		t.Fatalf("clusters after the refused create: %v %v", cs, err)
	}
	for _, vdc := range []string{"blue", "red"} {
		v, err := catalog.Get[*catalog.VDC](ctx, e.store, vdc)
		if err != nil {
			t.Fatal(err)
		}
		one := 1
		v.Quotas.PublicAddresses = &one
		if _, err := catalog.Update(ctx, e.store, v); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for i, c := range []tenantkube.CreateClusterInput{in, {VDC: "blue", Name: "two", Zone: "alpha", Network: e.blue, Version: "v1.37.2"},
		{VDC: "red", Name: "one", Zone: "alpha", Network: e.red, Version: "v1.37.2"}} {
		got, err := e.svc.CreateKubernetesCluster(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got.ID)
		t.Cleanup(func() {
			_ = e.kc.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: got.ID}})
		})
		want := []string{"10.1.0.1:6443", "10.1.0.1:6444", "10.1.0.1:6443"}[i]
		if got.Endpoint != want {
			t.Errorf("cluster %s/%s's endpoint %s, want %s", c.VDC, c.Name, got.Endpoint, want)
		}
	}
	if eps := e.endpoints(t, "blue"); len(eps) != 2 || eps[0].Cluster != ids[0] || eps[1].Cluster != ids[1] {
		t.Errorf("blue's endpoints %+v", eps)
	}
	if eps := e.endpoints(t, "red"); len(eps) != 1 || eps[0].Cluster != ids[2] || eps[0].Port != 6443 {
		t.Errorf("red's endpoints %+v", eps)
	}
	// A create that died after its claim: the claim goes once it is old.
	if _, err := catalog.ClaimKubeEndpoint(ctx, e.store, "blue", "alpha", "blue-ghost", netip.MustParseAddr("10.1.0.1")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.FinishDeletesOlderThan(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if eps := e.endpoints(t, "blue"); len(eps) != 3 {
		t.Errorf("a young claim was given back: %+v", eps)
	}
	if _, err := e.svc.FinishDeletesOlderThan(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if eps := e.endpoints(t, "blue"); len(eps) != 2 || slices.ContainsFunc(eps, func(ep catalog.KubeEndpoint) bool { return ep.Cluster == "blue-ghost" }) {
		t.Errorf("after the ghost's claim aged: %+v", eps)
	}
}
