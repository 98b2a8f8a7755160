// Package fleet is the orchestrator's view of the Proxmox fleet: the
// registry of its zones and hosts, and the transport to them. It holds two
// things:
//
//   - the fleet registry (Registry, registry.go): it derives the agents from
//     the mesh's node list and what each agent reports (Info) and proves
//     (Prove: its node's certificate and a signature with its key, see
//     membership.go), groups them into zones by the Proxmox cluster
//     identity they prove (a standalone node is a zone of one), keeps out
//     of every zone the agents that prove nothing or something else than
//     they claim (RefusedAgents), and tracks every host's status from the
//     mesh and the agent's Health; it finds the agent of a node
//     (AgentOfNode, Agent) and the gateway's edge client (EdgeClient);
//   - the Proxmox transport (transport.go): a go-proxmox client per zone
//     whose HTTP transport is the agents' Proxy RPC over the mesh, so the
//     orchestrator holds no Proxmox credential.
//
// Liveness: a host's ONLINE/OFFLINE follows the mesh, with few calls to
// the agent. At each refresh (Config.RefreshInterval) the registry reads
// the control server's node list and the orchestrator's node's view of its
// peers (no call to any agent); an agent both show online, whose
// connection is up, is pinged at the mesh's own level (TSMP, answered by
// the agent's mesh stack; PingTimeout) and gets a Health call only every
// Config.HealthInterval. When the ping goes unanswered, the mesh stops
// showing the agent, or its sampled Health is due, it gets a Health call,
// and while that call runs it is pinged again every PingTimeout (from a
// quarter of it on, so that a well agent's Health answers first): an agent
// that was online and answers nothing (ping or Health) within
// Config.LivenessTimeout of its check's start is marked offline at once,
// instead of when the Health call's CallTimeout ends. A gone agent is thus
// offline within a refresh and LivenessTimeout (2s + 2s), while an agent
// that is slow but alive (its Health slower than LivenessTimeout, a first
// ping lost) stays online as long as any ping answers: two unanswered
// pings and no Health answer in 2s are what it takes, and nothing is
// sent to an idle agent that was not sent before. With replicas (Share,
// sharing.go) only the replica sampling a zone pings and samples its
// agents; the others follow the mesh and what that replica publishes.
//
// Nothing is configured by hand and nothing is persisted. It sits in the
// mesh layer: it may import pkg/proxmox, never a capability; fan-out over
// its zones is pkg/inventory's, and joining it to a capability's interface
// (compute's zones, snippets, volumes) is pkg/orchestrator's wiring.
package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	"github.com/flexplane/flexplane/pkg/proxmox/pvecert"
	"github.com/flexplane/flexplane/pkg/support/tracing"
	// The agents' Proxy answers come zstd-compressed when the
	// orchestrator's gRPC clients advertise it.
	_ "github.com/flexplane/flexplane/pkg/mesh/rpczstd"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// MeshNode is a node of the mesh as the control server lists it.
type MeshNode struct {
	ID   uint64
	Name string
	Addr netip.Addr
	// NodeKey is the node's WireGuard key ("nodekey:<hex>"): the mesh
	// identity an agent's membership proof must be made for.
	NodeKey string
	Tags    []string
	Online  bool
}

// Mesh is what the registry needs of the mesh: the control server's node list
// and the orchestrator's own mesh node.
type Mesh interface {
	// Nodes lists the nodes known to the control server.
	Nodes(ctx context.Context) ([]MeshNode, error)
	// OnlinePeers is the mesh addresses of the peers the orchestrator's
	// node sees online (dialling a peer not yet in its view is slow). The
	// registry reads it once per refresh, for all agents.
	OnlinePeers(ctx context.Context) (map[netip.Addr]bool, error)
	// Dial dials over the orchestrator's mesh node.
	Dial(ctx context.Context, network, addr string) (net.Conn, error)
}

// MapResyncer is what a Mesh may also do: ask the control server for the
// orchestrator's node's whole map of the mesh again, on a new stream
// (meshnode.Node.ResyncMap), reporting whether it did. The registry asks
// for it when agents the control server shows online stay missing from
// the node's view (Config.StaleMapAfter).
type MapResyncer interface {
	ResyncMap(ctx context.Context) (bool, error)
}

// Pinger is what a Mesh may also do: ping a peer at the mesh's own level
// (meshnode.Node.PingPeer), which no service of the agent sees. While an
// agent's sampled Health is not due, the registry pings it at each
// refresh instead; and while a Health call to an agent that was online
// runs, it pings it again, so that an agent that is gone is found offline
// within a refresh and Config.LivenessTimeout (see Liveness in the package
// doc): the control server marks a node offline only seconds after its
// session ended.
type Pinger interface {
	PingPeer(ctx context.Context, ip netip.Addr) error
}

