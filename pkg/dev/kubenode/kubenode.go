// Package kubenode runs a real Kubernetes node for tests: containerd (the
// CRI runtime, Debian's), runc, the CNI plugins (bridge, host-local,
// loopback, portmap; Debian's containernetworking-plugins), a kubelet and
// kube-proxy in iptables mode (built from k8s.io/kubernetes by
// `make kube-bin`, like the API server) and CoreDNS as the cluster DNS
// (built from its module by `make kube-bin`), registering with a
// pkg/dev/kubetest API server (started with Config.PodAddress, its pods
// reach it at the kubernetes Service). Pods resolve Services' names of
// cluster.local through the kube-dns Service (ClusterDNSIP), whose one
// endpoint is the node's CoreDNS. Pods really run: images
// are built locally with pkg/dev/ociimage (the pause image too: no
// registry is reachable) and imported into containerd.
//
// Everything a node writes stays in places the test owns:
//
//   - the kubelet's root directory, containerd's root, state and socket,
//     the CNI configuration and IP allocations live in the node's
//     directory;
//   - containerd and the kubelet run in a mount namespace of their own
//     where /run, /var/lib and /var/log are empty tmpfs (the CNI library's
//     cache, the pods' network namespaces, the shims' sockets, the
//     kubelet's log links) and the kernel settings the kubelet insists on
//     are files of the node's directory, so the machine's are never
//     changed; the namespace's mounts vanish with its last process;
//   - pods' cgroups are under a cgroup root of the node's own
//     (/kubenode-<id> in each cgroup v1 hierarchy), removed by Close;
//   - the pods' bridge, routes and iptables rules are in the network
//     namespace of the test, which must be one of its own: Start refuses
//     to run outside one (a test package runs itself in one with
//     netns.Main in TestMain).
//
// It needs root (a test fails, never skips, without it), cgroup v1 (the
// kubelet runs with failCgroupV1: false) and Debian's containerd, runc,
// containernetworking-plugins and iptables (`make kube-node` installs
// them). docs/develop/testing.md says what runs and how.
package kubenode

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// CNIDir is where Debian's containernetworking-plugins installs the CNI
// plugins.
const CNIDir = "/usr/lib/cni"

// ClusterDNSIP is the ClusterIP of the kube-dns Service in kube-system: the
// nameserver of the node's pods (the kubelet's clusterDNS). Its endpoint is
// the node's CoreDNS.
const ClusterDNSIP = "10.96.0.10"

// ClusterDomain is the cluster's DNS domain: a Service's name is
// <service>.<namespace>.svc.ClusterDomain.
const ClusterDomain = "cluster.local"

// cgroupV1Root is where the machine's cgroup v1 hierarchies are mounted.
const cgroupV1Root = "/sys/fs/cgroup"

// Config configures a Node. API is required; the rest has useful defaults.
type Config struct {
	// API is the API server the kubelet registers with (as its
	// administrator).
	API *kubetest.Server
	// BinDir holds the kubelet (kubetest.BinDir's directory, where
	// `make kube-bin` puts it). Default kubetest.BinDir().
	BinDir string
	// Dir holds everything the node writes; it is removed by Close when the
	// node created it. Default a new temporary directory.
	Dir string
	// Name is the node's name. Default "kubenode-<id>".
	Name string
	// PodCIDR is the IPv4 /24 the pods' addresses are taken from. Default
	// a free 10.x.y.0/24.
	PodCIDR string
	// Images are more image tarballs to import into the runtime besides
	// the pause image and TestImage.
	Images []string
	// DNSForward are the nameservers (IP or IP:port) the cluster DNS
	// forwards names outside ClusterDomain to. Default none: it answers only
	// for ClusterDomain (SERVFAIL otherwise), and no query leaves the
	// test's network namespace.
	DNSForward []string
	// StartTimeout bounds Start: building the images, starting containerd
	// and the kubelet, the node becoming Ready, kube-proxy and the cluster
	// DNS answering at its ClusterIP. Default 2 minutes.
	StartTimeout time.Duration
}

// Node is a running containerd, kubelet, kube-proxy and CoreDNS,
// registered as a Node object.
type Node struct {
	cfg        Config
	id         string
	ownDir     bool
	cgroupRoot string // "/kubenode-<id>"
	bridge     string
	sock       string // containerd's socket
	mountNS    string // the namespace's /proc/<pid>/ns/mnt link, "mnt:[…]"
	client     kubernetes.Interface

	procs    []*proc // containerd, the kubelet, kube-proxy, then CoreDNS
	dnsSlice string  // the kube-dns EndpointSlice naming the node's CoreDNS, once made
	svcRoute bool    // the route of the Services' ClusterIPs was added
	logs     []string

	closeMu  sync.Mutex
	closed   bool  // protected by closeMu
	closeErr error // protected by closeMu
}

