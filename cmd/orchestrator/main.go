// Command orchestrator runs the flexplane orchestrator.
//
//	orchestrator serve [flags]                   serve (see -h)
//	orchestrator keys create [-reusable] [-ttl]  create an agent enrollment key
//	orchestrator keys list                       list enrollment keys
//	orchestrator keys revoke ID                  revoke an enrollment key
//	orchestrator catalog export [backend flags]  write the catalog as YAML manifests to stdout
//	orchestrator catalog import [backend flags]  create the manifests on stdin in the catalog
//	orchestrator releases add FILE MANIFEST SIG  publish a signed agent release
//	orchestrator releases list                   list the published releases
//
// The keys subcommands talk to the running orchestrator through the unix
// socket in its data directory (-data-dir, env FLEXPLANE_DATA_DIR).
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
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/pkg/audit"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
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

const usage = `usage:
  orchestrator serve [-listen ADDR] [-public-url URL] [-data-dir DIR] [-stun-addr ADDR] [-log-level LEVEL]
                     [-oidc-issuer URL -oidc-audience ID [-oidc-roles-claim C] [-oidc-name-claim C] [-oidc-email-claim C]]
                     [-catalog dir|kubernetes] [-catalog-dir DIR] [-kubeconfig FILE] [-namespace NS] [-tenant-name NAME] [-tenant-domain DOMAIN] [-zone-timeout DURATION] [-vm-recover-after DURATION] [-vm-recover-interval DURATION] [-agent-version V]
                     [-memory-limit SIZE] [-debug-addr ADDR] [-mesh-postgres URL -mesh-postgres-password-file FILE]
  orchestrator keys create [-data-dir DIR] [-reusable] [-ttl DURATION]
  orchestrator keys list [-data-dir DIR]
  orchestrator keys revoke [-data-dir DIR] ID
  orchestrator catalog export [-catalog dir|kubernetes] [-catalog-dir DIR | -data-dir DIR] [-kubeconfig FILE] [-namespace NS] > catalog.yaml
  orchestrator catalog import [-catalog ...] [-replace] < catalog.yaml
  orchestrator releases add [-data-dir DIR] [-release-dir DIR] -release-key-file FILE BINARY MANIFEST SIG
  orchestrator releases list [-data-dir DIR] [-release-dir DIR] -release-key-file FILE`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:])
	case "keys":
		if len(args) < 2 {
			return errors.New(usage)
		}
		return keys(ctx, args[1], args[2:], stdout)
	case "catalog":
		if len(args) < 2 {
			return errors.New(usage)
		}
		return catalogCmd(ctx, args[1], args[2:], os.Stdin, stdout)
	case "releases":
		if len(args) < 2 {
			return errors.New(usage)
		}
		return releases(args[1], args[2:], stdout)
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// envInt is the integer in environment variable key, or 0 when it is unset.
func envInt(key string) (int, error) {
	v := os.Getenv(key)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not an integer", key, v)
	}
	return n, nil
}

