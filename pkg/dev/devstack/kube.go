package devstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog/kubestore"
	"github.com/flexplane/flexplane/pkg/dev/kubenode"
	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/pgtest"
	"github.com/flexplane/flexplane/pkg/dev/tcpfront"
)

// Replicas is how many orchestrator replicas the stack runs with Kube.
const Replicas = 2

// LeaseName is the Lease electing the replica that runs the mesh control
// server, in the namespace "default", with Kube.
const LeaseName = "flexplane-mesh-control"

// NodeName is the name of the stack's Kubernetes node with Kube.
const NodeName = "devstack-node"

// clusterControllers are the controllers of kube-controller-manager the
// stack's cluster runs with Kube: what Deployments, Services, service
// accounts, namespaces and a node's health need.
var clusterControllers = []string{
	"deployment-controller", "replicaset-controller", "statefulset-controller", "daemonset-controller", "job-controller",
	"endpointslice-controller", "serviceaccount-controller", "serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller", "namespace-controller", "garbage-collector-controller",
	"pod-garbage-collector-controller", "node-lifecycle-controller", "ttl-controller", "disruption-controller",
}

// orchestratorUnit is an orchestrator process of the stack.
type orchestratorUnit struct {
	name, dataDir string
	args          []string // serve and its flags but those all share
}

// KubeState is Dir/kube/kube.json with Kube: how to reach the stack's
// kube-apiserver and its replicas.
type KubeState struct {
	// Kubeconfig is the admin's kubeconfig of the API server.
	Kubeconfig string `json:"kubeconfig"`
	// Replicas are the orchestrators' own URLs (the stack's URL spreads
	// connections over them), by process name.
	Replicas map[string]string `json:"replicas"`
	// Node is the name of the cluster's node (a kubelet with containerd,
	// kube-proxy and CoreDNS: pkg/dev/kubenode).
	Node string `json:"node"`
	// NodeDir is the node's directory: containerd's and the kubelet's
	// state and the logs of its processes.
	NodeDir string `json:"nodeDir"`
	// NodeCgroup is the cgroup root of the node's pods in each cgroup v1
	// hierarchy, removed when the stack stops.
	NodeCgroup string `json:"nodeCgroup"`
}

// agentDir is the state directory of an agent (or a file next to them):
// with Kube in Dir/kube/agents, thrown away with the mesh state at each
// start.
func (s *stack) agentDir(name string) string {
	if s.cfg.Kube {
		return s.path("kube", "agents", name)
	}
	return s.path("agents", name)
}

