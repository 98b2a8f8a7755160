package charts

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/flexplane/flexplane/pkg/dev/kubenode"
	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/lbtest"
	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/ociimage"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// runControllers are the kube-controller-manager controllers a chart's pods
// need: Deployments make ReplicaSets make pods, Services get
// EndpointSlices, namespaces their default ServiceAccount, and an
// uninstall's deleted owners take their dependents along.
var runControllers = []string{
	"deployment-controller", "replicaset-controller", "endpointslice-controller",
	"serviceaccount-controller", "garbage-collector-controller",
	"statefulset-controller", "persistentvolume-binder-controller", "namespace-controller",
	"persistentvolumeclaim-protection-controller",
}

// buildFlexgatewayImage builds flexgateway's image as `make
// image-flexgateway` does (the same build flags, ociimage.Flexgateway)
// into dir and returns its tarball, tagged ociimage.FlexgatewayRef (the
// chart's default image).
func buildFlexgatewayImage(ctx context.Context, dir string) ([]string, error) {
	bin := filepath.Join(dir, "flexgateway")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -buildid=", "-o", bin,
		"github.com/flexplane/flexplane/cmd/flexgateway")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build flexgateway: %w\n%s", err, out)
	}
	img, err := ociimage.Build(ociimage.Flexgateway(bin, time.Unix(0, 0)), runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	tarball := filepath.Join(dir, "flexgateway-image.tar")
	return []string{tarball}, ociimage.WriteTarball(tarball, ociimage.FlexgatewayRef, img)
}