// proc is a started process of the node; done is closed when it has
// exited, with err its Wait's answer.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts a node and returns once the kubelet has registered it and
// it is Ready, kube-proxy has programmed the Services' rules and the
// cluster DNS answers at ClusterDNSIP.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg.API == nil {
		return nil, errors.New("kubenode: start: Config.API is required")
	}
	if !realRoot() {
		return nil, errors.New("kubenode: start: a node needs root (containerd, runc, cgroups and mounts), not root of a user namespace: run the tests as root")
	}
	if !netns.Inside() {
		return nil, errors.New("kubenode: start: a node adds a bridge, routes and iptables rules to its network namespace: " +
			"run it in one of the test's own (netns.Main in TestMain)")
	}
	if err := checkDNSForward(cfg.DNSForward); err != nil {
		return nil, fmt.Errorf("kubenode: start: %w", err)
	}
	if cfg.BinDir == "" {
		if cfg.BinDir, err = kubetest.BinDir(); err != nil {
			return nil, fmt.Errorf("kubenode: start: %w", err)
		}
	}
	if err := checkTools(cfg.BinDir); err != nil {
		return nil, fmt.Errorf("kubenode: start: %w", err)
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 2 * time.Minute
	}
	idb := make([]byte, 4)
	if _, err := rand.Read(idb); err != nil {
		return nil, fmt.Errorf("kubenode: start: %w", err)
	}
	n := &Node{cfg: cfg, id: hex.EncodeToString(idb)}
	n.cgroupRoot = "/kubenode-" + n.id
	n.bridge = "kn" + n.id
	if n.cfg.Name == "" {
		n.cfg.Name = "kubenode-" + n.id
	}
	if n.cfg.PodCIDR == "" {
		if n.cfg.PodCIDR, err = freePodCIDR(); err != nil {
			return nil, fmt.Errorf("kubenode: start: %w", err)
		}
	}
	if _, cidr, err := net.ParseCIDR(n.cfg.PodCIDR); err != nil || cidr.IP.To4() == nil || cidr.Mask.String() != "ffffff00" {
		return nil, fmt.Errorf("kubenode: start: PodCIDR %q is not an IPv4 /24", n.cfg.PodCIDR)
	}
	if n.client, err = kubernetes.NewForConfig(cfg.API.RESTConfig()); err != nil {
		return nil, fmt.Errorf("kubenode: start: %w", err)
	}
	if n.cfg.Dir == "" {
		if n.cfg.Dir, err = os.MkdirTemp("", "kubenode-"); err != nil {
			return nil, fmt.Errorf("kubenode: start: %w", err)
		}
		n.ownDir = true
	}
	defer func() {
		if err != nil {
			_ = n.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	images, err := BuildImages(ctx, n.cfg.Dir)
	if err != nil {
		return nil, err
	}
	if err := n.makeCgroups(); err != nil {
		return nil, fmt.Errorf("kubenode: start: cgroups: %w", err)
	}
	if err := n.startContainerd(ctx); err != nil {
		return nil, fmt.Errorf("kubenode: start: containerd: %w", err)
	}
	for _, img := range append(images, cfg.Images...) {
		if out, err := n.ctr(ctx, "images", "import", img); err != nil {
			return nil, fmt.Errorf("kubenode: start: import %s: %w\n%s", img, err, out)
		}
	}
	if err := n.startKubelet(ctx); err != nil {
		return nil, fmt.Errorf("kubenode: start: kubelet: %w", err)
	}
	if err := n.addServiceRoute(); err != nil {
		return nil, fmt.Errorf("kubenode: start: %w", err)
	}
	if err := n.startKubeProxy(ctx); err != nil {
		return nil, fmt.Errorf("kubenode: start: kube-proxy: %w", err)
	}
	if err := n.startClusterDNS(ctx); err != nil {
		return nil, fmt.Errorf("kubenode: start: cluster DNS: %w", err)
	}
	return n, nil
}

// realRoot reports whether this process is root of the machine: uid 0 in
// the initial user namespace, whose uid_map maps every id to itself (the
// tests run in a user namespace of their own when not started as root).
func realRoot() bool {
	if os.Geteuid() != 0 {
		return false
	}
	data, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return strings.Join(strings.Fields(string(data)), " ") == "0 0 4294967295"
}

// checkTools says which of the programs a node runs is missing, and how to
// get it.
func checkTools(binDir string) error {
	for _, b := range []string{"kubelet", "kube-proxy", "coredns"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return fmt.Errorf("%s is missing in %s: run `make kube-bin` (make test does): %w", b, binDir, err)
		}
	}
	var missing []string
	for _, p := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "nsenter"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join(CNIDir, p)); err != nil {
			missing = append(missing, filepath.Join(CNIDir, p))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s missing: run `make kube-node` (it installs Debian's containerd, runc, containernetworking-plugins and iptables)", strings.Join(missing, ", "))
	}
	return nil
}

