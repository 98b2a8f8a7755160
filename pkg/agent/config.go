package agent

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/support/profiling"
)

// Environment variables (and keys of the configuration file) read by
// LoadConfig. The file uses the same KEY=VALUE lines as a systemd
// EnvironmentFile, so one file serves both.
const (
	EnvConfigFile       = "FLEXPLANE_AGENT_CONFIG"
	EnvControlURL       = "FLEXPLANE_CONTROL_URL"
	EnvEnrollKey        = "FLEXPLANE_ENROLL_KEY"
	EnvEnrollKeyFile    = "FLEXPLANE_ENROLL_KEY_FILE"
	EnvStateDir         = "FLEXPLANE_STATE_DIR"
	EnvNodeName         = "FLEXPLANE_NODE_NAME"
	EnvMeshName         = "FLEXPLANE_MESH_NAME"
	EnvProxmoxURL       = "FLEXPLANE_PVE_URL"
	EnvProxmoxToken     = "FLEXPLANE_PVE_TOKEN"
	EnvProxmoxTokenFile = "FLEXPLANE_PVE_TOKEN_FILE"
	EnvFingerprint      = "FLEXPLANE_PVE_FINGERPRINT"
	EnvNodeKeyFile      = "FLEXPLANE_PVE_SSL_KEY"
	EnvNodeCertFile     = "FLEXPLANE_PVE_SSL_CERT"
	EnvClusterCAFile    = "FLEXPLANE_PVE_ROOT_CA"
	EnvPort             = "FLEXPLANE_AGENT_PORT"
	EnvLogLevel         = "FLEXPLANE_LOG_LEVEL"
	EnvDebugAddr        = "FLEXPLANE_DEBUG_ADDR"
	EnvOTLPEndpoint     = "FLEXPLANE_OTLP_ENDPOINT"
	EnvReleaseKey       = "FLEXPLANE_RELEASE_KEY"
	EnvReleaseKeyFile   = "FLEXPLANE_RELEASE_KEY_FILE"
	EnvProbation        = "FLEXPLANE_UPDATE_PROBATION"
	EnvNoLauncher       = "FLEXPLANE_NO_LAUNCHER"
	EnvEdgeBridgeNetNS  = "FLEXPLANE_EDGE_BRIDGE_NETNS"
	EnvEdgeNetNSPrefix  = "FLEXPLANE_EDGE_NETNS_PREFIX"
	EnvHelperSocket     = "FLEXPLANE_HELPER_SOCKET"
	EnvFileRoot         = "FLEXPLANE_FILE_ROOT"
	EnvPBSPasswordFile  = "FLEXPLANE_PBS_PASSWORD_FILE"
	EnvDataListen       = "FLEXPLANE_DATA_LISTEN"
	EnvDataAdvertise    = "FLEXPLANE_DATA_ADVERTISE"
)

// Options is what LoadConfig produces besides Config.
type Options struct {
	LogLevel slog.Level
	// DebugAddr is a loopback address to serve Go runtime profiles on
	// (package profiling); "" serves none.
	DebugAddr string
	// OTLPEndpoint is the OTLP/gRPC collector URL the agent's spans go to;
	// "" leaves it to OTEL_EXPORTER_OTLP_ENDPOINT (package tracing).
	OTLPEndpoint string
	// Probation is how long a new version has to become healthy before the
	// launcher switches back to the previous one; 0 is its default (40s).
	Probation time.Duration
	// NoLauncher runs the agent without the launcher (no rollback of a
	// version that crashes at start): for supervisors that roll back
	// themselves.
	NoLauncher bool
}

