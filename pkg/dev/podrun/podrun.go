// Package podrun runs the pods of a namespace's Deployments and
// StatefulSets, as created in a real API server (pkg/dev/kubetest), as
// local processes: it plays the kubelet and the workload controllers that
// the test API server does not have. For each workload it makes one pod's
// worth of files (the Secrets, ConfigMaps and projected volumes it mounts,
// written to a directory; volume claims as directories, emptyDirs as
// directories its containers share),
// rewrites the mount paths in the containers' arguments, environment and
// mounted ConfigMap files to those directories, starts each container's
// command with the binary of that name from the binaries built by `make
// kube-bin` (kube-apiserver, kube-controller-manager, kube-scheduler,
// etcd; the orchestrator's, which the chart runs as the API server's
// egress proxy, is a stand-in of its egress-proxy subcommand built from
// ./egressproxy, see Config.Binaries), restarts it when it exits (restartPolicy Always), probes its
// readiness probe and writes the workload's status (ready replicas) as
// the controllers would. A Follower does so for namespaces that appear
// later, once a Helm release in them is installed.
//
// What it cannot do: several replicas of a workload (each would need its
// own address), images (the binary comes from the command's name), pod
// networking (every pod is 127.0.0.1, so the chart's ports and addresses
// must be loopback ones that do not collide).
package podrun

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/flexplane/flexplane/pkg/dev/kubetest"
)

// PodIP is the address every pod has.
const PodIP = "127.0.0.1"

// Config configures a Runner.
type Config struct {
	// Client reaches the API server holding the workloads. Required.
	Client kubernetes.Interface
	// Namespace holds the Deployments and StatefulSets to run. Required.
	Namespace string
	// BinDir holds the binaries the containers' commands name. Default
	// kubetest.BinDir().
	BinDir string
	// Dir receives the pods' files and logs. Default a new temporary
	// directory, removed by Close.
	Dir string
	// Binaries maps a command's name to the binary that runs it, ahead
	// of BinDir. A container whose command is orchestrator (the egress
	// proxy) runs the stand-in of package ./egressproxy, built (go build)
	// when first needed to the path Binaries names for it, else into Dir.
	Binaries map[string]string
	// Log receives the runner's events. Default slog.Default().
	Log *slog.Logger
}

// standIn is the command whose stand-in podrun builds, and the stand-in's
// package.
const (
	standIn        = "orchestrator"
	standInPackage = "github.com/flexplane/flexplane/pkg/dev/podrun/egressproxy"
)

// binary returns the path of the binary of command name.
func (r *Runner) binary(ctx context.Context, name string) (string, error) {
	p, ok := r.cfg.Binaries[name]
	if name == standIn {
		if !ok {
			p = filepath.Join(r.cfg.Dir, "bin", name)
		}
		return p, buildStandIn(ctx, p)
	}
	if ok {
		return p, nil
	}
	bin := filepath.Join(r.cfg.BinDir, name)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s is missing in %s: run `make kube-bin`: %w", name, r.cfg.BinDir, err)
	}
	return bin, nil
}

// buildStandIn builds the stand-in to out unless out exists (a Follower's
// namespaces share one); it is renamed into place whole.
func buildStandIn(ctx context.Context, out string) error {
	if _, err := os.Stat(out); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	b, err := exec.CommandContext(ctx, "go", "build", "-o", tmp, standInPackage).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s: %w\n%s", standInPackage, err, b)
	}
	return os.Rename(tmp, out)
}

// Runner runs the pods of one namespace.
type Runner struct {
	cfg    Config
	ownDir bool
	cancel context.CancelFunc
	wg     sync.WaitGroup
	pods   []*pod

	// tempDirs are the pods' emptyDirs, removed by Close.
	tempDirs []string

	closeMu sync.Mutex
	closed  bool // protected by closeMu
}