// PingTimeout bounds one ping of an agent; an unanswered ping is followed
// by a Health call at once, and by another ping.
const PingTimeout = time.Second

// KeepaliveTime is how long a connection to an agent may be silent before
// the registry pings it (gRPC's floor); a ping unanswered within
// Config.CallTimeout closes the connection.
const KeepaliveTime = 10 * time.Second

// ProbeInterval is how often an agent never heard from, which the mesh
// does not show online, is called anyway (see Registry.check).
const ProbeInterval = 5 * time.Second

// Config configures a Registry.
type Config struct {
	// Mesh is the mesh to discover agents in. Required.
	Mesh Mesh
	// AgentPort is the agents' gRPC port. Default 50051.
	AgentPort uint16
	// RefreshInterval is how often the node list (with each node's online
	// state at the control server) and the orchestrator's node's view of
	// its peers are read. An agent's Health is called at a refresh only
	// when that mesh state does not show it up and running as at its last
	// Health, when a call to it failed, or when HealthInterval has passed.
	// Default 2s.
	RefreshInterval time.Duration
	// HealthInterval is how long an online agent that the mesh keeps
	// showing online goes without a Health call: the mesh's own peer state
	// tells when it goes away, so the Health call is only a sampled check
	// of what the mesh cannot see (its Proxmox API, its update state). Each
	// wait is jittered by up to a quarter more, so that the agents' calls
	// spread out. Default 20s.
	HealthInterval time.Duration
	// InfoInterval is how often an agent's Info is read, and its membership
	// proven, again; both are also done whenever an agent comes (back)
	// online, reports another version or has another mesh identity.
	// Default 5m.
	InfoInterval time.Duration
	// CallTimeout bounds one Info or Health call. Default 3s.
	CallTimeout time.Duration
	// LivenessTimeout is how long an agent that was online may answer
	// nothing over the mesh, from the start of its check at a refresh,
	// before it is marked offline: neither a mesh ping (sent every
	// PingTimeout) nor its Health call. An answered ping lets a slow
	// Health call run for its CallTimeout. It applies when Mesh is a
	// Pinger; an agent that is gone is then offline within RefreshInterval
	// plus LivenessTimeout (4s by default). Default 2s.
	LivenessTimeout time.Duration
	// Logger receives the registry's logs. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider traces the calls to agents (their trace context goes
	// along, so the agents' spans join the caller's trace); nil traces
	// nothing.
	TracerProvider trace.TracerProvider
	// StaleMapAfter is how long an agent the control server shows online
	// may stay missing from the orchestrator's node's view (Mesh's
	// OnlinePeers) before the registry takes that view for stale and asks
	// for the whole map again (when Mesh is a MapResyncer). The control
	// server drops the map stream of a node that reads it too slowly during
	// a burst of changes, and such a node never hears of an agent that
	// joined since. Default ten RefreshIntervals (20s).
	StaleMapAfter time.Duration
	// RejoinGrace is how long after the registry starts an agent of the
	// mesh that is offline still counts as pending (see Identified):
	// after an orchestrator restart every agent is offline until it has
	// reconnected to the control server, which takes seconds. Default 30s.
	RejoinGrace time.Duration
}

// HostStatus is the state of a host.
type HostStatus string

// Host states.
const (
	// StatusOnline: the agent is in the mesh and reaches its Proxmox API.
	StatusOnline HostStatus = "online"
	// StatusDegraded: the agent is in the mesh but cannot reach Proxmox.
	StatusDegraded HostStatus = "degraded"
	// StatusOffline: the agent is not reachable over the mesh.
	StatusOffline HostStatus = "offline"
)

// Host is one Proxmox node and its agent.
type Host struct {
	// Node is the Proxmox node name; it is unique within a zone only.
	Node string
	// MeshID and MeshName identify the agent in the mesh.
	MeshID   uint64
	MeshName string
	MeshAddr netip.Addr
	Status   HostStatus
	// Detail explains a status other than online.
	Detail         string
	AgentVersion   string
	ProxmoxVersion string
	// Platform is the agent binary's GOOS/GOARCH.
	Platform string
	// LastHealthy is when the agent last reported healthy.
	LastHealthy time.Time
	// Update is the agent's update state as it last reported it.
	Update UpdateStatus
}

// UpdateStatus is an agent's update state (package selfupdate's State).
type UpdateStatus struct {
	// Phase is idle, downloading, verifying, restarting, probation, done,
	// rolled-back or refused; "" when the agent does not report one.
	Phase string
	// Version is the version being (or last) installed, From the one it
	// replaces.
	Version, From string
	// Reason says why it was refused or rolled back.
	Reason string
	// Operation is the rollout that asked for it.
	Operation string
	UpdatedAt time.Time
}