// freePodCIDR picks a 10.x.y.0/24 that no interface's address is in.
func freePodCIDR() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	b := make([]byte, 2)
	for range 20 {
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		_, cidr, _ := net.ParseCIDR(fmt.Sprintf("10.%d.%d.0/24", 200+int(b[0])%50, b[1]))
		taken := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && (cidr.Contains(ipn.IP) || ipn.Contains(cidr.IP)) {
				taken = true
			}
		}
		if !taken {
			return cidr.String(), nil
		}
	}
	return "", errors.New("no free 10.x.y.0/24 for the pods")
}

// path returns a path in the node's directory.
func (n *Node) path(elem ...string) string {
	return filepath.Join(append([]string{n.cfg.Dir}, elem...)...)
}

// cgroupHierarchies returns the mount points of the machine's cgroup
// hierarchies under /sys/fs/cgroup: the v1 ones (cpu, memory, pids,
// name=systemd, ...) and, on a hybrid machine, the unified one that runc
// puts a container's cgroup into as well.
func cgroupHierarchies() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, line := range strings.Split(string(data), "\n") {
		// ... mountpoint ... - fstype source options
		f := strings.Fields(line)
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(f) || f[sep+1] != "cgroup" && f[sep+1] != "cgroup2" {
			continue
		}
		if strings.HasPrefix(f[4], cgroupV1Root+"/") {
			dirs = append(dirs, f[4])
		}
	}
	if len(dirs) == 0 {
		return nil, errors.New("no cgroup v1 hierarchy is mounted under " + cgroupV1Root)
	}
	return dirs, nil
}

// makeCgroups creates the node's cgroup root in every hierarchy (the
// kubelet refuses a cgroup root that does not exist); a new cpuset cgroup
// gets its parent's CPUs and memory nodes, without which no task can join.
func (n *Node) makeCgroups() error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, n.cgroupRoot)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			data, err := os.ReadFile(filepath.Join(h, f))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// kernelSettings are the kernel settings the kubelet checks (and would
// change) and the bridge plugin sets, with the values they want: in the
// node's mount namespace each /proc/sys file is covered by a file of the
// node's directory holding that value.
var kernelSettings = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// mountScript is the shell the node's mount namespace starts with: it
// mounts the empty tmpfs and the kernel settings' files, then becomes
// containerd.
func (n *Node) mountScript() (string, error) {
	var b strings.Builder
	b.WriteString("set -e\n")
	for _, d := range []string{"/run", "/var/lib", "/var/log"} {
		fmt.Fprintf(&b, "mount -t tmpfs -o mode=0755 kubenode %s\n", d)
	}
	sysctl := n.path("sysctl")
	if err := os.MkdirAll(sysctl, 0o755); err != nil {
		return "", err
	}
	for k, v := range kernelSettings {
		f := filepath.Join(sysctl, strings.ReplaceAll(k, "/", "."))
		if err := os.WriteFile(f, []byte(v+"\n"), 0o644); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "mount --bind %s /proc/sys/%s\n", f, k)
	}
	fmt.Fprintf(&b, "exec containerd --config %s\n", n.path("containerd", "config.toml"))
	return b.String(), nil
}

