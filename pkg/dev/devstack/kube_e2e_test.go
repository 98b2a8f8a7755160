package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flexplane/flexplane/pkg/dev/devstack"
	"github.com/flexplane/flexplane/pkg/dev/kubenode"
	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// TestKubeStack: `DEV_KUBE=1 make dev` runs two orchestrator replicas
// behind the stack's one URL on a real kube-apiserver with PostgreSQL.
// Both replicas answer GraphQL with every host ONLINE; the demo VDCs are
// custom resources of the API server; the replica leading the mesh control
// server SIGKILLed, the stack keeps serving through its URL (a client that
// retries once sees no failure), another replica (or the killed one,
// restarted) takes the Lease and every host is ONLINE. The cluster has a
// Ready node on which a pod naming no node is scheduled and runs; the
// stack stopped, none of the node's processes or cgroups is left.
func TestKubeStack(t *testing.T) {
	t.Parallel()
	repo := stackTestRepo(t, "the DEV_KUBE stack")
	tmp := t.TempDir()
	bin := buildStack(t)
	addr, dir := freeAddr(t), filepath.Join(tmp, "dev")
	ctx := t.Context()
	began := time.Now()
	s := startStack(t, bin, repo, addr, dir, "DEV_KUBE=1", "DEV_PVE_TIMING=fast")
	t.Logf("the stack ready %v after its start (its binaries built already)", time.Since(began).Round(time.Second))
	admin := s.client(t, "admin")

	var ks devstack.KubeState
	if b, err := os.ReadFile(filepath.Join(dir, "kube", "kube.json")); err != nil || json.Unmarshal(b, &ks) != nil || len(ks.Replicas) != devstack.Replicas {
		t.Fatalf("kube.json: %s (%v)", b, err)
	}
	status := func() string { out, _ := devstackCommand(t, bin, dir, "status"); return out }
	// The replicas and the API server are inside the stack's namespace:
	// reached from the namespace of a simulator, which stays.
	simPID := pidInStatus(status(), "pvesim fra1")
	if simPID == 0 {
		t.Fatalf("no pvesim fra1 in devstack status:\n%s", status())
	}
	inside := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: netns.DialerOf(simPID)}}
	for name, u := range ks.Replicas {
		c := &devstack.Client{URL: u + "/graphql", Token: admin.Token, HTTPClient: inside}
		poll.Until(t, time.Minute, name+" answering with every host ONLINE", func() error { return allHostsOnline(ctx, c) })
	}

	kcfg, err := clientcmd.BuildConfigFromFlags("", ks.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kcfg.Dial = netns.DialerOf(simPID)
	dyn, err := dynamic.NewForConfig(kcfg)
	if err != nil {
		t.Fatal(err)
	}
	list, err := dyn.Resource(schema.GroupVersionResource{Group: "flexplane.io", Version: "v1alpha1", Resource: "vdcs"}).Namespace("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var vdcs []string
	for _, o := range list.Items {
		vdcs = append(vdcs, o.GetName())
	}
	if slices.Sort(vdcs); !slices.Equal(vdcs, []string{"dev", "prod", "staging"}) {
		t.Fatalf("VDC custom resources %v, want dev, prod, staging", vdcs)
	}

	cs, err := kubernetes.NewForConfig(kcfg)
	if err != nil {
		t.Fatal(err)
	}
	// The cluster has a Ready node; a pod of the locally built test image
	// naming no node is scheduled onto it and runs.
	checkNodeRunsPods(t, cs, ks.Node)

	holder := func() (name string, renewed time.Time) {
		l, err := cs.CoordinationV1().Leases("default").Get(ctx, devstack.LeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
			return "", time.Time{}
		}
		for n, u := range ks.Replicas {
			if u == *l.Spec.HolderIdentity {
				return n, l.Spec.RenewTime.Time
			}
		}
		return "", time.Time{}
	}
	leader, _ := holder()
	pid := pidInStatus(status(), leader)
	if leader == "" || pid == 0 {
		t.Fatalf("leader %q (pid %d); status:\n%s", leader, pid, status())
	}

	// Through the stack's URL during the failover, retrying once (on a new
	// connection, so maybe to the other replica).
	var requests, failed atomic.Int64
	var failures sync.Map
	pctx, stopPolling := context.WithCancel(ctx)
	var pollers sync.WaitGroup
	fresh := &devstack.Client{URL: admin.URL, Token: admin.Token,
		HTTPClient: &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	hosts := func() error { _, err := hostStatus(pctx, fresh); return err }
	pollers.Go(func() {
		// poll:own-loop: a client asking every 200 ms while the
		// orchestrator is killed, counting what fails.
		for pctx.Err() == nil {
			requests.Add(1)
			if err := hosts(); err != nil {
				if err = hosts(); err != nil && pctx.Err() == nil {
					failed.Add(1)
					failures.Store(time.Now(), err.Error())
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var next string
	poll.Until(t, 90*time.Second, "a live replica holding the Lease", func() error {
		n, renewed := holder()
		if p := pidInStatus(status(), n); n == "" || p == 0 || p == pid || renewed.Before(killed) {
			return fmt.Errorf("the Lease is %q's, renewed %v", n, renewed)
		}
		next = n
		resp, err := http.Get("http://" + addr + "/key?v=100") // the control protocol through the front
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New("/key: " + resp.Status)
		}
		return nil
	})
	failover := time.Since(killed)
	stopPolling()
	pollers.Wait()
	t.Logf("%s killed; %s leads %v later; %d requests through the stack's URL meanwhile, %d failed after a retry",
		leader, next, failover.Round(100*time.Millisecond), requests.Load(), failed.Load())
	failures.Range(func(k, v any) bool {
		t.Errorf("request failed at +%v: %v", k.(time.Time).Sub(killed).Round(100*time.Millisecond), v)
		return true
	})
	poll.Until(t, time.Minute, "every host ONLINE through the stack's URL", func() error { return allHostsOnline(ctx, admin) })

	// Stopped, the stack leaves none of the node's processes nor cgroups.
	stopping := time.Now()
	s.stop(t)
	t.Logf("the stack stopped %v after SIGTERM", time.Since(stopping).Round(100*time.Millisecond))
	checkNodeGone(t, ks)
}

// checkNodeRunsPods checks that node is Ready and runs a pod of
// kubenode.TestImage that names no node (the scheduler places it), with
// its service account's token.
func checkNodeRunsPods(t *testing.T, cs kubernetes.Interface, node string) {
	t.Helper()
	ctx := t.Context()
	poll.Until(t, time.Minute, "node "+node+" Ready", func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", n.Status.Conditions)
	})
	grace := int64(2)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "web", Image: kubenode.TestImage, ImagePullPolicy: corev1.PullNever,
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(kubenode.TestImagePort)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	// Admitted once the namespace's default service account exists (the
	// controller makes it at the cluster's start).
	poll.Until(t, time.Minute, "pod hello admitted", func() error {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
	poll.Until(t, 90*time.Second, "pod hello scheduled onto "+node+", Running and Ready", func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Projected != nil }) {
			return errors.New("no service account token projected into the pod")
		}
		if p.Spec.NodeName != node || p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("on node %q, phase %s, conditions %v", p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("not Ready: %v", p.Status.ContainerStatuses)
	})
}

// checkNodeGone checks, once the stack has stopped, that no process of its
// node (containerd, its shims, the kubelet, kube-proxy, CoreDNS: all of
// them name the node's directory) runs and its cgroups are gone.
func checkNodeGone(t *testing.T, ks devstack.KubeState) {
	t.Helper()
	if ks.NodeDir == "" || ks.NodeCgroup == "" {
		t.Fatalf("kube.json names no node directory or cgroup: %+v", ks)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), ks.NodeDir) {
			t.Errorf("process %s of the node outlived the stack: %s", e.Name(), strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	hs, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h.Name(), ks.NodeCgroup)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s of the node in %s outlived the stack (%v)", ks.NodeCgroup, h.Name(), err)
		}
	}
}
