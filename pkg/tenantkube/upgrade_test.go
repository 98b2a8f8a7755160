package tenantkube_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/tenantkube"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider/v1alpha1"
)

// kubelets stands in for the kubelets of the cluster in namespace ns: a
// worker whose VM runs registers a Ready Node named after its host name in
// the cluster (the stand-in's: the test's kube-apiserver), as a worker that
// booted and joined does, with no provider id: the provider sets it, and
// Cluster API counts a worker available only once it found its Node. A
// rolling update waits for that. It stops with ctx.
func kubelets(ctx context.Context, t *testing.T, kc client.Client, ns string) {
	t.Helper()
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var fms v1alpha1.FlexMachineList
			if err := kc.List(ctx, &fms, client.InNamespace(ns)); err == nil {
				for _, fm := range fms.Items {
					if fm.Status.VM == "" || slices.Contains(seen, fm.Name) {
						continue
					}
					if err := registerNode(ctx, kc, fm.Name); err != nil {
						if ctx.Err() == nil {
							t.Errorf("node %s: %v", fm.Name, err)
						}
						continue
					}
					seen = append(seen, fm.Name)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		<-done
		for _, name := range seen {
			_ = kc.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	})
}

// registerNode creates a Ready Node name, as a kubelet does.
func registerNode(ctx context.Context, kc client.Client, name string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := kc.Create(ctx, n); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := kc.Get(ctx, client.ObjectKeyFromObject(n), n); err != nil {
		return err
	}
	before := n.DeepCopy()
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	for _, c := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c, Status: corev1.ConditionFalse, Reason: "KubeletHasNo" + string(c)})
	}
	for i := range n.Status.Conditions {
		n.Status.Conditions[i].LastHeartbeatTime, n.Status.Conditions[i].LastTransitionTime = now, now
	}
	// A patch, not an update: the provider sets the Node's provider id meanwhile.
	return kc.Status().Patch(ctx, n, client.MergeFrom(before))
}