func serve(ctx context.Context, args []string) error {
	defComplexity, err := envInt("FLEXPLANE_MAX_COMPLEXITY")
	if err != nil {
		return err
	}
	defDepth, err := envInt("FLEXPLANE_MAX_DEPTH")
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", env("FLEXPLANE_LISTEN", ":8080"), "public listen address (env FLEXPLANE_LISTEN)")
	publicURL := fs.String("public-url", env("FLEXPLANE_PUBLIC_URL", ""), "URL agents use to reach -listen (env FLEXPLANE_PUBLIC_URL)")
	lbTokenFile := fs.String("lb-token-file", env("FLEXPLANE_LB_TOKEN_FILE", ""), "file holding the flexgateway replicas' admin bearer token, in place of -lb-config's token (env FLEXPLANE_LB_TOKEN_FILE)")
	lbConfig := fs.String("lb-config", env("FLEXPLANE_LB_CONFIG", ""), "JSON file of the zones' flexgateway replicas the load balancers are pushed to: {\"token\": ..., \"zones\": {\"<zone>\": {\"replicas\": [admin URLs], \"frontend\": address, \"sources\": [CIDRs], \"listenHost\": host}}, \"endpointSlices\": {\"namespace\": ..., \"fullname\": the flexgateway release's full name} to find the replicas in Kubernetes instead}; empty serves no balancer (env FLEXPLANE_LB_CONFIG)")
	dataDir := fs.String("data-dir", env("FLEXPLANE_DATA_DIR", "/var/lib/flexplane"), "state directory (env FLEXPLANE_DATA_DIR)")
	meshPG := fs.String("mesh-postgres", env("FLEXPLANE_MESH_POSTGRES", ""), "keep the mesh control server's state in PostgreSQL, postgres://USER@HOST[:PORT]/DATABASE[?sslmode=MODE] (no password in it); empty keeps it in SQLite under -data-dir (env FLEXPLANE_MESH_POSTGRES)")
	meshPGPassword := fs.String("mesh-postgres-password-file", env("FLEXPLANE_MESH_POSTGRES_PASSWORD_FILE", ""), "file holding the password of -mesh-postgres (env FLEXPLANE_MESH_POSTGRES_PASSWORD_FILE)")
	stun := fs.String("stun-addr", env("FLEXPLANE_STUN_ADDR", ":3478"), "STUN UDP address (env FLEXPLANE_STUN_ADDR)")
	level := fs.String("log-level", env("FLEXPLANE_LOG_LEVEL", "info"), "debug, info, warn or error (env FLEXPLANE_LOG_LEVEL)")
	issuer := fs.String("oidc-issuer", env("FLEXPLANE_OIDC_ISSUER", ""), "OIDC issuer URL whose tokens the GraphQL API at /graphql accepts; empty serves no API (env FLEXPLANE_OIDC_ISSUER)")
	audience := fs.String("oidc-audience", env("FLEXPLANE_OIDC_AUDIENCE", ""), "client id the tokens must be issued to (env FLEXPLANE_OIDC_AUDIENCE)")
	rolesClaim := fs.String("oidc-roles-claim", env("FLEXPLANE_OIDC_ROLES_CLAIM", auth.ZitadelRolesClaim), "claim holding the role keys (env FLEXPLANE_OIDC_ROLES_CLAIM)")
	nameClaim := fs.String("oidc-name-claim", env("FLEXPLANE_OIDC_NAME_CLAIM", "name"), "display-name claim (env FLEXPLANE_OIDC_NAME_CLAIM)")
	emailClaim := fs.String("oidc-email-claim", env("FLEXPLANE_OIDC_EMAIL_CLAIM", "email"), "email claim (env FLEXPLANE_OIDC_EMAIL_CLAIM)")
	cat := catalogFlags(fs)
	tenantName := fs.String("tenant-name", env("FLEXPLANE_TENANT_NAME", "flexplane"), "display name of the tenant (env FLEXPLANE_TENANT_NAME)")
	tenantDomain := fs.String("tenant-domain", env("FLEXPLANE_TENANT_DOMAIN", "localhost"), "DNS domain of the tenant (env FLEXPLANE_TENANT_DOMAIN)")
	zoneTimeout := fs.Duration("zone-timeout", graph.DefaultZoneTimeout, "bound of one zone's part of a request spanning zones")
	recoverAfter := fs.Duration("vm-recover-after", 2*time.Minute, "age at which an unfinished VM create that no running orchestrator is working on is finished or cleaned up by this one (another replica may be working on a younger one)")
	recoverInterval := fs.Duration("vm-recover-interval", 30*time.Second, "how often unfinished VM creates and moves are looked for (by the mesh control leader when replicated)")
	portalDir := fs.String("portal-dir", env("FLEXPLANE_PORTAL_DIR", ""), "built portal (portal/.output/public) to serve at /, signing in with -oidc-issuer as client -oidc-audience; empty serves no portal (env FLEXPLANE_PORTAL_DIR)")
	agentVersion := fs.String("agent-version", env("FLEXPLANE_AGENT_VERSION", buildVersion()), "agent version this release ships; hosts running another show updateAvailable (env FLEXPLANE_AGENT_VERSION)")
	maxComplexity := fs.Int("max-complexity", defComplexity, "bound of a GraphQL operation's complexity (each field 1 plus its children, lists times first); 0 is the API's default, 1000 (env FLEXPLANE_MAX_COMPLEXITY)")
	maxDepth := fs.Int("max-depth", defDepth, "deepest field nesting of a GraphQL query; 0 is the API's default, 12 (env FLEXPLANE_MAX_DEPTH)")
	memLimit := fs.String("memory-limit", env("FLEXPLANE_MEMORY_LIMIT", ""), "soft limit of the Go heap and runtime (e.g. 200MiB, as GOMEMLIMIT): the GC works harder near it instead of letting the heap double; empty keeps Go's default (env FLEXPLANE_MEMORY_LIMIT)")
	debugAddr := fs.String("debug-addr", env("FLEXPLANE_DEBUG_ADDR", ""), "loopback address (127.0.0.1:6060) serving Go runtime profiles at /debug/pprof/; empty serves none (env FLEXPLANE_DEBUG_ADDR)")
	metricsAddr := fs.String("metrics-addr", env("FLEXPLANE_METRICS_ADDR", ""), "address serving Prometheus metrics at /metrics (the orchestrator's) and /metrics/agents/<mesh name> (each agent's, over the mesh); keep it off the public network; empty serves none (env FLEXPLANE_METRICS_ADDR)")
	otlp := fs.String("otlp-endpoint", env("FLEXPLANE_OTLP_ENDPOINT", ""), "OTLP/gRPC collector URL for traces, e.g. http://collector:4317; empty falls back to OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing (env FLEXPLANE_OTLP_ENDPOINT)")
	auditLog := fs.String("audit-log", env("FLEXPLANE_AUDIT_LOG", ""), "where audit events of mutations go as JSON lines: - for stdout, or a file appended to; empty writes none (env FLEXPLANE_AUDIT_LOG)")
	auditWebhook := fs.String("audit-webhook", env("FLEXPLANE_AUDIT_WEBHOOK", ""), "URL audit events are POSTed to in batches (with retries); empty posts none (env FLEXPLANE_AUDIT_WEBHOOK)")
	releaseDir, releaseKeyFile := releaseFlags(fs)
	peerURL := fs.String("peer-url", env("FLEXPLANE_PEER_URL", ""), "this replica's http:// URL as the other replicas reach it (http://POD_IP:8080); set, the orchestrator runs as one of several replicas: the mesh control server runs on the holder of a Kubernetes Lease (in -namespace, through -kubeconfig) and needs -mesh-postgres; empty runs alone (env FLEXPLANE_PEER_URL)")
	leaseName := fs.String("lease-name", env("FLEXPLANE_LEASE_NAME", meshleader.DefaultLeaseName), "name of the Lease electing the replica that runs the mesh control server (env FLEXPLANE_LEASE_NAME)")
	leaseDuration := fs.Duration("lease-duration", 15*time.Second, "how long after a leader's last renewal of the Lease another replica takes over")
	managedKube := fs.Bool("managed-kubernetes", env("FLEXPLANE_MANAGED_KUBERNETES", "") == "true", "offer managed Kubernetes: the cluster of -kubeconfig is the management cluster (it must serve Cluster API's and flexplane's provider CRDs); the mesh control leader runs Cluster API's controllers (env FLEXPLANE_MANAGED_KUBERNETES=true)")
	kubeVersions := fs.String("kubernetes-versions", env("FLEXPLANE_KUBERNETES_VERSIONS", strings.Join(tenantkube.DefaultVersions, ",")), "comma-separated Kubernetes versions clusters may run (env FLEXPLANE_KUBERNETES_VERSIONS)")
	workerImage := fs.String("kubernetes-worker-image", env("FLEXPLANE_KUBERNETES_WORKER_IMAGE", "debian-13"), "catalog image of Kubernetes worker VMs (env FLEXPLANE_KUBERNETES_WORKER_IMAGE)")
	workerImages := fs.String("kubernetes-worker-images", env("FLEXPLANE_KUBERNETES_WORKER_IMAGES", ""), "catalog images of Kubernetes worker VMs by version, comma-separated version=image pairs (e.g. v1.37.2=debian-13-kube-1.37); other versions use -kubernetes-worker-image (env FLEXPLANE_KUBERNETES_WORKER_IMAGES)")
	kubeServiceType := fs.String("kubernetes-apiserver-service-type", env("FLEXPLANE_KUBERNETES_APISERVER_SERVICE_TYPE", "LoadBalancer"), "type of the hosted API servers' Services; the edge gateways forward workers to the address a LoadBalancer Service is given (env FLEXPLANE_KUBERNETES_APISERVER_SERVICE_TYPE)")
	kubeconfigTTL := fs.Duration("kubeconfig-ttl", 8*time.Hour, "lifetime of a kubeconfig issued by issueKubeconfig (at most 24h)")
	probation := fs.Duration("update-host-timeout", 3*time.Minute, "how long one host's agent update may take in a rollout, from sending the release to the end of its probation")
	if err := fs.Parse(args); err != nil {
		return err
	}
	releaseKey, err := readReleaseKey(*releaseKeyFile)
	if err != nil {
		return err
	}
	if *maxComplexity < 0 || *maxDepth < 0 {
		return errors.New("-max-complexity and -max-depth must not be negative")
	}
	if *peerURL != "" && *meshPG == "" {
		return errors.New("-peer-url needs -mesh-postgres: the mesh state moves between the replicas")
	}
	if *leaseDuration < 3*time.Second {
		return errors.New("-lease-duration must be at least 3s")
	}
	images, err := parseWorkerImages(*workerImages)
	if err != nil {
		return err
	}
	switch *kubeServiceType {
	case "LoadBalancer", "NodePort", "ClusterIP":
	default:
		return fmt.Errorf("-kubernetes-apiserver-service-type %q: want LoadBalancer, NodePort or ClusterIP", *kubeServiceType)
	}
	if *kubeconfigTTL <= 0 || *kubeconfigTTL > controlplane.MaxTTL {
		return fmt.Errorf("-kubeconfig-ttl must be more than 0 and at most %s", controlplane.MaxTTL)
	}
	if *issuer != "" && *audience == "" {
		return errors.New("-oidc-audience is required with -oidc-issuer")
	}
	var meshPostgres *meshcontrol.PostgresConfig
	if *meshPG != "" {
		if meshPostgres, err = meshcontrol.ParsePostgresURL(*meshPG); err != nil {
			return fmt.Errorf("-mesh-postgres: %w", err)
		}
		if *meshPGPassword == "" {
			return errors.New("-mesh-postgres needs -mesh-postgres-password-file")
		}
		meshPostgres.PasswordFile = *meshPGPassword
	} else if *meshPGPassword != "" {
		return errors.New("-mesh-postgres-password-file needs -mesh-postgres")
	}
	if *memLimit != "" {
		n, err := parseSize(*memLimit)
		if err != nil {
			return fmt.Errorf("-memory-limit: %w", err)
		}
		debug.SetMemoryLimit(n)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if *debugAddr != "" {
		prof, err := profiling.Start(*debugAddr, logger)
		if err != nil {
			return err
		}
		defer prof.Close()
	}
	var site http.Handler
	if *portalDir != "" {
		if *issuer == "" {
			return errors.New("-portal-dir needs -oidc-issuer: the portal signs in with it")
		}
		p, err := portal.New(portal.Config{Dir: *portalDir, Issuer: *issuer, ClientID: *audience, Logger: logger})
		if err != nil {
			return fmt.Errorf("portal: %w", err)
		}
		site = p
	}
	auditCfg := orchestrator.AuditConfig{Webhook: audit.WebhookConfig{URL: *auditWebhook}}
	switch *auditLog {
	case "":
	case "-":
		auditCfg.Log = os.Stdout
	default:
		f, err := os.OpenFile(*auditLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("-audit-log: %w", err)
		}
		defer f.Close()
		auditCfg.Log = f
	}
	tp, stopTracing, err := tracing.Start(ctx, tracing.Config{Endpoint: *otlp, Service: "flexplane-orchestrator", Version: buildVersion()})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = stopTracing(sctx)
	}()
	var lbs orchestrator.LoadBalancersConfig
	if *lbConfig != "" {
		data, err := os.ReadFile(*lbConfig)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(data, &lbs); err != nil {
			return fmt.Errorf("-lb-config %s: %w", *lbConfig, err)
		}
	}
	if *lbTokenFile != "" {
		if *lbConfig == "" {
			return errors.New("-lb-token-file needs -lb-config")
		}
		data, err := os.ReadFile(*lbTokenFile)
		if err != nil {
			return err
		}
		if lbs.Token = strings.TrimSpace(string(data)); lbs.Token == "" {
			return fmt.Errorf("-lb-token-file %s: the file is empty", *lbTokenFile)
		}
	}
	srv, err := orchestrator.New(orchestrator.Config{
		Listen:       *listen,
		PublicURL:    *publicURL,
		DataDir:      *dataDir,
		STUNAddr:     *stun,
		MeshPostgres: meshPostgres,
		API: orchestrator.APIConfig{
			Issuer:            *issuer,
			Audience:          *audience,
			Claims:            auth.ClaimNames{Roles: *rolesClaim, Name: *nameClaim, Email: *emailClaim},
			CatalogBackend:    *cat.backend,
			CatalogDir:        *cat.dir,
			Tenant:            graph.Tenant{Name: *tenantName, Domain: *tenantDomain},
			ZoneTimeout:       *zoneTimeout,
			VMRecoverAfter:    *recoverAfter,
			VMRecoverInterval: *recoverInterval,
			AgentVersion:      *agentVersion,
			MaxDepth:          *maxDepth,
			MaxComplexity:     *maxComplexity,
			Releases:          orchestrator.ReleasesConfig{PublicKey: releaseKey, Dir: *releaseDir, HostTimeout: *probation},
			LoadBalancers:     lbs,
			Kubernetes: orchestrator.ManagedKubernetesConfig{Enabled: *managedKube, Versions: strings.Split(*kubeVersions, ","),
				WorkerImage: *workerImage, WorkerImages: images, KubeconfigTTL: *kubeconfigTTL, APIServerServiceType: *kubeServiceType},
		},
		Kube: cat.kube(),
		Replication: orchestrator.ReplicationConfig{PeerURL: *peerURL, LeaseName: *leaseName,
			LeaseDuration: *leaseDuration, RenewDeadline: *leaseDuration * 2 / 3, RetryPeriod: *leaseDuration / 7},
		MetricsListen:  *metricsAddr,
		Audit:          auditCfg,
		TracerProvider: tp,
		Handler:        site,
		Logger:         logger,
	})
	if err != nil {
		return err
	}
	meshnode.PrepareProcess(cmp.Or(*publicURL, "http://"))
	return srv.Run(ctx)
}