// containerdConfig is containerd's configuration: everything under the
// node's directory, runc through the v2 shim with cgroupfs, the CNI
// configuration of the node. Containers' OOM score adjustments are kept at
// or above containerd's own: lowering one needs CAP_SYS_RESOURCE, which
// the machines the tests run on withhold even from root (runc fails the
// sandbox with "failed to update /proc/self/oom_score_adj").
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
`

// cniConfig is the pods' network: a bridge with the pods' gateway address
// on the node's side (so the node reaches every pod), addresses from
// PodCIDR, masquerading for traffic leaving it, host ports by portmap.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "kubenode",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

func (n *Node) startContainerd(ctx context.Context) error {
	for _, d := range []string{"containerd", "cni/net.d", "cni/ipam"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	n.sock = n.path("containerd", "containerd.sock")
	conf := fmt.Sprintf(containerdConfig, n.path("containerd", "root"), n.path("containerd", "state"), n.sock, n.sock+".ttrpc",
		PauseImage, CNIDir, n.path("cni", "net.d"))
	if err := os.WriteFile(n.path("containerd", "config.toml"), []byte(conf), 0o644); err != nil {
		return err
	}
	cni := fmt.Sprintf(cniConfig, n.bridge, n.cfg.PodCIDR, n.path("cni", "ipam"))
	if err := os.WriteFile(n.path("cni", "net.d", "10-kubenode.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	script, err := n.mountScript()
	if err != nil {
		return err
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	// A new mount namespace (Go makes its mounts private, so nothing
	// mounted in it shows outside).
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if err := n.run("containerd", cmd); err != nil {
		return err
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
	if err != nil {
		return err
	}
	n.mountNS = ns
	return n.wait(ctx, 0, "containerd to serve "+n.sock, func() error {
		_, err := n.ctr(ctx, "version")
		return err
	})
}

// kubeletConfig is the KubeletConfiguration: cgroup v1 allowed, cgroupfs
// with the node's cgroup root, loopback-only ports, no image garbage
// collection (the imported images cannot be pulled again) and no eviction
// for a full disk of the machine (the tests' pods are tiny), the kernel
// settings checked rather than changed, pods' nameserver the cluster DNS
// (no search domain or nameserver of the machine's resolv.conf is handed
// to pods).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]q
cgroupsPerQOS: true
address: 127.0.0.1
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
containerRuntimeEndpoint: %[4]q
podLogsDir: %[5]q
failSwapOn: false
protectKernelDefaults: true
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "0%%"
  nodefs.inodesFree: "0%%"
  imagefs.available: "0%%"
serializeImagePulls: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
authorization:
  mode: Webhook
clusterDNS:
- %[6]q
clusterDomain: %[7]q
resolvConf: ""
`

func (n *Node) startKubelet(ctx context.Context) error {
	kdir := n.path("kubelet")
	for _, d := range []string{"root", "logs", "volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(kdir, d), 0o755); err != nil {
			return err
		}
	}
	kubeconfig, err := n.cfg.API.Kubeconfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(kdir, "kubeconfig"), kubeconfig, 0o600); err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	conf := fmt.Sprintf(kubeletConfig, n.cgroupRoot, ports[0], ports[1], "unix://"+n.sock, filepath.Join(kdir, "logs"), ClusterDNSIP, ClusterDomain)
	if err := os.WriteFile(filepath.Join(kdir, "config.yaml"), []byte(conf), 0o644); err != nil {
		return err
	}
	cmd := n.inMountNS(filepath.Join(n.cfg.BinDir, "kubelet"),
		"--config="+filepath.Join(kdir, "config.yaml"),
		"--kubeconfig="+filepath.Join(kdir, "kubeconfig"),
		"--root-dir="+filepath.Join(kdir, "root"),
		"--volume-plugin-dir="+filepath.Join(kdir, "volume-plugins"),
		"--hostname-override="+n.cfg.Name,
		"--node-ip="+netns.Address,
		"--v=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.run("kubelet", cmd); err != nil {
		return err
	}
	return n.wait(ctx, 1, "node "+n.cfg.Name+" Ready", func() error {
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.cfg.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("condition Ready is %s: %s", c.Status, c.Message)
			}
		}
		return errors.New("no Ready condition yet")
	})
}

// addServiceRoute routes the Services' ClusterIPs (kubetest.ServiceCIDR) to
// lo with the node's address as the source. The test's network namespace
// has no default route, which on a real node carries a host process's
// packets to a ClusterIP until kube-proxy's rules rewrite their
// destination: without a route a connection fails before the rules are
// consulted.
func (n *Node) addServiceRoute() error {
	if out, err := exec.Command("ip", "route", "add", kubetest.ServiceCIDR, "dev", "lo", "src", netns.Address).CombinedOutput(); err != nil {
		return fmt.Errorf("route %s: %w: %s", kubetest.ServiceCIDR, err, out)
	}
	n.svcRoute = true
	return nil
}

