// Package pvesim simulates a Proxmox VE 9 cluster behind its REST API.
//
// A Cluster serves https://<addr>/api2/json/... with a node certificate signed by a
// per-cluster CA, authenticates API tokens, validates every request against Proxmox's own
// schema (package pveschema) and keeps an in-memory model of nodes, guests, storage,
// pools, SDN and IPAM. Asynchronous operations run as tasks with real UPIDs. Several
// clusters can run in one process; each has its own mutex-protected model, kept in memory
// or, with Config.StateFile, also in a file that a restarted cluster loads again.
package pvesim

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes a simulated cluster. The zero value is a standalone node "pve1" on a
// random loopback port with fast tasks and no tokens (every call answers 401).
type Config struct {
	// Cluster is the Proxmox cluster name; "" means a standalone node in no cluster.
	Cluster string
	// Nodes is the number of nodes, named pve1..pveN (default 1).
	Nodes int
	// Tokens are API tokens "USER@REALM!ID=SECRET" with full privileges.
	Tokens []string
	// Listen is the address the first node (pve1) serves the API on; default
	// "127.0.0.1:0". URL() answers it.
	Listen string
	// NodeListen gives other nodes' API addresses (node name -> address). Every node has
	// its own endpoint serving its own certificate, as every Proxmox node runs pveproxy;
	// a node missing here listens on a random port of Listen's host. NodeURL answers them.
	NodeListen map[string]string
	// Timing is the task duration model; the zero value is fast (tests).
	Timing Timing
	// Logger receives request and task logs; nil discards them.
	Logger *slog.Logger
	// NodeMemory is each node's memory in bytes (default 64 GiB).
	NodeMemory int64
	// NodeCPUs is each node's number of logical CPUs (default 16).
	NodeCPUs int
	// StorageSize is the capacity in bytes of each storage (default 1 TiB).
	StorageSize int64
	// CertDir holds the cluster CA and node certificates (pve-root-ca.pem/.key,
	// pveN.pem/.key). Present files are reused, missing ones created and saved, so a
	// cluster keeps its identity and fingerprints across restarts. "" creates fresh ones
	// in memory. Every start also writes them there as Proxmox keeps them for its nodes'
	// agents (NodeFiles: pve-root-ca.pem, nodes/pveN/pve-ssl.pem and pve-ssl.key); with
	// "", into a temporary directory that Close removes.
	CertDir string
	// StateFile is where the cluster keeps its model across restarts (JSON). Present, it
	// is loaded at Start (a corrupt or incompatible file fails Start); while the cluster
	// runs, the whole model is saved there atomically after changes, at most every 200 ms,
	// and once more at Close. It keeps guests (config, digest, power state: a running VM
	// is still running after a restart), storage contents, pools, SDN (pending and
	// applied), IPAM, the backup jobs with their last runs, the VMID sequence and
	// the task history. What a restart interrupts
	// settles as a node reboot would: running tasks end with exit status "unexpected
	// status" and guest locks are cleared, except that the half-made target of an
	// interrupted clone is removed. Tokens, injected failures and latency come from the
	// configuration, not the file; nodes start online. Its directory is created if
	// missing. "" keeps the model in memory only.
	StateFile string
	// DiskDir, if set, is where disks keep their bytes: one sparse file per
	// disk volume, named by the volume's "path" (GET .../content/{volume}),
	// so that what is written there is the disk's content; clones and
	// imports copy their source's bytes, resizes truncate, deletes remove
	// the file. Its files are kept across restarts with StateFile. "" keeps
	// no bytes. Uploaded files are spooled into its "upload" directory
	// (without it, CertDir's, or the temporary certificate directory's,
	// which Close removes) and kept there as the volumes they become.
	DiskDir string
	// FileRoot, if set, is where the nodes' file systems are: node N's is
	// FileRoot/N, and a file storage's directory (its config's "path") is
	// there (a shared storage's is one directory all nodes' paths lead to,
	// FileRoot/shared/<path>). What a process writes into a storage's
	// snippets directory there (the agent writing a VM's cloud-init
	// user-data) is the storage's `snippets` content: listed, found by
	// cicustom, read by cloudinit/dump, deleted with the volume; the files
	// of its import and template/iso directories (the agent writing an
	// upload) are its `import` and `iso` content, which the upload
	// endpoint and download-url also write there. "" keeps no files: a
	// storage has no snippets.
	FileRoot string
	// CheckResponses makes the cluster check every successful response against the
	// schema's `returns` (pveschema CheckReturn) and keep what disagrees for
	// SchemaProblems; for tests.
	CheckResponses bool
	// DataPlane, when set, is given the cluster's network topology (nodes, applied
	// VNets, running guests and their NICs) after every change of it, so that guests
	// have real packets to send; see package simnet. nil simulates no data plane.
	DataPlane DataPlane
	// HTTPClient downloads URLs for download-url tasks; nil uses a client that accepts
	// the certificates of the system pool (and any certificate when the request says
	// verify-certificates=0).
	HTTPClient *http.Client
}

