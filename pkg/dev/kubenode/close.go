package kubenode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// closeTimeout bounds each step of Close.
const closeTimeout = time.Minute

// Close deletes the node's pods and waits for their containers to end,
// deletes the kube-dns EndpointSlice naming its CoreDNS, stops CoreDNS,
// kube-proxy (removing its rules), the kubelet and containerd, ends every
// process left in the node's mount namespace (the shims) and cgroups,
// removes the node's cgroups, bridge and route of the Services' ClusterIPs,
// and then checks that nothing is left: no process, no mount under
// its directory, no cgroup, no bridge, no iptables rule of its pods. It
// removes the directory it created. Its error names what could not be
// cleaned up. It is safe to call more than once.
func (n *Node) Close() error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return n.closeErr
	}
	n.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var errs []error
	if len(n.procs) >= 2 && !n.exited(1) {
		if err := n.deletePods(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := n.unpublishClusterDNS(ctx); err != nil {
		errs = append(errs, err)
	}
	for i := len(n.procs) - 1; i >= 0; i-- {
		n.stop(i)
		switch i {
		case 2:
			// kube-proxy is gone: remove the Services' rules it made.
			if err := n.cleanupServiceRules(ctx); err != nil {
				errs = append(errs, err)
			}
		case 1:
			// The kubelet is gone: end the containers it left.
			n.killCgroupProcs()
		}
	}
	if n.mountNS != "" {
		n.killMountNS()
		if err := poll.Context(ctx, func() error {
			if pids := n.mountNSProcs(); len(pids) > 0 {
				return fmt.Errorf("processes %v left in the node's mount namespace", pids)
			}
			return nil
		}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := poll.Context(ctx, n.removeCgroups); err != nil {
		errs = append(errs, err)
	}
	if _, err := net.InterfaceByName(n.bridge); err == nil {
		if out, err := exec.Command("ip", "link", "delete", n.bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete bridge %s: %w: %s", n.bridge, err, out))
		}
	}
	if n.svcRoute {
		if out, err := exec.Command("ip", "route", "delete", kubetest.ServiceCIDR, "dev", "lo").CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete the route of %s: %w: %s", kubetest.ServiceCIDR, err, out))
		}
	}
	errs = append(errs, n.leftovers()...)
	if n.ownDir && len(errs) == 0 {
		if err := os.RemoveAll(n.cfg.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		n.closeErr = fmt.Errorf("kubenode: close %s (its files are kept in %s): %w", n.cfg.Name, n.cfg.Dir, err)
	}
	return n.closeErr
}

// cleanupServiceRules removes kube-proxy's rules (`kube-proxy --cleanup`,
// in the node's mount namespace) and checks that its chains are gone. The
// command's own status is not the judge: it also tears down the IPVS and
// nftables modes, which fail where the machine has neither.
func (n *Node) cleanupServiceRules(ctx context.Context) error {
	cmd := n.inMountNS(filepath.Join(n.cfg.BinDir, "kube-proxy"), "--cleanup", "--v=0")
	out, _ := cmd.CombinedOutput()
	rules, err := exec.CommandContext(ctx, "iptables-save").CombinedOutput()
	if err != nil {
		return fmt.Errorf("kube-proxy's rules: iptables-save: %w: %s", err, rules)
	}
	if strings.Contains(string(rules), "KUBE-SERVICES") {
		return fmt.Errorf("kube-proxy's rules are left after kube-proxy --cleanup: %s", out)
	}
	return nil
}

// exited reports whether process i has exited.
func (n *Node) exited(i int) bool {
	select {
	case <-n.procs[i].done:
		return true
	default:
		return false
	}
}

// deletePods deletes every pod bound to the node and waits until the
// kubelet has ended their containers and the pods are gone.
func (n *Node) deletePods(ctx context.Context) error {
	sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.cfg.Name}
	pods, err := n.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("delete pods: %w", err)
	}
	for _, p := range pods.Items {
		if err := n.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete pods: %w", err)
		}
	}
	err = poll.Context(ctx, func() error {
		pods, err := n.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, sel)
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left", len(pods.Items))
		}
		tasks, err := n.Tasks(ctx)
		if err != nil {
			return err
		}
		if len(tasks) > 0 {
			return fmt.Errorf("containers %v still running", tasks)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete pods: %w", err)
	}
	return nil
}

// stop ends process i: SIGTERM, then SIGKILL after 10 seconds.
func (n *Node) stop(i int) {
	p := n.procs[i]
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cgroupDirs returns the node's cgroup directories in every hierarchy,
// deepest first.
func (n *Node) cgroupDirs() []string {
	hs, err := cgroupHierarchies()
	if err != nil {
		return nil
	}
	var dirs []string
	for _, h := range hs {
		_ = filepath.WalkDir(filepath.Join(h, n.cgroupRoot), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	return dirs
}

// killCgroupProcs kills every process in the node's cgroups: containers
// the kubelet did not end.
func (n *Node) killCgroupProcs() {
	for _, d := range n.cgroupDirs() {
		data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// removeCgroups removes the node's cgroups, deepest first; it fails while
// one still has a process.
func (n *Node) removeCgroups() error {
	n.killCgroupProcs()
	var errs []error
	for _, d := range n.cgroupDirs() {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// mountNSProcs returns the processes in the node's mount namespace.
func (n *Node) mountNSProcs() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "mnt")); err == nil && ns == n.mountNS {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killMountNS kills every process in the node's mount namespace (the
// runtime's shims outlive containerd).
func (n *Node) killMountNS() {
	for _, pid := range n.mountNSProcs() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// leftovers checks that the node left nothing behind.
func (n *Node) leftovers() []error {
	var errs []error
	if n.mountNS != "" {
		if pids := n.mountNSProcs(); len(pids) > 0 {
			errs = append(errs, fmt.Errorf("processes %v left in the node's mount namespace", pids))
		}
	}
	if dirs := n.cgroupDirs(); len(dirs) > 0 {
		errs = append(errs, fmt.Errorf("cgroups left: %v", dirs))
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], n.cfg.Dir) {
				errs = append(errs, fmt.Errorf("mount left: %s", f[4]))
			}
		}
	}
	if _, err := net.InterfaceByName(n.bridge); err == nil {
		errs = append(errs, fmt.Errorf("bridge %s left", n.bridge))
	}
	if out, err := exec.Command("ip", "route", "show", kubetest.ServiceCIDR).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		errs = append(errs, fmt.Errorf("the route of %s left: %s (%v)", kubetest.ServiceCIDR, out, err))
	}
	if rules, err := n.IPTablesRules(); err != nil {
		errs = append(errs, err)
	} else if len(rules) > 0 {
		errs = append(errs, fmt.Errorf("iptables rules left: %v", rules))
	}
	return errs
}

// IPTablesRules returns the iptables rules (iptables-save lines) of the
// network namespace that are the node's pods': those naming the pod range's
// addresses or a chain the CNI plugins make (CNI-…).
func (n *Node) IPTablesRules() ([]string, error) {
	out, err := exec.Command("iptables-save").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("kubenode: iptables-save: %w: %s", err, out)
	}
	_, cidr, err := net.ParseCIDR(n.cfg.PodCIDR)
	if err != nil {
		return nil, fmt.Errorf("kubenode: iptables: %w", err)
	}
	prefix := strings.Join(strings.Split(cidr.IP.String(), ".")[:3], ".") + "."
	var rules []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.Contains(line, prefix) || strings.Contains(line, "CNI-") {
			rules = append(rules, line)
		}
	}
	return rules, nil
}
