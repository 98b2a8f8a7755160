// Package benchmark runs the whole flexplane stack for `make bench`: the
// orchestrator binary as its own process (so that its RSS and CPU time are
// its own), a development OpenID provider minting real signed tokens,
// simulated Proxmox clusters (pvesim) seeded through the Proxmox API, and
// one real agent per simulated node joined over the real mesh. It compares
// the GraphQL API with asking each simulated cluster directly, measured in
// the same run, and writes a JSON report plus a short table.
//
// The benchmark itself is BenchmarkStack in bench_test.go; this package
// holds the stack, the statistics and the report.
package benchmark

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/agent/privhelper"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/devidp"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Names the stack uses.
const (
	// ClientID is the OAuth client (and token audience) of the stack's
	// identity provider.
	ClientID = "flexplane-portal"
	// VDC is the VDC whose guests the stack seeds.
	VDC = "bench"
	// AdminUser is a platform admin; MemberUser a member of VDC.
	AdminUser  = "admin"
	MemberUser = "member"
)

// Config configures a Stack.
type Config struct {
	// Dir holds the binaries, data and state directories. Required.
	Dir string
	// ModuleDir is the root of the flexplane module (where cmd/ is).
	// Required.
	ModuleDir string
	// BinDir holds cmd/orchestrator and cmd/agent already built (see
	// Build); "" builds them into Dir/bin.
	BinDir string
	// Logger receives the stack's progress. Default: discarded.
	Logger *slog.Logger
	// MemoryLimit is passed to the orchestrator as -memory-limit ("" none).
	MemoryLimit string
	// Profiling starts the orchestrator with -debug-addr on a free
	// loopback port, so that OrchestratorProfile can fetch its profiles.
	Profiling bool
	// EdgeKernels gives every agent an EdgeKernel as its helper, where its
	// edge gateways end in memory (Cluster.Kernels): gateways can then be
	// applied without root or network namespaces. False: the agents run
	// gateways themselves, which needs root.
	EdgeKernels bool
	// Helpers runs every agent as the shipped units do, with a privileged
	// helper of its own (package privhelper, in this process, on a unix
	// socket: agent Config.HelperSocket) that writes its snippets and
	// uploads into the simulated node's directories. Not with EdgeKernels.
	Helpers bool
	// MeshUploads starts the agents without their data listeners, so
	// that uploads cross the mesh (UploadVolume) as they do where an
	// operator configures none. By default each agent serves one on a
	// free loopback port (agent Config.DataListen), and uploads take it.
	MeshUploads bool
}

// Stack is a running orchestrator process with its identity provider;
// clusters and agents are added with AddCluster and StartAgents.
type Stack struct {
	cfg      Config
	log      *slog.Logger
	bin      string // directory of the built binaries
	dataDir  string
	url      string
	debugURL string // the orchestrator's /debug/pprof/, "" without Config.Profiling
	idp      *devidp.Server
	orch     *exec.Cmd
	orchDone chan struct{}
	orchLog  *os.File
	key      string // reusable agent enrollment key
	http     *http.Client

	mu       sync.Mutex
	tokens   map[string]string // by user, protected by mu
	clusters []*Cluster        // protected by mu
	helpers  []helperProc      // of Config.Helpers, protected by mu

	closeOnce sync.Once
}

// Cluster is a simulated Proxmox cluster of the stack.
type Cluster struct {
	Name  string
	Sim   *pvesim.Cluster
	token string
	tr    *http.Transport
	// Direct is a go-proxmox client straight to the cluster (the floor).
	Direct *proxmox.Client
	// Agents are the running in-process agents, one per node once started.
	Agents []*agent.Agent
	// Kernels are the agents' edge kernels by node name, with
	// Config.EdgeKernels.
	Kernels map[string]*EdgeKernel
}

