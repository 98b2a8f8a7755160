package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/graph/server"
	"github.com/flexplane/flexplane/pkg/audit"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/mesh/meshleader"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/portal"
	"github.com/flexplane/flexplane/pkg/support/profiling"
	"github.com/flexplane/flexplane/pkg/support/tracing"
	"github.com/flexplane/flexplane/pkg/tenantkube"
	"github.com/flexplane/flexplane/pkg/tenantkube/controlplane"
)

// serve runs `orchestrator serve`: flags (serveFlags) → their checks →
// the process's own setup (memory limit, logs, profiling, tracing) → the
// orchestrator's Config, which orchestrator.New checks → Run until ctx
// ends.
func serve(ctx context.Context, args []string) error {
	f, err := parseServeFlags(args)
	if err != nil {
		return err
	}
	if f.memLimit != "" {
		n, err := parseSize(f.memLimit)
		if err != nil {
			return fmt.Errorf("-memory-limit: %w", err)
		}
		debug.SetMemoryLimit(n)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: f.level}))
	if f.debugAddr != "" {
		prof, err := profiling.Start(f.debugAddr, logger)
		if err != nil {
			return err
		}
		defer prof.Close()
	}
	tp, stopTracing, err := tracing.Start(ctx, tracing.Config{Endpoint: f.otlp, Service: "flexplane-orchestrator", Version: buildVersion()})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = stopTracing(sctx)
	}()
	cfg, closeFiles, err := f.config(logger)
	if err != nil {
		return err
	}
	defer closeFiles()
	cfg.TracerProvider = tp
	srv, err := orchestrator.New(cfg)
	if err != nil {
		return err
	}
	meshnode.PrepareProcess(cmp.Or(f.publicURL, "http://"))
	return srv.Run(ctx)
}

// serveFlags are the flags of `orchestrator serve`; each also reads an
// environment variable (named in its usage text), so a container is
// configured by either.
type serveFlags struct {
	// The public endpoint and the state.
	listen, publicURL, dataDir, stun string
	// The mesh control server's PostgreSQL (replicas), with the file of
	// its password.
	meshPG, meshPGPassword string
	meshPostgres           *meshcontrol.PostgresConfig // parsed from meshPG by check
	// Logs, the heap's soft limit, profiling, metrics, traces.
	level                                  slog.Level
	memLimit, debugAddr, metricsAddr, otlp string
	// The API: its identity provider, the catalog, the tenant, the bounds
	// of a query and of a zone's part of one.
	issuer, audience, cliClientID, rolesClaim, nameClaim, emailClaim string
	cat                                                              backendFlags
	tenantName, tenantDomain                                         string
	zoneTimeout                                                      time.Duration
	maxComplexity, maxDepth                                          int
	// The rate limits per caller: mutation fields and openConsole.
	mutationRate, consoleRate   float64
	mutationBurst, consoleBurst int
	// VM creates left unfinished: their age and how often to look.
	recoverAfter, recoverInterval time.Duration
	recoverResync                 time.Duration
	backupQuotaInterval           time.Duration
	imageCopyRecoverInterval      time.Duration
	haRequestTimeout              time.Duration
	drainParallel                 int
	securityGroupInterval         time.Duration
	edgeResync, lbResync          time.Duration
	edgeRederive                  time.Duration
	syncShards                    int
	// The portal's built files.
	portalDir string
	// Agent versions and releases.
	agentVersion, releaseDir, releaseKeyFile string
	probation                                time.Duration
	// Audit events.
	auditLog, auditWebhook string
	// Load balancers: the zones' flexgateway replicas, and their token.
	lbConfig, lbTokenDir string
	// Replicas: this one's URL, and the Lease electing the mesh control
	// server's.
	peerURL, leaseName string
	leaseDuration      time.Duration
	// Managed Kubernetes.
	managedKube                                              bool
	kubeVersions, workerImage, workerImages, kubeServiceType string
	kubeNamespaceRole                                        string
	kubeCPValues                                             string
	kubeconfigTTL                                            time.Duration
	images                                                   map[string]string // parsed from workerImages by check
}

