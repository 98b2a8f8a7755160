package kubenode_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/flexplane/flexplane/pkg/dev/kubenode"
	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// The node's bridge, routes and iptables rules go into a network
// namespace of the tests' own.
func TestMain(m *testing.M) { netns.Main(m) }

// TestNodeRunsPod starts a real node (containerd, runc, CNI, kubelet,
// kube-proxy, CoreDNS) on a real API server (with the controller manager's
// EndpointSlice controller): the node gets Ready, a pod of the locally built
// image runs and answers on its port at its pod address, a Service of it
// answers on its ClusterIP, and the pod reaches the API server at the
// kubernetes Service's ClusterIP and by its name and its own Service by
// name (the cluster DNS, at the kube-dns Service's ClusterIP), and a name
// outside the cluster through the nameserver the DNS forwards to. A deleted
// pod's containers and cgroup are gone, and closing the node leaves no
// process, mount, cgroup, bridge or iptables rule behind.
func TestNodeRunsPod(t *testing.T) {
	t.Parallel()
	// The API server serves the pods too: the kubernetes Service's
	// endpoint is the namespace's address.
	api, err := kubetest.Start(t.Context(), kubetest.Config{PodAddress: netns.Address, Controllers: []string{"endpointslice-controller"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	upstream, outside := outsideWorld(t)
	node, err := kubenode.Start(t.Context(), kubenode.Config{API: api, DNSForward: []string{upstream}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range node.Logs() {
				t.Log(kubetest.LogTail(l, 40))
			}
		}
		if !closed {
			_ = node.Close()
		}
	})
	client, err := kubernetes.NewForConfig(api.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const ns = "kubenode-test"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	no := false
	grace := int64(5)
	pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName:                      node.Name(), // no scheduler runs
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "web",
				Image:           kubenode.TestImage,
				ImagePullPolicy: corev1.PullNever,
				Ports:           []corev1.ContainerPort{{ContainerPort: kubenode.TestImagePort}},
				Env:             []corev1.EnvVar{{Name: "FETCH_CA", Value: string(api.CAData())}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(kubenode.TestImagePort)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		// Not the pod's name: that is its hostname, in its /etc/hosts.
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(kubenode.TestImagePort)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var podIP string
	poll.Until(t, 90*time.Second, "pod web Running and Ready", func() error {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Status.Phase == corev1.PodRunning {
				podIP = p.Status.PodIP
				return nil
			}
		}
		return fmt.Errorf("phase %s, conditions %v, containers %v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	})
	_, cidr, err := net.ParseCIDR(node.PodCIDR())
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(podIP); ip == nil || !cidr.Contains(ip) {
		t.Fatalf("pod IP %q is not in the node's pod range %s", podIP, cidr)
	}
	url := "http://" + net.JoinHostPort(podIP, strconv.Itoa(kubenode.TestImagePort)) + "/"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "podimage web\n" {
		t.Fatalf("GET %s: %s %q %v, want 200 %q", url, resp.Status, body, err, "podimage web\n")
	}
	// The pod's Service answers on its ClusterIP (the EndpointSlice
	// controller's slice, kube-proxy's rules). The pod reaches the API
	// server through the kubernetes Service's ClusterIP and by its name, and
	// its own Service by name, fully qualified and by the search path (the
	// cluster DNS): the server's certificate is valid for the address and
	// the name. A name of no Service does not resolve.
	fetch := "http://" + net.JoinHostPort(podIP, strconv.Itoa(kubenode.TestImagePort)) + "/fetch?url="
	web := "podimage web\n"
	for _, c := range []struct {
		url  string
		code int // of the URL; a fetch's own is in the body
		want string
	}{
		{"http://" + svc.Spec.ClusterIP + "/", http.StatusOK, web},
		{fetch + "https://" + kubetest.KubernetesServiceIP + "/version", http.StatusOK, `"gitVersion"`},
		{fetch + "https://kubernetes.default.svc.cluster.local/version", http.StatusOK, `"gitVersion"`},
		{fetch + "http://hello." + ns + ".svc.cluster.local/", http.StatusOK, "200\n" + web},
		{fetch + "http://hello." + ns + "/", http.StatusOK, "200\n" + web},
		{fetch + "http://hello/", http.StatusOK, "200\n" + web},
		{fetch + "http://nosuch." + ns + ".svc.cluster.local/", http.StatusBadGateway, "no such host"},
		// A name outside the cluster, forwarded to Config.DNSForward.
		{fetch + "http://" + outside + "/", http.StatusOK, "200\noutside\n"},
	} {
		poll.Until(t, 60*time.Second, "GET "+c.url, func() error {
			resp, err := http.Get(c.url)
			if err != nil {
				return err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			if resp.StatusCode != c.code || !strings.Contains(string(body), c.want) {
				return fmt.Errorf("%s %q, want %d and %q", resp.Status, body, c.code, c.want)
			}
			return nil
		})
	}
	tasks, err := node.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 2 {
		t.Fatalf("containers running: %v, want the pod's sandbox and its container", tasks)
	}
	if rules, err := node.IPTablesRules(); err != nil || len(rules) == 0 {
		t.Fatalf("the pod's masquerading rules: %v %v, want some while it runs", rules, err)
	}

	if err := client.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 60*time.Second, "the deleted pod's containers, cgroup and rules gone", func() error {
		if _, err := client.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod still there (%v)", err)
		}
		tasks, err := node.Tasks(ctx)
		if err != nil {
			return err
		}
		if len(tasks) > 0 {
			return fmt.Errorf("containers still running: %v", tasks)
		}
		if ok, err := node.PodCgroupExists(string(pod.UID)); err != nil || ok {
			return fmt.Errorf("the pod's cgroup is still there (%v)", err)
		}
		if rules, err := node.IPTablesRules(); err != nil || len(rules) > 0 {
			return fmt.Errorf("the pod's iptables rules are still there: %v %v", rules, err)
		}
		return nil
	})

	dir := node.Dir()
	err = node.Close()
	closed = true
	if err != nil {
		t.Fatal(err)
	}
	// Close checks what it cleaned up; check the same from outside.
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the node's directory %s is still there (%v)", dir, err)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if data, err := os.ReadFile(p); err == nil && strings.Contains(string(data), dir) {
			t.Errorf("process %s still runs: %q", p, data)
		}
	}
	if mounts, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(mounts), dir) {
		t.Errorf("a mount under %s is left (%v)", dir, err)
	}
	if cg, _ := filepath.Glob("/sys/fs/cgroup/*/kubenode-*"); len(cg) > 0 {
		t.Errorf("cgroups left: %v", cg)
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifaces {
		if i.Name != "lo" {
			t.Errorf("interface %s left in the test's network namespace", i.Name)
		}
	}
}

// outsideWorld stands for what is outside the cluster: a nameserver on a
// loopback UDP port of the test's namespace that answers outside.example.
// with the namespace's address (and NXDOMAIN for other names), and a web
// server there answering "outside". It returns the nameserver's address and
// the web server's as outside.example:port.
func outsideWorld(t *testing.T) (nameserver, web string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const name = "outside.example."
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) != 1 || r.Question[0].Name != name {
			m.Rcode = dns.RcodeNameError
		} else if r.Question[0].Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.ParseIP(netns.Address)}}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	l, err := net.Listen("tcp", net.JoinHostPort(netns.Address, "0"))
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "outside") })}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { _ = hs.Close() })
	return pc.LocalAddr().String(), net.JoinHostPort(strings.TrimSuffix(name, "."), strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
}

// TestStartRefusesBadDNSForward checks that a nameserver that is no
// address is refused before anything of a node starts.
func TestStartRefusesBadDNSForward(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, fwd := range []string{"", "dns.example", "10.0.0.1:domain", "10.0.0.1:0", "10.0.0.1:53:53", "1.2.3.4/24"} {
		n, err := kubenode.Start(t.Context(), kubenode.Config{API: &kubetest.Server{}, Dir: dir, DNSForward: []string{fwd}})
		if err == nil || !strings.Contains(err.Error(), "DNSForward") {
			if n != nil {
				_ = n.Close()
			}
			t.Errorf("Start with DNSForward %q: %v, want it refused", fwd, err)
		}
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
		t.Errorf("a refused start wrote %v (%v)", entries, err)
	}
}