// startKube starts what the replicas stand on, fresh on every start: a
// kube-apiserver with etcd, the controllers of clusterControllers and the
// scheduler (pkg/dev/kubetest, `make kube-bin`; pods get their service
// account's token) with the catalog's CRDs,
// a node running pods (pkg/dev/kubenode: containerd, the kubelet,
// kube-proxy, CoreDNS; `make kube-node`), and PostgreSQL (pkg/dev/pgtest, `make postgres`) with
// Headscale's database. It returns the replicas to run and listens on
// the stack's address with a front spreading connections over them, as a
// Service would (to the replicas answering /readyz). The first replica
// serves metrics on metricsAddr.
func (s *stack) startKube(ctx context.Context, metricsAddr string) (_ []orchestratorUnit, closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	// The mesh state starts empty: so do the agents' identities.
	if err := os.RemoveAll(s.path("kube")); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(s.path("kube", "agents"), 0o700); err != nil {
		return nil, nil, err
	}
	t := time.Now()
	bin, err := kubetest.BinDirOf(s.cfg.RepoDir)
	if err != nil {
		return nil, nil, err
	}
	// The pods reach the API server at the kubernetes Service, whose
	// endpoint is the namespace's own address.
	kube, err := kubetest.Start(ctx, kubetest.Config{BinDir: bin, PodAddress: netns.Address,
		Controllers: clusterControllers, Scheduler: true, ServiceAccounts: true})
	if err != nil {
		return nil, nil, fmt.Errorf("kube-apiserver (make kube-bin): %w", err)
	}
	closers = append(closers, func() { _ = kube.Close() })
	node, err := kubenode.Start(ctx, kubenode.Config{API: kube, BinDir: bin, Dir: s.path("kube", "node"), Name: NodeName,
		StartTimeout: 5 * time.Minute})
	if err != nil {
		return nil, nil, fmt.Errorf("the Kubernetes node (make kube-node): %w", err)
	}
	closers = append(closers, func() {
		if err := node.Close(); err != nil {
			s.log.Error("Kubernetes node: close", "err", err)
		}
	})
	s.log.Info("Kubernetes node Ready", "node", node.Name(), "took", time.Since(t).Round(100*time.Millisecond).String())
	if err := kubestore.InstallCRDs(ctx, kube.RESTConfig()); err != nil {
		return nil, nil, err
	}
	kubeconfig, err := kube.WriteKubeconfig()
	if err != nil {
		return nil, nil, err
	}
	pg, err := pgtest.Start(ctx, pgtest.Config{Logger: s.log.With("component", "postgres")})
	if err != nil {
		return nil, nil, fmt.Errorf("PostgreSQL (make postgres; as root): %w", err)
	}
	closers = append(closers, func() { _ = pg.Close() })
	db, err := pg.CreateDatabase(ctx, "headscale")
	if err != nil {
		return nil, nil, err
	}
	s.log.Info("kube-apiserver and PostgreSQL up", "kube", kube.URL(), "postgres", fmt.Sprintf("%s:%d", db.Host, db.Port),
		"took", time.Since(t).Round(100*time.Millisecond).String())

	pgURL := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", db.User, db.Host, db.Port, db.Name)
	stunPort, err := freeUDPPort()
	if err != nil {
		return nil, nil, err
	}
	st := KubeState{Kubeconfig: kubeconfig, Replicas: map[string]string{}, Node: node.Name(), NodeDir: node.Dir(), NodeCgroup: node.CgroupRoot()}
	var units []orchestratorUnit
	var backends []string
	for i := range Replicas {
		listen, err := freeTCPAddr()
		if err != nil {
			return nil, nil, err
		}
		metrics := metricsAddr
		if i > 0 {
			if metrics, err = freeTCPAddr(); err != nil {
				return nil, nil, err
			}
		}
		name, dir := fmt.Sprintf("orchestrator-%d", i), s.path("kube", fmt.Sprintf("orchestrator-%d", i))
		units = append(units, orchestratorUnit{name: name, dataDir: dir, args: []string{"serve",
			"-listen", listen, "-public-url", s.url, "-peer-url", "http://" + listen, "-data-dir", dir,
			// One STUN port, each replica on its own loopback address.
			"-stun-addr", fmt.Sprintf("127.0.0.%d:%d", i+1, stunPort), "-metrics-addr", metrics,
			"-mesh-postgres", pgURL, "-mesh-postgres-password-file", db.PasswordFile,
			"-catalog", "kubernetes", "-kubeconfig", kubeconfig, "-namespace", "default", "-lease-name", LeaseName}})
		backends = append(backends, listen)
		st.Replicas[name] = "http://" + listen
	}
	front, err := tcpfront.Listen(s.cfg.Addr, backends...)
	if err != nil {
		return nil, nil, fmt.Errorf("front on %s: %w", s.cfg.Addr, err)
	}
	front.WatchReady("/readyz") // the orchestrator's readiness, the chart's probe
	closers = append(closers, func() { _ = front.Close() })
	if err := writeJSON(s.path("kube", "kube.json"), st); err != nil {
		return nil, nil, err
	}
	s.kube = &st
	return units, closeAll, nil
}

// enrollKey makes a reusable enrollment key with `orchestrator keys
// create` on the orchestrator that runs the mesh control server (with
// Kube, whichever replica leads: only its data directory has the socket).
func (s *stack) enrollKey(ctx context.Context, orchestrators []orchestratorUnit) (string, error) {
	var key string
	err := s.poll(ctx, 60*time.Second, "the mesh control server's socket", func() error {
		var errs []error
		for _, o := range orchestrators {
			if _, err := os.Stat(filepath.Join(o.dataDir, "headscale", "headscale.sock")); err != nil {
				errs = append(errs, err)
				continue
			}
			k, err := s.mux.run(ctx, "keys", s.cfg.Dir, s.path("bin", "orchestrator"),
				"keys", "create", "-data-dir", o.dataDir, "-reusable", "-ttl", "15m")
			if err == nil {
				key = strings.TrimSpace(k)
				return nil
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
	return key, err
}

func freeTCPAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func freeUDPPort() (int, error) {
	c, err := net.ListenPacket("udp", ":0")
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}
