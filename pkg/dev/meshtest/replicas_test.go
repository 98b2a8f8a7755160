package meshtest_test

import (
	"context"
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

	"tailscale.com/net/stun"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/catalog/kubestore"
	"github.com/flexplane/flexplane/pkg/dev/devidp"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/pgtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/tcpfront"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	"github.com/flexplane/flexplane/pkg/mesh/syncowner"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

// replica is one orchestrator process of TestReplicasFailover.
type replica struct {
	name, listen, dataDir string
	stun                  string // its STUN address: 127.0.0.N, one port for all
	cmd                   *exec.Cmd
	exited                chan struct{}
	log                   string // the file of its output, once started
}

func (r *replica) url() string { return "http://" + r.listen }

// replicaSet is the stack of the replica tests: three orchestrator
// processes as replicas on a real kube-apiserver (the Lease, the CRD
// catalog) with the mesh state in PostgreSQL, behind one Service address
// the agents use, and a simulated zone "ha" of 4 nodes, 3 of them with a
// real agent that is ONLINE on every replica.
type replicaSet struct {
	t        *testing.T
	tmp      string
	replicas []*replica
	svc      *tcpfront.Front // the Service
	idp      *devidp.Server
	admin    string // the admin's Authorization header
	lease    string
	cs       kubernetes.Interface
	sim      *pvesim.Cluster
	hc       *http.Client

	mu     sync.Mutex
	agents []*agent.Agent // started by startAgent; protected by mu
}

// simToken is the simulated zone's API token of the agents.
const simToken = "flexplane@pve!agent=replicas"

// startReplicas starts a replicaSet whose orchestrators get the flags
// extra besides the set's, and whose zone's tasks take timing.
func startReplicas(t *testing.T, timing pvesim.Timing, extra ...string) *replicaSet {
	t.Helper()
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
	rs := &replicaSet{t: t, tmp: tmp, idp: idp, lease: "mesh-" + strings.ToLower(t.Name()), hc: &http.Client{Timeout: 10 * time.Second}}
	rs.admin = rs.token("admin")

	// One STUN port, as in a cluster: each replica on its own address.
	rs.replicas = make([]*replica, 3)
	var backends []string
	stunPort := freeUDPPort(t)
	for i := range rs.replicas {
		r := &replica{name: fmt.Sprintf("orchestrator-%d", i), listen: freeTCP(t), dataDir: filepath.Join(tmp, fmt.Sprint(i)),
			stun: fmt.Sprintf("127.0.0.%d:%d", i+1, stunPort)}
		rs.replicas[i] = r
		backends = append(backends, r.listen)
	}
	if rs.svc, err = tcpfront.Listen("127.0.0.1:0", backends...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.svc.Close() })
	pgURL := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", db.User, db.Host, db.Port, db.Name)
	// The replicas stop together, as a Deployment's pods do: each has 15s
	// after its SIGTERM.
	t.Cleanup(func() {
		var started []*replica
		for _, r := range rs.replicas {
			if r.log != "" { // started
				started = append(started, r)
				_ = r.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		deadline := time.After(15 * time.Second)
		for _, r := range started {
			select {
			case <-r.exited:
			case <-deadline:
				_ = r.cmd.Process.Kill()
				<-r.exited
			}
			if t.Failed() {
				b, _ := os.ReadFile(r.log)
				t.Logf("%s log (tail):\n%s", r.name, tail(string(b), 6000))
			}
		}
	})
	for _, r := range rs.replicas {
		r.cmd = exec.Command(bin, append([]string{"serve",
			"-listen", r.listen, "-public-url", rs.svc.URL(), "-peer-url", r.url(), "-data-dir", r.dataDir,
			"-stun-addr", r.stun, "-mesh-postgres", pgURL, "-mesh-postgres-password-file", db.PasswordFile,
			"-oidc-issuer", idp.Issuer(), "-oidc-audience", meshtest.APIClientID,
			"-catalog", "kubernetes", "-kubeconfig", kubeconfig, "-namespace", "default",
			"-lease-name", rs.lease, "-log-level", "debug"}, extra...)...)
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
		r.log = log.Name()
		go func() {
			err := r.cmd.Wait()
			fmt.Fprintf(log, "exited: %v\n", err)
			log.Close()
			close(r.exited)
		}()
	}
	poll.Until(t, 90*time.Second, "every replica ready", func() error {
		return errors.Join(rs.ready(rs.replicas[0]), rs.ready(rs.replicas[1]), rs.ready(rs.replicas[2]))
	})
	if rs.cs, err = kubernetes.NewForConfig(kube.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	leader := rs.waitLeader(30*time.Second, nil)
	key, err := rs.meshAPI(leader).CreateKey(ctx, meshcontrol.KeyOptions{Reusable: true, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rs.sim, err = pvesim.Start(pvesim.Config{Cluster: "ha", Nodes: 4, Tokens: []string{simToken}, DiskDir: t.TempDir(), FileRoot: t.TempDir(), Timing: timing})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.sim.Close() })
	// The agents stop together, each with 5s for its calls in flight
	// (the replicas' streams to it, which end only with the replicas).
	t.Cleanup(func() {
		rs.mu.Lock()
		agents := rs.agents
		rs.mu.Unlock()
		var wg sync.WaitGroup
		for _, a := range agents {
			wg.Go(func() {
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				a.Shutdown(sctx)
			})
		}
		wg.Wait()
	})
	for _, n := range rs.sim.NodeNames()[:3] {
		rs.startAgent(n, key.Secret)
	}
	poll.Until(t, 90*time.Second, "the agents ONLINE on every replica", func() error {
		return errors.Join(rs.hosts(rs.replicas[0]), rs.hosts(rs.replicas[1]), rs.hosts(rs.replicas[2]))
	})
	return rs
}

// token is a fresh access token of user.
func (rs *replicaSet) token(user string) string {
	rs.t.Helper()
	tok, err := rs.idp.Login(rs.t.Context(), meshtest.APIClientID, user, user+"-pw")
	if err != nil {
		rs.t.Fatal(err)
	}
	return "Bearer " + tok.AccessToken
}

// ready is nil once r's /readyz answers 200.
func (rs *replicaSet) ready(r *replica) error {
	resp, err := rs.hc.Get(r.url() + orchestrator.ReadyzPath)
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

// leader is the replica holding the Lease, nil if none does.
func (rs *replicaSet) leader() *replica {
	l, err := rs.cs.CoordinationV1().Leases("default").Get(rs.t.Context(), rs.lease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return nil
	}
	for _, r := range rs.replicas {
		if r.url() == *l.Spec.HolderIdentity {
			return r
		}
	}
	return nil
}

// waitLeader waits until a replica other than not holds the Lease.
func (rs *replicaSet) waitLeader(timeout time.Duration, not *replica) *replica {
	rs.t.Helper()
	var r *replica
	poll.Until(rs.t, timeout, "a leader", func() error {
		if r = rs.leader(); r == nil || r == not {
			return errors.New("no live replica holds the lease")
		}
		return nil
	})
	return r
}

// meshAPI is a client of r's headscale API.
func (rs *replicaSet) meshAPI(r *replica) *meshcontrol.Client {
	rs.t.Helper()
	c, err := meshcontrol.Dial(orchestrator.SocketPath(r.dataDir))
	if err != nil {
		rs.t.Fatal(err)
	}
	rs.t.Cleanup(func() { c.Close() })
	return c
}

// startAgent starts the agent of node, enrolling with key through the
// Service.
func (rs *replicaSet) startAgent(node, key string) {
	t := rs.t
	t.Helper()
	actx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	a, err := agent.Start(actx, agent.Config{
		ControlURL: rs.svc.URL(), AuthKey: key, StateDir: shortDir(t, "fpra"), NodeName: node, MeshName: "ha-" + node,
		ProxmoxURL: rs.sim.URL(), ProxmoxToken: simToken, ProxmoxFingerprint: rs.sim.Fingerprint(), Version: "meshtest",
		FileRoot:    rs.sim.NodeRoot(node),
		NodeKeyFile: rs.sim.NodeFiles(node).Key, NodeCertFile: rs.sim.NodeFiles(node).Cert, ClusterCAFile: rs.sim.NodeFiles(node).CA,
	})
	if err != nil {
		t.Fatalf("agent %s: %v", node, err)
	}
	rs.mu.Lock()
	rs.agents = append(rs.agents, a) // shut down by startReplicas' cleanup
	rs.mu.Unlock()
}

// derpSTUNPort is the STUN port of the DERP map a mesh node joining
// through the Service gets (enrolled with a key of api, not as an agent,
// which would have to report its zone); the node stays until the test
// ends.
func (rs *replicaSet) derpSTUNPort(api *meshcontrol.Client) int {
	t := rs.t
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	key, err := api.CreateKey(ctx, meshcontrol.KeyOptions{TTL: time.Hour, Tags: []string{meshcontrol.TagOrchestrator}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := meshnode.Start(ctx, meshnode.Config{Hostname: "stun-probe", Dir: shortDir(t, "fprn"), ControlURL: rs.svc.URL(), AuthKey: key.Secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	var port int
	poll.Until(t, 30*time.Second, "a DERP map with a STUN port", func() error {
		m, err := n.DERPMap(ctx)
		if err != nil {
			return err
		}
		for _, r := range m.Regions {
			for _, dn := range r.Nodes {
				if port = dn.STUNPort; port > 0 {
					return nil
				}
			}
		}
		return fmt.Errorf("no STUN port in %+v", m)
	})
	return port
}

// stunAnswers is nil when a STUN binding request to addr is answered with
// the address it came from.
func stunAnswers(addr string) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	txid := stun.NewTxID()
	if _, err := c.Write(stun.Request(txid)); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return fmt.Errorf("STUN %s: %w", addr, err)
	}
	got, mapped, err := stun.ParseResponse(buf[:n])
	if err != nil {
		return fmt.Errorf("STUN %s: %w", addr, err)
	}
	if got != txid || mapped.String() != c.LocalAddr().String() {
		return fmt.Errorf("STUN %s: answered %v for %v, want %v", addr, mapped, got, c.LocalAddr())
	}
	return nil
}

// graphql posts a request to r's API with authz in vdc and decodes its
// data into out (if not nil); a GraphQL error is an error.
func (rs *replicaSet) graphql(r *replica, authz, vdc, query string, vars map[string]any, out any) error {
	resp, err := gqltest.Post(rs.t.Context(), rs.hc, r.url()+orchestrator.APIPath, gqltest.Request{Query: query, Variables: vars, Authorization: authz, VDC: vdc})
	if err == nil {
		err = resp.Err()
	}
	if err == nil && out != nil {
		err = resp.Decode(out)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", r.name, err)
	}
	return nil
}

// seedRed makes, through r, what a VM of VDC "red" (alice's) needs: the
// VDC, profiles "small" and "ssd", image "tiny" and network "lan" in zone
// "ha", whose id it returns.
func (rs *replicaSet) seedRed(r *replica) string {
	t := rs.t
	t.Helper()
	url, sum := vmtest.ImageServer(t, 1<<20)
	if err := rs.graphql(r, rs.admin, "", `mutation($u: String!, $c: String!) {
	  createVDC(input: {name: "red", quotas: {vcpus: 16, memoryMiB: 16384, storageGiB: 200, vms: 10}}) { name }
	  createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name }
	  createStorageProfile(input: {name: "ssd", tier: "ssd", readMBps: 200, writeMBps: 100, pools: [{zone: "ha", pool: "local-lvm"}]}) { name }
	  createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name } }`,
		map[string]any{"u": url, "c": sum}, nil); err != nil {
		t.Fatal(err)
	}
	var lan struct{ CreateNetwork struct{ ID string } }
	poll.Until(t, 30*time.Second, "the network created", func() error {
		return rs.graphql(r, rs.token("alice"), "red", `mutation { createNetwork(input: {name: "lan", zone: "ha", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`, nil, &lan)
	})
	return lan.CreateNetwork.ID
}

// hosts is nil when r's API lists at least 3 hosts ONLINE.
func (rs *replicaSet) hosts(r *replica) error {
	var d struct {
		Hosts []struct{ Name, Status string }
	}
	if err := rs.graphql(r, rs.admin, "", `{ hosts { name status } }`, nil, &d); err != nil {
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

// TestReplicasFailover runs a replicaSet and SIGKILLs the replica running
// the mesh control server. Within 30s another replica serves the control
// protocol; the agents stay ONLINE in the API of both survivors all along
// (polled with a client that retries once: no request may fail); a new
// agent enrolls afterwards; no node, address or tag is lost in the control
// server's node list. Every replica, leading or not, answers STUN on the
// DERP map's STUN port, before and after. Then an agent killed is OFFLINE
// on both survivors within 5 s, though only one of them samples its zone.
func TestReplicasFailover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rs := startReplicas(t, pvesim.Timing{})
	replicas, svc, hc, hosts := rs.replicas, rs.svc, rs.hc, rs.hosts
	leader := rs.waitLeader(30*time.Second, nil)
	api := rs.meshAPI(leader)
	stunPort := rs.derpSTUNPort(api)
	before, err := api.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nodes := rs.sim.NodeNames()
	stunOn := func(rs ...*replica) func() error {
		return func() error {
			var errs []error
			for _, r := range rs {
				if _, port, _ := net.SplitHostPort(r.stun); port != fmt.Sprint(stunPort) {
					return fmt.Errorf("the DERP map's STUN port is %d, %s's STUN address %s", stunPort, r.name, r.stun)
				}
				errs = append(errs, stunAnswers(r.stun))
			}
			return errors.Join(errs...)
		}
	}
	poll.Until(t, 30*time.Second, "STUN answered by every replica", stunOn(replicas...))

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
	poll.Until(t, 30*time.Second, "another replica serving the control protocol", func() error {
		if next = rs.leader(); next == nil || next == leader {
			return errors.New("the lease is still the killed replica's")
		}
		// The control protocol's key, through the Service and through
		// both survivors (one forwards).
		for _, u := range []string{svc.URL(), survivors[0].url(), survivors[1].url()} {
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
	poll.Until(t, 30*time.Second, "STUN answered by both survivors", stunOn(survivors...))
	api = rs.meshAPI(next)
	poll.Until(t, 60*time.Second, "the agents back on the new control server", func() error {
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
	rs.startAgent(nodes[3], fresh.Secret)
	poll.Until(t, 60*time.Second, "the new agent ONLINE on the survivors", func() error {
		var errs []error
		for _, r := range survivors {
			var d struct {
				Hosts []struct{ Name, Status string }
			}
			err := rs.graphql(r, rs.admin, "", `{ hosts { name status } }`, nil, &d)
			if err == nil && !slices.Contains(d.Hosts, struct{ Name, Status string }{nodes[3], "ONLINE"}) {
				err = fmt.Errorf("%s: %s not ONLINE: %+v", r.name, nodes[3], d.Hosts)
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

	// An agent killed is OFFLINE on both survivors within 5 s: on the one
	// sampling its zone (the sync shard's owner, a survivor once the
	// killed replica's Lease expired) by its own check, on the other by
	// what the sampler publishes.
	poll.Until(t, 30*time.Second, "a survivor sampling the zone", func() error {
		l, err := rs.cs.CoordinationV1().Leases("default").Get(ctx, syncowner.DefaultLeasePrefix+"-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h := l.Spec.HolderIdentity; h == nil || *h == leader.url() {
			return errors.New("the sync shard is still the killed replica's")
		}
		return nil
	})
	rs.mu.Lock()
	victim := rs.agents[0]
	rs.mu.Unlock()
	if err := victim.KillForTest(); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	offline := make([]time.Duration, len(survivors))
	poll.Until(t, 20*time.Second, nodes[0]+" OFFLINE on both survivors", func() error {
		var errs []error
		for i, r := range survivors {
			if offline[i] != 0 {
				continue
			}
			var d struct {
				Hosts []struct{ Name, Status string }
			}
			if err := rs.graphql(r, rs.admin, "", `{ hosts { name status } }`, nil, &d); err != nil {
				errs = append(errs, err)
				continue
			}
			if slices.Contains(d.Hosts, struct{ Name, Status string }{nodes[0], "OFFLINE"}) {
				offline[i] = time.Since(gone)
				continue
			}
			errs = append(errs, fmt.Errorf("%s: %s not OFFLINE: %+v", r.name, nodes[0], d.Hosts))
		}
		return errors.Join(errs...)
	})
	for i, r := range survivors {
		t.Logf("killed agent OFFLINE on %s %v after the kill", r.name, offline[i].Round(time.Millisecond))
		if offline[i] > 5*time.Second {
			t.Errorf("killed agent OFFLINE on %s %v after the kill, want within 5s", r.name, offline[i].Round(time.Millisecond))
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

// freeUDPPort is a UDP port free on every address.
func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
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