// workload is a Deployment or StatefulSet to run one pod of.
type workload struct {
	kind, name string
	pod        string // the pod's name
	template   corev1.PodTemplateSpec
	claims     []string // volume claim templates: directories
	// markReady writes the workload's status: ready or not.
	markReady func(ctx context.Context, ready bool) error
}

// Start reads the namespace's workloads, starts one pod of each and
// returns; the pods become ready (and their workloads' status says so) in
// the background. A workload the runner cannot run (several replicas, an
// unsupported volume, a binary that is missing) is an error and nothing
// is left running.
func Start(ctx context.Context, cfg Config) (_ *Runner, err error) {
	if cfg.Client == nil || cfg.Namespace == "" {
		return nil, errors.New("podrun: Config.Client and Config.Namespace are required")
	}
	if cfg.BinDir == "" {
		if cfg.BinDir, err = kubetest.BinDir(); err != nil {
			return nil, fmt.Errorf("podrun: %w", err)
		}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Runner{cfg: cfg}
	if r.cfg.Dir == "" {
		if r.cfg.Dir, err = os.MkdirTemp("", "podrun-"); err != nil {
			return nil, fmt.Errorf("podrun: %w", err)
		}
		r.ownDir = true
	}
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	wls, err := r.workloads(ctx)
	if err != nil {
		return nil, fmt.Errorf("podrun: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	for _, w := range wls {
		p, err := r.preparePod(ctx, w)
		if err != nil {
			return nil, fmt.Errorf("podrun: %s %s: %w", w.kind, w.name, err)
		}
		r.pods = append(r.pods, p)
	}
	for _, p := range r.pods {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			p.run(runCtx)
		}()
	}
	return r, nil
}

// workloads lists the StatefulSets, then the Deployments, of the namespace.
func (r *Runner) workloads(ctx context.Context) ([]workload, error) {
	apps := r.cfg.Client.AppsV1()
	ns := r.cfg.Namespace
	var out []workload
	stss, err := apps.StatefulSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, s := range stss.Items {
		if n := replicas(s.Spec.Replicas); n != 1 {
			return nil, fmt.Errorf("statefulset %s has %d replicas: podrun runs one", s.Name, n)
		}
		w := workload{kind: "statefulset", name: s.Name, pod: s.Name + "-0", template: s.Spec.Template}
		for _, c := range s.Spec.VolumeClaimTemplates {
			w.claims = append(w.claims, c.Name)
		}
		w.markReady = func(ctx context.Context, ready bool) error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, err := apps.StatefulSets(ns).Get(ctx, w.name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				n := int32(0)
				if ready {
					n = 1
				}
				cur.Status = appsv1.StatefulSetStatus{ObservedGeneration: cur.Generation, Replicas: 1,
					ReadyReplicas: n, AvailableReplicas: n, CurrentReplicas: 1, UpdatedReplicas: 1}
				_, err = apps.StatefulSets(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
				return err
			})
		}
		out = append(out, w)
	}
	ds, err := apps.Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, d := range ds.Items {
		if n := replicas(d.Spec.Replicas); n != 1 {
			return nil, fmt.Errorf("deployment %s has %d replicas: podrun runs one", d.Name, n)
		}
		w := workload{kind: "deployment", name: d.Name, pod: d.Name + "-podrun", template: d.Spec.Template}
		w.markReady = func(ctx context.Context, ready bool) error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, err := apps.Deployments(ns).Get(ctx, w.name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				n := int32(0)
				if ready {
					n = 1
				}
				cur.Status = appsv1.DeploymentStatus{ObservedGeneration: cur.Generation, Replicas: 1,
					UpdatedReplicas: 1, ReadyReplicas: n, AvailableReplicas: n, UnavailableReplicas: 1 - n}
				_, err = apps.Deployments(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
				return err
			})
		}
		out = append(out, w)
	}
	return out, nil
}

func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

// pod is one running pod: its containers and its workload.
type pod struct {
	r          *Runner
	w          workload
	containers []*container
}