// Zone is one Proxmox cluster, or a standalone node.
type Zone struct {
	// ID is the stable cluster identity its agents prove (pvecert.ClusterIdentity
	// of the cluster CA).
	ID string
	// Name is the Proxmox cluster name, or the node name of a standalone node.
	Name       string
	Standalone bool
	// Hosts are sorted by node name.
	Hosts []Host
}

// Host returns the host with the given Proxmox node name.
func (z Zone) Host(node string) (Host, bool) {
	i := slices.IndexFunc(z.Hosts, func(h Host) bool { return h.Node == node })
	if i < 0 {
		return Host{}, false
	}
	return z.Hosts[i], true
}

// agentState is what the registry knows of one agent.
type agentState struct {
	node   MeshNode
	conn   *grpc.ClientConn
	client agentv1.AgentServiceClient

	info   *agentv1.InfoResponse
	infoAt time.Time
	// member is what the agent's proof showed with info; nil when it proved
	// nothing, refusal then says why. provenKey is the mesh node key the
	// proof was made for.
	member       *pvecert.Member
	refusal      string
	refusedSince time.Time
	provenKey    string
	// heldBy is the mesh node that holds the agent's node of its zone
	// when another agent does (set by snapshot); heldSince is since when.
	heldBy      string
	heldSince   time.Time
	status      HostStatus
	detail      string
	lastHealthy time.Time
	update      UpdateStatus
	checking    bool // a check is in flight
	// healthDue is when the agent's next Health call is due while the mesh
	// keeps showing it online (see Config.HealthInterval); zero before its
	// first answer.
	healthDue time.Time
	probedAt  time.Time // when it was last probed although the mesh did not show it
	// unseenSince is since when the control server shows the agent online
	// and the orchestrator's node does not (zero while it does, or the
	// control server does not).
	unseenSince time.Time
	// fromSampler: status is the verdict of the replica sampling the
	// agent's zone (see Sharing), not of a check of this replica's.
	fromSampler bool
}

// Registry discovers agents and zones. Run keeps it current. It is a
// prometheus.Collector of the requests sent to the zones, the hosts and the
// mesh peers.
type Registry struct {
	cfg     Config
	log     *slog.Logger
	metrics *registryMetrics

	inflight sync.WaitGroup // checks Run started without waiting; only Run touches it

	started time.Time // when New made it

	mu     sync.Mutex
	agents map[uint64]*agentState // by mesh node ID, protected by mu
	ready  bool                   // a refresh completed, protected by mu
	// graceOver is set once the agents still without Info when
	// RejoinGrace ended have been logged; protected by mu.
	graceOver bool
	// changed is closed (and replaced) whenever the agents or their state
	// change; protected by mu.
	changed chan struct{}
	// snap is the zones built from agents, nil after any change to agents
	// or their state; protected by mu.
	snap *snapshot
	// share is how the liveness checks are shared with the other
	// replicas (Share); nil: this replica checks every agent. shared is
	// closed when it is set. Both protected by mu.
	share  Sharing
	shared chan struct{}
}

// snapshot is the zones as of one state of the registry's agents.
type snapshot struct {
	zones []Zone         // sorted by name then ID
	byID  map[string]int // index into zones
	// members are the agents of the zones (by mesh ID): proven, and the
	// first of their node.
	members map[uint64]bool
	refused []RefusedAgent // sorted by mesh name
}

// New returns a registry; call Run to keep it current.
func New(cfg Config) (*Registry, error) {
	if cfg.Mesh == nil {
		return nil, errors.New("zones: Mesh is required")
	}
	if cfg.AgentPort == 0 {
		cfg.AgentPort = 50051
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = 2 * time.Second
	}
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = 20 * time.Second
	}
	if cfg.InfoInterval <= 0 {
		cfg.InfoInterval = 5 * time.Minute
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 3 * time.Second
	}
	if cfg.LivenessTimeout <= 0 {
		cfg.LivenessTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RejoinGrace <= 0 {
		cfg.RejoinGrace = 30 * time.Second
	}
	if cfg.StaleMapAfter <= 0 {
		cfg.StaleMapAfter = 10 * cfg.RefreshInterval
	}
	return &Registry{cfg: cfg, log: cfg.Logger, metrics: newRegistryMetrics(), agents: map[uint64]*agentState{},
		started: time.Now(), changed: make(chan struct{}), shared: make(chan struct{})}, nil
}

