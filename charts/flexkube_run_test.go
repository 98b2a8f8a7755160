package charts_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flexplane/flexplane/charts"
	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/ociimage"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/tenantkube/controlplane"
)

// controlPlaneImages builds the images of the flexkube chart's defaults
// from `make kube-bin`'s binaries (linked against glibc: its loader and
// libc go into each image) and the egress proxy's from podrun's stand-in.
func controlPlaneImages(ctx context.Context, dir string) ([]string, error) {
	bin, err := kubetest.BinDir()
	if err != nil {
		return nil, err
	}
	libc := []ociimage.File{
		{Source: "/lib64/ld-linux-x86-64.so.2", Target: "/lib64/ld-linux-x86-64.so.2", Mode: 0o755},
		{Source: "/lib/x86_64-linux-gnu/libc.so.6", Target: "/lib/x86_64-linux-gnu/libc.so.6", Mode: 0o755},
	}
	proxy := filepath.Join(dir, "orchestrator")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", proxy, "github.com/flexplane/flexplane/pkg/dev/podrun/egressproxy")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the egress proxy: %w\n%s", err, out)
	}
	type im struct{ ref, src, target string }
	var out []string
	for i, x := range []im{
		{"registry.k8s.io/kube-apiserver:v1.37.2", filepath.Join(bin, "kube"), "/usr/local/bin/kube-apiserver"},
		{"registry.k8s.io/kube-controller-manager:v1.37.2", filepath.Join(bin, "kube"), "/usr/local/bin/kube-controller-manager"},
		{"registry.k8s.io/kube-scheduler:v1.37.2", filepath.Join(bin, "kube"), "/usr/local/bin/kube-scheduler"},
		{"registry.k8s.io/etcd:3.7.3-0", filepath.Join(bin, "etcd"), "/usr/local/bin/etcd"},
		{ociimage.OrchestratorRef, proxy, "/usr/bin/orchestrator"},
	} {
		files := []ociimage.File{{Source: x.src, Target: x.target, Mode: 0o755}}
		if i < 4 {
			files = append(files, libc...)
		}
		img, err := ociimage.Build(ociimage.Config{Files: files, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}, runtime.GOARCH)
		if err != nil {
			return nil, err
		}
		p := filepath.Join(dir, fmt.Sprintf("cp-%d.tar", i))
		if err := ociimage.WriteTarball(p, x.ref, img); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// TestChartsRun installs the charts onto one real node (kubelet,
// containerd, kube-proxy, CoreDNS; pkg/dev/kubenode) with the images the
// project builds, as an operator would: every pod gets Running and Ready,
// `helm test` passes, and an uninstall leaves nothing but what the chart
// documents as kept; flexgateway also rolls on an upgrade with no failed
// request through its Service. The charts run side by side on the node.
func TestChartsRun(t *testing.T) {
	t.Parallel()
	c, node := charts.RunningCluster(t, charts.FlexgatewayImage, controlPlaneImages)
	t.Run("flexgateway", func(t *testing.T) {
		t.Parallel()
		charts.RunFlexgateway(t, c, node.Name())
	})
	t.Run("flexkube", func(t *testing.T) {
		t.Parallel()
		runFlexKube(t, c, node.Name())
	})
}

// runFlexKube installs a hosted control plane (the flexkube chart,
// through controlplane.Manager as the orchestrator does) with the images
// built from `make kube-bin`'s binaries: etcd, the API server, the
// controller manager and the scheduler get Running and Ready, the
// Manager's status Ready, the API server answers /readyz through its
// Service, `helm test` passes, and deleting the control plane removes its
// namespace.
func runFlexKube(t *testing.T, c *charts.Cluster, nodeName string) {
	c = c.For(t)
	ctx := t.Context()
	client := c.Client()
	// etcd's claim: a PersistentVolume in a directory of the test (the
	// node has no provisioner), writable by the pods' user.
	pvDir := t.TempDir()
	if err := os.Chmod(pvDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-" + nodeName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: pvDir}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	small := func(cpu, mem string) map[string]any {
		return map[string]any{"requests": map[string]any{"cpu": cpu, "memory": mem}, "limits": map[string]any{"memory": "1Gi"}}
	}
	// tenantAddress is the tenant API server's Service's ClusterIP and
	// port (the test has no cluster DNS).
	tenantAddress := func(ns, cluster string) string {
		svc, err := client.CoreV1().Services(ns).Get(ctx, cluster+"-apiserver", metav1.GetOptions{})
		if err != nil {
			return "unknown.invalid:6443"
		}
		return net.JoinHostPort(svc.Spec.ClusterIP, "6443")
	}
	m, err := controlplane.New(controlplane.Config{REST: c.Kube().RESTConfig(), ServiceType: "ClusterIP",
		Values: func(controlplane.Spec) map[string]any {
			return map[string]any{
				"images":            map[string]any{"pullPolicy": "Never"},
				"apiServer":         map[string]any{"replicas": 1, "resources": small("50m", "128Mi")},
				"controllerManager": map[string]any{"resources": small("20m", "64Mi")},
				"scheduler":         map[string]any{"resources": small("20m", "64Mi")},
				"egressProxy":       map[string]any{"resources": small("10m", "16Mi")},
				"etcd": map[string]any{"resources": small("20m", "64Mi"), "storage": map[string]any{"size": "1Gi"},
					"extraArgs": []any{"--unsafe-no-fsync"}},
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "kc-run"
	spec := controlplane.Spec{Namespace: ns, Cluster: "run", VDC: "vdc-a", Version: "v1.37.2",
		ServiceCIDR: "10.97.0.0/16", PodCIDR: "10.245.0.0/16", Endpoint: "run-apiserver." + ns + ".svc:6443"}
	if err := m.Ensure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	pods := c.PodsReady(ns, "app.kubernetes.io/instance=run", 4, 3*time.Minute)
	for _, p := range pods {
		t.Logf("pod %s ready on %s", p.Name, p.Spec.NodeName)
	}
	poll.Until(t, time.Minute, "the control plane's status Ready", func() error {
		st, err := m.Status(ctx, ns)
		if err != nil {
			return err
		}
		if !st.Ready {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	// The tenant API server answers through its Service (at its
	// ClusterIP: the test has no cluster DNS; its certificate is checked
	// for the Service's name) with the administrator's kubeconfig the
	// Manager keeps for Cluster API.
	sec, err := client.CoreV1().Secrets(ns).Get(ctx, "run-kubeconfig", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(sec.Data["value"])
	if err != nil {
		t.Fatal(err)
	}
	rc.Host = "https://" + tenantAddress(ns, "run")
	rc.ServerName = "run-apiserver." + ns + ".svc"
	tenant, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "the tenant API server's /readyz through its Service", func() error {
		body, err := tenant.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%v: %s", err, body)
		}
		return nil
	})
	// helm test: the chart's hook probes /readyz through the Service.
	for _, p := range c.HelmTest("run", ns) {
		for _, v := range p.Spec.Volumes {
			if v.Secret == nil || v.Secret.SecretName != "run-ca" || len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "tls.crt" {
				t.Errorf("test pod %s mounts %+v, want only the CA's certificate", p.Name, v)
			}
		}
	}
	if err := m.Delete(ctx, ns); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, "the control plane's namespace gone", func() error {
		n, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v): %+v", err, n.Status)
		}
		return nil
	})
}
