package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph/server"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/tenantkube/controlplane"
)

// TestKeys drives `orchestrator keys` against a running orchestrator.
func TestKeys(t *testing.T) {
	dir, err := os.MkdirTemp("", "fpk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	meshnode.PrepareProcess("http://")
	srv, err := orchestrator.New(orchestrator.Config{
		Listen: "127.0.0.1:0", DataDir: dir, STUNAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })

	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, append(args, "-data-dir", dir), &out)
		return out.String(), err
	}
	// Flags come before positional arguments for revoke.
	revoke := func(id string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, []string{"keys", "revoke", "-data-dir", dir, id}, &out)
		return out.String(), err
	}

	out, err := cli("keys", "create", "-reusable", "-ttl", "2h")
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(out)
	if !strings.HasPrefix(secret, "hskey-auth-") {
		t.Fatalf("create printed %q", out)
	}
	list, err := cli("keys", "list")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(list, secret) {
		t.Fatal("list shows the full key")
	}
	m := regexp.MustCompile(`(?m)^(\d+)\s+\S+\s+true\s+false\s+\S+\s+valid\s+tag:agent$`).FindStringSubmatch(list)
	if m == nil {
		t.Fatalf("list lacks the new reusable key:\n%s", list)
	}
	if out, err := revoke(m[1]); err != nil || !strings.Contains(out, "revoked key "+m[1]) {
		t.Fatalf("revoke: %q %v", out, err)
	}
	list, _ = cli("keys", "list")
	if !regexp.MustCompile(`(?m)^` + m[1] + `\s.*\sexpired\s+tag:agent$`).MatchString(list) {
		t.Fatalf("revoked key not expired:\n%s", list)
	}

	// Bad input: a clear error, nothing created.
	for _, args := range [][]string{
		{"keys", "create", "-ttl", "-1h"},
		{"keys", "create", "-ttl", "10000h"},
		{"keys", "frobnicate"},
	} {
		if _, err := cli(args...); err == nil {
			t.Errorf("%v succeeded", args)
		}
	}
	if _, err := revoke("abc"); err == nil {
		t.Error("revoke abc succeeded")
	}
	if _, err := revoke("999"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("revoke 999: %v", err)
	}
	if after, _ := cli("keys", "list"); strings.Count(after, "\n") != strings.Count(list, "\n") {
		t.Errorf("bad input changed the key list:\n%s", after)
	}
	if err := run(ctx, []string{"keys", "list", "-data-dir", t.TempDir()}, &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), "running") {
		t.Errorf("keys against a data dir without orchestrator: %v", err)
	}

	// The mesh's nodes: the orchestrator's own is listed; deleting a node
	// that is not there, or not a number, is refused.
	nodes, err := cli("nodes", "list")
	if err != nil || !regexp.MustCompile(`(?m)^\d+\s+\S+\s.*\stag:orchestrator$`).MatchString(nodes) {
		t.Errorf("nodes list: %v\n%s", err, nodes)
	}
	for id, want := range map[string]string{"999": "not found", "abc": "not a number"} {
		err := run(ctx, []string{"nodes", "delete", "-data-dir", dir, id}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("nodes delete %s: %v, want %q", id, err, want)
		}
	}
	if after, _ := cli("nodes", "list"); strings.Count(after, "\n") != strings.Count(nodes, "\n") {
		t.Errorf("refused deletes changed the node list:\n%s", after)
	}
}

// TestServeAPIFlags refuses an API configuration without an audience
// before anything starts.
func TestServeAPIFlags(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"serve", "-data-dir", t.TempDir(), "-oidc-issuer", "http://127.0.0.1:1"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "-oidc-audience") {
		t.Errorf("serve without an audience: %v", err)
	}
}

// TestServePortalFlags refuses a portal without the issuer it signs in with.
func TestServePortalFlags(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"serve", "-data-dir", t.TempDir(), "-portal-dir", t.TempDir()}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "-oidc-issuer") {
		t.Errorf("serve with a portal but no issuer: %v", err)
	}
}