// Timing is the task duration model. A task takes Base plus, for clone, migrate and disk
// copies, PerGiB for every GiB of disk it copies. Start, Stop and Shutdown are the power
// operations' durations. The zero value makes every task finish almost at once (tests).
type Timing struct {
	Base     time.Duration // every task
	PerGiB   time.Duration // clone, migrate and move per GiB of disk copied
	Start    time.Duration // qmstart, qmreboot
	Stop     time.Duration // qmstop
	Shutdown time.Duration // qmshutdown
	// FenceDelay is how long a node stays offline before the HA manager fences it and
	// recovers its HA resources on other nodes; 0 is Proxmox's DefaultFenceDelay (60 s).
	FenceDelay time.Duration
	// HACycle is how long the HA manager takes to act on a request queued by the API (a
	// start, stop or migration of an HA guest, whose hastart, hastop or hamigrate task
	// ends once the request is queued): a real cluster's CRM and LRM run every 10 s. 0
	// acts right after the request's task ended.
	HACycle time.Duration
}

// DevFenceDelay is RealisticTiming's FenceDelay: shorter than a real cluster's 60 s, so
// that the dev stack shows a node's HA guests recovered within half a minute.
const DevFenceDelay = 20 * time.Second

// RealisticTiming is a task model close to a small real cluster, for the dev stack:
// a 32 GiB full clone takes about 20 s, a start about 3 s.
func RealisticTiming() Timing {
	return Timing{
		Base:       500 * time.Millisecond,
		PerGiB:     600 * time.Millisecond,
		Start:      3 * time.Second,
		Stop:       1 * time.Second,
		Shutdown:   4 * time.Second,
		FenceDelay: DevFenceDelay,
		HACycle:    2 * time.Second,
	}
}

// Cluster is a running simulated Proxmox VE cluster.
type Cluster struct {
	cfg      Config
	log      *slog.Logger
	name     string
	nodes    []string
	api      *apiSchema
	certs    *certBundle
	certDir  string               // where NodeFiles are; immutable after Start
	tempDir  bool                 // certDir is temporary: Close removes it
	eps      map[string]*endpoint // node -> its API endpoint; immutable after Start
	url      string
	started  time.Time
	latency  atomic.Int64 // nanoseconds added to every request
	inFlight atomic.Int64 // requests being answered
	skew     atomic.Int64 // nanoseconds the clock is ahead of real time (AdvanceClockForTest)
	download *http.Client
	persist  *persister    // nil without Config.StateFile; immutable after Start
	netKick  chan struct{} // nil without Config.DataPlane; immutable after Start

	ctx    context.Context // canceled by Close; parent of task work
	cancel context.CancelFunc
	work   sync.WaitGroup // task timers and downloads

	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex
	st     *state                 // protected by mu
	tokens map[string]*apiToken   // token id "USER@REALM!ID" -> token; protected by mu
	fails  []*failRule            // protected by mu
	probs  []string               // schema problems of responses; protected by mu
	vnc    map[string]*vncSession // consoles by vncKey; protected by mu
	routes map[string]routeEntry  // immutable after Start
}