// Run refreshes the registry every RefreshInterval until ctx ends, then
// closes its connections to agents. An agent that answers slowly (or not at
// all) delays neither the discovery of new agents nor the checks of others.
func (r *Registry) Run(ctx context.Context) error {
	defer r.closeConns()
	defer r.inflight.Wait()
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		r.followShared(fctx)
	}()
	defer func() {
		stopFollow()
		<-followed
	}()
	t := time.NewTicker(r.cfg.RefreshInterval)
	defer t.Stop()
	for wait := true; ; wait = false {
		if err := r.refresh(ctx, wait); err != nil && ctx.Err() == nil {
			r.log.Warn("zones: refresh", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (r *Registry) closeConns() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.agents {
		if a.conn != nil {
			a.conn.Close()
		}
	}
	r.agents = map[uint64]*agentState{}
	r.snap = nil
}

// Refresh reads the node list once and checks every agent that is not being
// checked already, waiting for those checks.
func (r *Registry) Refresh(ctx context.Context) error { return r.refresh(ctx, true) }

func (r *Registry) refresh(ctx context.Context, wait bool) error {
	nodes, err := r.cfg.Mesh.Nodes(ctx)
	if err != nil {
		return fmt.Errorf("zones: refresh: %w", err)
	}
	seen := map[uint64]bool{}
	var checks []*agentState
	changed := false // the set of agents, or what the mesh says of one
	r.mu.Lock()
	for _, n := range nodes {
		if !slices.Contains(n.Tags, meshnode.TagAgent) || !n.Addr.IsValid() {
			continue
		}
		seen[n.ID] = true
		a := r.agents[n.ID]
		if a == nil || a.node.Addr != n.Addr {
			if a != nil && a.conn != nil {
				a.conn.Close()
			}
			a = &agentState{status: StatusOffline}
			r.agents[n.ID] = a
			changed = true
		} else if !sameNode(a.node, n) {
			changed = true
		}
		a.node = n
		if !a.checking {
			a.checking = true
			checks = append(checks, a)
		}
	}
	for id, a := range r.agents {
		if !seen[id] {
			if a.conn != nil {
				a.conn.Close()
			}
			delete(r.agents, id)
			changed = true
		}
	}
	if changed {
		// Zones and hosts are rebuilt, and whoever follows them looks
		// again, only when the mesh's list changed: an idle refresh
		// costs them nothing.
		r.changedLocked()
	}
	r.mu.Unlock()

	// One read of the orchestrator node's view for every check (it lists
	// every peer: reading it per agent made a refresh O(agents²)).
	var reachable map[netip.Addr]bool
	if len(checks) > 0 {
		if reachable, err = r.cfg.Mesh.OnlinePeers(ctx); err != nil {
			r.log.Warn("zones: mesh status", "err", err)
		} else {
			r.resyncIfStale(ctx, reachable)
		}
	}

	var wg sync.WaitGroup
	// Checks Run does not wait for are tracked so that Run can wait for
	// them before it returns.
	track := &wg
	if !wait {
		track = &r.inflight
	}
	for _, a := range checks {
		track.Add(1)
		go func() {
			defer track.Done()
			r.check(ctx, a, reachable)
			r.mu.Lock()
			a.checking = false
			r.mu.Unlock()
		}()
	}
	if wait {
		wg.Wait()
		r.mu.Lock()
		r.ready = true
		r.changedLocked()
		r.mu.Unlock()
	}
	r.logGraceOver()
	return nil
}

// sameNode reports whether the control server lists a node as it did.
func sameNode(a, b MeshNode) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Addr == b.Addr && a.NodeKey == b.NodeKey && a.Online == b.Online &&
		slices.Equal(a.Tags, b.Tags)
}

// resyncIfStale asks the mesh for the orchestrator's node's whole map again
// when an agent the control server shows online has been missing from the
// node's view (reachable) for Config.StaleMapAfter.
func (r *Registry) resyncIfStale(ctx context.Context, reachable map[netip.Addr]bool) {
	now := time.Now()
	var stale []string
	r.mu.Lock()
	for _, a := range r.agents {
		switch {
		case !a.node.Online || reachable[a.node.Addr]:
			a.unseenSince = time.Time{}
		case a.unseenSince.IsZero():
			a.unseenSince = now
		case now.Sub(a.unseenSince) >= r.cfg.StaleMapAfter:
			stale = append(stale, a.node.Name)
		}
	}
	r.mu.Unlock()
	rs, ok := r.cfg.Mesh.(MapResyncer)
	if len(stale) == 0 || !ok {
		return
	}
	slices.Sort(stale)
	did, err := rs.ResyncMap(ctx)
	switch {
	case err != nil:
		r.log.Warn("zones: resync the orchestrator's map of the mesh", "err", err)
	case did:
		r.metrics.mapResyncs.Inc()
		r.log.Warn("zones: agents online at the control server are missing from the orchestrator's map; asked for the whole map again",
			"agents", len(stale), "first", stale[0], "after", r.cfg.StaleMapAfter)
	}
}

// logGraceOver warns, once, when RejoinGrace has ended, of every agent of
// the mesh whose Info was never read, with why: from then on Identified
// no longer waits for those offline in the mesh, so they are missing from
// every list of zones and hosts until they answer.
func (r *Registry) logGraceOver() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.graceOver || time.Since(r.started) < r.cfg.RejoinGrace {
		return
	}
	r.graceOver = true
	for _, a := range r.agents {
		if a.info == nil {
			r.log.Warn("zones: agent without info after the rejoin grace; it is in no zone until it answers",
				"mesh_name", a.node.Name, "mesh_addr", a.node.Addr, "mesh_online", a.node.Online,
				"status", a.status, "detail", a.detail, "grace", r.cfg.RejoinGrace)
		}
	}
}

