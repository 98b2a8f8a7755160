//go:build !race

package tfprovider_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/capitest"
	"github.com/flexplane/flexplane/pkg/dev/cmdrun"
	"github.com/flexplane/flexplane/pkg/dev/gobin"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/orchestrator"
)

// tofuBinEnv names the variable holding the directory of the OpenTofu CLI
// (`make tofu-bin`); the Makefile sets it. Without it the directory is
// derived from the pins as the Makefile derives it.
const tofuBinEnv = "FLEXPLANE_TOFU_BIN"

// tofuPins are the files whose content keys the CLI's cache directory,
// hashed in the Makefile's order (TOFU_PINS).
var tofuPins = []string{"tools/tofu/go.mod", "tools/tofu/go.sum", "tools/tofu/tools.go", "tools/tofu/build.sh"}

// tofuPath is the OpenTofu CLI `make tofu-bin` built.
func tofuPath(t testing.TB) string {
	t.Helper()
	bin, err := tofuBin()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// tofuBin is tofuPath without a test: the CLI's path, or why there is none.
func tofuBin() (string, error) {
	dir := os.Getenv(tofuBinEnv)
	if dir == "" {
		root, err := filepath.Abs("../..")
		if err != nil {
			return "", err
		}
		h := sha256.New()
		for _, f := range tofuPins {
			data, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				return "", err
			}
			h.Write(data)
		}
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", err
			}
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "flexplane", "tofu-"+hex.EncodeToString(h.Sum(nil))[:16])
	}
	bin := filepath.Join(dir, "tofu")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no OpenTofu CLI at %s: run make tofu-bin (%w)", bin, err)
	}
	return bin, nil
}

// stack is a mesh harness (zone "alpha" of one node, the API with
// meshtest's default users and VDCs) with a catalog of one image ("tiny",
// staged in alpha), compute profiles "small" and "large", storage profile
// "ssd", backup profile "backups" (zone alpha's "local"), and an external network in alpha, so that port forwards have
// public addresses. Its managed Kubernetes has a management cluster (a
// kube-apiserver with Cluster API's CRDs) and capitest's stand-in for the
// hosted control plane, ready at once; workers are VMs of image tiny; a
// deleted cluster is gone within seconds (a short CreateGrace).
type stack struct {
	h *meshtest.Harness
}

func startStack(t testing.TB) *stack {
	t.Helper()
	m := capitest.Start(t)
	api := meshtest.APISpec{Kube: orchestrator.KubeConfig{Kubeconfig: m.Kubeconfig, Namespace: "flexplane"},
		Kubernetes: orchestrator.ManagedKubernetesConfig{Enabled: true, WorkerImage: "tiny", WorkerDiskGiB: 4,
			Poll: 250 * time.Millisecond, ControlPlane: m.ControlPlane,
			// A deleted cluster's namespace goes at the leader's next pass
			// (every 5 s) rather than a minute after it was made: the
			// test's one create is done long before 5 s.
			CreateGrace: 5 * time.Second}}
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1, Snippets: true}), meshtest.WithAPI(api))
	h.WaitOnline(t, 30*time.Second)
	url, sum := vmtest.ImageServer(t, 3<<20)
	h.GraphQL(t, "admin", "", `mutation($u: String!, $c: String!) {
	  createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name }
	  large: createComputeProfile(input: {name: "large", vcpus: 2, memoryMiB: 1024}) { name }
	  createStorageProfile(input: {name: "ssd", tier: "ssd", readMBps: 200, writeMBps: 100, pools: [{zone: "alpha", pool: "local-lvm"}]}) { name }
	  backups: createStorageProfile(input: {name: "backups", tier: "backup", kind: BACKUP, pools: [{zone: "alpha", pool: "local"}]}) { name }
	  createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name }
	  createExternalNetwork(input: {zone: "alpha", bridge: "vmbr0", cidr: "203.0.113.0/24",
	    gateway: "203.0.113.254", poolStart: "203.0.113.10", poolEnd: "203.0.113.20"}) { zone }
	  stageImage(name: "tiny", zone: "alpha") { state } }`,
		map[string]any{"u": url, "c": sum}).OK(t)
	poll.True(t, 2*time.Minute, "image tiny staged in alpha", func() bool {
		var imgs []struct{ Zones []struct{ State string } }
		h.GraphQL(t, "admin", "", `{ images { zones(zone: "alpha") { state } } }`, nil).OK(t).Into(t, "images", &imgs)
		return len(imgs) == 1 && len(imgs[0].Zones) == 1 && imgs[0].Zones[0].State == "STAGED"
	})
	return &stack{h: h}
}

// serviceAccount makes a service account of vdc with role (as the platform
// admin) and returns its fpsa_ token.
func (s *stack) serviceAccount(t testing.TB, vdc, name, role string) string {
	t.Helper()
	var out struct{ Token string }
	s.h.GraphQL(t, "admin", vdc, `mutation($in: CreateServiceAccountInput!) { createServiceAccount(input: $in) { token } }`,
		map[string]any{"in": map[string]any{"name": name, "role": role}}).OK(t).Into(t, "createServiceAccount", &out)
	if !strings.HasPrefix(out.Token, "fpsa_") {
		t.Fatalf("service account token %q", out.Token)
	}
	return out.Token
}

// buildProvider builds cmd/terraform-provider-flexplane into a new
// directory and returns that directory (what dev_overrides names).
func buildProvider(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	gobin.Build(t, filepath.Join("..", ".."), filepath.Join(dir, "terraform-provider-flexplane"), "./cmd/terraform-provider-flexplane")
	return dir
}

// devOverrides writes a CLI configuration that takes flexplane/flexplane
// from providerDir (as docs/use/terraform.md shows) and returns its path.
func devOverrides(t testing.TB, providerDir string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tofurc")
	cfg := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    %q = %q\n  }\n  direct {}\n}\n", "flexplane/flexplane", providerDir)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tofuRun is one tofu command's outcome.
type tofuRun struct {
	stdout, stderr string
	code           int
}

// runTofu runs tofu with args in dir, with only env (and PATH, HOME and
// the CLI configuration cliConfig) in its environment.
func runTofu(t testing.TB, tofu, dir, cliConfig string, env []string, args ...string) tofuRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tofu, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TF_CLI_CONFIG_FILE=" + cliConfig,
		"TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1"}, env...)
	r := cmdrun.Run(t, cmd)
	return tofuRun{r.Stdout, r.Stderr, r.Code}
}

// copyExample copies docs/examples/terraform into a new directory.
func copyExample(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	src := "../../docs/examples/terraform"
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".tf") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// exampleVars are the example's variables for the stack.
var exampleVars = []string{"-var", "zone=alpha", "-var", "image=tiny", "-var", "compute_profile=small",
	"-var", "storage_profile=ssd", "-var", "disk_gib=4"}
