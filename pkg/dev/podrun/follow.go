package podrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// FollowConfig configures a Follower.
type FollowConfig struct {
	// Client reaches the API server holding the namespaces. Required.
	Client kubernetes.Interface
	// Selector is a label selector of the namespaces to follow (empty:
	// every namespace).
	Selector string
	// BinDir is as Config.BinDir.
	BinDir string
	// Binaries is as Config.Binaries.
	Binaries map[string]string
	// Dir receives one directory per namespace (as Config.Dir). Default a
	// new temporary directory, removed by Close.
	Dir string
	// Poll is how often the namespaces are listed. Default 200 ms.
	Poll time.Duration
	// Log is as Config.Log.
	Log *slog.Logger
}

// Follower runs the workloads of namespaces that appear after it starts,
// as a kubelet runs the pods of workloads created at any time: it lists
// the namespaces of its selector, and starts a Runner for each one as
// soon as a Helm release there is installed (a Secret of Helm's storage
// driver with status deployed or superseded: every object of the release
// exists by then, so the Runner sees all its workloads). It closes a
// namespace's Runner when the namespace is deleted or terminating.
//
// A release that is upgraded keeps the workloads the Runner read at its
// start (a Runner does not follow changes of its workloads).
type Follower struct {
	cfg    FollowConfig
	ownDir bool
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	runners map[string]*Runner // protected by mu
	errs    map[string]error   // protected by mu: why a namespace's Runner could not start
}

// Follow starts a Follower; it runs until Close.
func Follow(cfg FollowConfig) (*Follower, error) {
	if cfg.Client == nil {
		return nil, errors.New("podrun: follow: FollowConfig.Client is required")
	}
	if cfg.Poll == 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	f := &Follower{cfg: cfg, done: make(chan struct{}), runners: map[string]*Runner{}, errs: map[string]error{}}
	if f.cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "podrun-follow-")
		if err != nil {
			return nil, fmt.Errorf("podrun: follow: %w", err)
		}
		f.cfg.Dir, f.ownDir = dir, true
	}
	if _, ok := f.cfg.Binaries[standIn]; !ok {
		// One stand-in for every namespace's Runner, built by the first.
		f.cfg.Binaries = maps.Clone(f.cfg.Binaries)
		if f.cfg.Binaries == nil {
			f.cfg.Binaries = map[string]string{}
		}
		f.cfg.Binaries[standIn] = filepath.Join(f.cfg.Dir, ".bin", standIn) // no namespace is named so
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go f.loop(ctx)
	return f, nil
}

func (f *Follower) loop(ctx context.Context) {
	defer close(f.done)
	t := time.NewTicker(f.cfg.Poll)
	defer t.Stop()
	for {
		if err := f.sync(ctx); err != nil && ctx.Err() == nil {
			f.cfg.Log.Warn("podrun: follow", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sync starts the Runners of the namespaces whose release is installed
// and closes those of the namespaces going away.
func (f *Follower) sync(ctx context.Context) error {
	nss, err := f.cfg.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: f.cfg.Selector})
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, ns := range nss.Items {
		if ns.DeletionTimestamp != nil {
			continue
		}
		live[ns.Name] = true
		f.mu.Lock()
		_, running := f.runners[ns.Name]
		_, failed := f.errs[ns.Name]
		f.mu.Unlock()
		if running || failed {
			continue
		}
		installed, err := f.installed(ctx, ns.Name)
		if err != nil || !installed {
			continue
		}
		r, err := Start(ctx, Config{Client: f.cfg.Client, Namespace: ns.Name, BinDir: f.cfg.BinDir, Binaries: f.cfg.Binaries,
			Dir: filepath.Join(f.cfg.Dir, ns.Name), Log: f.cfg.Log})
		f.mu.Lock()
		if err != nil {
			f.errs[ns.Name] = err
			f.cfg.Log.Error("podrun: follow: start", "namespace", ns.Name, "err", err)
		} else {
			f.runners[ns.Name] = r
			f.cfg.Log.Info("podrun: follow: running", "namespace", ns.Name)
		}
		f.mu.Unlock()
	}
	f.mu.Lock()
	gone := map[string]*Runner{}
	for ns, r := range f.runners {
		if !live[ns] {
			gone[ns] = r
		}
	}
	f.mu.Unlock()
	// A namespace's Runner goes once its processes have stopped, so that a
	// test seeing none sees no process serve either.
	for ns, r := range gone {
		_ = r.Close()
		f.mu.Lock()
		delete(f.runners, ns)
		f.mu.Unlock()
	}
	return nil
}

// installed says whether a Helm release of namespace ns has been
// installed (Helm's Secret driver labels its records owner=helm and with
// the release's status).
func (f *Follower) installed(ctx context.Context, ns string) (bool, error) {
	s, err := f.cfg.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,status in (deployed,superseded)"})
	if err != nil {
		return false, err
	}
	return len(s.Items) > 0, nil
}

// Runner returns the Runner of namespace ns, nil while there is none (before
// its release is installed, and once its processes have stopped).
func (f *Follower) Runner(ns string) *Runner {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runners[ns]
}

// Tail returns the last lines of the logs of every namespace's
// containers, and why a namespace's Runner could not start, for a test's
// failure message.
func (f *Follower) Tail(lines int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, ns := range slices.Sorted(maps.Keys(f.runners)) {
		fmt.Fprintf(&b, "\n== namespace %s:%s", ns, f.runners[ns].Tail(lines))
	}
	for _, ns := range slices.Sorted(maps.Keys(f.errs)) {
		fmt.Fprintf(&b, "\n== namespace %s: not started: %v", ns, f.errs[ns])
	}
	return b.String()
}

// Close stops following and closes every Runner, and removes the
// directory the Follower created.
func (f *Follower) Close() error {
	f.cancel()
	<-f.done
	f.mu.Lock()
	rs := f.runners
	f.runners = map[string]*Runner{}
	f.mu.Unlock()
	for _, r := range rs {
		_ = r.Close()
	}
	if f.ownDir {
		return os.RemoveAll(f.cfg.Dir)
	}
	return nil
}