// parseSize parses a byte count as GOMEMLIMIT writes it: a number with an
// optional unit B, KiB, MiB, GiB or TiB.
func parseSize(s string) (int64, error) {
	num := strings.TrimRight(s, "BKMGTi")
	unit := s[len(num):]
	mult, ok := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size like 200MiB", s)
	}
	return n * mult, nil
}

// buildVersion is the module version of this build, as the agent of the
// same build reports it ("dev" for builds from a work tree).
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func keys(ctx context.Context, sub string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	dataDir := fs.String("data-dir", env("FLEXPLANE_DATA_DIR", "/var/lib/flexplane"), "data directory of the running orchestrator (env FLEXPLANE_DATA_DIR)")
	reusable := fs.Bool("reusable", false, "create: the key enrolls any number of agents until it expires")
	ttl := fs.Duration("ttl", time.Hour, "create: how long the key can be used")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client, err := meshcontrol.Dial(orchestrator.SocketPath(*dataDir))
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Ping(ctx); err != nil {
		return fmt.Errorf("is the orchestrator running with -data-dir %s? %w", *dataDir, err)
	}
	switch sub {
	case "create":
		if fs.NArg() != 0 {
			return errors.New(usage)
		}
		k, err := client.CreateKey(ctx, meshcontrol.KeyOptions{Reusable: *reusable, TTL: *ttl})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", k.Secret)
		fmt.Fprintf(os.Stderr, "key %d: reusable=%t expires %s\n", k.ID, k.Reusable, k.Expiration.Format(time.RFC3339))
		return nil
	case "list":
		if fs.NArg() != 0 {
			return errors.New(usage)
		}
		ks, err := client.ListKeys(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKEY\tREUSABLE\tUSED\tEXPIRES\tSTATE\tTAGS")
		now := time.Now()
		for _, k := range ks {
			state := "valid"
			if k.Expired(now) {
				state = "expired"
			}
			fmt.Fprintf(tw, "%d\t%s\t%t\t%t\t%s\t%s\t%s\n", k.ID, k.Secret, k.Reusable, k.Used,
				k.Expiration.Format(time.RFC3339), state, strings.Join(k.Tags, ","))
		}
		return tw.Flush()
	case "revoke":
		if fs.NArg() != 1 {
			return errors.New(usage)
		}
		id, err := strconv.ParseUint(fs.Arg(0), 10, 64)
		if err != nil {
			return fmt.Errorf("key id %q is not a number", fs.Arg(0))
		}
		if err := client.RevokeKey(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked key %d\n", id)
		return nil
	default:
		return fmt.Errorf("unknown keys command %q\n%s", sub, usage)
	}
}

// backendFlags are the flags choosing the catalog's backend, shared by
// serve and the catalog subcommands.
type backendFlags struct {
	backend, dir, kubeconfig, namespace *string
}

func catalogFlags(fs *flag.FlagSet) backendFlags {
	return backendFlags{
		backend:    fs.String("catalog", env("FLEXPLANE_CATALOG", orchestrator.CatalogDir), "catalog backend: dir (manifests in -catalog-dir; one host) or kubernetes (custom resources flexplane.io/v1alpha1 in -namespace; many replicas) (env FLEXPLANE_CATALOG)"),
		dir:        fs.String("catalog-dir", env("FLEXPLANE_CATALOG_DIR", ""), "catalog manifest directory of the dir backend; default DATA_DIR/catalog (env FLEXPLANE_CATALOG_DIR)"),
		kubeconfig: fs.String("kubeconfig", env("KUBECONFIG", ""), "kubeconfig of the kubernetes backend; empty uses the pod's service account (env KUBECONFIG)"),
		namespace:  fs.String("namespace", env("FLEXPLANE_NAMESPACE", ""), "namespace of flexplane's objects in Kubernetes; default the pod's own, else default (env FLEXPLANE_NAMESPACE)"),
	}
}

func (b backendFlags) kube() orchestrator.KubeConfig {
	return orchestrator.KubeConfig{Kubeconfig: *b.kubeconfig, Namespace: *b.namespace}
}

// catalogCmd runs `orchestrator catalog export|import`: the catalog moves
// between backends (dir to kubernetes and back) as a stream of YAML
// manifests, without loss.
func catalogCmd(ctx context.Context, sub string, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("catalog "+sub, flag.ContinueOnError)
	cat := catalogFlags(fs)
	dataDir := fs.String("data-dir", env("FLEXPLANE_DATA_DIR", "/var/lib/flexplane"), "state directory whose catalog/ the dir backend uses without -catalog-dir (env FLEXPLANE_DATA_DIR)")
	replace := fs.Bool("replace", false, "import: overwrite objects that exist with other content (else they are an error)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return errors.New(usage)
	}
	dir := cmp.Or(*cat.dir, filepath.Join(*dataDir, "catalog"))
	store, closeStore, err := orchestrator.OpenCatalog(ctx, orchestrator.CatalogConfig{Backend: *cat.backend, Dir: dir, Kube: cat.kube()})
	if err != nil {
		return err
	}
	defer closeStore()
	switch sub {
	case "export":
		n, err := catalog.Export(ctx, store, stdout)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "exported %d objects\n", n)
		return nil
	case "import":
		res, err := catalog.Import(ctx, store, stdin, catalog.ImportOptions{Replace: *replace})
		fmt.Fprintf(os.Stderr, "created %d, replaced %d, unchanged %d\n", res.Created, res.Replaced, res.Unchanged)
		return err
	default:
		return fmt.Errorf("unknown catalog command %q\n%s", sub, usage)
	}
}

// parseWorkerImages reads -kubernetes-worker-images: version=image pairs,
// comma-separated, each version once ("" is none).
func parseWorkerImages(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		v, img, ok := strings.Cut(pair, "=")
		v, img = strings.TrimSpace(v), strings.TrimSpace(img)
		if !ok || v == "" || img == "" {
			return nil, fmt.Errorf("-kubernetes-worker-images: %q is not version=image", pair)
		}
		if _, dup := out[v]; dup {
			return nil, fmt.Errorf("-kubernetes-worker-images: %s is given twice", v)
		}
		out[v] = img
	}
	return out, nil
}