// Start builds cmd/orchestrator and cmd/agent, starts the identity provider
// and the orchestrator process, and creates the agents' enrollment key.
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	if cfg.Dir == "" || cfg.ModuleDir == "" {
		return nil, errors.New("benchmark: start: Dir and ModuleDir are required")
	}
	if cfg.Helpers && cfg.EdgeKernels {
		return nil, errors.New("benchmark: start: Helpers and EdgeKernels are each an agent's helper: choose one")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Stack{
		cfg: cfg, log: cfg.Logger,
		bin:     cfg.BinDir,
		dataDir: filepath.Join(cfg.Dir, "orch"),
		tokens:  map[string]string{},
		http: &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 64,
			// The identity provider and the orchestrator are plain HTTP on
			// loopback.
			Proxy: nil,
		}},
	}
	meshnode.PrepareProcess("http://")
	if s.bin == "" {
		s.bin = filepath.Join(cfg.Dir, "bin")
		if err := Build(ctx, cfg.ModuleDir, s.bin); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := s.startIDP(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.startOrchestrator(ctx); err != nil {
		s.Close()
		return nil, err
	}
	k, err := s.CreateKey(ctx, meshcontrol.KeyOptions{Reusable: true, TTL: 2 * time.Hour})
	if err != nil {
		s.Close()
		return nil, err
	}
	s.key = k
	return s, nil
}

// Build builds cmd/orchestrator and cmd/agent of the module in moduleDir
// into binDir.
func Build(ctx context.Context, moduleDir, binDir string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", binDir+string(filepath.Separator), "./cmd/orchestrator", "./cmd/agent")
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("benchmark: build binaries: %w\n%s", err, out)
	}
	return nil
}

func (s *Stack) startIDP() error {
	idp, err := devidp.New(devidp.Config{
		KeyDir: filepath.Join(s.cfg.Dir, "idp"),
		Users: []devidp.User{
			{Username: AdminUser, Password: AdminUser + "-pw", Name: "Admin", Roles: []string{auth.PlatformAdminRole}},
			{Username: MemberUser, Password: MemberUser + "-pw", Name: "Member", Roles: []string{auth.VDCRoleKey(VDC, auth.RoleMember)}},
		},
		Clients:       []devidp.Client{{ID: ClientID, RedirectURIs: []string{"http://127.0.0.1/callback"}}},
		TokenLifetime: 2 * time.Hour,
		Logger:        s.log.With("component", "devidp"),
	})
	if err != nil {
		return fmt.Errorf("benchmark: identity provider: %w", err)
	}
	if err := idp.Start(); err != nil {
		return fmt.Errorf("benchmark: identity provider: %w", err)
	}
	s.idp = idp
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Stack) startOrchestrator(ctx context.Context) error {
	store, err := catalog.OpenDir(filepath.Join(s.dataDir, "catalog"))
	if err != nil {
		return fmt.Errorf("benchmark: catalog: %w", err)
	}
	v := &catalog.VDC{}
	v.Name, v.Description = VDC, "benchmark VDC"
	v.Quotas = catalog.VDCQuotas{VCPUs: 1 << 20, MemoryMiB: 1 << 30, StorageGiB: 1 << 30, VMs: 1 << 20}
	if _, err := catalog.Create(ctx, store, v); err != nil {
		return fmt.Errorf("benchmark: seed VDC: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return fmt.Errorf("benchmark: orchestrator port: %w", err)
	}
	s.url = "http://127.0.0.1:" + strconv.Itoa(port)
	s.orchLog, err = os.Create(filepath.Join(s.cfg.Dir, "orchestrator.log"))
	if err != nil {
		return fmt.Errorf("benchmark: orchestrator log: %w", err)
	}
	// Production defaults everywhere except the loopback addresses.
	args := []string{"serve",
		"-listen", "127.0.0.1:" + strconv.Itoa(port),
		"-public-url", s.url,
		"-data-dir", s.dataDir,
		"-stun-addr", "127.0.0.1:0",
		"-oidc-issuer", s.idp.Issuer(),
		"-oidc-audience", ClientID,
		"-log-level", "warn",
	}
	if s.cfg.MemoryLimit != "" {
		args = append(args, "-memory-limit", s.cfg.MemoryLimit)
	}
	if s.cfg.Profiling {
		dport, err := freePort()
		if err != nil {
			return fmt.Errorf("benchmark: orchestrator debug port: %w", err)
		}
		addr := "127.0.0.1:" + strconv.Itoa(dport)
		args = append(args, "-debug-addr", addr)
		s.debugURL = "http://" + addr + "/debug/pprof/"
	}
	s.orch = exec.Command(filepath.Join(s.bin, "orchestrator"), args...)
	s.orch.Stdout, s.orch.Stderr = s.orchLog, s.orchLog
	if err := s.orch.Start(); err != nil {
		return fmt.Errorf("benchmark: start orchestrator: %w", err)
	}
	s.orchDone = make(chan struct{})
	go func() { s.orch.Wait(); close(s.orchDone) }()
	ready, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var exited error
	err = poll.Context(ready, func() error {
		c, err := meshcontrol.Dial(orchestrator.SocketPath(s.dataDir))
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err = c.Ping(pctx)
			cancel()
			c.Close()
		}
		if err == nil {
			resp, herr := s.http.Get(s.url + orchestrator.APIPath)
			if herr == nil {
				resp.Body.Close()
				return nil
			}
			err = herr
		}
		select {
		case <-s.orchDone:
			exited = fmt.Errorf("benchmark: orchestrator exited: %s", s.orchLogTail())
			cancel()
		default:
		}
		return err
	})
	switch {
	case exited != nil:
		return exited
	case err != nil:
		return fmt.Errorf("benchmark: orchestrator not ready after 60s: %w; log: %s", err, s.orchLogTail())
	}
	return nil
}

