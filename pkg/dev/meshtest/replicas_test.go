package meshtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/catalog/kubestore"
	"github.com/flexplane/flexplane/pkg/dev/devidp"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/pgtest"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

// replica is one orchestrator process of TestReplicasFailover.
type replica struct {
	name, listen, dataDir string
	cmd                   *exec.Cmd
	exited                chan struct{}
}

func (r *replica) url() string { return "http://" + r.listen }

// service is what a Kubernetes Service does for the replicas: each TCP
// connection goes to one of them, the next one that accepts it.
type service struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint32
}

func startService(t *testing.T, backends []string) *service {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &service{ln: ln, backends: backends}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.forward(c)
		}
	}()
	return s
}

func (s *service) forward(c net.Conn) {
	defer c.Close()
	start := int(s.next.Add(1))
	for i := range s.backends {
		b, err := net.DialTimeout("tcp", s.backends[(start+i)%len(s.backends)], time.Second)
		if err != nil {
			continue
		}
		defer b.Close()
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
		go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
		<-done
		return
	}
}

func (s *service) url() string { return "http://" + s.ln.Addr().String() }

// TestReplicasFailover runs three orchestrator processes as replicas on a
// real kube-apiserver (the Lease, the CRD catalog) with the mesh state in
// PostgreSQL, behind one Service address the agents use, and SIGKILLs the
// one running the mesh control server. Within 30s another replica serves
// the control protocol; the agents stay ONLINE in the API of both
// survivors all along (polled with a client that retries once: no request
// may fail); a new agent enrolls afterwards; no node, address or tag is
// lost in the control server's node list.
func TestReplicasFailover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	meshnode.PrepareProcess("http://")
	tmp := shortDir(t, "fpr")
	bin := meshtest.BuildProgram(t, tmp, "orchestrator", "github.com/flexplane/flexplane/cmd/orchestrator", "")

	kube := kubetest.ForTest(t)
	if err := kubestore.InstallCRDs(ctx, kube.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := kube.WriteKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.New(t).Database(t, "headscale")
	users := meshtest.DefaultUsers()
	for i := range users {
		users[i].Password = users[i].Username + "-pw"
	}
	idp, err := devidp.New(devidp.Config{KeyDir: filepath.Join(tmp, "idp"), Users: users,
		Clients: []devidp.Client{{ID: meshtest.APIClientID, RedirectURIs: []string{"http://127.0.0.1/callback"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := idp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idp.Close() })
	tok, err := idp.Login(ctx, meshtest.APIClientID, "admin", "admin-pw")
	if err != nil {
		t.Fatal(err)
	}
	admin := "Bearer " + tok.AccessToken

	replicas := make([]*replica, 3)
	var backends []string
	for i := range replicas {
		r := &replica{name: fmt.Sprintf("orchestrator-%d", i), listen: freeTCP(t), dataDir: filepath.Join(tmp, fmt.Sprint(i))}
		replicas[i] = r
		backends = append(backends, r.listen)
	}
	svc := startService(t, backends)
	pgURL := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", db.User, db.Host, db.Port, db.Name)
	for _, r := range replicas {
		r.cmd = exec.Command(bin, "serve",
			"-listen", r.listen, "-public-url", svc.url(), "-peer-url", r.url(), "-data-dir", r.dataDir,
			"-stun-addr", "127.0.0.1:0", "-mesh-postgres", pgURL, "-mesh-postgres-password-file", db.PasswordFile,
			"-oidc-issuer", idp.Issuer(), "-oidc-audience", meshtest.APIClientID,
			"-catalog", "kubernetes", "-kubeconfig", kubeconfig, "-namespace", "default",
			"-lease-name", "mesh-"+strings.ToLower(t.Name()), "-log-level", "debug")
		log, err := os.Create(filepath.Join(tmp, r.name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		r.cmd.Stdout, r.cmd.Stderr = log, log
		r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		r.exited = make(chan struct{})
		if err := startOnOwnThread(r.cmd, r.exited); err != nil {
			t.Fatal(err)
		}
		go func() {
			err := r.cmd.Wait()
			fmt.Fprintf(log, "exited: %v\n", err)
			log.Close()
			close(r.exited)
		}()
		t.Cleanup(func() {
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.exited:
			case <-time.After(15 * time.Second):
				_ = r.cmd.Process.Kill()
				<-r.exited
			}
			if t.Failed() {
				b, _ := os.ReadFile(log.Name())
				t.Logf("%s log (tail):\n%s", r.name, tail(string(b), 6000))
			}
		})
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	ready := func(r *replica) error {
		resp, err := hc.Get(r.url() + orchestrator.ReadyzPath)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", r.name, b)
		}
		return nil
	}
	pollUntil(t, 90*time.Second, "every replica ready", func() error {
		return errors.Join(ready(replicas[0]), ready(replicas[1]), ready(replicas[2]))
	})

	cs, err := kubernetes.NewForConfig(kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	holder := func() string {
		l, err := cs.CoordinationV1().Leases("default").Get(ctx, "mesh-"+strings.ToLower(t.Name()), metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	leaderOf := func() *replica {
		for _, r := range replicas {
			if r.url() == holder() {
				return r
			}
		}
		return nil
	}
	var leader *replica
	pollUntil(t, 30*time.Second, "a leader", func() error {
		if leader = leaderOf(); leader == nil {
			return errors.New("no replica holds the lease")
		}
		return nil
	})
	meshAPI := func(r *replica) *meshcontrol.Client {
		c, err := meshcontrol.Dial(orchestrator.SocketPath(r.dataDir))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	api := meshAPI(leader)
	key, err := api.CreateKey(ctx, meshcontrol.KeyOptions{Reusable: true, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}

	const token = "flexplane@pve!agent=replicas"
	sim, err := pvesim.Start(pvesim.Config{Cluster: "ha", Nodes: 4, Tokens: []string{token}, DiskDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	startAgent := func(node, key string) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		a, err := agent.Start(actx, agent.Config{
			ControlURL: svc.url(), AuthKey: key, StateDir: shortDir(t, "fpra"), NodeName: node, MeshName: "ha-" + node,
			ProxmoxURL: sim.URL(), ProxmoxToken: token, ProxmoxFingerprint: sim.Fingerprint(), Version: "meshtest",
		})
		if err != nil {
			t.Fatalf("agent %s: %v", node, err)
		}
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			a.Shutdown(sctx)
		})
	}
	nodes := sim.NodeNames()
	for _, n := range nodes[:3] {
		startAgent(n, key.Secret)
	}
	hosts := func(r *replica) error {
		resp, err := gqltest.Post(ctx, hc, r.url()+orchestrator.APIPath, gqltest.Request{Query: `{ hosts { name status } }`, Authorization: admin})
		if err != nil {
			return err
		}
		if err := resp.Err(); err != nil {
			return err
		}
		var d struct {
			Hosts []struct{ Name, Status string }
		}
		if err := json.Unmarshal(resp.Data["hosts"], &d.Hosts); err != nil {
			return err
		}
		online := 0
		for _, h := range d.Hosts {
			if h.Status == "ONLINE" {
				online++
			}
		}
		if online < 3 {
			return fmt.Errorf("%s: %d of %d hosts ONLINE: %+v", r.name, online, len(d.Hosts), d.Hosts)
		}
		return nil
	}
	pollUntil(t, 90*time.Second, "the agents ONLINE on every replica", func() error {
		return errors.Join(hosts(replicas[0]), hosts(replicas[1]), hosts(replicas[2]))
	})
	before, err := api.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Poll the hosts on the survivors during the failover, retrying once.
	var survivors []*replica
	for _, r := range replicas {
		if r != leader {
			survivors = append(survivors, r)
		}
	}
	var requests, retried, failed atomic.Int64
	var failures sync.Map
	pollCtx, stopPolling := context.WithCancel(ctx)
	var pollers sync.WaitGroup
	for _, r := range survivors {
		pollers.Go(func() {
			for pollCtx.Err() == nil {
				requests.Add(1)
				if err := hosts(r); err != nil {
					retried.Add(1)
					if err = hosts(r); err != nil && pollCtx.Err() == nil {
						failed.Add(1)
						failures.Store(time.Now(), err.Error())
					}
				}
				select {
				case <-pollCtx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		})
	}

	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-leader.exited
	var next *replica
	pollUntil(t, 30*time.Second, "another replica serving the control protocol", func() error {
		if next = leaderOf(); next == nil || next == leader {
			return errors.New("the lease is still the killed replica's")
		}
		// The control protocol's key, through the Service and through
		// both survivors (one forwards).
		for _, u := range []string{svc.url(), survivors[0].url(), survivors[1].url()} {
			resp, err := hc.Get(u + "/key?v=100")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s/key: %s", u, resp.Status)
			}
		}
		return nil
	})
	failover := time.Since(killed)
	api = meshAPI(next)
	pollUntil(t, 60*time.Second, "the agents back on the new control server", func() error {
		ns, err := api.Nodes(ctx)
		if err != nil {
			return err
		}
		for _, n := range ns {
			if n.HasTag(meshcontrol.TagAgent) && !n.Online {
				return fmt.Errorf("%s offline", n.GivenName)
			}
		}
		return nil
	})
	stopPolling()
	pollers.Wait()
	t.Logf("failover: another replica served the control protocol %v after the SIGKILL; of %d host polls on the survivors %d needed the retry, %d failed after it",
		failover.Round(100*time.Millisecond), requests.Load(), retried.Load(), failed.Load())
	if failover > 30*time.Second {
		t.Errorf("failover took %v, more than 30s", failover)
	}
	failures.Range(func(k, v any) bool {
		t.Errorf("host poll failed at +%v: %v", k.(time.Time).Sub(killed).Round(100*time.Millisecond), v)
		return true
	})

	// Enrollment works again.
	fresh, err := api.CreateKey(ctx, meshcontrol.KeyOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	startAgent(nodes[3], fresh.Secret)
	pollUntil(t, 60*time.Second, "the new agent ONLINE on the survivors", func() error {
		var errs []error
		for _, r := range survivors {
			resp, err := gqltest.Post(ctx, hc, r.url()+orchestrator.APIPath, gqltest.Request{Query: `{ hosts { name status } }`, Authorization: admin})
			if err == nil {
				err = resp.Err()
			}
			if err == nil && !strings.Contains(resp.Raw, `"name":"`+nodes[3]+`","status":"ONLINE"`) {
				err = fmt.Errorf("%s: %s", r.name, resp.Raw)
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})

	// No node lost: same id, name, addresses and tags.
	after, err := api.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range before {
		i := slices.IndexFunc(after, func(a meshcontrol.Node) bool { return a.ID == b.ID })
		if i < 0 {
			t.Errorf("node %d %s lost in the failover", b.ID, b.GivenName)
			continue
		}
		a := after[i]
		if a.GivenName != b.GivenName || !slices.Equal(a.Addrs, b.Addrs) || !slices.Equal(a.Tags, b.Tags) {
			t.Errorf("node %d changed in the failover: %+v, then %+v", b.ID, b, a)
		}
	}
}

// startOnOwnThread starts cmd from an OS thread that stays until exited
// is closed: the parent-death signal follows the thread that started the
// process, and the test's threads come and go.
func startOnOwnThread(cmd *exec.Cmd, exited <-chan struct{}) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		errc <- err
		if err == nil {
			<-exited
		}
	}()
	return <-errc
}

// pollUntil calls f until it succeeds, failing t with its last error after
// timeout.
func pollUntil(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freeTCP(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// shortDir is a temporary directory with a short path (unix sockets).
func shortDir(t *testing.T, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
