package orchestrator

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/graph/server"
	"github.com/flexplane/flexplane/pkg/audit"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbsync"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
)

// Config configures an orchestrator.
type Config struct {
	// Listen is the public TCP address. Default ":8080".
	Listen string
	// PublicURL is the URL agents use to reach Listen (behind a TLS
	// terminating proxy, its https:// URL). Default "http://" + the bound
	// address, with 127.0.0.1 for an unspecified host (enough for one
	// machine only).
	PublicURL string
	// DataDir keeps the mesh control server's state and the orchestrator's
	// mesh identity. Required.
	DataDir string
	// STUNAddr is the UDP address of the STUN server. Default ":3478"; a
	// zero port picks a free one.
	STUNAddr string
	// MeshPostgres keeps the mesh control server's state in PostgreSQL
	// (replicated deployments: whichever replica runs it finds the same
	// nodes, keys and server keys); nil keeps it in SQLite under DataDir.
	MeshPostgres *meshcontrol.PostgresConfig
	// AgentPort is the agents' gRPC port. Default 50051.
	AgentPort uint16
	// MeshName is the orchestrator's name in the mesh. Default
	// "flexplane-orchestrator".
	MeshName string
	// API configures the GraphQL API served at /graphql; its zero value
	// serves none.
	API APIConfig
	// Handler serves every path the mesh control server and the API do not
	// own (the portal, ...). Nil answers 404.
	Handler http.Handler
	// RefreshInterval is how often zones and host status are refreshed from
	// the mesh (an agent's Health is called only when due: see
	// fleet.Config.HealthInterval).
	// Default 2s.
	RefreshInterval time.Duration
	// MetricsListen is the TCP address serving the Prometheus metrics: the
	// orchestrator's at /metrics, each agent's (fetched over the mesh) at
	// /metrics/agents/<mesh name>. Keep it off the public network; ""
	// serves none.
	MetricsListen string
	// Audit says where the audit events of mutations go; its zero value
	// records none.
	Audit AuditConfig
	// TracerProvider traces GraphQL operations and the calls they make to
	// the agents, whose spans join the trace; nil traces nothing.
	TracerProvider trace.TracerProvider
	// Kube says how to reach Kubernetes (the catalog's kubernetes
	// backend, the Lease of Replication).
	Kube KubeConfig
	// Replication runs the orchestrator as one of several replicas behind
	// one Service; its zero value runs it alone.
	Replication ReplicationConfig
	// MeshPolicy replaces the default mesh policy; for tests only.
	MeshPolicy string
	// Logger receives all logs, including the control server's. Default
	// slog.Default().
	Logger *slog.Logger
}

// ReplicationConfig makes the orchestrator one of several replicas: the
// embedded mesh control server runs on one of them at a time, the holder
// of a Kubernetes Lease (reached through Config.Kube), with its state in
// Config.MeshPostgres (required); the others forward the control protocol
// to it (package meshleader). Every replica is its own mesh node and
// serves the whole API.
type ReplicationConfig struct {
	// PeerURL is this replica's http:// URL as the other replicas reach
	// it (its pod's IP and the port of Listen); it must differ between
	// replicas. "" runs the orchestrator alone.
	PeerURL string
	// LeaseName is the Lease's name, in the namespace of Config.Kube.
	// Default meshleader.DefaultLeaseName.
	LeaseName string
	// LeaseDuration, RenewDeadline and RetryPeriod are the election's
	// timings (see meshleader.Config); defaults 15s, 10s and 2s. The sync
	// shards' Leases use them too.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// SyncShards is the number of shards of the zones whose background
	// syncs (edge gateways, load balancers) one replica runs at a time,
	// each elected by a Lease <SyncLeasePrefix>-<shard> (syncowner).
	// Every replica must be given the same. Default 1.
	SyncShards int
	// SyncLeasePrefix prefixes the sync shards' Lease names. Default
	// syncowner.DefaultLeasePrefix.
	SyncLeasePrefix string
}

// APIPath is where the GraphQL API is served.
const APIPath = "/graphql"