// kubeProxyConfig is the KubeProxyConfiguration: iptables mode (Debian's
// iptables, nf_tables underneath), loopback-only ports, every Service
// connection masqueraded (the pods' bridge does no netfilter, so a pod's
// answer to another pod through a ClusterIP must come back through the
// node), and no change to the kernel's settings outside the test's
// network namespace (conntrack's table size and timeouts are the
// machine's: left as they are) nor to route_localnet (no NodePorts on
// loopback).
const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %[1]q
hostnameOverride: %[2]q
bindAddress: %[3]q
healthzBindAddress: 127.0.0.1:%[4]d
metricsBindAddress: 127.0.0.1:%[5]d
iptables:
  localhostNodePorts: false
  masqueradeAll: true
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`

// startKubeProxy starts kube-proxy in the node's mount namespace (iptables'
// lock file is under its /run) and waits until it has programmed the
// Services' rules once (its /healthz answers 200).
func (n *Node) startKubeProxy(ctx context.Context) error {
	kubeconfig := filepath.Join(n.path("kubelet"), "kubeconfig")
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	conf := fmt.Sprintf(kubeProxyConfig, kubeconfig, n.cfg.Name, netns.Address, ports[0], ports[1])
	confPath := n.path("kube-proxy.yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	cmd := n.inMountNS(filepath.Join(n.cfg.BinDir, "kube-proxy"), "--config="+confPath, "--v=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.run("kube-proxy", cmd); err != nil {
		return err
	}
	healthz := "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/healthz"
	return n.wait(ctx, 2, "kube-proxy's "+healthz, func() error { return kubetest.GetOK(http.DefaultClient, healthz) })
}

// inMountNS is the command name args run in the node's mount namespace.
func (n *Node) inMountNS(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--mount=/proc/" + strconv.Itoa(n.procs[0].cmd.Process.Pid) + "/ns/mnt", "--", name}, args...)...)
}

// freePorts returns loopback TCP ports that were free a moment ago.
func freePorts(k int) ([]int, error) {
	var ports []int
	for range k {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// run starts cmd as the node's process called name, logging to
// <dir>/<name>.log.
func (n *Node) run(name string, cmd *exec.Cmd) error {
	logPath := n.path(name + ".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	n.procs = append(n.procs, p)
	n.logs = append(n.logs, logPath)
	return nil
}

// wait polls cond until it holds; it fails early, with the end of its
// log, when process i exits first.
func (n *Node) wait(ctx context.Context, i int, what string, cond func() error) error {
	p := n.procs[i]
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-p.done:
			cancel(fmt.Errorf("%s exited: %v", filepath.Base(p.cmd.Path), p.err))
		case <-ctx.Done():
		}
	}()
	if err := poll.Context(ctx, cond); err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
			err = cause
		}
		return fmt.Errorf("waiting for %s: %w%s", what, err, kubetest.LogTail(n.logs[i], 20))
	}
	return nil
}

// ctr runs containerd's ctr on the node's socket in the CRI's namespace.
func (n *Node) ctr(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.sock, "--namespace", "k8s.io"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// PodCIDR is the range the node's pods get their addresses from.
func (n *Node) PodCIDR() string { return n.cfg.PodCIDR }

// Dir is the node's directory.
func (n *Node) Dir() string { return n.cfg.Dir }

// CgroupRoot is the node's cgroup root ("/kubenode-<id>"), the parent of its
// pods' cgroups in each cgroup hierarchy; Close removes it.
func (n *Node) CgroupRoot() string { return n.cgroupRoot }

// Logs returns the paths of containerd's, the kubelet's, kube-proxy's and
// CoreDNS's logs.
func (n *Node) Logs() []string { return append([]string(nil), n.logs...) }

// Tasks returns the IDs of the containers that have a process on the node
// (pods' containers and their sandboxes, as containerd's tasks).
func (n *Node) Tasks(ctx context.Context) ([]string, error) {
	out, err := n.ctr(ctx, "tasks", "list", "--quiet")
	if err != nil {
		return nil, fmt.Errorf("kubenode: tasks: %w: %s", err, out)
	}
	return strings.Fields(string(out)), nil
}

// PodCgroupExists reports whether the kubelet's cgroup of the pod with
// uid exists in any hierarchy (it is removed once the pod has ended).
func (n *Node) PodCgroupExists(uid string) (bool, error) {
	hs, err := cgroupHierarchies()
	if err != nil {
		return false, fmt.Errorf("kubenode: pod cgroup: %w", err)
	}
	found := false
	for _, h := range hs {
		err := filepath.WalkDir(filepath.Join(h, n.cgroupRoot), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "pod"+uid {
				found = true
				return filepath.SkipAll
			}
			return nil
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("kubenode: pod cgroup: %w", err)
		}
	}
	return found, nil
}

// ForTest starts a node for one test on api and closes it when the test
// ends; a failure to start or to clean up fails the test.
func ForTest(t testing.TB, api *kubetest.Server) *Node {
	t.Helper()
	n, err := Start(t.Context(), Config{API: api})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}