// Start starts a simulated cluster serving https://<Listen>/api2/json/... with a
// self-signed certificate (node certificate signed by a per-cluster CA, as Proxmox does).
func Start(cfg Config) (*Cluster, error) {
	if cfg.Nodes < 0 {
		return nil, fmt.Errorf("pvesim: start: negative node count %d", cfg.Nodes)
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 1
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.NodeMemory <= 0 {
		cfg.NodeMemory = 64 << 30
	}
	if cfg.NodeCPUs <= 0 {
		cfg.NodeCPUs = 16
	}
	if cfg.StorageSize <= 0 {
		cfg.StorageSize = 1 << 40
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Cluster != "" && !validClusterName(cfg.Cluster) {
		return nil, fmt.Errorf("pvesim: start: invalid cluster name %q", cfg.Cluster)
	}
	c := &Cluster{
		cfg:     cfg,
		log:     log.With("cluster", cfg.Cluster),
		name:    cfg.Cluster,
		started: time.Now(),
		tokens:  map[string]*apiToken{},
		vnc:     map[string]*vncSession{},
	}
	for i := 1; i <= cfg.Nodes; i++ {
		c.nodes = append(c.nodes, fmt.Sprintf("pve%d", i))
	}
	for _, t := range cfg.Tokens {
		if err := c.addToken(t, nil); err != nil {
			return nil, fmt.Errorf("pvesim: start: %w", err)
		}
	}
	api, err := loadSchema()
	if err != nil {
		return nil, fmt.Errorf("pvesim: start: %w", err)
	}
	c.api = api
	c.routes = c.routeTable()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("pvesim: start: %w", err)
	}
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	certs, err := newCertBundle(c.nodes, host, cfg.CertDir)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("pvesim: start: %w", err)
	}
	c.certs = certs
	c.certDir = cfg.CertDir
	if c.certDir == "" {
		if c.certDir, err = os.MkdirTemp("", "pvesim-pve-"); err != nil {
			ln.Close()
			return nil, fmt.Errorf("pvesim: start: %w", err)
		}
		c.tempDir = true
	}
	started := false
	defer func() {
		if !started {
			c.removeTempDir()
		}
	}()
	if err := certs.writeFiles(c.certDir); err != nil {
		ln.Close()
		return nil, fmt.Errorf("pvesim: start: %w", err)
	}
	c.st = newState(c)
	if cfg.StateFile != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.StateFile), 0o755); err != nil {
			ln.Close()
			return nil, fmt.Errorf("pvesim: start: state file: %w", err)
		}
		if err := c.loadState(cfg.StateFile); err != nil {
			ln.Close()
			return nil, fmt.Errorf("pvesim: start: %w", err)
		}
	}
	if err := c.makeFileRoots(); err != nil {
		ln.Close()
		return nil, fmt.Errorf("pvesim: start: %w", err)
	}
	c.download = cfg.HTTPClient
	c.ctx, c.cancel = context.WithCancel(context.Background())

	listeners := map[string]net.Listener{c.nodes[0]: ln}
	for _, node := range c.nodes[1:] {
		addr, ok := cfg.NodeListen[node]
		if !ok {
			addr = net.JoinHostPort(host, "0")
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return nil, fmt.Errorf("pvesim: start: node %s: %w", node, err)
		}
		listeners[node] = l
	}
	for node := range cfg.NodeListen {
		if _, ok := listeners[node]; !ok || node == c.nodes[0] {
			for _, l := range listeners {
				l.Close()
			}
			return nil, fmt.Errorf("pvesim: start: NodeListen names %q, which is not one of pve2..pve%d", node, len(c.nodes))
		}
	}
	c.eps = map[string]*endpoint{}
	for _, node := range c.nodes {
		c.eps[node] = c.serveNode(node, listeners[node])
	}
	c.url = c.eps[c.nodes[0]].url
	if cfg.StateFile != "" {
		c.startPersister(cfg.StateFile)
	}
	c.work.Add(1)
	go c.scheduleLoop()
	if cfg.DataPlane != nil {
		c.netKick = make(chan struct{}, 1)
		c.work.Add(1)
		go c.dataPlaneLoop()
		c.kickNet()
	}
	// The HA manager drives the services of a loaded state to their requested states.
	c.mu.Lock()
	if len(c.st.ha.res) > 0 {
		c.st.haKick()
	}
	c.mu.Unlock()
	started = true
	c.log.Info("pvesim started", "url", c.url, "nodes", len(c.nodes), "fingerprint", certs.fingerprint)
	return c, nil
}

// URL is the base URL, "https://127.0.0.1:PORT" (no /api2/json suffix).
func (c *Cluster) URL() string { return c.url }

// Fingerprint is the SHA-256 fingerprint of the served certificate, "AB:CD:..." (Proxmox style).
func (c *Cluster) Fingerprint() string { return c.certs.fingerprint }

// NodeURL is the base URL of node's own API endpoint ("" for an unknown node); the first
// node's is URL(). While a node is offline its endpoint drops every connection.
func (c *Cluster) NodeURL(node string) string {
	if ep := c.eps[node]; ep != nil {
		return ep.url
	}
	return ""
}

// NodeFingerprint is the SHA-256 fingerprint of node's certificate ("" for an unknown node).
func (c *Cluster) NodeFingerprint(node string) string {
	if nc := c.certs.nodes[node]; nc != nil {
		return nc.fingerprint
	}
	return ""
}

// Name is the cluster name ("" for a standalone node).
func (c *Cluster) Name() string { return c.name }

// NodeNames lists the nodes, pve1..pveN.
func (c *Cluster) NodeNames() []string { return append([]string(nil), c.nodes...) }

// CACertPEM is the PEM of the per-cluster CA that signed the node certificates; clients
// may trust it instead of pinning the fingerprint.
func (c *Cluster) CACertPEM() []byte { return append([]byte(nil), c.certs.caPEM...) }

// NodeFiles are the paths of node's certificate files (the cluster CA, the node's
// certificate and key) as Proxmox keeps them: what the node's agent proves its
// membership of the cluster with. The paths of a node not in the cluster are of files
// that do not exist.
func (c *Cluster) NodeFiles(node string) NodeFiles { return NodeFilesIn(c.certDir, node) }