// APIConfig configures the GraphQL API. The zero value serves no API.
type APIConfig struct {
	// Issuer is the URL of the OpenID Connect issuer whose bearer tokens
	// the API accepts; "" serves no API. Its discovery document is read at
	// Start, which fails if the issuer cannot be reached.
	Issuer string
	// Audience is the client id tokens must be issued to (the portal's).
	// Required with Issuer.
	Audience string
	// CLIClientID is the client id of flexctl's native OIDC application,
	// whose tokens the API accepts too (auth.Config.CLIClientID); "" only
	// the portal's.
	CLIClientID string
	// Claims names the role, name and email claims; the zero value reads
	// Zitadel's tokens.
	Claims auth.ClaimNames
	// CatalogBackend is where the catalog (VDCs, profiles, images) lives:
	// CatalogDir (the default: manifests in CatalogDir) or
	// CatalogKubernetes (custom resources, reached through Config.Kube).
	CatalogBackend string
	// CatalogDir holds the catalog's manifests (the dir backend).
	// Default DataDir/catalog.
	CatalogDir string
	// Tenant is the one tenant this deployment serves.
	Tenant graph.Tenant
	// ZoneTimeout bounds each zone's part of a request that spans zones;
	// a slower zone is reported ZONE_UNAVAILABLE. Default
	// graph.DefaultZoneTimeout.
	ZoneTimeout time.Duration
	// AgentVersion is the agent version this orchestrator ships; hosts
	// whose agent reports another show updateAvailable. Empty: never.
	AgentVersion string
	// Releases configures agent releases and rollouts; its zero value
	// offers none.
	Releases ReleasesConfig
	// MaxDepth and MaxComplexity bound queries; zero keeps graph/server's
	// defaults.
	MaxDepth, MaxComplexity int
	// RateLimits bound how fast one caller (a token's issuer and subject)
	// may run mutations and openConsole, on this replica; the zero value
	// keeps graph/server's defaults, a negative rate turns a limit off
	// (docs/operate/orchestrator.md).
	RateLimits server.RateLimits
	// HTTPClient fetches the issuer's discovery document and signing keys;
	// nil is http.DefaultClient.
	HTTPClient *http.Client
	// VMRecoverAfter is how old an unfinished VM create must be before
	// this orchestrator, not running it, finishes or cleans it up (another
	// replica may still be working on it until then). Default 2m
	// (compute.Config.StaleAfter).
	VMRecoverAfter time.Duration
	// VMRecoverInterval is how often the orchestrator looks for unfinished
	// VM creates and moves to finish or undo. Default 30s
	// (compute.Config.RecoverInterval).
	VMRecoverInterval time.Duration
	// VMRecoverResync is how often the recovery pass reads the config of
	// every managed guest again; between, it reads only those whose
	// listing changed. Default 10m (compute.Config.RecoverResyncInterval).
	VMRecoverResync time.Duration
	// BackupQuotaInterval is how often the VDCs' backups are checked
	// against their backupGiB quotas, their backup schedules paused or
	// resumed (by the mesh control leader when replicated). Default 1m
	// (compute.Config.BackupQuotaInterval).
	BackupQuotaInterval time.Duration
	// ImageCopyRecoverInterval is how often the orchestrator looks for
	// copies of VDC images into zones (stageVDCImage) cut off by the end
	// of the orchestrator that ran them, deletes each and copies the image
	// again (by the mesh control leader when replicated). Default 1m
	// (compute.Config.ImageCopyRecoverInterval).
	ImageCopyRecoverInterval time.Duration
	// DrainParallel is how many VMs of the hosts in maintenance are
	// live-migrated at once per zone (by the mesh control leader when
	// replicated). Default 4 (compute.DefaultDrainParallel).
	DrainParallel int
	// HARequestTimeout is how long a start, stop, migration or create of an
	// HA VM, and a drain of one, waits for Proxmox's HA manager to have done
	// it before it fails. Default 3m (compute.DefaultHARequestTimeout).
	HARequestTimeout time.Duration
	// SecurityGroupInterval is how often the VDCs' security groups are
	// written into every zone's Proxmox firewall (by the mesh control
	// leader when replicated; a change through the API starts a pass at
	// once on the replica that made it). Default 10s
	// (sgsync.Config.Interval).
	SecurityGroupInterval time.Duration
	// EdgeResyncInterval is the time between the edge gateways' passes
	// while nothing changes: the slow resync that repairs drift (a pass
	// runs at once on a change of the catalog, of a zone's hosts or of
	// what an agent reports). Default 5m (edgesync.Config.Interval).
	EdgeResyncInterval time.Duration
	// EdgeRederiveInterval is the time between the edge gateways' light
	// passes, which read the zones' Proxmox again (a VDC's networks and
	// VMs' addresses, which another replica's API may have changed) but
	// ask no agent. Default 30s (edgesync.Config.Rederive).
	EdgeRederiveInterval time.Duration
	// LBResyncInterval is the same for the load balancers' sync. Default
	// 5m (lbsync.Config.Resync).
	LBResyncInterval time.Duration
	// ConsoleTTL is how long a console ticket of openConsole waits for its
	// websocket (1s to 5m). Default console.DefaultTTL.
	ConsoleTTL time.Duration
	// LoadBalancers are the zones' flexgateway replicas the load balancers
	// are pushed to; its zero value serves no balancer (they can be made
	// and are kept, but reach no data plane).
	LoadBalancers LoadBalancersConfig
	// Kubernetes is managed Kubernetes over the management cluster of
	// Config.Kube; its zero value offers none.
	Kubernetes ManagedKubernetesConfig
}