// runningCluster is an API server with a scheduler and runControllers, and
// one real node (pkg/dev/kubenode) with images imported.
func runningCluster(t *testing.T, images ...func(ctx context.Context, dir string) ([]string, error)) (*cluster, *kubenode.Node) {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	// The images build while the API server starts.
	built := make([][]string, len(images))
	errs := make([]error, len(images))
	var wg sync.WaitGroup
	for i, build := range images {
		wg.Go(func() { built[i], errs[i] = build(ctx, dir) })
	}
	api, err := kubetest.Start(ctx, kubetest.Config{PodAddress: netns.Address, Controllers: runControllers, Scheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// The control plane's images are large: importing them on a busy
	// machine takes longer than a node's default start allows.
	node, err := kubenode.Start(ctx, kubenode.Config{API: api, Images: slices.Concat(built...), StartTimeout: 4 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := clusterOn(t, api)
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range append(node.Logs(), api.Logs()...) {
				t.Log(kubetest.LogTail(l, 30))
			}
		}
		// A test that failed half-way leaves workloads whose controllers
		// would make again every pod the node's Close deletes.
		ctx := context.WithoutCancel(ctx)
		all := metav1.ListOptions{}
		if nss, err := c.client.CoreV1().Namespaces().List(ctx, all); err == nil {
			for _, ns := range nss.Items {
				apps := c.client.AppsV1()
				_ = apps.Deployments(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
				_ = apps.StatefulSets(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
				_ = apps.ReplicaSets(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
			}
		}
		if err := node.Close(); err != nil {
			t.Error(err)
		}
	})
	untaintReady(t, c, node.Name())
	return c, node
}

// untaintReady does what the node lifecycle controller does for a node
// that turned Ready: it lifts the not-ready taint the API server put on
// the new Node (admission plugin TaintNodesByCondition), which keeps every
// pod without a toleration off it. kubenode.Start returned once the node
// was Ready.
func untaintReady(t *testing.T, c *cluster, name string) {
	t.Helper()
	ctx := t.Context()
	poll.Until(t, 30*time.Second, "node "+name+" untainted", func() error {
		n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		if len(taints) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = taints
		_, err = c.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		if err == nil {
			err = errors.New("updated; checking again")
		}
		return err
	})
}

// podsReady waits until the release's pods (selector) are exactly want,
// each Running and Ready, and returns them.
func (c *cluster) podsReady(ns, selector string, want int, timeout time.Duration) []corev1.Pod {
	c.t.Helper()
	var pods []corev1.Pod
	poll.Until(c.t, timeout, fmt.Sprintf("%d pods %s Running and Ready", want, selector), func() error {
		list, err := c.client.CoreV1().Pods(ns).List(c.t.Context(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		if len(list.Items) != want {
			return fmt.Errorf("%d pods", len(list.Items))
		}
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podReady(&p) {
				return fmt.Errorf("pod %s: phase %s, conditions %v, containers %v", p.Name, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
			}
		}
		pods = list.Items
		return nil
	})
	return pods
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// helmTest runs the release's test hooks, checks each succeeded and
// returns their Pods as the chart rendered them.
func (c *cluster) helmTest(name, ns string) []corev1.Pod {
	c.t.Helper()
	rt := action.NewReleaseTesting(c.helm(ns))
	rt.Namespace, rt.Timeout = ns, 2*time.Minute
	rel, err := rt.Run(name)
	if err != nil {
		c.t.Fatalf("helm test %s: %v", name, err)
	}
	var pods []corev1.Pod
	for _, h := range rel.Hooks {
		if !slices.Contains(h.Events, release.HookTest) {
			continue
		}
		if h.LastRun.Phase != release.HookPhaseSucceeded {
			c.t.Errorf("helm test %s: hook %s %s", name, h.Name, h.LastRun.Phase)
		}
		var p corev1.Pod
		if err := yaml.Unmarshal([]byte(h.Manifest), &p); err != nil || p.Kind != "Pod" {
			c.t.Fatalf("helm test %s: hook %s is no Pod (%v)", name, h.Name, err)
		}
		pods = append(pods, p)
	}
	if len(pods) == 0 {
		c.t.Fatalf("helm test %s: the chart has no test hook", name)
	}
	return pods
}

// gatewayPusher stands for the orchestrator: it pushes a config to every
// replica of the release that has none yet (a replica is Ready only once
// it has one), as lbsync does through the zone's admin Service.
func gatewayPusher(t *testing.T, c *cluster, ns, selector, token string, pki *lbtest.PKI) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	hc := pki.HTTP(t, 5*time.Second)
	go func() {
		defer close(done)
		pushed := map[string]bool{} // pod UIDs
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			list, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err == nil {
				for _, p := range list.Items {
					if pushed[string(p.UID)] || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
						continue
					}
					cl := &lbconfig.Client{BaseURL: "https://" + net.JoinHostPort(p.Status.PodIP, "9443"), Token: token, HTTP: hc}
					if cl.Apply(ctx, lbconfig.Config{Revision: "run-test"}) == nil {
						pushed[string(p.UID)] = true
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// runFlexgateway is TestChartsRun's flexgateway part (TestChartsRun is in
// package charts_test, beside the flexkube part, which needs
// pkg/tenantkube/controlplane): on the cluster of kube with node, the
// chart installed with the image buildFlexgatewayImage built gets every
// pod Ready, passes `helm test`, rolls on an upgrade with no failed
// request through the zone Service, and leaves only its kept Secret on
// uninstall.
func runFlexgateway(t *testing.T, kube *kubetest.Server, nodeName string) {
	c := clusterOn(t, kube)
	ctx := t.Context()
	// The zone's replicas run on the nodes labelled with the zone.
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, nodeName, "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"topology.kubernetes.io/zone":"zone-a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	{
		const ns, rel = "gw-run", "gw"
		const selector = "app.kubernetes.io/instance=" + rel + ",app.kubernetes.io/component=flexgateway"
		if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The admin TLS Secret the operator provides: the replicas'
		// certificate (for "flexgateway") and the CA of the orchestrator's.
		pki := lbtest.NewPKI(t)
		tlsData := map[string][]byte{}
		for k, f := range map[string]string{"tls.crt": pki.Server.CertFile, "tls.key": pki.Server.KeyFile, "ca.crt": pki.Server.CAFile} {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			tlsData[k] = data
		}
		if _, err := c.client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "gw-admin-tls"}, Type: corev1.SecretTypeTLS, Data: tlsData,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		vals := func(logLevel string) map[string]any {
			return map[string]any{
				"image":     map[string]any{"pullPolicy": "Never"},
				"zones":     []any{map[string]any{"name": "zone-a", "replicas": 2}},
				"adminTLS":  map[string]any{"existingSecret": "gw-admin-tls"},
				"logLevel":  logLevel,
				"resources": map[string]any{"requests": map[string]any{"cpu": "10m", "memory": "32Mi"}, "limits": map[string]any{"memory": "256Mi"}},
			}
		}
		c.install(rel, ns, "flexgateway", vals("info"))
		tokens, err := c.client.CoreV1().Secrets(ns).Get(ctx, "gw-flexgateway-admin-tokens", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gatewayPusher(t, c, ns, selector, string(tokens.Data["zone-a"]), pki)
		before := c.podsReady(ns, selector, 2, 2*time.Minute)
		// The test Pod holds the CA only: no key, no token, no service
		// account token.
		for _, p := range c.helmTest(rel, ns) {
			if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
				t.Errorf("test pod %s mounts a service account token", p.Name)
			}
			for _, v := range p.Spec.Volumes {
				if v.Secret == nil || v.Secret.SecretName != "gw-admin-tls" || len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "ca.crt" {
					t.Errorf("test pod %s mounts %+v, want only ca.crt of the admin TLS Secret", p.Name, v)
				}
			}
		}

		// The zone's Service answers /readyz on its ClusterIP while the
		// upgrade rolls the replicas: a new connection per request, so
		// every request is balanced anew.
		svc, err := c.client.CoreV1().Services(ns).Get(ctx, "gw-flexgateway-zone-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		readyz := "https://" + net.JoinHostPort(svc.Spec.ClusterIP, "9443") + "/readyz"
		tr := pki.Transport(t)
		tr.DisableKeepAlives = true
		hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		get := func() error {
			resp, err := hc.Get(readyz)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s", resp.Status)
			}
			return nil
		}
		poll.Until(t, 30*time.Second, "GET "+readyz, get)
		var requests, failed atomic.Int64
		var firstErr atomic.Value
		stop := make(chan struct{})
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			for {
				select {
				case <-stop:
					return
				default:
				}
				requests.Add(1)
				if err := get(); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
		oldRS := replicaSets(t, c, ns, selector)
		c.upgrade(rel, ns, "flexgateway", vals("debug"))
		poll.Until(t, 2*time.Minute, "the rolling update done", func() error {
			d, err := c.client.AppsV1().Deployments(ns).Get(ctx, "gw-flexgateway-zone-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			st := d.Status
			if st.ObservedGeneration != d.Generation || st.UpdatedReplicas != 2 || st.ReadyReplicas != 2 || st.AvailableReplicas != 2 || st.Replicas != 2 {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		})
		after := c.podsReady(ns, selector, 2, time.Minute)
		close(stop)
		<-polled
		t.Logf("%d requests to the Service during the rolling update, %d failed", requests.Load(), failed.Load())
		if n, f := requests.Load(), failed.Load(); f > 0 || n < 10 {
			t.Errorf("during the rolling update %d of %d requests to the Service failed (first: %v), want none of at least 10", f, n, firstErr.Load())
		}
		newRS := replicaSets(t, c, ns, selector)
		if len(oldRS) != 1 || len(newRS) != 2 {
			t.Errorf("ReplicaSets before %v, after %v: want one, then a new one beside it", oldRS, newRS)
		}
		for _, p := range after {
			if slices.ContainsFunc(before, func(b corev1.Pod) bool { return b.UID == p.UID }) {
				t.Errorf("pod %s was not replaced by the upgrade", p.Name)
			}
			if !slices.Contains(p.Spec.Containers[0].Args, `-log-level=debug`) {
				t.Errorf("pod %s runs %v, want -log-level=debug", p.Name, p.Spec.Containers[0].Args)
			}
			if newRS[p.Labels["pod-template-hash"]] != 2 {
				t.Errorf("pod %s is of ReplicaSet %s, want the new one with both replicas (%v)", p.Name, p.Labels["pod-template-hash"], newRS)
			}
		}

		un := action.NewUninstall(c.helm(ns))
		un.Wait, un.Timeout = true, 2*time.Minute
		if _, err := un.Run(rel); err != nil {
			t.Fatalf("uninstall: %v", err)
		}
		poll.Until(t, 2*time.Minute, "nothing of the release left but the kept tokens", func() error {
			pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(pods.Items) > 0 {
				return fmt.Errorf("%d pods left", len(pods.Items))
			}
			if rs := replicaSets(t, c, ns, ""); len(rs) > 0 {
				return fmt.Errorf("ReplicaSets left: %v", rs)
			}
			left := c.objects(ns, rel)
			if _, ok := left["secrets/gw-flexgateway-admin-tokens"]; !ok || len(left) != 1 {
				return fmt.Errorf("left: %v, want only the tokens' Secret (kept)", slices.Sorted(maps.Keys(left)))
			}
			return nil
		})
	}
}

// replicaSets returns the ReplicaSets in ns matching selector: their
// pod-template-hash -> ready replicas.
func replicaSets(t *testing.T, c *cluster, ns, selector string) map[string]int32 {
	t.Helper()
	list, err := c.client.AppsV1().ReplicaSets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, rs := range list.Items {
		out[rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey]] = rs.Status.ReadyReplicas
	}
	return out
}