// TestServeLimitFlags refuses negative query limits and a limit in the
// environment that is not a number, before anything starts.
func TestServeLimitFlags(t *testing.T) {
	for _, args := range [][]string{{"-max-complexity", "-1"}, {"-max-depth", "-2"}} {
		err := run(t.Context(), append([]string{"serve", "-data-dir", t.TempDir()}, args...), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "must not be negative") {
			t.Errorf("serve %v: %v", args, err)
		}
	}
	err := run(t.Context(), []string{"serve", "-data-dir", t.TempDir(), "-drain-parallel", "0"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "-drain-parallel must be at least 1") {
		t.Errorf("serve -drain-parallel 0: %v", err)
	}
	t.Setenv("FLEXPLANE_MAX_COMPLEXITY", "lots")
	err = run(t.Context(), []string{"serve", "-data-dir", t.TempDir()}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "FLEXPLANE_MAX_COMPLEXITY") {
		t.Errorf("serve with FLEXPLANE_MAX_COMPLEXITY=lots: %v", err)
	}
}

// TestServeRateLimitFlags: the rate limits' flags and environment give the
// API's RateLimits (the defaults without them, a rate of 0 or less a limit
// turned off), and values that are no rate or burst are refused with an
// error naming the flag, before anything starts.
func TestServeRateLimitFlags(t *testing.T) {
	parse := func(args ...string) (server.RateLimits, error) {
		f, err := parseServeFlags(append([]string{"-data-dir", t.TempDir()}, args...))
		if err != nil {
			return server.RateLimits{}, err
		}
		return f.rateLimits(), nil
	}
	same := func(a, b server.RateLimits) bool {
		return a.MutationRate == b.MutationRate && a.MutationBurst == b.MutationBurst && a.ConsoleRate == b.ConsoleRate && a.ConsoleBurst == b.ConsoleBurst
	}
	for _, c := range []struct {
		args []string
		want server.RateLimits
	}{
		{nil, server.RateLimits{MutationRate: 10, MutationBurst: 30, ConsoleRate: 5, ConsoleBurst: 5}},
		{[]string{"-mutation-rate", "2.5", "-mutation-burst", "4", "-console-rate", "1", "-console-burst", "2"},
			server.RateLimits{MutationRate: 2.5, MutationBurst: 4, ConsoleRate: 1, ConsoleBurst: 2}},
		{[]string{"-mutation-rate", "0", "-console-rate", "-1"}, server.RateLimits{MutationRate: -1, MutationBurst: -1, ConsoleRate: -1, ConsoleBurst: -1}},
		{[]string{"-mutation-rate", "0", "-mutation-burst", "0"}, server.RateLimits{MutationRate: -1, MutationBurst: -1, ConsoleRate: 5, ConsoleBurst: 5}},
	} {
		if got, err := parse(c.args...); err != nil || !same(got, c.want) {
			t.Errorf("serve %v: %+v, %v; want %+v", c.args, got, err, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-mutation-rate", "lots"}, "-mutation-rate"},
		{[]string{"-mutation-rate", "NaN"}, "-mutation-rate NaN"},
		{[]string{"-console-rate", "+Inf"}, "-console-rate +Inf"},
		{[]string{"-console-rate", "2e6"}, "-console-rate 2e+06"},
		{[]string{"-mutation-burst", "0"}, "-mutation-burst 0: want 1 to 1000000 while -mutation-rate is on"},
		{[]string{"-console-burst", "-3"}, "-console-burst -3"},
		{[]string{"-mutation-burst", "1.5"}, "-mutation-burst"},
	} {
		if _, err := parse(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v: %v, want an error naming %q", c.args, err, c.want)
		}
	}
	t.Setenv("FLEXPLANE_MUTATION_RATE", "3")
	t.Setenv("FLEXPLANE_CONSOLE_BURST", "9")
	if got, err := parse(); err != nil || got.MutationRate != 3 || got.ConsoleBurst != 9 {
		t.Errorf("from the environment: %+v, %v", got, err)
	}
	for key, v := range map[string]string{"FLEXPLANE_CONSOLE_RATE": "fast", "FLEXPLANE_MUTATION_BURST": "2.5"} {
		t.Setenv(key, v)
		if _, err := parse(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%s: %v, want an error naming it", key, v, err)
		}
		t.Setenv(key, "")
	}
}

// TestServeCLIClientFlags: flexctl's client id reaches the API's
// verifier; without an issuer it is refused before anything starts.
func TestServeCLIClientFlags(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"serve", "-data-dir", t.TempDir(), "-oidc-cli-client-id", "flexctl"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "-oidc-cli-client-id needs -oidc-issuer") {
		t.Errorf("serve with a CLI client and no issuer: %v", err)
	}
	f, err := parseServeFlags([]string{"-data-dir", t.TempDir(), "-oidc-issuer", "http://127.0.0.1:1", "-oidc-audience", "portal", "-oidc-cli-client-id", "flexctl"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, closeFiles, err := f.config(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if closeFiles != nil {
		closeFiles()
	}
	if cfg.API.CLIClientID != "flexctl" || cfg.API.Audience != "portal" {
		t.Errorf("API config: audience %q, CLI client %q", cfg.API.Audience, cfg.API.CLIClientID)
	}
}

// TestServeKubernetesFlags refuses a hosted API servers' Service type
// Kubernetes does not have, before anything starts.
func TestServeKubernetesFlags(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"serve", "-data-dir", t.TempDir(), "-kubernetes-apiserver-service-type", "Ingress"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "-kubernetes-apiserver-service-type") {
		t.Errorf("serve with Service type Ingress: %v", err)
	}
}

// TestParseWorkerImages reads version=image pairs and refuses what is not
// one, or a version given twice.
func TestParseWorkerImages(t *testing.T) {
	t.Parallel()
	got, err := parseWorkerImages(" v1.36.4=kube-1.36, v1.37.2=kube-1.37,")
	if err != nil || len(got) != 2 || got["v1.36.4"] != "kube-1.36" || got["v1.37.2"] != "kube-1.37" {
		t.Errorf("two pairs: %v, %v", got, err)
	}
	if got, err := parseWorkerImages(""); err != nil || len(got) != 0 {
		t.Errorf("none: %v, %v", got, err)
	}
	for _, bad := range []string{"v1.37.2", "v1.37.2=", "=img", "v1.37.2=a,v1.37.2=b"} {
		if _, err := parseWorkerImages(bad); err == nil || !strings.Contains(err.Error(), "-kubernetes-worker-images") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"200MiB": 200 << 20, "1GiB": 1 << 30, "4096": 4096, "512KiB": 512 << 10, "10B": 10} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1MiB", "0", "200MB", "2.5GiB", "1iB", "200 MiB", "99999999999TiB"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

// TestServeMeshPostgresFlags refuses a PostgreSQL configuration that is
// incomplete or carries its password on the command line, before anything
// starts.
func TestServeMeshPostgresFlags(t *testing.T) {
	t.Parallel()
	for args, want := range map[[2]string]string{
		{"-mesh-postgres", "postgres://hs@db/headscale"}:               "needs -mesh-postgres-password-file",
		{"-mesh-postgres-password-file", "/run/secrets/pw"}:            "needs -mesh-postgres",
		{"-mesh-postgres", "postgres://hs:secret@db/headscale"}:        "password",
		{"-mesh-postgres", "postgres://hs@db/headscale?sslmode=maybe"}: "sslmode",
		{"-mesh-postgres", "http://hs@db/headscale"}:                   "postgres://",
	} {
		err := run(t.Context(), []string{"serve", "-data-dir", t.TempDir(), args[0], args[1]}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("serve %v: %v, want an error about %q", args, err, want)
		}
	}
}

// TestServeLBTokenFlags refuses a load balancers' token directory without
// their config, a zone's token that is missing, empty or short, two
// zones sharing a token, and zones without the admin API's TLS files,
// before anything starts.
func TestServeLBTokenFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const tls = `"tls": {"certFile": "c", "keyFile": "k", "caFile": "ca"}`
	cfg := write("lb.json", `{"zones": {"fra": {}, "hel": {}}, `+tls+`}`)
	shared := write("shared.json", `{"zones": {"fra": {}, "hel": {}}, "tokens": {"fra": "0123456789abcdef", "hel": "0123456789abcdef"}, `+tls+`}`)
	noTLS := write("notls.json", `{"zones": {"fra": {}}, "tokens": {"fra": "0123456789abcdef"}}`)
	write("empty/fra", " \n")
	write("empty/hel", "0123456789abcdef-hel")
	write("short/fra", "abc")
	write("short/hel", "0123456789abcdef-hel")
	write("one/fra", "0123456789abcdef-fra")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-lb-token-dir", dir}, "needs -lb-config"},
		{[]string{"-lb-config", cfg}, "no admin token"},
		{[]string{"-lb-config", cfg, "-lb-token-dir", filepath.Join(dir, "one")}, "zone hel"},
		{[]string{"-lb-config", cfg, "-lb-token-dir", filepath.Join(dir, "empty")}, "is empty"},
		{[]string{"-lb-config", cfg, "-lb-token-dir", filepath.Join(dir, "short")}, "16 characters"},
		{[]string{"-lb-config", shared}, "the same admin token"},
		{[]string{"-lb-config", noTLS}, "tls needs"},
	} {
		err := run(t.Context(), append([]string{"serve", "-data-dir", t.TempDir()}, c.args...), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v: %v, want an error about %q", c.args, err, c.want)
		}
	}
}

// TestServeControlPlaneValues: -kubernetes-controlplane-values reaches the
// hosted control planes' chart values, a new copy for each cluster; a file
// that is missing, not a mapping, sets what each cluster derives, or that
// the chart's schema refuses stops serve before anything starts, naming
// the flag.
func TestServeControlPlaneValues(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	config := func(values string) (orchestrator.Config, error) {
		f, err := parseServeFlags([]string{"-data-dir", t.TempDir(), "-kubernetes-controlplane-values", values})
		if err != nil {
			return orchestrator.Config{}, err
		}
		cfg, closeFiles, err := f.config(slog.New(slog.DiscardHandler))
		if closeFiles != nil {
			closeFiles()
		}
		return cfg, err
	}
	cfg, err := config(file("good.yaml", "images: {registry: registry.example/k8s, pullPolicy: Never}\napiServer: {replicas: 1}\netcd:\n  storage: {storageClass: local, size: 1Gi}\n"))
	if err != nil {
		t.Fatal(err)
	}
	values := cfg.API.Kubernetes.ControlPlaneValues
	if values == nil {
		t.Fatal("no control plane values in the config")
	}
	first := values(controlplane.Spec{Cluster: "a"})
	first["apiServer"].(map[string]any)["port"] = 7443 // as the Manager merges into it
	second := values(controlplane.Spec{Cluster: "b"})
	if got := fmt.Sprint(second["images"], second["apiServer"], second["etcd"]); got != "map[pullPolicy:Never registry:registry.example/k8s] map[replicas:1] map[storage:map[size:1Gi storageClass:local]]" {
		t.Errorf("a cluster's values: %s", got)
	}
	for name, c := range map[string]struct{ content, want string }{
		"list.yaml":     {"- images\n", "want a YAML mapping"},
		"derived.yaml":  {"endpoint: 10.0.0.1:6443\ncluster: x\n", "cluster, endpoint derived from each cluster"},
		"schema.yaml":   {"images: {pullPolicy: Sometimes}\n", "pullPolicy"},
		"replicas.yaml": {"apiServer: {replicas: 0}\n", "replicas"},
		"unknown.yaml":  {"apiServr: {replicas: 1}\n", "apiServr"},
	} {
		_, err := config(file(name, c.content))
		if err == nil || !strings.Contains(err.Error(), "-kubernetes-controlplane-values") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming the flag and %q", name, err, c.want)
		}
	}
	if _, err := config(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "-kubernetes-controlplane-values") {
		t.Errorf("a missing file: %v", err)
	}
}
