package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/agent/privhelper"
	"github.com/flexplane/flexplane/pkg/dev/gobin"
)

// installed is where the units run the agent binary from.
const installed = "/usr/local/bin/flexplane-agent"

// unit is the [Service] and [Unit] settings of a unit file: every value
// of each key, in order.
type unit map[string][]string

func parseUnit(t *testing.T, text string) unit {
	t.Helper()
	u := unit{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("not a setting: %q", line)
		}
		u[k] = append(u[k], v)
	}
	return u
}

// is reports whether key's last value is want.
func (u unit) is(key, want string) bool {
	vs := u[key]
	return len(vs) > 0 && vs[len(vs)-1] == want
}

// TestSystemdUnits: deploy/systemd's two units pass `systemd-analyze
// verify` with the agent binary built and put where their ExecStart says,
// and keep the hardening the agent's split relies on: the agent runs as
// the fixed user the helper serves, with no capability, a read-only
// system and no devices, and finds the helper's socket; the helper keeps
// only CAP_NET_ADMIN, CAP_SYS_ADMIN and CAP_CHOWN, reaches only unix and netlink
// sockets, may create only network namespaces, serves the agent's user
// from its runtime directory, and stays in the node's mount namespace
// (where the gateways' named namespaces must be); the sysusers file makes
// the user and group they name. Without systemd-analyze
// it fails: `make test` installs it (make systemd-analyze).
func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is missing (Debian's systemd package; make systemd-analyze installs it): %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "flexplane-agent")
	gobin.Build(t, filepath.Join("..", ".."), bin, "./cmd/agent")
	units := map[string]unit{}
	var paths []string
	for _, name := range []string{"flexplane-agent.service", "flexplane-agent-helper.service"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("ExecStart="+installed)) {
			t.Fatalf("%s does not start %s", name, installed)
		}
		units[name] = parseUnit(t, string(b))
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, bytes.ReplaceAll(b, []byte(installed), []byte(bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	// verify prints what it does not like (an unknown key too) and exits 0
	// for some of it: any output fails.
	out, err := exec.Command(analyze, append([]string{"verify"}, paths...)...).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}

	ag, h := units["flexplane-agent.service"], units["flexplane-agent-helper.service"]
	socket := ""
	for _, env := range ag["Environment"] {
		if v, ok := strings.CutPrefix(env, agent.EnvHelperSocket+"="); ok {
			socket = v
		}
	}
	for key, want := range map[string]string{
		"DynamicUser": "yes", "User": "flexplane-agent", "Group": "flexplane-agent",
		"CapabilityBoundingSet": "", "AmbientCapabilities": "", "NoNewPrivileges": "yes",
		"ProtectSystem": "strict", "PrivateDevices": "yes", "ProtectHome": "yes", "PrivateTmp": "yes",
		"Requires": "flexplane-agent-helper.service",
	} {
		if !ag.is(key, want) {
			t.Errorf("flexplane-agent.service: %s=%q, want %q", key, ag[key], want)
		}
	}
	if socket == "" {
		t.Errorf("flexplane-agent.service sets no %s", agent.EnvHelperSocket)
	}
	for key, want := range map[string]string{
		"Group": "flexplane-agent", "RuntimeDirectory": "flexplane-agent-helper", "RuntimeDirectoryMode": "0750",
		"CapabilityBoundingSet": "CAP_NET_ADMIN CAP_SYS_ADMIN CAP_CHOWN", "NoNewPrivileges": "yes",
		"RestrictAddressFamilies": "AF_UNIX AF_NETLINK", "RestrictNamespaces": "net", "SystemCallArchitectures": "native",
	} {
		if !h.is(key, want) {
			t.Errorf("flexplane-agent-helper.service: %s=%q, want %q", key, h[key], want)
		}
	}
	for _, key := range []string{"ProtectSystem", "PrivateTmp", "PrivateDevices", "ProtectHome", "PrivateMounts", "ReadWritePaths",
		"ReadOnlyPaths", "InaccessiblePaths", "ProtectKernelTunables", "ProtectKernelModules", "ProtectControlGroups", "DynamicUser"} {
		if _, ok := h[key]; ok {
			t.Errorf("flexplane-agent-helper.service sets %s, which gives it a mount namespace of its own: the gateways' named namespaces would not be the node's", key)
		}
	}
	// The helper's command line is the agent binary's helper subcommand,
	// whose flags it accepts, serving the agent's socket for the agent's
	// user (here root, which exists on every machine).
	args := strings.Fields(h["ExecStart"][0])
	if len(args) < 2 || args[0] != installed || args[1] != "helper" {
		t.Fatalf("flexplane-agent-helper.service runs %q, want %s helper ...", args, installed)
	}
	flags := slices.Clone(args[2:])
	if i := slices.Index(flags, "-agent-user"); i < 0 || i+1 >= len(flags) || flags[i+1] != "flexplane-agent" {
		t.Errorf("the helper serves %q, want -agent-user flexplane-agent", flags)
	} else {
		flags[i+1] = "root"
	}
	cfg, _, err := privhelper.LoadConfig(flags)
	if err != nil {
		t.Fatalf("the helper's flags: %v", err)
	}
	if cfg.Socket != socket || filepath.Base(filepath.Dir(socket)) != "flexplane-agent-helper" {
		t.Errorf("the helper listens on %q, the agent dials %q: want one socket in the helper's RuntimeDirectory", cfg.Socket, socket)
	}
	// The sysusers file makes the user and group both units name: read by
	// systemd-sysusers itself, into an empty root and writing nothing.
	sysusers, err := filepath.Abs(filepath.Join("..", "..", "deploy", "systemd", "flexplane-agent.sysusers"))
	if err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command("systemd-sysusers", "--root", t.TempDir(), "--dry-run", sysusers).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("Creating group 'flexplane-agent'")) || !bytes.Contains(out, []byte("Creating user 'flexplane-agent'")) {
		t.Errorf("systemd-sysusers %s: %v\n%s", sysusers, err, out)
	}
}