// parseServeFlags reads serve's flags and environment, and checks what
// can be checked without reading a file.
func parseServeFlags(args []string) (*serveFlags, error) {
	defComplexity, err := envInt("FLEXPLANE_MAX_COMPLEXITY")
	if err != nil {
		return nil, err
	}
	defDepth, err := envInt("FLEXPLANE_MAX_DEPTH")
	if err != nil {
		return nil, err
	}
	f := &serveFlags{}
	rates := map[string]float64{}
	for key, def := range map[string]float64{
		"FLEXPLANE_MUTATION_RATE": server.DefaultMutationRate, "FLEXPLANE_MUTATION_BURST": server.DefaultMutationBurst,
		"FLEXPLANE_CONSOLE_RATE": server.DefaultConsoleRate, "FLEXPLANE_CONSOLE_BURST": server.DefaultConsoleBurst,
	} {
		if rates[key], err = envFloat(key, def); err != nil {
			return nil, err
		}
		if strings.HasSuffix(key, "_BURST") && rates[key] != math.Trunc(rates[key]) {
			return nil, fmt.Errorf("%s: %v is not a whole number", key, rates[key])
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&f.listen, "listen", env("FLEXPLANE_LISTEN", ":8080"), "public listen address (env FLEXPLANE_LISTEN)")
	fs.StringVar(&f.publicURL, "public-url", env("FLEXPLANE_PUBLIC_URL", ""), "URL agents use to reach -listen (env FLEXPLANE_PUBLIC_URL)")
	fs.StringVar(&f.lbTokenDir, "lb-token-dir", env("FLEXPLANE_LB_TOKEN_DIR", ""), "directory of the flexgateway replicas' admin bearer tokens, a file per zone named as the zone (a Secret's volume), in place of -lb-config's tokens: each zone's replicas accept only their own zone's token (env FLEXPLANE_LB_TOKEN_DIR)")
	fs.StringVar(&f.lbConfig, "lb-config", env("FLEXPLANE_LB_CONFIG", ""), "JSON file of the zones' flexgateway replicas the load balancers are pushed to: {\"tokens\": {\"<zone>\": token}, \"tls\": {\"certFile\": client certificate, \"keyFile\": its key, \"caFile\": the replicas' CA, \"serverName\": the name their certificates carry (default flexgateway)}, \"zones\": {\"<zone>\": {\"replicas\": [admin URLs], \"frontend\": address, \"sources\": [CIDRs], \"listenHost\": host}}, \"endpointSlices\": {\"namespace\": ..., \"fullname\": the flexgateway release's full name} to find the replicas in Kubernetes instead}; empty serves no balancer (env FLEXPLANE_LB_CONFIG)")
	fs.StringVar(&f.dataDir, "data-dir", env("FLEXPLANE_DATA_DIR", "/var/lib/flexplane"), "state directory (env FLEXPLANE_DATA_DIR)")
	fs.StringVar(&f.meshPG, "mesh-postgres", env("FLEXPLANE_MESH_POSTGRES", ""), "keep the mesh control server's state in PostgreSQL, postgres://USER@HOST[:PORT]/DATABASE[?sslmode=MODE] (no password in it); empty keeps it in SQLite under -data-dir (env FLEXPLANE_MESH_POSTGRES)")
	fs.StringVar(&f.meshPGPassword, "mesh-postgres-password-file", env("FLEXPLANE_MESH_POSTGRES_PASSWORD_FILE", ""), "file holding the password of -mesh-postgres (env FLEXPLANE_MESH_POSTGRES_PASSWORD_FILE)")
	fs.StringVar(&f.stun, "stun-addr", env("FLEXPLANE_STUN_ADDR", ":3478"), "STUN UDP address (env FLEXPLANE_STUN_ADDR)")
	level := fs.String("log-level", env("FLEXPLANE_LOG_LEVEL", "info"), "debug, info, warn or error (env FLEXPLANE_LOG_LEVEL)")
	fs.StringVar(&f.issuer, "oidc-issuer", env("FLEXPLANE_OIDC_ISSUER", ""), "OIDC issuer URL whose tokens the GraphQL API at /graphql accepts; empty serves no API (env FLEXPLANE_OIDC_ISSUER)")
	fs.StringVar(&f.audience, "oidc-audience", env("FLEXPLANE_OIDC_AUDIENCE", ""), "client id the tokens must be issued to (env FLEXPLANE_OIDC_AUDIENCE)")
	fs.StringVar(&f.cliClientID, "oidc-cli-client-id", env("FLEXPLANE_OIDC_CLI_CLIENT_ID", ""), "client id of flexctl's native OIDC application (device authorization): its tokens are accepted too, and the portal's /config.json names it for flexctl login; empty: flexctl signs in as -oidc-audience (env FLEXPLANE_OIDC_CLI_CLIENT_ID)")
	fs.StringVar(&f.rolesClaim, "oidc-roles-claim", env("FLEXPLANE_OIDC_ROLES_CLAIM", auth.ZitadelRolesClaim), "claim holding the role keys (env FLEXPLANE_OIDC_ROLES_CLAIM)")
	fs.StringVar(&f.nameClaim, "oidc-name-claim", env("FLEXPLANE_OIDC_NAME_CLAIM", "name"), "display-name claim (env FLEXPLANE_OIDC_NAME_CLAIM)")
	fs.StringVar(&f.emailClaim, "oidc-email-claim", env("FLEXPLANE_OIDC_EMAIL_CLAIM", "email"), "email claim (env FLEXPLANE_OIDC_EMAIL_CLAIM)")
	f.cat = catalogFlags(fs)
	fs.StringVar(&f.tenantName, "tenant-name", env("FLEXPLANE_TENANT_NAME", "flexplane"), "display name of the tenant (env FLEXPLANE_TENANT_NAME)")
	fs.StringVar(&f.tenantDomain, "tenant-domain", env("FLEXPLANE_TENANT_DOMAIN", "localhost"), "DNS domain of the tenant (env FLEXPLANE_TENANT_DOMAIN)")
	fs.DurationVar(&f.zoneTimeout, "zone-timeout", graph.DefaultZoneTimeout, "bound of one zone's part of a request spanning zones")
	fs.DurationVar(&f.recoverAfter, "vm-recover-after", 2*time.Minute, "age at which an unfinished VM create that no running orchestrator is working on is finished or cleaned up by this one (another replica may be working on a younger one)")
	fs.DurationVar(&f.haRequestTimeout, "ha-request-timeout", compute.DefaultHARequestTimeout, "how long a start, stop, migration or create of an HA VM waits for Proxmox's HA manager to have done it before it fails")
	fs.IntVar(&f.drainParallel, "drain-parallel", compute.DefaultDrainParallel, "how many VMs of hosts in maintenance are live-migrated at once per zone")
	fs.DurationVar(&f.recoverInterval, "vm-recover-interval", 30*time.Second, "how often unfinished VM creates and moves are looked for (by the mesh control leader when replicated)")
	fs.DurationVar(&f.recoverResync, "vm-recover-resync", 10*time.Minute, "how often the recovery pass reads every managed guest's config again (between, only those whose listing changed)")
	fs.DurationVar(&f.imageCopyRecoverInterval, "image-copy-recover-interval", time.Minute, "how often copies of VDC images into zones cut off by a crash are looked for, deleted and copied again (by the mesh control leader when replicated)")
	fs.DurationVar(&f.backupQuotaInterval, "backup-quota-interval", time.Minute, "how often the VDCs' backups are checked against their backupGiB quotas, their backup schedules paused or resumed (by the mesh control leader when replicated)")
	fs.DurationVar(&f.securityGroupInterval, "security-group-interval", 10*time.Second, "how often the VDCs' security groups are written into every zone's Proxmox firewall (by the mesh control leader when replicated)")
	fs.DurationVar(&f.edgeResync, "edge-resync-interval", 5*time.Minute, "time between the edge gateways' passes while nothing changes (the resync that repairs drift; a change of the catalog, of a zone's hosts or of an agent's gateways starts a pass at once)")
	fs.DurationVar(&f.edgeRederive, "edge-rederive-interval", 30*time.Second, "time between the edge gateways' light passes, which read the zones' Proxmox again (networks and VM addresses another replica changed) but ask no agent")
	fs.DurationVar(&f.lbResync, "lb-resync-interval", 5*time.Minute, "time between the load balancers' passes while nothing changes (a change starts a pass at once)")
	fs.StringVar(&f.portalDir, "portal-dir", env("FLEXPLANE_PORTAL_DIR", ""), "built portal (portal/.output/public) to serve at /, signing in with -oidc-issuer as client -oidc-audience; empty serves no portal (env FLEXPLANE_PORTAL_DIR)")
	fs.StringVar(&f.agentVersion, "agent-version", env("FLEXPLANE_AGENT_VERSION", buildVersion()), "agent version this release ships; hosts running another show updateAvailable (env FLEXPLANE_AGENT_VERSION)")
	fs.IntVar(&f.maxComplexity, "max-complexity", defComplexity, "bound of a GraphQL operation's complexity (each field 1 plus its children, lists times first); 0 is the API's default, 1000 (env FLEXPLANE_MAX_COMPLEXITY)")
	fs.Float64Var(&f.mutationRate, "mutation-rate", rates["FLEXPLANE_MUTATION_RATE"], "mutation fields per second one caller (a token's issuer and subject) may run, sustained, on this replica; 0 or less turns the limit off (env FLEXPLANE_MUTATION_RATE)")
	fs.IntVar(&f.mutationBurst, "mutation-burst", int(rates["FLEXPLANE_MUTATION_BURST"]), "mutation fields one caller may run at once after a pause (env FLEXPLANE_MUTATION_BURST)")
	fs.Float64Var(&f.consoleRate, "console-rate", rates["FLEXPLANE_CONSOLE_RATE"], "openConsole calls per second one caller may make, sustained, on top of -mutation-rate; 0 or less turns the limit off (env FLEXPLANE_CONSOLE_RATE)")
	fs.IntVar(&f.consoleBurst, "console-burst", int(rates["FLEXPLANE_CONSOLE_BURST"]), "openConsole calls one caller may make at once after a pause (env FLEXPLANE_CONSOLE_BURST)")
	fs.IntVar(&f.maxDepth, "max-depth", defDepth, "deepest field nesting of a GraphQL query; 0 is the API's default, 12 (env FLEXPLANE_MAX_DEPTH)")
	fs.StringVar(&f.memLimit, "memory-limit", env("FLEXPLANE_MEMORY_LIMIT", ""), "soft limit of the Go heap and runtime (e.g. 200MiB, as GOMEMLIMIT): the GC works harder near it instead of letting the heap double; empty keeps Go's default (env FLEXPLANE_MEMORY_LIMIT)")
	fs.StringVar(&f.debugAddr, "debug-addr", env("FLEXPLANE_DEBUG_ADDR", ""), "loopback address (127.0.0.1:6060) serving Go runtime profiles at /debug/pprof/; empty serves none (env FLEXPLANE_DEBUG_ADDR)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", env("FLEXPLANE_METRICS_ADDR", ""), "address serving Prometheus metrics at /metrics (the orchestrator's) and /metrics/agents/<mesh name> (each agent's, over the mesh); keep it off the public network; empty serves none (env FLEXPLANE_METRICS_ADDR)")
	fs.StringVar(&f.otlp, "otlp-endpoint", env("FLEXPLANE_OTLP_ENDPOINT", ""), "OTLP/gRPC collector URL for traces, e.g. http://collector:4317; empty falls back to OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing (env FLEXPLANE_OTLP_ENDPOINT)")
	fs.StringVar(&f.auditLog, "audit-log", env("FLEXPLANE_AUDIT_LOG", ""), "where audit events of mutations go as JSON lines: - for stdout, or a file appended to; empty writes none (env FLEXPLANE_AUDIT_LOG)")
	fs.StringVar(&f.auditWebhook, "audit-webhook", env("FLEXPLANE_AUDIT_WEBHOOK", ""), "URL audit events are POSTed to in batches (with retries); empty posts none (env FLEXPLANE_AUDIT_WEBHOOK)")
	releaseDir, releaseKeyFile := releaseFlags(fs)
	fs.StringVar(&f.peerURL, "peer-url", env("FLEXPLANE_PEER_URL", ""), "this replica's http:// URL as the other replicas reach it (http://POD_IP:8080); set, the orchestrator runs as one of several replicas: the mesh control server runs on the holder of a Kubernetes Lease (in -namespace, through -kubeconfig) and needs -mesh-postgres; empty runs alone (env FLEXPLANE_PEER_URL)")
	fs.StringVar(&f.leaseName, "lease-name", env("FLEXPLANE_LEASE_NAME", meshleader.DefaultLeaseName), "name of the Lease electing the replica that runs the mesh control server (env FLEXPLANE_LEASE_NAME)")
	fs.DurationVar(&f.leaseDuration, "lease-duration", 15*time.Second, "how long after a leader's last renewal of the Lease another replica takes over")
	fs.IntVar(&f.syncShards, "sync-shards", 1, "number of shards of the zones, each with its Lease (flexplane-sync-<shard>), whose edge gateway and load balancer syncs one replica runs at a time; the same on every replica")
	fs.BoolVar(&f.managedKube, "managed-kubernetes", env("FLEXPLANE_MANAGED_KUBERNETES", "") == "true", "offer managed Kubernetes: the cluster of -kubeconfig is the management cluster (it must serve Cluster API's and flexplane's provider CRDs); the mesh control leader runs Cluster API's controllers (env FLEXPLANE_MANAGED_KUBERNETES=true)")
	fs.StringVar(&f.kubeVersions, "kubernetes-versions", env("FLEXPLANE_KUBERNETES_VERSIONS", strings.Join(tenantkube.DefaultVersions, ",")), "comma-separated Kubernetes versions clusters may run (env FLEXPLANE_KUBERNETES_VERSIONS)")
	fs.StringVar(&f.workerImage, "kubernetes-worker-image", env("FLEXPLANE_KUBERNETES_WORKER_IMAGE", "debian-13"), "catalog image of Kubernetes worker VMs (env FLEXPLANE_KUBERNETES_WORKER_IMAGE)")
	fs.StringVar(&f.workerImages, "kubernetes-worker-images", env("FLEXPLANE_KUBERNETES_WORKER_IMAGES", ""), "catalog images of Kubernetes worker VMs by version, comma-separated version=image pairs (e.g. v1.37.2=debian-13-kube-1.37); other versions use -kubernetes-worker-image (env FLEXPLANE_KUBERNETES_WORKER_IMAGES)")
	fs.StringVar(&f.kubeServiceType, "kubernetes-apiserver-service-type", env("FLEXPLANE_KUBERNETES_APISERVER_SERVICE_TYPE", "LoadBalancer"), "type of the hosted API servers' Services; the edge gateways forward workers to the address a LoadBalancer Service is given (env FLEXPLANE_KUBERNETES_APISERVER_SERVICE_TYPE)")
	fs.StringVar(&f.kubeNamespaceRole, "kubernetes-namespace-role", env("FLEXPLANE_KUBERNETES_NAMESPACE_ROLE", ""), "ClusterRole holding the orchestrator's rights in a cluster's namespace (the chart's <fullname>-controlplane), bound there when the namespace is made; empty: the orchestrator's rights are cluster-wide (env FLEXPLANE_KUBERNETES_NAMESPACE_ROLE)")
	fs.StringVar(&f.kubeCPValues, "kubernetes-controlplane-values", env("FLEXPLANE_KUBERNETES_CONTROLPLANE_VALUES", ""), "YAML file of flexkube chart values every hosted control plane gets, merged over the ones derived from its cluster: the site's image registry and pull policy, etcd's storage class and size, replicas and resources (checked against the chart's schema at the start); empty: the chart's defaults (env FLEXPLANE_KUBERNETES_CONTROLPLANE_VALUES)")
	fs.DurationVar(&f.kubeconfigTTL, "kubeconfig-ttl", 8*time.Hour, "lifetime of the client certificate of a kubeconfig issued by issueKubeconfig (at most 24h): also the longest a member removed from a VDC keeps access")
	fs.DurationVar(&f.probation, "update-host-timeout", 3*time.Minute, "how long one host's agent update may take in a rollout, from sending the release to the end of its probation")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	f.releaseDir, f.releaseKeyFile = *releaseDir, *releaseKeyFile
	if err := f.level.UnmarshalText([]byte(*level)); err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	return f, f.check()
}

// check refuses flags that contradict each other or are out of range,
// naming the flag.
func (f *serveFlags) check() error {
	if f.maxComplexity < 0 || f.maxDepth < 0 {
		return errors.New("-max-complexity and -max-depth must not be negative")
	}
	if f.haRequestTimeout <= 0 {
		return fmt.Errorf("-ha-request-timeout must be positive, not %s", f.haRequestTimeout)
	}
	if f.drainParallel < 1 {
		return fmt.Errorf("-drain-parallel must be at least 1, not %d", f.drainParallel)
	}
	for _, l := range []struct {
		name, burstName string
		rate            float64
		burst           int
	}{{"-mutation-rate", "-mutation-burst", f.mutationRate, f.mutationBurst}, {"-console-rate", "-console-burst", f.consoleRate, f.consoleBurst}} {
		switch {
		case math.IsNaN(l.rate) || math.IsInf(l.rate, 0) || l.rate > maxRate:
			return fmt.Errorf("%s %v: want a number of calls per second up to %d (0 turns the limit off)", l.name, l.rate, maxRate)
		case l.rate > 0 && (l.burst < 1 || l.burst > maxRate):
			return fmt.Errorf("%s %d: want 1 to %d while %s is on (%s 0 turns the limit off)", l.burstName, l.burst, maxRate, l.name, l.name)
		}
	}
	if f.peerURL != "" && f.meshPG == "" {
		return errors.New("-peer-url needs -mesh-postgres: the mesh state moves between the replicas")
	}
	if f.leaseDuration < 3*time.Second {
		return errors.New("-lease-duration must be at least 3s")
	}
	if f.syncShards < 1 || f.syncShards > 256 {
		return fmt.Errorf("-sync-shards %d: want 1 to 256", f.syncShards)
	}
	if f.edgeResync < time.Second || f.lbResync < time.Second || f.edgeRederive < time.Second {
		return errors.New("-edge-resync-interval, -edge-rederive-interval and -lb-resync-interval must be at least 1s")
	}
	images, err := parseWorkerImages(f.workerImages)
	if err != nil {
		return err
	}
	f.images = images
	switch f.kubeServiceType {
	case "LoadBalancer", "NodePort", "ClusterIP":
	default:
		return fmt.Errorf("-kubernetes-apiserver-service-type %q: want LoadBalancer, NodePort or ClusterIP", f.kubeServiceType)
	}
	if f.kubeconfigTTL <= 0 || f.kubeconfigTTL > controlplane.MaxTTL {
		return fmt.Errorf("-kubeconfig-ttl must be more than 0 and at most %s", controlplane.MaxTTL)
	}
	if f.issuer != "" && f.audience == "" {
		return errors.New("-oidc-audience is required with -oidc-issuer")
	}
	if f.portalDir != "" && f.issuer == "" {
		return errors.New("-portal-dir needs -oidc-issuer: the portal signs in with it")
	}
	if f.cliClientID != "" && f.issuer == "" {
		return errors.New("-oidc-cli-client-id needs -oidc-issuer: flexctl signs in with it")
	}
	if f.meshPG != "" {
		pg, err := meshcontrol.ParsePostgresURL(f.meshPG)
		if err != nil {
			return fmt.Errorf("-mesh-postgres: %w", err)
		}
		if f.meshPGPassword == "" {
			return errors.New("-mesh-postgres needs -mesh-postgres-password-file")
		}
		pg.PasswordFile = f.meshPGPassword
		f.meshPostgres = pg
	} else if f.meshPGPassword != "" {
		return errors.New("-mesh-postgres-password-file needs -mesh-postgres")
	}
	if f.lbTokenDir != "" && f.lbConfig == "" {
		return errors.New("-lb-token-dir needs -lb-config")
	}
	return nil
}

// config is the orchestrator's Config the flags give, with the files they
// name read (release key, load balancers, their token) or opened (the
// audit log: closeFiles closes it).
func (f *serveFlags) config(logger *slog.Logger) (_ orchestrator.Config, closeFiles func(), err error) {
	closeFiles = func() {}
	releaseKey, err := readReleaseKey(f.releaseKeyFile)
	if err != nil {
		return orchestrator.Config{}, nil, err
	}
	lbs, err := f.loadBalancers()
	if err != nil {
		return orchestrator.Config{}, nil, err
	}
	var cpValues func(controlplane.Spec) map[string]any
	if f.kubeCPValues != "" {
		data, err := os.ReadFile(f.kubeCPValues)
		if err != nil {
			return orchestrator.Config{}, nil, fmt.Errorf("-kubernetes-controlplane-values: %w", err)
		}
		if cpValues, err = controlplane.SiteValues(data); err != nil {
			return orchestrator.Config{}, nil, fmt.Errorf("-kubernetes-controlplane-values %s: %w", f.kubeCPValues, err)
		}
	}
	var site http.Handler
	if f.portalDir != "" {
		p, err := portal.New(portal.Config{Dir: f.portalDir, Issuer: f.issuer, ClientID: f.audience, CLIClientID: f.cliClientID, Logger: logger})
		if err != nil {
			return orchestrator.Config{}, nil, fmt.Errorf("portal: %w", err)
		}
		site = p
	}
	auditCfg := orchestrator.AuditConfig{Webhook: audit.WebhookConfig{URL: f.auditWebhook}}
	switch f.auditLog {
	case "":
	case "-":
		auditCfg.Log = os.Stdout
	default:
		file, err := os.OpenFile(f.auditLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return orchestrator.Config{}, nil, fmt.Errorf("-audit-log: %w", err)
		}
		closeFiles = func() { file.Close() }
		auditCfg.Log = io.Writer(file)
	}
	return orchestrator.Config{
		Listen:       f.listen,
		PublicURL:    f.publicURL,
		DataDir:      f.dataDir,
		STUNAddr:     f.stun,
		MeshPostgres: f.meshPostgres,
		API: orchestrator.APIConfig{
			Issuer:                   f.issuer,
			Audience:                 f.audience,
			CLIClientID:              f.cliClientID,
			Claims:                   auth.ClaimNames{Roles: f.rolesClaim, Name: f.nameClaim, Email: f.emailClaim},
			CatalogBackend:           *f.cat.backend,
			CatalogDir:               *f.cat.dir,
			Tenant:                   graph.Tenant{Name: f.tenantName, Domain: f.tenantDomain},
			ZoneTimeout:              f.zoneTimeout,
			VMRecoverAfter:           f.recoverAfter,
			VMRecoverInterval:        f.recoverInterval,
			VMRecoverResync:          f.recoverResync,
			BackupQuotaInterval:      f.backupQuotaInterval,
			ImageCopyRecoverInterval: f.imageCopyRecoverInterval,
			DrainParallel:            f.drainParallel,
			HARequestTimeout:         f.haRequestTimeout,
			SecurityGroupInterval:    f.securityGroupInterval,
			EdgeResyncInterval:       f.edgeResync,
			EdgeRederiveInterval:     f.edgeRederive,
			LBResyncInterval:         f.lbResync,
			AgentVersion:             f.agentVersion,
			MaxDepth:                 f.maxDepth,
			MaxComplexity:            f.maxComplexity,
			RateLimits:               f.rateLimits(),
			Releases:                 orchestrator.ReleasesConfig{PublicKey: releaseKey, Dir: f.releaseDir, HostTimeout: f.probation},
			LoadBalancers:            lbs,
			Kubernetes: orchestrator.ManagedKubernetesConfig{Enabled: f.managedKube, Versions: strings.Split(f.kubeVersions, ","),
				WorkerImage: f.workerImage, WorkerImages: f.images, KubeconfigTTL: f.kubeconfigTTL, APIServerServiceType: f.kubeServiceType,
				NamespaceRole: f.kubeNamespaceRole, ControlPlaneValues: cpValues},
		},
		Kube: f.cat.kube(),
		Replication: orchestrator.ReplicationConfig{PeerURL: f.peerURL, LeaseName: f.leaseName, SyncShards: f.syncShards,
			LeaseDuration: f.leaseDuration, RenewDeadline: f.leaseDuration * 2 / 3, RetryPeriod: f.leaseDuration / 7},
		MetricsListen: f.metricsAddr,
		Audit:         auditCfg,
		Handler:       site,
		Logger:        logger,
	}, closeFiles, nil
}

// maxRate bounds the rate and burst flags: beyond it a limit means
// nothing.
const maxRate = 1_000_000

// rateLimits are the API's rate limits the flags give: a rate of 0 or
// less is a limit turned off.
func (f *serveFlags) rateLimits() server.RateLimits {
	rl := server.RateLimits{MutationRate: f.mutationRate, MutationBurst: f.mutationBurst, ConsoleRate: f.consoleRate, ConsoleBurst: f.consoleBurst}
	if f.mutationRate <= 0 {
		rl.MutationRate, rl.MutationBurst = -1, -1
	}
	if f.consoleRate <= 0 {
		rl.ConsoleRate, rl.ConsoleBurst = -1, -1
	}
	return rl
}

// loadBalancers reads -lb-config and -lb-token-dir, and checks that every
// zone has a token and that the admin API's TLS files are named.
func (f *serveFlags) loadBalancers() (orchestrator.LoadBalancersConfig, error) {
	var lbs orchestrator.LoadBalancersConfig
	if f.lbConfig == "" {
		return lbs, nil
	}
	data, err := os.ReadFile(f.lbConfig)
	if err != nil {
		return lbs, err
	}
	if err := json.Unmarshal(data, &lbs); err != nil {
		return lbs, fmt.Errorf("-lb-config %s: %w", f.lbConfig, err)
	}
	if f.lbTokenDir != "" {
		lbs.Tokens = map[string]string{}
		for zone := range lbs.Zones {
			data, err := os.ReadFile(filepath.Join(f.lbTokenDir, zone))
			if err != nil {
				return lbs, fmt.Errorf("-lb-token-dir: zone %s: %w", zone, err)
			}
			if lbs.Tokens[zone] = strings.TrimSpace(string(data)); lbs.Tokens[zone] == "" {
				return lbs, fmt.Errorf("-lb-token-dir: zone %s: the file is empty", zone)
			}
		}
	}
	seen := map[string]string{}
	for zone := range lbs.Zones {
		tok := lbs.Tokens[zone]
		if len(tok) < 16 {
			return lbs, fmt.Errorf("-lb-config: zone %s: no admin token of 16 characters or more (tokens, or -lb-token-dir)", zone)
		}
		if other, ok := seen[tok]; ok {
			return lbs, fmt.Errorf("-lb-config: zones %s and %s have the same admin token: each zone needs its own", other, zone)
		}
		seen[tok] = zone
	}
	if len(lbs.Zones) > 0 && (lbs.TLS.CertFile == "" || lbs.TLS.KeyFile == "" || lbs.TLS.CAFile == "") {
		return lbs, errors.New("-lb-config: tls needs certFile, keyFile and caFile (the admin API's mutual TLS)")
	}
	return lbs, nil
}
