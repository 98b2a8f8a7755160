package devstack_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/cmdrun"
	"github.com/flexplane/flexplane/pkg/dev/devstack"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// automationVDC is the VDC TestStack's automation subtest works in: its
// demo VMs are web-1 and db-1, its networks 10.10.1.0/24 and 10.10.2.0/24.
const automationVDC = "prod"

// automationVars are the example's variables in the dev stack: its
// catalog, and a range and public port no demo resource has.
var automationVars = []string{
	"-var", "zone=fra1", "-var", "image=debian-12", "-var", "compute_profile=small",
	"-var", "storage_profile=ssd-standard", "-var", "cidr=10.99.0.0/24", "-var", "public_ssh_port=2299",
}

// testAutomation drives the dev stack s as automation does, with a
// service account's token (made by the platform admin in automationVDC):
// flexctl (in tools) lists the VDC's demo VMs, OpenTofu applies
// docs/examples/terraform of repo with the provider in tools and destroys
// it, leaving nothing; once the account is deleted flexctl is refused.
func testAutomation(t *testing.T, s *stack, repo, tools string, admin *devstack.Client) {
	ctx := t.Context()
	tofu := tofuCLI(t, repo)
	var created struct {
		CreateServiceAccount struct {
			Token          string
			ServiceAccount struct{ ID string }
		}
	}
	if err := admin.Do(ctx, automationVDC, `mutation($in: CreateServiceAccountInput!) {
	  createServiceAccount(input: $in) { token serviceAccount { id } } }`,
		map[string]any{"in": map[string]any{"name": "e2e-automation", "role": "MEMBER"}}, &created); err != nil {
		t.Fatalf("createServiceAccount: %v", err)
	}
	token, saID := created.CreateServiceAccount.Token, created.CreateServiceAccount.ServiceAccount.ID
	if !strings.HasPrefix(token, "fpsa_") || saID == "" {
		t.Fatalf("service account %q with token %q", saID, token)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			_ = admin.Do(t.Context(), automationVDC, `mutation($id: ID!) { deleteServiceAccount(id: $id) { id } }`, map[string]any{"id": saID}, nil)
		}
	})
	env := []string{"PATH=" + os.Getenv("PATH"), "FLEXPLANE_ENDPOINT=http://" + s.addr, "FLEXPLANE_VDC=" + automationVDC, "FLEXPLANE_TOKEN=" + token}
	home := t.TempDir()
	run := func(dir, bin string, extra []string, args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(append([]string{"HOME=" + home}, env...), extra...)
		r := cmdrun.Run(t, cmd)
		return r.Stdout, r.Stderr, r.Code
	}
	flexctl := filepath.Join(tools, "flexctl")

	out, errOut, code := run(home, flexctl, nil, "vm", "list", "-o", "json")
	var vms []struct{ Name string }
	if err := json.Unmarshal([]byte(out), &vms); code != 0 || err != nil {
		t.Fatalf("flexctl vm list: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	var names []string
	for _, v := range vms {
		names = append(names, v.Name)
	}
	for _, want := range []string{"web-1", "db-1"} {
		if !slices.Contains(names, want) {
			t.Errorf("flexctl vm list with the service account's token: %v, want the demo VM %s", names, want)
		}
	}

	// OpenTofu: the example, with the provider from tools (dev_overrides).
	work := t.TempDir()
	for _, f := range []string{"main.tf", "variables.tf"} {
		b, err := os.ReadFile(filepath.Join(repo, "docs", "examples", "terraform", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cliConfig := filepath.Join(work, "tofurc")
	rc := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    %q = %q\n  }\n  direct {}\n}\n", "flexplane/flexplane", tools)
	if err := os.WriteFile(cliConfig, []byte(rc), 0o600); err != nil {
		t.Fatal(err)
	}
	tofuEnv := []string{"TF_CLI_CONFIG_FILE=" + cliConfig, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1"}
	// The port forward takes its public address from fra1's external
	// network, which the dev stack's seed made (checked by TestStack's
	// demo data).
	// Whatever happens, the example leaves nothing among the demo VMs.
	destroyed := false
	t.Cleanup(func() {
		if destroyed {
			return
		}
		if _, errOut, code := run(work, tofu, tofuEnv, append([]string{"destroy", "-auto-approve", "-input=false", "-no-color"}, automationVars...)...); code != 0 {
			t.Errorf("tofu destroy (cleanup): exit %d\n%s", code, errOut)
		}
	})
	began := time.Now()
	if out, errOut, code := run(work, tofu, tofuEnv, append([]string{"apply", "-auto-approve", "-input=false", "-no-color"}, automationVars...)...); code != 0 {
		t.Fatalf("tofu apply: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("tofu apply took %v", time.Since(began).Round(100*time.Millisecond))
	const state = `{ networks { name cidr } vms { id name } edgeGateways(first: 10) { nodes { portForwards { publicPort vmId } } } }`
	type stateData struct {
		Networks []struct{ Name, Cidr string }
		VMs      []struct{ ID, Name string }
		Gateways struct {
			Nodes []struct {
				PortForwards []struct {
					PublicPort int
					VMID       string `json:"vmId"`
				}
			}
		} `json:"edgeGateways"`
	}
	// mine counts what of the example the API shows in the VDC: the
	// network, the VM and the port forward to it.
	mine := func() (nets, vms, forwards int, err error) {
		var d stateData
		if err := admin.Do(ctx, automationVDC, state, nil, &d); err != nil {
			return 0, 0, 0, err
		}
		web := ""
		for _, n := range d.Networks {
			if n.Name == "lan" && n.Cidr == "10.99.0.0/24" {
				nets++
			}
		}
		for _, v := range d.VMs {
			if v.Name == "web" {
				vms++
				web = v.ID
			}
		}
		for _, g := range d.Gateways.Nodes {
			for _, pf := range g.PortForwards {
				if pf.PublicPort == 2299 && (web == "" || pf.VMID == web) {
					forwards++
				}
			}
		}
		return nets, vms, forwards, nil
	}
	if n, v, f, err := mine(); err != nil || n != 1 || v != 1 || f != 1 {
		t.Errorf("after tofu apply the API shows %d network lan, %d VM web, %d port forward to it (%v), want 1 each", n, v, f, err)
	}
	began = time.Now()
	if out, errOut, code := run(work, tofu, tofuEnv, append([]string{"destroy", "-auto-approve", "-input=false", "-no-color"}, automationVars...)...); code != 0 {
		t.Fatalf("tofu destroy: exit %d\n%s\n%s", code, out, errOut)
	}
	destroyed = true
	t.Logf("tofu destroy took %v", time.Since(began).Round(100*time.Millisecond))
	// destroy returns once the API reports each deletion done: nothing left, at once.
	if n, v, f, err := mine(); err != nil || n+v+f != 0 {
		t.Errorf("after tofu destroy the API shows %d network lan, %d VM web, %d port forward (%v), want none", n, v, f, err)
	}

	if err := admin.Do(ctx, automationVDC, `mutation($id: ID!) { deleteServiceAccount(id: $id) { id } }`, map[string]any{"id": saID}, nil); err != nil {
		t.Fatalf("deleteServiceAccount: %v", err)
	}
	deleted = true
	poll.Until(t, 30*time.Second, "flexctl refused with the deleted service account's token", func() error {
		out, errOut, code := run(home, flexctl, nil, "vm", "list", "-o", "json")
		if code != 1 || !strings.Contains(errOut, "(UNAUTHENTICATED)") {
			return fmt.Errorf("exit %d\n%s%s", code, out, errOut)
		}
		return nil
	})
}

// tofuCLI is the OpenTofu CLI `make tofu-bin` built: in $FLEXPLANE_TOFU_BIN,
// which make test exports, else where make print-tofu-bin says.
func tofuCLI(t *testing.T, repo string) string {
	t.Helper()
	bin := ""
	if dir := os.Getenv("FLEXPLANE_TOFU_BIN"); dir != "" {
		bin = filepath.Join(dir, "tofu")
	} else {
		cmd := exec.Command("make", "-s", "--no-print-directory", "print-tofu-bin")
		cmd.Dir = repo
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("make print-tofu-bin: %v", err)
		}
		bin = strings.TrimSpace(string(out))
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no OpenTofu CLI (make tofu-bin): %v", err)
	}
	return bin
}