// LoadBalancersConfig configures the load balancers' sync (package lbsync).
type LoadBalancersConfig struct {
	// Zones are the zones with flexgateway replicas, by zone name.
	Zones map[string]lbsync.Zone `json:"zones"`
	// Tokens are the replicas' admin bearer tokens by zone name: each
	// zone's replicas accept only their own zone's token, and a zone
	// without one is sent nothing. cmd/orchestrator reads them from
	// -lb-token-dir (a file per zone) when given.
	Tokens map[string]string `json:"tokens,omitempty"`
	// TLS are the orchestrator's client certificate and key for the
	// replicas' admin API, the CA the replicas' certificates chain to,
	// and the name they carry (default lbconfig.DefaultServerName).
	// Required with Zones.
	TLS lbconfig.TLSFiles `json:"tls"`
	// EndpointSlices, when set, finds each zone's replicas in the
	// EndpointSlices of charts/flexgateway's admin Services in the
	// management cluster of Config.Kube, in place of Zones' Replicas.
	EndpointSlices *lbsync.EndpointSlicesConfig `json:"endpointSlices,omitempty"`
}

// ReleasesConfig configures agent releases (package release) and their
// rollouts (package rollout).
type ReleasesConfig struct {
	// PublicKey is the minisign public key releases are signed with (the
	// agents have the same); "" offers no releases.
	PublicKey string
	// Dir is the release store: published releases and the rollouts'
	// records. Replicas share it (one volume mounted by all). Default
	// DataDir/releases.
	Dir string
	// HostTimeout bounds one host's update in a rollout. Default 3m.
	HostTimeout time.Duration
}

// AuditConfig configures the audit sinks; every one set receives every
// event.
type AuditConfig struct {
	// Log receives the events as JSON lines (os.Stdout, a file); nil
	// writes none.
	Log io.Writer
	// Webhook posts the events in batches when its URL is set; its
	// Metrics and Logger are the orchestrator's.
	Webhook audit.WebhookConfig
	// Sink also receives every event (tests).
	Sink audit.Sink
}

// New checks cfg and returns a server; Start or Run starts it.
func New(cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("orchestrator: DataDir is required")
	}
	if cfg.Listen == "" {
		cfg.Listen = ":8080"
	}
	if cfg.PublicURL != "" {
		u, err := url.Parse(cfg.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("orchestrator: PublicURL %q must be an http(s) URL without a path", cfg.PublicURL)
		}
	}
	if cfg.MeshName == "" {
		cfg.MeshName = "flexplane-orchestrator"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.API.Issuer != "" {
		if cfg.API.Audience == "" {
			return nil, errors.New("orchestrator: API.Audience is required with API.Issuer")
		}
		if cfg.API.CatalogDir == "" {
			cfg.API.CatalogDir = filepath.Join(cfg.DataDir, "catalog")
		}
	}
	if cfg.Replication.PeerURL != "" && cfg.MeshPostgres == nil {
		return nil, errors.New("orchestrator: Replication needs MeshPostgres: the mesh state moves with the leadership")
	}
	return &Server{cfg: cfg, log: cfg.Logger, stopped: make(chan struct{}), probe: &probe{}}, nil
}
