package kubetest

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// pinnedVersion reads the k8s.io/kubernetes version tools/kube requires.
func pinnedVersion(t *testing.T) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "tools/kube/go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(sc.Text(), "require"))
		if len(fields) >= 2 && fields[0] == "k8s.io/kubernetes" {
			return fields[1]
		}
	}
	t.Fatal("tools/kube/go.mod requires no k8s.io/kubernetes")
	return ""
}

// TestServer starts the pinned API server and uses it as the admin, through
// the kubeconfig and as an unprivileged user; after Close nothing answers
// and the server's directory is gone.
func TestServer(t *testing.T) {
	s, err := Start(t.Context(), Config{Tokens: map[string]string{"nobody-token": "nobody"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	cs, err := kubernetes.NewForConfig(s.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if want := pinnedVersion(t); v.GitVersion != want {
		t.Errorf("server version %q, want the pinned %q (version ldflags)", v.GitVersion, want)
	}

	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The kubeconfig reaches the same server as the admin.
	kc, err := s.WriteKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cs2, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs2.CoreV1().ConfigMaps("default").Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Data["k"] != "v" {
		t.Errorf("read back %v", got.Data)
	}

	// RBAC is enforced: a user without bindings may not read it.
	cs3, err := kubernetes.NewForConfig(s.RESTConfigFor("nobody-token"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs3.CoreV1().ConfigMaps("default").Get(ctx, "hello", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("unprivileged get: %v, want Forbidden", err)
	}

	dir := filepath.Dir(s.Logs()[0])
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("server directory %s left behind: %v", dir, err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: s.TLSConfig()}}
	if resp, err := hc.Get(s.URL() + "/readyz"); err == nil {
		resp.Body.Close()
		t.Errorf("API server still answers after Close: %s", resp.Status)
	}
}

// TestBinDirFollowsPins checks that the cache directory is the one the
// Makefile builds into (make -s print-kube-bin).
func TestBinDirFollowsPins(t *testing.T) {
	t.Setenv(BinEnv, "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	d, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-s", "--no-print-directory", "print-kube-bin")
	cmd.Dir = root
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "KUBE_BIN" && k != BinEnv && k != "MAKEFLAGS" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != d {
		t.Errorf("make builds into %q, BinDir() is %q", got, d)
	}
}

// TestPodAddressRefused checks that a server is never started listening
// beyond loopback on a bad PodAddress, nor outside a network namespace of
// the test's own (this package's tests run in the machine's).
func TestPodAddressRefused(t *testing.T) {
	t.Parallel()
	var cfgs []Config
	for _, addr := range []string{"not-an-ip", "127.0.0.1", "0.0.0.0", "::1", "198.18.0.1"} {
		cfgs = append(cfgs, Config{PodAddress: addr})
	}
	refusedBeforeStart(t, "PodAddress", cfgs)
}

// TestControllersRefused checks that a controller name that would change
// the controller manager's --controllers list (empty, or a list of its
// own) is refused before anything starts.
func TestControllersRefused(t *testing.T) {
	t.Parallel()
	var cfgs []Config
	for _, c := range [][]string{{""}, {"endpointslice-controller,namespace-controller"}, {"a b"}} {
		cfgs = append(cfgs, Config{Controllers: c})
	}
	refusedBeforeStart(t, "Controllers", cfgs)
}

// refusedBeforeStart checks that Start refuses each of cfgs naming field,
// and that a refused start wrote nothing into its directory.
func refusedBeforeStart(t *testing.T, field string, cfgs []Config) {
	t.Helper()
	dir := t.TempDir()
	for _, cfg := range cfgs {
		cfg.Dir = dir
		if s, err := Start(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), field) {
			if s != nil {
				_ = s.Close()
			}
			t.Errorf("Start with %+v: %v, want it refused naming %s", cfg, err, field)
		}
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
		t.Errorf("a refused start wrote %v (%v)", entries, err)
	}
}

// TestSchedulerBindsPods: with Config.Scheduler a pod that names no node
// is bound to a Ready node that fits it, and one that fits none stays
// Pending with the scheduler's reason.
func TestSchedulerBindsPods(t *testing.T) {
	t.Parallel()
	s, err := Start(t.Context(), Config{Scheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range s.Logs() {
				t.Log(LogTail(l, 30))
			}
		}
		s.Close()
	})
	client, err := kubernetes.NewForConfig(s.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/hostname": "n1"}},
	}
	if node, err = client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status = corev1.NodeStatus{
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("10")},
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("10")},
	}
	if node, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server taints a new node not-ready (TaintNodesByCondition);
	// no node lifecycle controller runs here to lift it once it is Ready.
	node.Spec.Taints = nil
	if _, err := client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name, cpu string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "none.invalid/none:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		}}}}
	}
	for _, p := range []*corev1.Pod{pod("fits", "500m"), pod("too-big", "3")} {
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, time.Minute, "fits bound to n1, too-big unschedulable", func() error {
		fits, err := client.CoreV1().Pods("default").Get(ctx, "fits", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if fits.Spec.NodeName != "n1" {
			return fmt.Errorf("fits on %q: %v", fits.Spec.NodeName, fits.Status.Conditions)
		}
		big, err := client.CoreV1().Pods("default").Get(ctx, "too-big", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range big.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				if big.Spec.NodeName != "" {
					return fmt.Errorf("too-big on %q", big.Spec.NodeName)
				}
				return nil
			}
		}
		return fmt.Errorf("too-big: %v", big.Status.Conditions)
	})
}

// TestServiceAccounts: with Config.ServiceAccounts (and the service
// account controllers) a pod gets its service account's token as a
// projected volume with the cluster's CA, a pod naming a service account
// that does not exist is refused, and the token the API server issues for
// the account authenticates as it.
func TestServiceAccounts(t *testing.T) {
	t.Parallel()
	s, err := Start(t.Context(), Config{ServiceAccounts: true,
		Controllers: []string{"serviceaccount-controller", "root-ca-certificate-publisher-controller"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range s.Logs() {
				t.Log(LogTail(l, 30))
			}
		}
		s.Close()
	})
	client, err := kubernetes.NewForConfig(s.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	poll.Until(t, time.Minute, "the default service account and kube-root-ca.crt of default", func() error {
		if _, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := client.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
	pod := func(name, sa string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "c", Image: "none.invalid/none:1"}}}}
	}
	p, err := client.CoreV1().Pods("default").Create(ctx, pod("p", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	projected := false
	for _, v := range p.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") && v.Projected != nil {
			projected = true
		}
	}
	if p.Spec.ServiceAccountName != "default" || !projected {
		t.Fatalf("pod's service account %q, volumes %+v: want default and its token projected", p.Spec.ServiceAccountName, p.Spec.Volumes)
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod("q", "nosuch"), metav1.CreateOptions{}); err == nil {
		t.Fatal("a pod of a service account that does not exist was admitted")
	}
	tok, err := client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	as, err := kubernetes.NewForConfig(s.RESTConfigFor(tok.Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	review, err := as.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := review.Status.UserInfo.Username; u != "system:serviceaccount:default:default" {
		t.Fatalf("the token authenticates as %q", u)
	}
}