// container is one container's process as it will be started.
type container struct {
	name  string
	bin   string
	args  []string
	env   []string
	dir   string // working directory
	log   string // log file
	probe *corev1.Probe
	ports []corev1.ContainerPort
}

// mount is a volume mount: the path in the container and the directory
// standing for it.
type mount struct{ path, dir string }

// preparePod writes the pod's files and works out its containers'
// processes.
func (r *Runner) preparePod(ctx context.Context, w workload) (*pod, error) {
	spec := w.template.Spec
	if len(spec.InitContainers) > 0 {
		return nil, errors.New("init containers are not supported")
	}
	p := &pod{r: r, w: w}
	podDir := filepath.Join(r.cfg.Dir, w.pod)
	// A pod's emptyDirs are shared by its containers (a unix socket in
	// one is how two of them talk), in a directory of a short path, as a
	// socket's path must be.
	emptyDirs := map[string]string{}
	for _, v := range spec.Volumes {
		if v.EmptyDir == nil {
			continue
		}
		dir, err := os.MkdirTemp("", "podrun-")
		if err != nil {
			return nil, err
		}
		r.tempDirs = append(r.tempDirs, dir)
		emptyDirs[v.Name] = dir
	}
	for _, c := range spec.Containers {
		cdir := filepath.Join(podDir, c.Name)
		if err := os.MkdirAll(filepath.Join(cdir, "tmp"), 0o700); err != nil {
			return nil, err
		}
		var mounts []mount
		for _, vm := range c.VolumeMounts {
			dir := filepath.Join(cdir, "volumes", vm.Name)
			if d, ok := emptyDirs[vm.Name]; ok {
				dir = d
			}
			if vm.SubPath != "" {
				dir = filepath.Join(dir, vm.SubPath)
			}
			mounts = append(mounts, mount{path: vm.MountPath, dir: dir})
		}
		// Longest mount path first, so a nested mount wins.
		slices.SortFunc(mounts, func(a, b mount) int { return len(b.path) - len(a.path) })
		rewrite := func(s string) string { return rewritePaths(s, mounts) }
		for _, vm := range c.VolumeMounts {
			if d, ok := emptyDirs[vm.Name]; ok {
				if err := os.MkdirAll(filepath.Join(d, vm.SubPath), 0o700); err != nil {
					return nil, err
				}
				continue
			}
			if err := r.writeVolume(ctx, spec.Volumes, w.claims, vm.Name, filepath.Join(cdir, "volumes", vm.Name), rewrite); err != nil {
				return nil, fmt.Errorf("container %s: volume %s: %w", c.Name, vm.Name, err)
			}
		}
		env, err := r.env(ctx, w, c)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
		cmd := append(slices.Clone(c.Command), c.Args...)
		if len(c.Command) == 0 {
			return nil, fmt.Errorf("container %s: no command (an image's entrypoint cannot be run)", c.Name)
		}
		for i := range cmd {
			cmd[i] = rewrite(expand(cmd[i], env))
		}
		bin, err := r.binary(ctx, filepath.Base(cmd[0]))
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
		var envList []string
		for _, e := range c.Env {
			envList = append(envList, e.Name+"="+rewrite(env[e.Name]))
		}
		envList = append(envList, "HOME="+cdir, "TMPDIR="+filepath.Join(cdir, "tmp"))
		probe := c.ReadinessProbe
		if probe == nil {
			probe = c.StartupProbe
		}
		p.containers = append(p.containers, &container{name: c.Name, bin: bin, args: cmd[1:], env: envList,
			dir: cdir, log: filepath.Join(podDir, c.Name+".log"), probe: probe, ports: c.Ports})
	}
	return p, nil
}