func (c *Cluster) removeTempDir() {
	if c.tempDir {
		_ = os.RemoveAll(c.certDir)
	}
}

// Identity is the random organizational unit in the cluster CA's subject: the stable
// identity of this cluster that /nodes/{node}/certificates/info reveals.
func (c *Cluster) Identity() string { return c.certs.identity }

// Close stops serving, cancels running tasks and waits for them to end; with
// Config.StateFile it then writes the final state (tasks it canceled are saved as
// running and load as interrupted).
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, ep := range c.eps {
			if err := ep.srv.Shutdown(ctx); err != nil {
				c.closeErr = fmt.Errorf("pvesim: close: %w", err)
				_ = ep.srv.Close()
			}
		}
		c.mu.Lock()
		c.st.stopTimers()
		c.mu.Unlock()
		c.work.Wait()
		if err := c.stopPersister(); err != nil && c.closeErr == nil {
			c.closeErr = fmt.Errorf("pvesim: close: %w", err)
		}
		c.removeTempDir()
	})
	return c.closeErr
}

// SchemaProblems lists where responses disagreed with the schema's `returns` since Start
// (only with Config.CheckResponses), each "METHOD /path: problem".
func (c *Cluster) SchemaProblems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.probs...)
}

// SetLatency adds d to every request (0 removes it).
func (c *Cluster) SetLatency(d time.Duration) { c.latency.Store(int64(d)) }

// InFlight is the number of requests the cluster is answering now (waiting
// out SetLatency included): tests wait on it for a call to be under way.
func (c *Cluster) InFlight() int { return int(c.inFlight.Load()) }

// SetNodeOnline takes a node offline or brings it back. An offline node's guests and
// storage report unknown status, and calls proxied to it fail with 595 like Proxmox.
// Guests running on a node that goes offline stop.
func (c *Cluster) SetNodeOnline(node string, online bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.setNodeOnline(node, online)
	c.markDirty()
}

// FailRequests makes the next count requests whose method and path match fail with
// status. method "" matches every method; pathPattern is either a path relative to
// /api2/json with "*" matching one segment ("/nodes/*/qemu/*/clone"), or a schema
// template ("/nodes/{node}/qemu/{vmid}/clone"). count <= 0 removes matching rules.
func (c *Cluster) FailRequests(method, pathPattern string, status, count int) {
	c.InjectFault(Fault{Method: method, Path: pathPattern, Status: status, Count: count})
}

// Fault is a failure or a delay injected into the requests that match it,
// after they were authenticated and routed and before they are checked or
// change anything (a failed request changes nothing, as a refused one in
// Proxmox). The first fault that matches a request applies.
type Fault struct {
	// Method matches the request's method; "" matches every method.
	Method string `json:"method"`
	// Path is a path relative to /api2/json with "*" matching one segment
	// ("/nodes/*/qemu/*/clone"), or a schema template
	// ("/nodes/{node}/qemu/{vmid}/clone").
	Path string `json:"path"`
	// Status is the answer's HTTP status; 0 fails nothing (a delay only,
	// or 500 with LockTimeout).
	Status int `json:"status"`
	// Message is the failure's reason (status line and message); default
	// "simulated failure".
	Message string `json:"message"`
	// LockTimeout answers as Proxmox does when the guest's config lock
	// could not be taken in time: LockTimeoutMessage of the path's vmid,
	// status 500 unless Status says otherwise.
	LockTimeout bool `json:"lockTimeout"`
	// Delay is waited before the request goes on or fails: a slow node,
	// or the wait for a lock that ends in LockTimeout.
	Delay time.Duration `json:"-"`
	// Count is how many matching requests it applies to; Count <= 0
	// removes the faults of this Method and Path instead.
	Count int `json:"count"`
}

// InjectFault adds f (see Fault), or removes faults with f.Count <= 0.
func (c *Cluster) InjectFault(f Fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	method := strings.ToUpper(f.Method)
	if f.Count <= 0 {
		kept := c.fails[:0]
		for _, r := range c.fails {
			if r.method != method || r.pattern != f.Path {
				kept = append(kept, r)
			}
		}
		c.fails = kept
		return
	}
	c.fails = append(c.fails, &failRule{method: method, pattern: f.Path, status: f.Status, message: f.Message,
		lock: f.LockTimeout, delay: f.Delay, left: f.Count})
}

// AddToken adds (or replaces) an API token "USER@REALM!ID=SECRET". A nil acl grants full
// privileges; otherwise acl maps ACL paths ("/", "/vms/100", "/storage/local") to the
// privileges the token has there, propagating to paths below. A malformed token is
// logged and ignored (every call with it answers 401).
func (c *Cluster) AddToken(token string, acl map[string][]string) {
	if err := c.addToken(token, acl); err != nil {
		c.log.Error("add token", "err", err)
	}
}