// check updates one agent's status (and Info when due); reachable is the
// set of mesh addresses the orchestrator's node sees online.
func (r *Registry) check(ctx context.Context, a *agentState, reachable map[netip.Addr]bool) {
	began := time.Now()
	pinger, _ := r.cfg.Mesh.(Pinger)
	r.mu.Lock()
	node, client, prev := a.node, a.client, a.status
	infoDue := a.info == nil || time.Since(a.infoAt) > r.cfg.InfoInterval || prev == StatusOffline || a.provenKey != node.NodeKey
	knownVersion := a.info.GetAgentVersion()
	// The mesh shows the agent as it was at its last answer and the
	// connection to it is up: the Health call waits for its sampled turn.
	// A failed call (markFailed) made it offline, which calls again at
	// once; an agent that restarted (into another version, say) closed
	// the connection.
	quiet := prev != StatusOffline && node.Online && reachable[node.Addr] && !infoDue &&
		a.conn != nil && a.conn.GetState() == connectivity.Ready &&
		!a.healthDue.IsZero() && time.Now().Before(a.healthDue)
	r.mu.Unlock()
	if share, zone := r.follower(a); share != nil {
		// Another replica samples the zone: its verdict, the mesh's
		// state and this replica's own failed calls are what call the
		// agent, never the sampling's turn.
		if pub, ok := share.Published(zone); ok {
			if d, ok := pub[node.ID]; ok {
				r.adopt(a, d)
				return
			}
		}
		r.mu.Lock()
		// Its own call failed, the mesh does not show it up, or the
		// sampler's verdict on it was withdrawn: call it.
		due := prev == StatusOffline || a.fromSampler || !node.Online || !reachable[node.Addr] || infoDue ||
			a.conn == nil || a.conn.GetState() != connectivity.Ready
		r.mu.Unlock()
		if !due {
			r.metrics.healthSkipped.Inc()
			return
		}
	} else if quiet {
		pinged := true
		if pinger != nil {
			pctx, cancel := context.WithTimeout(ctx, min(PingTimeout, r.cfg.LivenessTimeout))
			err := pinger.PingPeer(pctx, node.Addr)
			cancel()
			if err != nil {
				r.log.Debug("zones: mesh ping of an online agent failed; calling its Health", "mesh_name", node.Name, "err", err)
				pinged = false
			}
		}
		if pinged {
			r.metrics.healthSkipped.Inc()
			return
		}
	}

	var update *UpdateStatus
	var proven verdict
	set := func(st HostStatus, detail string, info *agentv1.InfoResponse) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if info != nil {
			a.info, a.infoAt = info, time.Now()
			r.setVerdictLocked(a, node, info, proven)
		}
		if update != nil {
			a.update = *update
		}
		a.fromSampler = false
		if st != StatusOffline {
			a.lastHealthy = time.Now()
		}
		switch {
		case st != a.status:
			r.log.Info("zones: host status", "mesh_name", node.Name, "status", st, "detail", detail, "has_info", a.info != nil)
		case detail != a.detail && st == StatusOffline:
			// An agent that never came online starts offline: without
			// this, why it stays so would never be logged.
			r.log.Info("zones: host still offline", "mesh_name", node.Name, "detail", detail, "has_info", a.info != nil)
		}
		a.status, a.detail = st, detail
		r.changedLocked()
	}

	// An agent answering on its connection stays checked over it while
	// the control server does not see it: tunnels outlive the control
	// server (which moves between orchestrator replicas), and the health
	// call fails soon enough for an agent that is really gone.
	viaTunnel := client != nil && prev != StatusOffline
	var unseen string // why the mesh says the agent is not there
	switch {
	case !node.Online && !viaTunnel:
		unseen = "not connected to the mesh"
	case !reachable[node.Addr] && !viaTunnel:
		unseen = "not yet reachable from the orchestrator"
	}
	if unseen != "" {
		// The control server's view can be wrong for long: an agent
		// that reconnected while an earlier session of it was ending
		// may stay offline there (headscale marks it so when the old
		// session's grace of 10 s ends just as the new one begins)
		// although its tunnel works. An agent never
		// heard from yet is probed over the mesh anyway, at most every
		// ProbeInterval; without it, it would be in no zone until it
		// reconnects for another reason. The probe's dial waits for the
		// agent to know this orchestrator's node as it is now
		// (meshnode.Node.Dial): one that has not reconnected to the
		// control server since the orchestrator restarted does not, and
		// would drop the tunnel when it does.
		r.mu.Lock()
		probe := a.info == nil && time.Since(a.probedAt) >= ProbeInterval
		if probe {
			a.probedAt = time.Now()
		}
		r.mu.Unlock()
		if !probe {
			set(StatusOffline, unseen, nil)
			return
		}
	}
	if client == nil {
		conn, err := grpc.NewClient("passthrough:///"+net.JoinHostPort(node.Addr.String(), strconv.Itoa(int(r.cfg.AgentPort))),
			grpc.WithTransportCredentials(insecure.NewCredentials()), // the mesh encrypts and authenticates
			grpc.WithStatsHandler(tracing.ClientHandler(r.cfg.TracerProvider)),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return r.cfg.Mesh.Dial(ctx, "tcp", addr)
			}),
			// A vanished agent must fail fast so reads fail over to another
			// agent of the zone (gRPC's default connect timeout is 20s).
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
				MinConnectTimeout: r.cfg.CallTimeout,
			}),
			// An agent whose node lost power sends nothing: without pings a
			// call on its connection would wait forever. A dead connection
			// fails its calls with Unavailable, and reads fail over.
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: r.cfg.CallTimeout, PermitWithoutStream: true}),
		)
		if err != nil {
			set(StatusOffline, err.Error(), nil)
			return
		}
		client = agentv1.NewAgentServiceClient(conn)
		r.mu.Lock()
		a.conn, a.client = conn, client
		r.mu.Unlock()
	}

	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	r.metrics.healthCalls.Inc()
	silent := func() bool { return false }
	if pinger != nil && prev != StatusOffline {
		// An agent that was online: the call ends when it has answered
		// nothing over the mesh by LivenessTimeout.
		silent = watchLiveness(cctx, cancel, pinger, node.Addr, began.Add(r.cfg.LivenessTimeout))
	}
	h, err := client.Health(cctx, &agentv1.HealthRequest{})
	gone := silent()
	r.mu.Lock()
	if err == nil {
		a.healthDue = time.Now().Add(r.cfg.HealthInterval + rand.N(r.cfg.HealthInterval/4+1))
	} else {
		a.healthDue = time.Time{}
	}
	r.mu.Unlock()
	if err != nil {
		if unseen != "" {
			r.log.Debug("zones: probe of an agent the mesh does not show", "mesh_name", node.Name, "why", unseen, "err", err)
			set(StatusOffline, unseen, nil)
			return
		}
		if gone {
			r.metrics.livenessTimeouts.Inc()
			set(StatusOffline, fmt.Sprintf("no answer over the mesh (ping or health) within %v", r.cfg.LivenessTimeout), nil)
			return
		}
		set(StatusOffline, "health: "+err.Error(), nil)
		return
	}
	if unseen != "" {
		r.log.Info("zones: agent answers although the mesh does not show it", "mesh_name", node.Name, "why", unseen)
	}
	if u := h.GetUpdate(); u != nil {
		update = &UpdateStatus{
			Phase: u.GetPhase(), Version: u.GetVersion(), From: u.GetFrom(), Reason: u.GetReason(),
			Operation: u.GetOperation(), UpdatedAt: time.UnixMilli(u.GetUpdatedAtUnixMs()),
		}
	}
	var info *agentv1.InfoResponse
	// An agent that restarted into another version within one refresh was
	// never seen offline: its new version says its Info is stale.
	if infoDue || (h.GetAgentVersion() != "" && h.GetAgentVersion() != knownVersion) {
		// Each call has CallTimeout of its own: on a loaded agent, Info
		// (several Proxmox reads) after Health in one budget timed out
		// over and over, and the agent stayed in no zone.
		ictx, icancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		info, err = client.Info(ictx, &agentv1.InfoRequest{})
		icancel()
		pctx, pcancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		defer pcancel()
		if err != nil {
			r.log.Warn("zones: agent info", "mesh_name", node.Name, "err", err)
			info = nil
		} else if proven, err = r.prove(pctx, client, node, info); err != nil {
			// Info and the proof are kept together: the Info is read
			// again with the next proof.
			r.log.Warn("zones: agent proof", "mesh_name", node.Name, "err", err)
			info = nil
		}
	}
	if h.GetStatus() != agentv1.HealthStatus_HEALTH_STATUS_SERVING {
		set(StatusDegraded, h.GetDetail(), info)
		return
	}
	set(StatusOnline, "", info)
}