// rewritePaths replaces each mount path in s (as the whole of s, after a
// flag's "=", or as a path's prefix) by its directory, in one pass (a
// directory may itself lie under a mount path, such as /tmp). mounts are
// longest path first, so a nested mount wins.
func rewritePaths(s string, mounts []mount) string {
	for _, m := range mounts {
		if s == m.path {
			return m.dir
		}
		if strings.HasSuffix(s, "="+m.path) {
			return strings.TrimSuffix(s, m.path) + m.dir
		}
	}
	pairs := make([]string, 0, 2*len(mounts))
	for _, m := range mounts {
		pairs = append(pairs, m.path+"/", m.dir+"/")
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) of the container's environment as the kubelet
// does ($$ is a literal $, an unknown variable stays as written).
func expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		if ref == "$$" {
			return "$"
		}
		if v, ok := env[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

// env resolves a container's environment.
func (r *Runner) env(ctx context.Context, w workload, c corev1.Container) (map[string]string, error) {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = w.pod
			case "metadata.namespace":
				env[e.Name] = r.cfg.Namespace
			case "status.podIP", "status.hostIP":
				env[e.Name] = PodIP
			case "spec.nodeName":
				env[e.Name] = "podrun"
			default:
				return nil, fmt.Errorf("env %s: field %s is not supported", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, err := r.cfg.Client.CoreV1().Secrets(r.cfg.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			env[e.Name] = string(s.Data[ref.Key])
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, err := r.cfg.Client.CoreV1().ConfigMaps(r.cfg.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			env[e.Name] = cm.Data[ref.Key]
		default:
			return nil, fmt.Errorf("env %s: source not supported", e.Name)
		}
	}
	return env, nil
}

// writeVolume makes the directory of volume name: its files, or an empty
// directory. Files from ConfigMaps go through rewrite (they may name
// mounted paths, as a kubeconfig names its certificate files).
func (r *Runner) writeVolume(ctx context.Context, vols []corev1.Volume, claims []string, name, dir string, rewrite func(string) string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if slices.Contains(claims, name) {
		return nil
	}
	i := slices.IndexFunc(vols, func(v corev1.Volume) bool { return v.Name == name })
	if i < 0 {
		return errors.New("no such volume")
	}
	v := vols[i].VolumeSource
	switch {
	case v.EmptyDir != nil:
		return nil
	case v.Secret != nil:
		return r.writeSecret(ctx, dir, v.Secret.SecretName, v.Secret.Items)
	case v.ConfigMap != nil:
		return r.writeConfigMap(ctx, dir, v.ConfigMap.Name, v.ConfigMap.Items, rewrite)
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			var err error
			switch {
			case src.Secret != nil:
				err = r.writeSecret(ctx, dir, src.Secret.Name, src.Secret.Items)
			case src.ConfigMap != nil:
				err = r.writeConfigMap(ctx, dir, src.ConfigMap.Name, src.ConfigMap.Items, rewrite)
			default:
				err = errors.New("only Secret and ConfigMap projections are supported")
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	return errors.New("volume type not supported")
}

func (r *Runner) writeSecret(ctx context.Context, dir, name string, items []corev1.KeyToPath) error {
	s, err := r.cfg.Client.CoreV1().Secrets(r.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return writeItems(dir, "secret "+name, s.Data, items)
}

func (r *Runner) writeConfigMap(ctx context.Context, dir, name string, items []corev1.KeyToPath, rewrite func(string) string) error {
	cm, err := r.cfg.Client.CoreV1().ConfigMaps(r.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(rewrite(v))
	}
	return writeItems(dir, "configmap "+name, data, items)
}

// writeItems writes data's keys as files (items map keys to paths; no
// items: every key under its own name).
func writeItems(dir, what string, data map[string][]byte, items []corev1.KeyToPath) error {
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("%s has no key %s", what, it.Key)
		}
		p := filepath.Join(dir, filepath.Clean("/"+it.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, v, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// run keeps the pod's containers running until ctx ends, and its
// workload's status up to date.
func (p *pod) run(ctx context.Context) {
	log := p.r.cfg.Log.With("namespace", p.r.cfg.Namespace, "pod", p.w.pod)
	var wg sync.WaitGroup
	ready := make(chan bool, len(p.containers)*4)
	for _, c := range p.containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.keepRunning(ctx, log, ready)
		}()
	}
	go func() { wg.Wait(); close(ready) }()
	readyCount, wasReady := 0, false
	for up := range ready {
		if up {
			readyCount++
		} else {
			readyCount--
		}
		now := readyCount == len(p.containers)
		if now == wasReady || ctx.Err() != nil {
			continue
		}
		wasReady = now
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := p.w.markReady(sctx, now); err != nil {
			log.Warn("podrun: workload status", "err", err)
		} else {
			log.Info("podrun: pod readiness", "ready", now)
		}
		cancel()
	}
}

// keepRunning starts the container's process, waits for it to pass its
// probe (reporting true on ready), and restarts it with a backoff when it
// exits (reporting false when it had been ready).
func (c *container) keepRunning(ctx context.Context, log *slog.Logger, ready chan<- bool) {
	backoff := time.Second
	for ctx.Err() == nil {
		logf, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			log.Error("podrun: log", "err", err)
			return
		}
		cmd := exec.Command(c.bin, c.args...)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = c.dir, c.env, logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
		logf.Close()
		if err != nil {
			log.Error("podrun: start", "container", c.name, "err", err)
			return
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		probed := make(chan struct{})
		pctx, cancel := context.WithCancel(ctx)
		go func() {
			if c.waitReady(pctx) == nil {
				close(probed)
			}
		}()
		wasReady := false
		started := time.Now()
	wait:
		for {
			select {
			case <-probed:
				probed = nil
				wasReady = true
				ready <- true
			case err := <-exited:
				log.Warn("podrun: container exited", "container", c.name, "err", err, "log", c.log)
				break wait
			case <-ctx.Done():
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
				break wait
			}
		}
		cancel()
		if wasReady {
			ready <- false
		}
		if time.Since(started) > time.Minute {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 20*time.Second)
	}
}

// waitReady polls the container's probe (an HTTP GET) until it succeeds;
// a container without one is ready once started. It polls every 200 ms,
// more often than a kubelet's period, so readiness is seen when it
// happens.
func (c *container) waitReady(ctx context.Context) error {
	if c.probe == nil {
		return nil
	}
	get := c.probe.HTTPGet
	if get == nil {
		return errors.New("only HTTP probes are supported")
	}
	port, err := c.port(get.Port)
	if err != nil {
		return err
	}
	host := get.Host
	if host == "" {
		host = PodIP
	}
	scheme := "http"
	if get.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	url := scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + get.Path
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// As a kubelet's probes, which do not verify the certificate.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes only
	}}
	defer client.CloseIdleConnections()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode >= 200 && resp.StatusCode < 400 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// port resolves a probe's port, by number or by the container port's name.
func (c *container) port(p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("probe port %q is not a container port", p.StrVal)
}

// Logs returns the paths of the containers' log files.
func (r *Runner) Logs() []string {
	var out []string
	for _, p := range r.pods {
		for _, c := range p.containers {
			out = append(out, c.log)
		}
	}
	return out
}

// Tail returns the last lines of every container's log, for a test's
// failure message.
func (r *Runner) Tail(lines int) string {
	var b strings.Builder
	for _, path := range r.Logs() {
		data, _ := os.ReadFile(path)
		l := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(l) > lines {
			l = l[len(l)-lines:]
		}
		fmt.Fprintf(&b, "\n== %s:\n%s", path, strings.Join(l, "\n"))
	}
	return b.String()
}

// Close stops every process (SIGTERM, then SIGKILL after 10 s) and removes
// the directory the runner created. It is safe to call more than once.
func (r *Runner) Close() error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
	for _, d := range r.tempDirs {
		_ = os.RemoveAll(d)
	}
	if r.ownDir {
		return os.RemoveAll(r.cfg.Dir)
	}
	return nil
}