func (s *Stack) orchLogTail() string {
	b, _ := os.ReadFile(filepath.Join(s.cfg.Dir, "orchestrator.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// CreateKey creates an enrollment key through the orchestrator's local
// socket, as `orchestrator keys create` does.
func (s *Stack) CreateKey(ctx context.Context, opts meshcontrol.KeyOptions) (string, error) {
	c, err := meshcontrol.Dial(orchestrator.SocketPath(s.dataDir))
	if err != nil {
		return "", fmt.Errorf("benchmark: create key: %w", err)
	}
	defer c.Close()
	k, err := c.CreateKey(ctx, opts)
	if err != nil {
		return "", fmt.Errorf("benchmark: create key: %w", err)
	}
	return k.Secret, nil
}

// DeleteMeshNode removes the mesh nodes named name (their host name)
// through the orchestrator's local socket, as `orchestrator nodes delete`
// does; a name no node has deletes nothing.
func (s *Stack) DeleteMeshNode(ctx context.Context, name string) error {
	c, err := meshcontrol.Dial(orchestrator.SocketPath(s.dataDir))
	if err != nil {
		return fmt.Errorf("benchmark: delete mesh node %s: %w", name, err)
	}
	defer c.Close()
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return fmt.Errorf("benchmark: delete mesh node %s: %w", name, err)
	}
	for _, n := range nodes {
		if n.Name == name {
			if err := c.DeleteNode(ctx, n.ID); err != nil {
				return fmt.Errorf("benchmark: delete mesh node %s: %w", name, err)
			}
		}
	}
	return nil
}

// OrchestratorProfile fetches the orchestrator's profile name (as
// net/http/pprof names them: "profile" for CPU, "heap", ...) with query
// (e.g. "seconds=8") into path. The stack must have Config.Profiling.
func (s *Stack) OrchestratorProfile(ctx context.Context, name, query, path string) error {
	if s.debugURL == "" {
		return errors.New("benchmark: profile: the orchestrator serves no profiles (Config.Profiling)")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.debugURL+name+"?"+query, nil)
	if err != nil {
		return fmt.Errorf("benchmark: profile %s: %w", name, err)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("benchmark: profile %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
		return fmt.Errorf("benchmark: profile %s: status %d: %s", name, resp.StatusCode, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("benchmark: profile %s: %w", name, err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("benchmark: profile %s: %w", name, err)
	}
	return f.Close()
}

// URL is the orchestrator's public URL.
func (s *Stack) URL() string { return s.url }

// OrchestratorPID is the orchestrator process's id.
func (s *Stack) OrchestratorPID() int { return s.orch.Process.Pid }

// AgentBinary is the path of the built cmd/agent.
func (s *Stack) AgentBinary() string { return filepath.Join(s.bin, "agent") }

// Token returns a real signed access token of user (minted once through
// the provider's authorization code flow).
func (s *Stack) Token(ctx context.Context, user string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tokens[user]; ok {
		return t, nil
	}
	tok, err := s.idp.Login(ctx, ClientID, user, user+"-pw")
	if err != nil {
		return "", fmt.Errorf("benchmark: token of %s: %w", user, err)
	}
	s.tokens[user] = tok.AccessToken
	return tok.AccessToken, nil
}

// AddCluster starts a simulated cluster of nodes nodes and seeds it with
// vms guests through the Proxmox API: every tenth is not flexplane's, the
// others are VDC's (its tags, pkg/tenancy, and its pool); a quarter run.
// Its agents are not started.
func (s *Stack) AddCluster(ctx context.Context, name string, nodes, vms int) (*Cluster, error) {
	secret := strconv.FormatInt(time.Now().UnixNano(), 36) + "x" + name
	token := "flexplane@pve!agent=" + secret
	// The nodes' file systems (where the agents write uploads) are
	// directories of the stack's.
	sim, err := pvesim.Start(pvesim.Config{Cluster: name, Nodes: nodes, Tokens: []string{token}, FileRoot: filepath.Join(s.cfg.Dir, "files", name)})
	if err != nil {
		return nil, fmt.Errorf("benchmark: cluster %s: %w", name, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(sim.CACertPEM())
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 16}
	id, sec, _ := strings.Cut(token, "=")
	c := &Cluster{
		Name: name, Sim: sim, token: token, tr: tr,
		Direct: proxmox.NewClient(sim.URL()+"/api2/json",
			proxmox.WithHTTPClient(&http.Client{Transport: tr, Timeout: 60 * time.Second}),
			proxmox.WithAPIToken(id, sec)),
	}
	s.mu.Lock()
	s.clusters = append(s.clusters, c)
	s.mu.Unlock()
	if err := c.seed(ctx, vms); err != nil {
		return nil, err
	}
	return c, nil
}

// Token is the cluster's Proxmox API token (USER@REALM!ID=SECRET).
func (c *Cluster) Token() string { return c.token }

// AuthHeader is the Authorization header value of the cluster's token.
func (c *Cluster) AuthHeader() string { return "PVEAPIToken=" + c.token }

// HTTPClient is a plain HTTPS client trusting the cluster's CA.
func (c *Cluster) HTTPClient() *http.Client {
	return &http.Client{Transport: c.tr, Timeout: 60 * time.Second}
}

// seed creates vms guests spread over the nodes (addGuests):
// every tenth is not flexplane's, the others are VDC's.
func (c *Cluster) seed(ctx context.Context, vms int) error {
	return c.addGuests(ctx, vms, 1000, func(i int) string {
		if i%10 == 9 {
			return ""
		}
		return VDC
	})
}

// AddGuests adds n guests of vdc (tagged and in its pool, as flexplane's
// creates leave them; "" for guests that are not flexplane's) with VMIDs
// from first, spread over the nodes, and waits until Proxmox lists them.
func (c *Cluster) AddGuests(ctx context.Context, n, first int, vdc string) error {
	return c.addGuests(ctx, n, first, func(int) string { return vdc })
}

// addGuests creates n guests with VMIDs from first, guest i of vdcOf(i),
// with 8 concurrent callers.
func (c *Cluster) addGuests(ctx context.Context, n, first int, vdcOf func(i int) string) error {
	pools := map[string]bool{}
	for i := range n {
		if vdc := vdcOf(i); vdc != "" && !pools[vdc] {
			pools[vdc] = true
			if err := c.Direct.Post(ctx, "/pools", map[string]any{"poolid": tenancy.PoolID(vdc)}, nil); err != nil && !strings.Contains(err.Error(), "already exists") {
				return fmt.Errorf("benchmark: seed %s: pool of %s: %w", c.Name, vdc, err)
			}
		}
	}
	cl := (&proxmox.Cluster{}).New(c.Direct)
	before, err := cl.Resources(ctx, "vm")
	if err != nil {
		return fmt.Errorf("benchmark: seed %s: %w", c.Name, err)
	}
	nodes := c.Sim.NodeNames()
	jobs := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				if err := c.createGuest(ctx, nodes[i%len(nodes)], first+i, i, vdcOf(i)); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("benchmark: seed %s: %w", c.Name, err)
	default:
	}
	want := len(before) + n
	seeded, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := poll.Context(seeded, func() error {
		rs, err := cl.Resources(ctx, "vm")
		if err == nil && len(rs) != want {
			err = fmt.Errorf("%d of %d guests", len(rs), want)
		}
		return err
	}); err != nil {
		return fmt.Errorf("benchmark: seed %s: not seeded after 60s: %w", c.Name, err)
	}
	return nil
}

// createGuest creates guest vmid (the i-th of a seed) of vdc on node (one
// POST; its task is not waited for).
func (c *Cluster) createGuest(ctx context.Context, node string, vmid, i int, vdc string) error {
	params := map[string]any{
		"vmid": vmid, "name": fmt.Sprintf("%s-vm-%d", c.Name, vmid), "memory": 2048, "cores": 2,
		"scsi0": "local-lvm:16", "net0": "virtio,bridge=vmbr0", "tags": "other",
	}
	if i%4 == 0 {
		params["start"] = 1
	}
	if vdc != "" {
		params["tags"], params["pool"] = tenancy.GuestTags(vdc), tenancy.PoolID(vdc)
	}
	var upid string
	return c.Direct.Post(ctx, "/nodes/"+node+"/qemu", params, &upid)
}

// ManagedGuests is how many of vms seeded guests are VDC's.
func ManagedGuests(vms int) int { return vms - vms/10 }

// StartAgents starts one in-process agent per node of every cluster in cs,
// all concurrently.
func (s *Stack) StartAgents(ctx context.Context, cs ...*Cluster) error {
	type result struct {
		c   *Cluster
		a   *agent.Agent
		err error
	}
	var n int
	out := make(chan result)
	for _, c := range cs {
		for _, node := range c.Sim.NodeNames() {
			n++
			dataListen := "127.0.0.1:0"
			if s.cfg.MeshUploads {
				dataListen = ""
			}
			go func() {
				var helper string
				if s.cfg.EdgeKernels {
					helper = filepath.Join(s.cfg.Dir, "kernels", c.Name+"-"+node+".sock")
					if _, err := s.startKernel(c, node, helper); err != nil {
						out <- result{c, nil, err}
						return
					}
				}
				if s.cfg.Helpers {
					var err error
					if helper, err = s.startHelper(c, node); err != nil {
						out <- result{c, nil, err}
						return
					}
				}
				a, err := agent.Start(ctx, agent.Config{
					DataListen:         dataListen,
					ControlURL:         s.url,
					AuthKey:            s.key,
					StateDir:           filepath.Join(s.cfg.Dir, "agents", c.Name+"-"+node),
					NodeName:           node,
					MeshName:           c.Name + "-" + node,
					ProxmoxURL:         c.Sim.NodeURL(node),
					ProxmoxToken:       c.token,
					ProxmoxFingerprint: c.Sim.NodeFingerprint(node),
					NodeKeyFile:        c.Sim.NodeFiles(node).Key,
					NodeCertFile:       c.Sim.NodeFiles(node).Cert,
					ClusterCAFile:      c.Sim.NodeFiles(node).CA,
					FileRoot:           c.Sim.NodeRoot(node),
					Version:            "bench",
					HelperSocket:       helper,
					Logger:             s.log.With("component", "agent", "agent", c.Name+"-"+node),
				})
				out <- result{c, a, err}
			}()
		}
	}
	var errs []error
	for range n {
		r := <-out
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		s.mu.Lock()
		r.c.Agents = append(r.c.Agents, r.a)
		s.mu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("benchmark: start agents: %w", err)
	}
	return nil
}

// startKernel starts the edge kernel of c's node at the socket path.
func (s *Stack) startKernel(c *Cluster, node, path string) (*EdgeKernel, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("benchmark: edge kernel: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := c.Kernels[node]; old != nil {
		old.Close()
	}
	_ = os.Remove(path) // a socket left by a kernel before
	k, err := StartEdgeKernel(path)
	if err != nil {
		return nil, err
	}
	if c.Kernels == nil {
		c.Kernels = map[string]*EdgeKernel{}
	}
	c.Kernels[node] = k
	return k, nil
}

// startHelper starts the privileged helper of the cluster's node
// (Config.Helpers) and returns its socket.
func (s *Stack) startHelper(c *Cluster, node string) (string, error) {
	dir, err := os.MkdirTemp("", "fph")
	if err != nil {
		return "", fmt.Errorf("benchmark: helper: %w", err)
	}
	vz := filepath.Join(c.Sim.NodeRoot(node), "var", "lib", "vz")
	h, err := privhelper.Start(privhelper.Config{
		Socket: filepath.Join(dir, "helper.sock"), AgentUID: os.Getuid(), AgentGID: os.Getgid(),
		SnippetDirs: []string{filepath.Join(vz, "snippets")}, VolumeDirs: []string{},
		UploadDirs:     []string{filepath.Join(vz, "import"), filepath.Join(vz, "template", "iso")},
		GuestConfigDir: filepath.Join(dir, "no-guest-configs"),
		Logger:         s.log.With("component", "helper", "agent", c.Name+"-"+node),
	})
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("benchmark: helper: %w", err)
	}
	s.mu.Lock()
	s.helpers = append(s.helpers, helperProc{h: h, dir: dir})
	s.mu.Unlock()
	return filepath.Join(dir, "helper.sock"), nil
}

// helperProc is a running helper of Config.Helpers and its directory.
type helperProc struct {
	h   *privhelper.Helper
	dir string
}

// Kernel is the edge kernel of the cluster's node (Config.EdgeKernels),
// nil when it has none.
func (s *Stack) Kernel(c *Cluster, node string) *EdgeKernel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return c.Kernels[node]
}

// GraphQLResult is a decoded GraphQL answer.
type GraphQLResult = gqltest.Response

// GraphQL posts query as user (in VDC when vdc is true) and decodes the
// answer (gqltest.Post); GraphQL errors are returned as an error.
func (s *Stack) GraphQL(ctx context.Context, user string, vdc bool, query string, vars map[string]any) (*GraphQLResult, error) {
	tok, err := s.Token(ctx, user)
	if err != nil {
		return nil, err
	}
	req := gqltest.Request{Query: query, Variables: vars, Authorization: "Bearer " + tok}
	if vdc {
		req.VDC = VDC
	}
	r, err := gqltest.Post(ctx, s.http, s.url+orchestrator.APIPath, req)
	if err != nil {
		return nil, fmt.Errorf("benchmark: %w", err)
	}
	if r.Status != http.StatusOK || len(r.Errors) > 0 {
		raw := r.Raw
		if len(raw) > 500 {
			raw = raw[:500]
		}
		return r, fmt.Errorf("benchmark: graphql: status %d: %s", r.Status, raw)
	}
	return r, nil
}

// ProcessMemory is a process's resident memory from /proc/PID/status.
type ProcessMemory struct {
	// RSS and HWM (peak RSS) in MiB.
	RSS float64 `json:"rss_mib"`
	HWM float64 `json:"peak_rss_mib"`
}

// ReadMemory reads /proc/PID/status.
func ReadMemory(pid int) (ProcessMemory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcessMemory{}, fmt.Errorf("benchmark: memory of %d: %w", pid, err)
	}
	defer f.Close()
	var m ProcessMemory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		kb, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			m.RSS = round(kb / 1024)
		case "VmHWM":
			m.HWM = round(kb / 1024)
		}
	}
	return m, sc.Err()
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times on Linux.
const clockTicks = 100

// CPUTime is the user plus system CPU time a process has used, from
// /proc/PID/stat (resolution 10ms).
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("benchmark: cpu time of %d: %w", pid, err)
	}
	// Fields after the command name (which may hold spaces) in parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("benchmark: cpu time of %d: malformed stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("benchmark: cpu time of %d: malformed stat", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("benchmark: cpu time of %d: %w", pid, err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// SelfCPUTime is the CPU time of this process (getrusage RUSAGE_SELF).
func SelfCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Close stops the agents, the orchestrator, the clusters and the provider;
// closing a closed stack does nothing.
func (s *Stack) Close() { s.closeOnce.Do(s.close) }

func (s *Stack) close() {
	s.mu.Lock()
	cs, helpers := s.clusters, s.helpers
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range cs {
		for _, a := range c.Agents {
			wg.Go(func() { a.Shutdown(ctx) })
		}
	}
	wg.Wait()
	for _, h := range helpers {
		h.h.Shutdown(ctx)
		os.RemoveAll(h.dir)
	}
	if s.orch != nil && s.orch.Process != nil {
		s.orch.Process.Signal(os.Interrupt)
		select {
		case <-s.orchDone:
		case <-time.After(10 * time.Second):
			s.orch.Process.Kill()
			<-s.orchDone
		}
	}
	if s.orchLog != nil {
		s.orchLog.Close()
	}
	for _, c := range cs {
		c.Sim.Close()
		for _, k := range c.Kernels {
			k.Close()
		}
	}
	if s.idp != nil {
		s.idp.Close()
	}
}