// watchGrace is how long a watched call runs before its agent is pinged:
// the Health call of an agent that is well answers first, and no ping is
// sent beside it.
const watchGrace = PingTimeout / 4

// watchLiveness pings the agent at addr over the mesh while a call to it
// runs under ctx (from watchGrace on), and ends the call (cancel) when
// no ping has answered by deadline. The function it returns stops the
// watch and reports whether the watch ended the call; call it once the
// call has returned.
func watchLiveness(ctx context.Context, cancel context.CancelFunc, p Pinger, addr netip.Addr, deadline time.Time) func() bool {
	wctx, stop := context.WithCancel(ctx)
	ended := make(chan bool, 1)
	go func() {
		if !wait(wctx, min(watchGrace, time.Until(deadline))) {
			ended <- false // the call returned first
			return
		}
		if !pingUntil(wctx, p, addr, deadline) && wctx.Err() == nil {
			cancel()
			ended <- true
			return
		}
		ended <- false
	}()
	return func() bool {
		stop()
		return <-ended
	}
}

// pingUntil pings addr, a ping every PingTimeout at most, until one
// answers (true) or deadline passes or ctx ends (false).
func pingUntil(ctx context.Context, p Pinger, addr netip.Addr, deadline time.Time) bool {
	for {
		sent := time.Now()
		left := deadline.Sub(sent)
		if left <= 0 || ctx.Err() != nil {
			return false
		}
		pctx, cancel := context.WithTimeout(ctx, min(PingTimeout, left))
		err := p.PingPeer(pctx, addr)
		cancel()
		if err == nil {
			return true
		}
		// A ping that failed at once (no route to the peer) is sent again
		// only when the last one's time is up, not in a busy loop.
		if !wait(ctx, min(time.Until(sent.Add(PingTimeout)), time.Until(deadline))) {
			return false
		}
	}
}