// LoadConfig builds a Config from command-line flags, the environment
// (getenv) and an optional configuration file, in that order of precedence.
// The Proxmox token and the enrollment key are never taken from flags (they
// would show in the process list): only from the environment or a file.
// Logger and Version are left for the caller.
func LoadConfig(args []string, getenv func(string) string) (Config, Options, error) {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		configFile  = fs.String("config", "", "configuration file of KEY=VALUE lines (env "+EnvConfigFile+")")
		controlURL  = fs.String("control-url", "", "orchestrator URL (env "+EnvControlURL+")")
		keyFile     = fs.String("enroll-key-file", "", "file holding the enrollment key (env "+EnvEnrollKeyFile+"; or the key itself in "+EnvEnrollKey+")")
		stateDir    = fs.String("state-dir", "", "state directory (env "+EnvStateDir+"; default $STATE_DIRECTORY or /var/lib/flexplane-agent)")
		nodeName    = fs.String("node", "", "Proxmox node name (env "+EnvNodeName+"; default the host name)")
		meshName    = fs.String("mesh-name", "", "host name in the mesh (env "+EnvMeshName+"; default the node name)")
		pveURL      = fs.String("pve-url", "", "local Proxmox API URL (env "+EnvProxmoxURL+"; default https://127.0.0.1:8006)")
		tokenFile   = fs.String("pve-token-file", "", "file holding the Proxmox API token USER@REALM!ID=SECRET (env "+EnvProxmoxTokenFile+"; or the token itself in "+EnvProxmoxToken+")")
		fingerprint = fs.String("pve-fingerprint", "", "SHA-256 fingerprint of the Proxmox certificate (env "+EnvFingerprint+")")
		sslKey      = fs.String("pve-ssl-key", "", "the node's TLS key, which proves the agent's membership of its cluster (env "+EnvNodeKeyFile+"; default "+DefaultNodeKeyFile+")")
		sslCert     = fs.String("pve-ssl-cert", "", "the node's certificate (env "+EnvNodeCertFile+"; default "+DefaultNodeCertFile+")")
		rootCA      = fs.String("pve-root-ca", "", "the cluster CA's certificate (env "+EnvClusterCAFile+"; default "+DefaultClusterCAFile+")")
		port        = fs.String("port", "", "gRPC port on the mesh address (env "+EnvPort+"; default 50051)")
		logLevel    = fs.String("log-level", "", "debug, info, warn or error (env "+EnvLogLevel+"; default info)")
		debugAddr   = fs.String("debug-addr", "", "loopback address serving Go runtime profiles at /debug/pprof/ (env "+EnvDebugAddr+"; default none)")
		edgeBridge  = fs.String("edge-bridge-netns", "", "named network namespace holding the node's bridges for the edge gateways (env "+EnvEdgeBridgeNetNS+"; default the agent's own, as on Proxmox)")
		edgePrefix  = fs.String("edge-netns-prefix", "", "prefix of the edge gateways' namespace names (env "+EnvEdgeNetNSPrefix+"; default fp)")
		helper      = fs.String("helper-socket", "", "unix socket of the node's privileged helper (`agent helper`), which then runs the edge gateways, the volume I/O of moves and the snippet files (env "+EnvHelperSocket+"; default none: the agent does that work itself, as root)")
		fileRoot    = fs.String("file-root", "", "directory the paths of the node's storages are under, where snippet files are written (env "+EnvFileRoot+"; default /, the node's own file system)")
		otlp        = fs.String("otlp-endpoint", "", "OTLP/gRPC collector URL for traces, e.g. http://collector:4317 (env "+EnvOTLPEndpoint+"; default OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing)")
		releaseKey  = fs.String("release-key-file", "", "file of the trusted minisign public keys agent releases must be signed with: a .pub file, or ID=BASE64KEY lines (env "+EnvReleaseKeyFile+"; default none: no updates)")
		pbsPassword = fs.String("pbs-password-file", "", "file holding the secret of the Proxmox Backup Server user of the operator's pbs storage entries, given with each VDC's entry (env "+EnvPBSPasswordFile+"; default none)")
		dataListen  = fs.String("data-listen", "", "host address HOST:PORT of the data listener, on which the orchestrator uploads images directly instead of over the mesh (env "+EnvDataListen+"; default none: uploads cross the mesh)")
		dataAdv     = fs.String("data-advertise", "", "HOST:PORT the orchestrator dials to reach the data listener (env "+EnvDataAdvertise+"; default -data-listen's)")
		probation   = fs.String("update-probation", "", "how long a new version has to become healthy before it is rolled back (env "+EnvProbation+"; default 40s)")
	)
	var releaseKeys []string
	fs.Func("release-key", "a trusted release public key ID=BASE64KEY; repeat it or separate keys with commas (env "+EnvReleaseKey+")", func(v string) error {
		releaseKeys = append(releaseKeys, v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		var b strings.Builder
		fs.SetOutput(&b)
		fs.PrintDefaults()
		return Config{}, Options{}, fmt.Errorf("agent: %w\nflags:\n%s", err, b.String())
	}
	if fs.NArg() > 0 {
		return Config{}, Options{}, fmt.Errorf("agent: unexpected arguments %q", fs.Args())
	}

	file := map[string]string{}
	path := first(*configFile, getenv(EnvConfigFile))
	if path != "" {
		var err error
		if file, err = readEnvFile(path); err != nil {
			return Config{}, Options{}, fmt.Errorf("agent: config file: %w", err)
		}
	}
	get := func(flagValue, key string) string { return first(flagValue, getenv(key), file[key]) }

	cfg := Config{
		ControlURL:          get(*controlURL, EnvControlURL),
		StateDir:            get(*stateDir, EnvStateDir),
		NodeName:            get(*nodeName, EnvNodeName),
		MeshName:            get(*meshName, EnvMeshName),
		ProxmoxURL:          get(*pveURL, EnvProxmoxURL),
		ProxmoxFingerprint:  get(*fingerprint, EnvFingerprint),
		NodeKeyFile:         get(*sslKey, EnvNodeKeyFile),
		NodeCertFile:        get(*sslCert, EnvNodeCertFile),
		ClusterCAFile:       get(*rootCA, EnvClusterCAFile),
		EdgeBridgeNamespace: get(*edgeBridge, EnvEdgeBridgeNetNS),
		EdgeNamespacePrefix: get(*edgePrefix, EnvEdgeNetNSPrefix),
		HelperSocket:        get(*helper, EnvHelperSocket),
		FileRoot:            get(*fileRoot, EnvFileRoot),
		DataListen:          get(*dataListen, EnvDataListen),
		DataAdvertise:       get(*dataAdv, EnvDataAdvertise),
	}
	if cfg.StateDir == "" {
		cfg.StateDir = first(getenv("STATE_DIRECTORY"), "/var/lib/flexplane-agent")
	}
	if cfg.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return Config{}, Options{}, fmt.Errorf("agent: node name: %w", err)
		}
		cfg.NodeName, _, _ = strings.Cut(h, ".")
	}
	var err error
	if cfg.AuthKey, err = secret(get("", EnvEnrollKey), get(*keyFile, EnvEnrollKeyFile)); err != nil {
		return Config{}, Options{}, fmt.Errorf("agent: enrollment key: %w", err)
	}
	if cfg.ProxmoxToken, err = secret(get("", EnvProxmoxToken), get(*tokenFile, EnvProxmoxTokenFile)); err != nil {
		return Config{}, Options{}, fmt.Errorf("agent: proxmox token: %w", err)
	}
	if cfg.PBSPassword, err = secret("", get(*pbsPassword, EnvPBSPasswordFile)); err != nil {
		return Config{}, Options{}, fmt.Errorf("agent: pbs password: %w", err)
	}
	if p := get(*port, EnvPort); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return Config{}, Options{}, fmt.Errorf("agent: port %q is not a TCP port", p)
		}
		cfg.Port = uint16(n)
	}
	// Release keys are public: flags, the environment and a key file all
	// add to the trusted set.
	if len(releaseKeys) == 0 {
		releaseKeys = append(releaseKeys, get("", EnvReleaseKey))
	}
	if path := get(*releaseKey, EnvReleaseKeyFile); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, Options{}, fmt.Errorf("agent: release key: %w", err)
		}
		releaseKeys = append(releaseKeys, string(b))
	}
	cfg.ReleaseKey = strings.TrimSpace(strings.Join(releaseKeys, "\n"))
	opts := Options{DebugAddr: get(*debugAddr, EnvDebugAddr), OTLPEndpoint: get(*otlp, EnvOTLPEndpoint), NoLauncher: get("", EnvNoLauncher) != ""}
	if p := get(*probation, EnvProbation); p != "" {
		if opts.Probation, err = time.ParseDuration(p); err != nil || opts.Probation <= 0 {
			return Config{}, Options{}, fmt.Errorf("agent: update probation %q is not a positive duration", p)
		}
	}
	if opts.DebugAddr != "" {
		if err := profiling.CheckAddr(opts.DebugAddr); err != nil {
			return Config{}, Options{}, fmt.Errorf("agent: %w", err)
		}
	}
	if l := get(*logLevel, EnvLogLevel); l != "" {
		if err := opts.LogLevel.UnmarshalText([]byte(l)); err != nil {
			return Config{}, Options{}, fmt.Errorf("agent: log level %q: %w", l, err)
		}
	}
	return cfg, opts, nil
}

// secret takes a value given directly or the content of a file; not both.
func secret(value, file string) (string, error) {
	if value != "" && file != "" {
		return "", errors.New("given both directly and as a file")
	}
	if file == "" {
		return value, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// readEnvFile reads KEY=VALUE lines; blank lines and # comments are skipped,
// values may be wrapped in single or double quotes.
func readEnvFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(strings.TrimPrefix(k, "export "))
		if !ok || k == "" {
			return nil, fmt.Errorf("%s:%d: not a KEY=VALUE line", path, n)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out[k] = v
	}
	return out, sc.Err()
}
