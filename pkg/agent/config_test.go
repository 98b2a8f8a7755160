package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const token = "flexplane@pve!agent=5ecret-5ecret"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "agent.env")
	if err := os.WriteFile(cfgFile, []byte(`# agent configuration
FLEXPLANE_CONTROL_URL="https://file.example"
FLEXPLANE_NODE_NAME=pve7
FLEXPLANE_MESH_NAME=file-name
FLEXPLANE_PVE_TOKEN_FILE=`+tokenFile+`
FLEXPLANE_AGENT_PORT=50099
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		EnvConfigFile:     cfgFile,
		EnvControlURL:     "https://env.example",
		EnvEnrollKey:      "hskey-auth-abc",
		"STATE_DIRECTORY": "/var/lib/flexplane-agent-test",
	}
	cfg, opts, err := LoadConfig([]string{"-node", "pve9"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if opts.DebugAddr != "" {
		t.Fatalf("profiles served by default on %q", opts.DebugAddr)
	}
	if cfg.ControlURL != "https://env.example" || cfg.NodeName != "pve9" || cfg.ProxmoxToken != token ||
		cfg.Port != 50099 || cfg.AuthKey != "hskey-auth-abc" || cfg.StateDir != "/var/lib/flexplane-agent-test" {
		t.Fatalf("precedence flag > env > file broken: %+v", cfg)
	}

	// The membership proof's files: Proxmox's by default, else as given.
	c0 := cfg
	if err := c0.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c0.NodeKeyFile != "/etc/pve/local/pve-ssl.key" || c0.NodeCertFile != "/etc/pve/local/pve-ssl.pem" || c0.ClusterCAFile != "/etc/pve/pve-root-ca.pem" {
		t.Fatalf("default proof files: %q %q %q", c0.NodeKeyFile, c0.NodeCertFile, c0.ClusterCAFile)
	}
	env[EnvNodeCertFile] = "/env/pve-ssl.pem"
	pc, _, err := LoadConfig([]string{"-pve-ssl-key", "/flag/pve-ssl.key", "-pve-root-ca", "/flag/ca.pem"}, func(k string) string { return env[k] })
	delete(env, EnvNodeCertFile)
	if err != nil || pc.NodeKeyFile != "/flag/pve-ssl.key" || pc.NodeCertFile != "/env/pve-ssl.pem" || pc.ClusterCAFile != "/flag/ca.pem" {
		t.Fatalf("proof files from flags and env: %+v, %v", pc, err)
	}

	// No helper by default; its socket from the environment or the flag.
	if cfg.HelperSocket != "" {
		t.Fatalf("a helper socket by default: %q", cfg.HelperSocket)
	}
	env[EnvHelperSocket] = "/run/env/helper.sock"
	hc, _, err := LoadConfig(nil, func(k string) string { return env[k] })
	if err != nil || hc.HelperSocket != "/run/env/helper.sock" {
		t.Fatalf("helper socket from the environment: %q, %v", hc.HelperSocket, err)
	}
	hc, _, err = LoadConfig([]string{"-helper-socket", "/run/flag/helper.sock"}, func(k string) string { return env[k] })
	delete(env, EnvHelperSocket)
	if err != nil || hc.HelperSocket != "/run/flag/helper.sock" {
		t.Fatalf("helper socket from the flag: %q, %v", hc.HelperSocket, err)
	}

	// The storages' paths are the node's own by default; a simulated
	// node's root from the environment or the flag, absolute only.
	if cfg.FileRoot != "" {
		t.Fatalf("a file root by default: %q", cfg.FileRoot)
	}
	env[EnvFileRoot] = "/srv/env/pve1"
	fc, _, err := LoadConfig(nil, func(k string) string { return env[k] })
	if err != nil || fc.FileRoot != "/srv/env/pve1" {
		t.Fatalf("file root from the environment: %q, %v", fc.FileRoot, err)
	}
	fc, _, err = LoadConfig([]string{"-file-root", "relative/pve1"}, func(k string) string { return env[k] })
	delete(env, EnvFileRoot)
	if err != nil || fc.FileRoot != "relative/pve1" {
		t.Fatalf("file root from the flag: %q, %v", fc.FileRoot, err)
	}
	if err := fc.setDefaults(); err == nil || !strings.Contains(err.Error(), "file root") {
		t.Fatalf("a relative file root: %v, want it refused", err)
	}

	// The data listener is off by default; on, it needs an address the
	// orchestrator can dial: its own host, or an advertised one.
	if fc.DataListen != "" || fc.DataAdvertise != "" {
		t.Fatalf("a data listener by default: %q %q", fc.DataListen, fc.DataAdvertise)
	}
	env[EnvDataAdvertise] = "pve1.example:8443"
	dc, _, err := LoadConfig([]string{"-data-listen", ":8443"}, func(k string) string { return env[k] })
	delete(env, EnvDataAdvertise)
	if err != nil || dc.DataListen != ":8443" || dc.DataAdvertise != "pve1.example:8443" {
		t.Fatalf("data listener from the flag and the environment: %q %q, %v", dc.DataListen, dc.DataAdvertise, err)
	}
	dc.FileRoot = ""
	if err := dc.setDefaults(); err != nil {
		t.Fatalf("a data listener on every interface, advertised: %v", err)
	}
	for _, bad := range []Config{{DataListen: ":8443"}, {DataListen: "0.0.0.0:8443"}, {DataAdvertise: "pve1.example:8443"}} {
		c := fc
		c.FileRoot, c.DataListen, c.DataAdvertise = "", bad.DataListen, bad.DataAdvertise
		if err := c.setDefaults(); err == nil || !strings.Contains(err.Error(), "data") {
			t.Errorf("data listener %q advertised as %q: %v, want it refused", bad.DataListen, bad.DataAdvertise, err)
		}
	}

	// The profile listener is off by default and loopback only.
	_, opts, err = LoadConfig([]string{"-debug-addr", "127.0.0.1:6061"}, func(k string) string { return env[k] })
	if err != nil || opts.DebugAddr != "127.0.0.1:6061" {
		t.Fatalf("-debug-addr: %+v, %v", opts, err)
	}
	if _, _, err := LoadConfig([]string{"-debug-addr", "0.0.0.0:6061"}, func(k string) string { return env[k] }); err == nil {
		t.Fatal("a -debug-addr on every interface was accepted")
	}

	// The token is not a flag, and errors never quote secrets.
	if _, _, err := LoadConfig([]string{"-pve-token", token}, func(string) string { return "" }); err == nil {
		t.Fatal("a -pve-token flag was accepted")
	}
	env[EnvProxmoxToken] = token
	_, _, err = LoadConfig(nil, func(k string) string { return env[k] })
	if err == nil || strings.Contains(err.Error(), "5ecret") {
		t.Fatalf("token given twice: err = %v", err)
	}
	c := Config{ControlURL: "http://x", StateDir: dir, NodeName: "pve1", ProxmoxToken: "not a token", AuthKey: "k"}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if _, err := newPVE("https://127.0.0.1:8006", "root@pam!x=s3cr3t value", ""); err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("malformed token: err = %v", err)
	}
	if err := (&Config{}).setDefaults(); err == nil {
		t.Fatal("empty config accepted")
	}
}

func TestLoadConfigMeshName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "agent.env")
	if err := os.WriteFile(cfgFile, []byte("FLEXPLANE_MESH_NAME=fra1-pve1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{EnvControlURL: "http://x", EnvStateDir: dir, EnvNodeName: "pve1", EnvProxmoxToken: "flexplane@pve!agent=s", EnvEnrollKey: "k"}
	for _, tc := range []struct {
		name  string
		args  []string
		env   map[string]string
		want  string
		valid bool
	}{
		{"default: the node name", nil, nil, "pve1", true},
		{"config file", nil, map[string]string{EnvConfigFile: cfgFile}, "fra1-pve1", true},
		{"env over file", nil, map[string]string{EnvConfigFile: cfgFile, EnvMeshName: "hel1-pve1"}, "hel1-pve1", true},
		{"flag over env", []string{"-mesh-name", "lab-pve1"}, map[string]string{EnvMeshName: "hel1-pve1"}, "lab-pve1", true},
		{"not a DNS label", []string{"-mesh-name", "fra1_pve1"}, nil, "", false},
		{"leading hyphen", []string{"-mesh-name", "-pve1"}, nil, "", false},
		{"too long", []string{"-mesh-name", strings.Repeat("a", 64)}, nil, "", false},
	} {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for k, v := range tc.env {
			env[k] = v
		}
		cfg, _, err := LoadConfig(tc.args, func(k string) string { return env[k] })
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err = cfg.setDefaults()
		switch {
		case tc.valid && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.valid && cfg.MeshName != tc.want:
			t.Errorf("%s: mesh name %q, want %q", tc.name, cfg.MeshName, tc.want)
		case !tc.valid && err == nil:
			t.Errorf("%s: mesh name %q accepted", tc.name, cfg.MeshName)
		}
	}
}