// wait waits for d, reporting false when ctx ends first.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Changed returns a channel closed at the next change of the agents or
// their state (the mesh's list of them included, and the end of the first
// refresh): a reader compares what it depends on and takes a new channel.
func (r *Registry) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// changedLocked records a change of the agents or their state. r.mu must be
// held.
func (r *Registry) changedLocked() {
	r.snap = nil
	close(r.changed)
	r.changed = make(chan struct{})
}

// UnidentifiedError is what Identified returns when ctx ended first: the
// zones of Agents are not known yet, so a list of every zone may lack some.
type UnidentifiedError struct {
	// Agents are the mesh names of the agents not identified yet; empty
	// when the registry has not read the mesh's node list yet.
	Agents []string
	Err    error
}

func (e *UnidentifiedError) Error() string {
	if len(e.Agents) == 0 {
		return fmt.Sprintf("zones: the agents of the mesh are not known yet: %v", e.Err)
	}
	return fmt.Sprintf("zones: agents %v have not reported their zone yet: %v", e.Agents, e.Err)
}

func (e *UnidentifiedError) Unwrap() error { return e.Err }

// Identified waits until the registry knows the zone of every agent that
// may answer: a refresh has completed, and every agent of the mesh has
// reported its Info, but for those offline in the mesh once RejoinGrace has
// passed since the registry started (a node that is gone stays in the mesh's
// list). It returns an *UnidentifiedError naming the agents still pending when
// ctx ends first. Right after an orchestrator restart it is what keeps a list
// of zones, hosts or VMs from answering nothing instead of waiting for the
// agents that are rejoining.
func (r *Registry) Identified(ctx context.Context) error {
	for {
		r.mu.Lock()
		pending, ready, changed := r.pendingLocked(), r.ready, r.changed
		r.mu.Unlock()
		if ready && len(pending) == 0 {
			return nil
		}
		// The grace's end changes what is pending, too.
		var grace <-chan time.Time
		var t *time.Timer
		if d := r.cfg.RejoinGrace - time.Since(r.started); d > 0 {
			t = time.NewTimer(d)
			grace = t.C
		}
		var err error
		select {
		case <-changed:
		case <-grace:
		case <-ctx.Done():
			err = &UnidentifiedError{Agents: pending, Err: context.Cause(ctx)}
		}
		if t != nil {
			t.Stop()
		}
		if err != nil {
			return err
		}
	}
}