// TestUpgrade: a cluster moves one minor version: its control plane first,
// then its pool's workers, replaced one by one by workers of the new version
// (new VMs, none left of the old), through Cluster API's rolling update.
// Downgrades, skipping a minor version, a second upgrade while one runs
// and an upgrade whose new workers' zone was dedicated to another VDC are
// refused and change nothing; asking for the version it has is a no-op.
//
// It runs before the parallel tests, as its controllers watch every
// namespace, and leaves nothing for theirs.
func TestUpgrade(t *testing.T) {
	e := newEnvImages(t, quotas, true, map[string]string{"v1.37.2": "tiny-1-37", "v1.38.0": "tiny-1-38"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := e.svc.CreateKubernetesCluster(ctx, tenantkube.CreateClusterInput{VDC: "blue", Name: "up", Zone: "alpha", Network: e.blue, Version: "v1.36.4"})
	if err != nil {
		t.Fatal(err)
	}
	kctx, stopKubelets := context.WithCancel(ctx)
	defer stopKubelets()
	kubelets(kctx, t, e.kc, c.ID)
	waitFor(t, time.Minute, "the control plane at v1.36.4", func() (bool, string) {
		got, err := e.svc.Cluster(ctx, "blue", c.ID)
		if err != nil {
			return false, err.Error()
		}
		return got.RunningVersion == "v1.36.4", "running " + got.RunningVersion
	})
	if _, err := e.svc.UpgradeKubernetesCluster(ctx, "red", c.ID, "v1.37.2"); kind(err) != tenantkube.KindNotFound {
		t.Errorf("red upgrades blue's cluster: %v, want NOT_FOUND", err)
	}
	pool, err := e.svc.CreateNodePool(ctx, tenantkube.NodePoolInput{VDC: "blue", Cluster: c.ID, Name: "w",
		ComputeProfile: "small", StorageProfile: "ssd", Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	// workersAt waits for n running workers, all of version, and returns their
	// VMs' names (unique, unlike their ids: Proxmox hands a deleted VM's
	// number to the next VM).
	workersAt := func(n int, version string) []string {
		t.Helper()
		var names []string
		waitFor(t, 3*time.Minute, fmt.Sprintf("%d workers at %s", n, version), func() (bool, string) {
			names = nil
			for _, vm := range e.workers(t, "blue", "up-w-") {
				if vm.Status == compute.StatusRunning {
					names = append(names, vm.Name)
				}
			}
			p, err := e.svc.NodePool(ctx, "blue", pool.ID)
			if err != nil {
				return false, err.Error()
			}
			var ms clusterv1.MachineList
			if err := e.kc.List(ctx, &ms, client.InNamespace(c.ID)); err != nil {
				return false, err.Error()
			}
			at, conds := 0, ""
			for _, m := range ms.Items {
				if m.Spec.Version == version {
					at++
				}
				for _, cd := range m.Status.Conditions {
					if cd.Status != metav1.ConditionTrue {
						conds += fmt.Sprintf(" %s %s=%s %s %s;", m.Name, cd.Type, cd.Status, cd.Reason, cd.Message)
					}
				}
			}
			vms := len(e.workers(t, "blue", "up-w-"))
			return len(names) == n && vms == n && len(ms.Items) == n && at == n && p.Version == version && p.UpToDate == n && p.Ready == n,
				fmt.Sprintf("%d VMs, %d running, %d machines, %d at %s; pool %s, %d up to date, %d ready;%s", vms, len(names), len(ms.Items), at, version, p.Version, p.UpToDate, p.Ready, conds)
		})
		return names
	}
	old := workersAt(2, "v1.36.4")

	for _, tc := range []struct {
		version string
		kind    tenantkube.ErrorKind
	}{
		{"v1.38.0", tenantkube.KindBadInput}, // two minor versions
		{"v1.35.0", tenantkube.KindBadInput}, // not offered
		{"1.37.2", tenantkube.KindBadInput},
	} {
		_, err := e.svc.UpgradeKubernetesCluster(ctx, "blue", c.ID, tc.version)
		var te *tenantkube.Error
		if !errors.As(err, &te) || te.Kind != tc.kind || te.Field != "version" {
			t.Errorf("upgrade to %s: %v, want kind %d field version", tc.version, err, tc.kind)
		}
	}
	if got, err := e.svc.UpgradeKubernetesCluster(ctx, "blue", c.ID, "v1.36.4"); err != nil || got.Version != "v1.36.4" {
		t.Errorf("upgrade to the version it has: %+v, %v", got, err)
	}
	// alpha dedicated to red: the upgrade's new workers could not be
	// placed, so it is refused as a zone that does not exist, and the
	// cluster stays at its version.
	undedicate := e.dedicate(t, "red")
	if _, err := e.svc.UpgradeKubernetesCluster(ctx, "blue", c.ID, "v1.37.2"); kind(err) != tenantkube.KindBadInput || field(err) != "id" || !strings.Contains(err.Error(), `no zone "alpha"`) {
		t.Errorf("upgrade with workers in alpha, dedicated to red: %v, want BAD_INPUT on id", err)
	}
	if got, err := e.svc.Cluster(ctx, "blue", c.ID); err != nil || got.Version != "v1.36.4" {
		t.Errorf("after the refused upgrade: %+v, %v", got, err)
	}
	undedicate()
	got, err := e.svc.UpgradeKubernetesCluster(ctx, "blue", c.ID, "v1.37.2")
	if err != nil || got.Version != "v1.37.2" {
		t.Fatalf("upgrade: %+v, %v", got, err)
	}
	// The workers are still moving: a second upgrade waits for them.
	if _, err := e.svc.UpgradeKubernetesCluster(ctx, "blue", c.ID, "v1.38.0"); kind(err) != tenantkube.KindConflict {
		t.Errorf("a second upgrade while the first runs: %v, want CONFLICT", err)
	}
	upgraded := workersAt(2, "v1.37.2")
	// The new workers are made from v1.37.2's image, the old were v1.36.4's
	// (the default one).
	var fms v1alpha1.FlexMachineList
	if err := e.kc.List(ctx, &fms, client.InNamespace(c.ID)); err != nil {
		t.Fatal(err)
	}
	for _, fm := range fms.Items {
		if fm.Spec.Image != "tiny-1-37" {
			t.Errorf("worker %s of v1.37.2 is made from image %q, want tiny-1-37", fm.Name, fm.Spec.Image)
		}
	}
	if len(fms.Items) != 2 {
		t.Errorf("%d FlexMachines after the upgrade, want 2", len(fms.Items))
	}
	for _, id := range upgraded {
		if slices.Contains(old, id) {
			t.Errorf("worker %s of v1.36.4 still runs after the upgrade (old %v, now %v)", id, old, upgraded)
		}
	}
	if got, err := e.svc.Cluster(ctx, "blue", c.ID); err != nil || got.RunningVersion != "v1.37.2" || got.Version != "v1.37.2" {
		t.Errorf("after the upgrade: %+v, %v", got, err)
	}
	if _, err := e.svc.UpgradeKubernetesCluster(ctx, "blue", c.ID, "v1.36.4"); kind(err) != tenantkube.KindBadInput {
		t.Errorf("a downgrade: %v, want BAD_INPUT", err)
	}
	// v1.38.0's worker image is not in the catalog (any more): refused, and
	// nothing changes.
	if err := catalog.Delete[*catalog.Image](ctx, e.store, "tiny-1-38", ""); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.UpgradeKubernetesCluster(ctx, "blue", c.ID, "v1.38.0")
	if te := (*tenantkube.Error)(nil); !errors.As(err, &te) || te.Kind != tenantkube.KindBadInput || te.Field != "version" || !strings.Contains(te.Message, "tiny-1-38") {
		t.Errorf("an upgrade whose worker image is missing: %v, want BAD_INPUT on version naming the image", err)
	}
	if got, err := e.svc.Cluster(ctx, "blue", c.ID); err != nil || got.Version != "v1.37.2" {
		t.Errorf("after the refused upgrade: %+v, %v", got, err)
	}

	// Nothing of it stays for the parallel tests' controllers.
	stopKubelets()
	if err := e.svc.DeleteKubernetesCluster(ctx, "blue", c.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "the cluster gone", func() (bool, string) {
		var cls clusterv1.ClusterList
		if err := e.kc.List(ctx, &cls, client.InNamespace(c.ID)); err != nil {
			return false, err.Error()
		}
		vms := e.workers(t, "blue", "")
		return len(cls.Items) == 0 && len(vms) == 0, fmt.Sprintf("%d clusters, %d VMs", len(cls.Items), len(vms))
	})
	_ = e.kc.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ID}})
}