// pendingLocked lists the agents Identified waits for. r.mu must be held.
func (r *Registry) pendingLocked() []string {
	rejoining := time.Since(r.started) < r.cfg.RejoinGrace
	var out []string
	for _, a := range r.agents {
		if a.info == nil && (a.node.Online || rejoining) {
			out = append(out, a.node.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Ready reports whether at least one refresh has completed.
func (r *Registry) Ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready
}

// Zones returns the zones, sorted by name then ID. Agents whose Info was
// never read yet belong to no zone.
func (r *Registry) Zones() []Zone {
	r.mu.Lock()
	defer r.mu.Unlock()
	zs := slices.Clone(r.snapshot().zones)
	for i := range zs {
		zs[i].Hosts = slices.Clone(zs[i].Hosts)
	}
	return zs
}

// Zone returns the zone with the given ID. It is cheap: the zones are
// rebuilt only after the registry's state changed, not on every lookup.
func (r *Registry) Zone(id string) (Zone, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.snapshot()
	i, ok := s.byID[id]
	if !ok {
		return Zone{}, false
	}
	z := s.zones[i]
	z.Hosts = slices.Clone(z.Hosts)
	return z, true
}

// snapshot returns the zones of the current state, building them if the
// state changed since the last build. r.mu must be held; the result must
// not be modified.
func (r *Registry) snapshot() *snapshot {
	if r.snap != nil {
		return r.snap
	}
	members, refused := r.membersLocked()
	byID := map[string]*Zone{}
	for _, a := range r.agents {
		if !members[a.node.ID] {
			continue
		}
		id := a.member.ClusterID
		z := byID[id]
		if z == nil {
			z = &Zone{ID: id, Name: a.info.GetClusterName(), Standalone: a.info.GetClusterName() == ""}
			byID[id] = z
		}
		z.Hosts = append(z.Hosts, a.host())
	}
	zones := make([]Zone, 0, len(byID))
	for _, z := range byID {
		slices.SortFunc(z.Hosts, func(a, b Host) int {
			return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.MeshID, b.MeshID))
		})
		if z.Standalone {
			z.Name = z.Hosts[0].Node
		}
		zones = append(zones, *z)
	}
	slices.SortFunc(zones, func(a, b Zone) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID)) })
	idx := make(map[string]int, len(zones))
	for i, z := range zones {
		idx[z.ID] = i
	}
	r.snap = &snapshot{zones: zones, byID: idx, members: members, refused: refused}
	return r.snap
}

func (a *agentState) host() Host {
	return Host{
		Node:           a.member.Node,
		MeshID:         a.node.ID,
		MeshName:       a.node.Name,
		MeshAddr:       a.node.Addr,
		Status:         a.status,
		Detail:         a.detail,
		AgentVersion:   a.info.GetAgentVersion(),
		ProxmoxVersion: a.info.GetProxmoxVersion(),
		Platform:       a.info.GetPlatform(),
		LastHealthy:    a.lastHealthy,
		Update:         a.update,
	}
}

// Agent returns the gRPC client of the agent with the given mesh ID, if
// the registry has one and the agent is a host of a zone (for calls the
// zone clients do not make, such as Update); a refused agent has none.
func (r *Registry) Agent(meshID uint64) (agentv1.AgentServiceClient, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.agents[meshID]
	if a == nil || a.client == nil || !r.snapshot().members[meshID] {
		return nil, false
	}
	return a.client, true
}

// target is an agent a request can go to.
type target struct {
	node   string
	meshID uint64
	client agentv1.AgentServiceClient
}

// targets returns the usable agents of a zone: the agent of preferNode first
// (if any), then the others in a stable order. Only online agents that are
// hosts of the zone (proven, see membership.go) are usable.
func (r *Registry) targets(zoneID, preferNode string) []target {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ts []target
	members := r.snapshot().members
	for _, a := range r.agents {
		if !members[a.node.ID] || a.member.ClusterID != zoneID || a.status != StatusOnline || a.client == nil {
			continue
		}
		ts = append(ts, target{node: a.member.Node, meshID: a.node.ID, client: a.client})
	}
	slices.SortFunc(ts, func(a, b target) int {
		ap, bp := a.node == preferNode, b.node == preferNode
		switch {
		case ap && !bp:
			return -1
		case bp && !ap:
			return 1
		}
		return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.meshID, b.meshID))
	})
	return ts
}

// markFailed records that a call to an agent failed at the transport level,
// so that following requests skip it until the next refresh finds it healthy.
func (r *Registry) markFailed(meshID uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.agents[meshID]; a != nil && a.status == StatusOnline {
		a.status, a.detail = StatusOffline, "proxy: "+err.Error()
		r.log.Info("zones: host status", "mesh_name", a.node.Name, "status", a.status, "detail", a.detail)
		r.snap = nil
	}
}

// CheckSoon makes the next refresh call the Health of the agent of mesh
// node meshID, whatever its sampling interval: for a caller that waits
// for what only Health reports (an update's phase).
func (r *Registry) CheckSoon(meshID uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.agents[meshID]; a != nil {
		a.healthDue = time.Time{}
	}
}

// AgentOfNode returns the client of the online agent of node in zone zoneID and
// its host, for calls to that one agent (a volume on its node): the agent
// that proved that node of that zone.
func (r *Registry) AgentOfNode(zoneID, node string) (agentv1.AgentServiceClient, Host, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	members := r.snapshot().members
	for _, a := range r.agents {
		if members[a.node.ID] && a.member.ClusterID == zoneID && a.member.Node == node && a.status == StatusOnline && a.client != nil {
			return a.client, a.host(), true
		}
	}
	return nil, Host{}, false
}
