//go:build !race

package flexctl_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/devidp"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/flexctl"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// TestFlexctlEndToEnd runs the built flexctl binary against a running
// mesh harness (real orchestrator, agents, simulated Proxmox, real OIDC
// tokens): a device login as alice (a member of VDC red) kept in a context,
// an expired login renewed with its refresh token, then with that context
// a network and a VM created (--wait), listed, read, its console opened,
// stopped, started and deleted, images and load balancers listed, a
// managed Kubernetes cluster created, listed, its kubeconfig written and
// deleted (kubeTest), a load balancer created with --wait (lbTest),
// listed and deleted; an API refusal
// (exit 1, the API's message and code), a backup of the VM taken, listed,
// restored as a new VM and deleted (backupTest), usage errors (exit 2, nothing
// changed), red's VM asked for from VDC blue by bob (NOT_FOUND), and
// service accounts' tokens in FLEXPLANE_TOKEN (saTest).
func TestFlexctlEndToEnd(t *testing.T) {
	s := startStack(t)
	home := t.TempDir()
	endpoint := s.h.Orchestrator.URL()
	base := []string{flexctl.EnvEndpoint + "=" + endpoint}

	t.Run("login", func(t *testing.T) {
		login(t, s, home, append(base, flexctl.EnvVDC+"=red"), "alice", "alice-pw")
		cfg := filepath.Join(home, ".config", "flexplane", "config.yaml")
		st, err := os.Stat(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("config file mode %v, want 0600", st.Mode().Perm())
		}
		f, err := flexctl.LoadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := f.Context("default")
		if f.CurrentContext != "default" || c == nil || c.Token == "" || c.VDC != "red" || c.Endpoint != endpoint {
			t.Fatalf("config after login: %+v", f)
		}
		// Signed in as the CLI's own client the configuration document
		// names, not the portal's.
		if c.ClientID != meshtest.CLIClientID {
			t.Errorf("login's client %q, want %q", c.ClientID, meshtest.CLIClientID)
		}
	})

	t.Run("an expired login is renewed with its refresh token", func(t *testing.T) {
		issuer := s.h.IDP(t).Issuer()
		tok, err := devidp.CodeFlow(context.Background(), nil, devidp.FlowParams{Issuer: issuer, ClientID: meshtest.APIClientID,
			RedirectURI: "http://127.0.0.1/callback", Username: "alice", Password: "alice-pw",
			Scopes: []string{"openid", "profile", "offline_access"}})
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			TokenEndpoint string `json:"token_endpoint"`
		}
		res, err := http.Get(issuer + "/.well-known/openid-configuration")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(res.Body).Decode(&d)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		path := filepath.Join(dir, ".config", "flexplane", "config.yaml")
		old := flexctl.Context{Name: "old", Endpoint: endpoint, VDC: "red", Token: "expired", RefreshToken: tok.RefreshToken,
			Expiry: time.Now().Add(-time.Minute), TokenURL: d.TokenEndpoint, ClientID: meshtest.APIClientID}
		if err := (&flexctl.File{CurrentContext: "old", Contexts: []flexctl.Context{old}}).Save(path); err != nil {
			t.Fatal(err)
		}
		if r := s.run(t, dir, nil, "vm", "list"); r.code != 0 {
			t.Fatalf("vm list with an expired login: %+v", r)
		}
		f, err := flexctl.LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		c := f.Context("old")
		if c.Token == "expired" || c.RefreshToken == old.RefreshToken || !c.Expiry.After(time.Now()) {
			t.Fatalf("context after renewal: token %q..., expiry %v, refresh token rotated %v", c.Token[:8], c.Expiry, c.RefreshToken != old.RefreshToken)
		}
	})

	// From here on, nothing but the context: the token flexctl obtained.
	var netID string
	t.Run("network create and list", func(t *testing.T) {
		r := s.run(t, home, nil, "network", "create", "lan", "--zone", "alpha", "--cidr", "10.1.0.0/24", "--gateway", "10.1.0.1", "-o", "json")
		var n struct{ ID, Name, Cidr string }
		decode(t, r, &n)
		if n.ID == "" || n.Name != "lan" || n.Cidr != "10.1.0.0/24" {
			t.Fatalf("created network %+v", n)
		}
		netID = n.ID
		r = s.run(t, home, nil, "network", "list")
		if r.code != 0 || !strings.Contains(r.stdout, netID) || !strings.Contains(r.stdout, "10.1.0.0/24") || !strings.HasPrefix(r.stdout, "ID ") {
			t.Fatalf("network list: %+v", r)
		}
	})

	var vmID string
	t.Run("vm create --wait", func(t *testing.T) {
		r := s.run(t, home, nil, "vm", "create", "web", "--zone", "alpha", "--image", "tiny", "--compute-profile", "small",
			"--storage-profile", "ssd", "--disk-gib", "4", "--user", "ubuntu", "--nic", netID, "--wait", "-o", "json")
		var v struct{ ID, Name, Status string }
		decode(t, r, &v)
		if v.ID == "" || v.Name != "web" || v.Status != "RUNNING" {
			t.Fatalf("created VM %+v", v)
		}
		if !strings.Contains(r.stderr, "create_vm RUNNING") || !strings.Contains(r.stderr, "create_vm SUCCEEDED") {
			t.Errorf("no progress lines on stderr:\n%s", r.stderr)
		}
		vmID = v.ID
	})

	t.Run("vm list and get", func(t *testing.T) {
		var vms []struct{ ID, Name, Status string }
		decode(t, s.run(t, home, nil, "vm", "list", "-o", "json"), &vms)
		if len(vms) != 1 || vms[0].ID != vmID || vms[0].Status != "RUNNING" {
			t.Fatalf("vm list: %+v", vms)
		}
		r := s.run(t, home, nil, "vm", "get", vmID, "-o", "yaml")
		if r.code != 0 || !strings.Contains(r.stdout, "id: "+vmID) || !strings.Contains(r.stdout, "status: RUNNING") {
			t.Fatalf("vm get -o yaml: %+v", r)
		}
	})

	t.Run("images, console, load balancers", func(t *testing.T) {
		var images []struct{ Name, Version string }
		decode(t, s.run(t, home, nil, "image", "list", "-o", "json"), &images)
		if len(images) != 1 || images[0].Name != "tiny" {
			t.Errorf("image list: %+v", images)
		}
		if r := s.run(t, home, nil, "image", "get", "tiny"); r.code != 0 || !strings.Contains(r.stdout, "tiny") {
			t.Errorf("image get: %+v", r)
		}
		var console struct{ URL string }
		decode(t, s.run(t, home, nil, "vm", "console-url", vmID, "-o", "json"), &console)
		if !strings.HasPrefix(console.URL, "ws://"+strings.TrimPrefix(endpoint, "http://")+"/") {
			t.Errorf("console-url: %q", console.URL)
		}
		var lbs []any
		decode(t, s.run(t, home, nil, "lb", "list", "-o", "json"), &lbs)
		if len(lbs) != 0 {
			t.Errorf("lb list: %+v", lbs)
		}
	})

	t.Run("kubernetes create, list, kubeconfig and delete", func(t *testing.T) {
		kubeTest(t, s, home, netID)
	})

	t.Run("lb create --wait, list and delete", func(t *testing.T) {
		lbTest(t, s, home, vmID)
	})

	t.Run("vm stop and start", func(t *testing.T) {
		for _, step := range []struct{ action, status string }{{"stop", "STOPPED"}, {"start", "RUNNING"}} {
			var op struct{ State, Kind string }
			decode(t, s.run(t, home, nil, "vm", step.action, vmID, "--wait", "-o", "json"), &op)
			if op.State != "SUCCEEDED" {
				t.Fatalf("vm %s: %+v", step.action, op)
			}
			var v struct{ Status string }
			decode(t, s.run(t, home, nil, "vm", "get", vmID, "-o", "json"), &v)
			if v.Status != step.status {
				t.Fatalf("after vm %s: status %s, want %s", step.action, v.Status, step.status)
			}
		}
	})

	t.Run("disk attach, resize, list and detach; vm resize", func(t *testing.T) {
		diskTest(t, s, home, vmID)
	})

	t.Run("a service account's token drives flexctl", func(t *testing.T) {
		saTest(t, s, base, netID)
	})

	t.Run("another VDC's VM is NOT_FOUND", func(t *testing.T) {
		bob := append(base, flexctl.EnvVDC+"=blue", flexctl.EnvToken+"="+s.h.Token(t, "bob"))
		for _, args := range [][]string{{"vm", "get", vmID}, {"vm", "stop", vmID}, {"vm", "delete", vmID}, {"vm", "detach-iso", vmID},
			{"disk", "list", vmID}, {"disk", "attach", vmID, "--size-gib", "1"}, {"vm", "resize", vmID, "--compute-profile", "small"}} {
			r := s.run(t, t.TempDir(), bob, args...)
			if r.code != flexctl.ExitRefused || !strings.HasSuffix(strings.TrimSpace(r.stderr), "(NOT_FOUND)") || !strings.HasPrefix(r.stderr, "error: ") {
				t.Errorf("bob's %v: %+v", args, r)
			}
		}
		var v struct{ Status string }
		decode(t, s.run(t, home, nil, "vm", "get", vmID, "-o", "json"), &v)
		if v.Status != "RUNNING" {
			t.Fatalf("after bob's attempts: %s", v.Status)
		}
	})

	t.Run("refused by the API: exit 1 with message and code", func(t *testing.T) {
		r := s.run(t, home, nil, "network", "create", "bad", "--zone", "alpha", "--cidr", "10.1.0.0/33", "--gateway", "10.1.0.1")
		if r.code != flexctl.ExitRefused || !regexp.MustCompile(`^error: .+ \(BAD_USER_INPUT\)\n$`).MatchString(r.stderr) {
			t.Fatalf("bad CIDR: %+v", r)
		}
		r = s.run(t, t.TempDir(), append(base, flexctl.EnvVDC+"=red", flexctl.EnvToken+"=not-a-token"), "vm", "list")
		if r.code != flexctl.ExitRefused || !strings.Contains(r.stderr, "(UNAUTHENTICATED)") {
			t.Fatalf("a malformed token: %+v", r)
		}
	})

	t.Run("usage error: exit 2, nothing sent", func(t *testing.T) {
		for _, args := range [][]string{
			{"vm", "create", "x", "--zone", "alpha"}, // required flags missing
			{"vm", "get"},                            // no id
			{"vm", "list", "--no-such-flag"},
			{"vm", "list", "-o", "xml"},
			{"backup", "restore", "only-an-id"}, // no name
			{"disk", "attach", "some-vm"},       // no --size-gib
			{"disk", "resize", "some-vm"},       // no slot
			{"vm", "resize", "some-vm"},         // no --compute-profile
			{"nope"},
		} {
			r := s.run(t, home, nil, args...)
			if r.code != flexctl.ExitUsage || !strings.HasPrefix(r.stderr, "error: ") {
				t.Errorf("flexctl %v: %+v", args, r)
			}
		}
		var networks []struct{ Name string }
		decode(t, s.run(t, home, nil, "network", "list", "-o", "json"), &networks)
		if len(networks) != 1 {
			t.Errorf("networks after refusals: %+v", networks)
		}
	})

	t.Run("backup create --wait, list, restore --wait and delete", func(t *testing.T) {
		backupTest(t, s, home, base, vmID)
	})

	t.Run("vm delete and network delete", func(t *testing.T) {
		var op struct{ State string }
		decode(t, s.run(t, home, nil, "vm", "delete", vmID, "--wait", "-o", "json"), &op)
		if op.State != "SUCCEEDED" {
			t.Fatalf("vm delete: %+v", op)
		}
		if r := s.run(t, home, nil, "vm", "get", vmID); r.code != flexctl.ExitRefused || !strings.Contains(r.stderr, "(NOT_FOUND)") {
			t.Fatalf("vm get after delete: %+v", r)
		}
		if r := s.run(t, home, nil, "network", "delete", netID); r.code != 0 {
			t.Fatalf("network delete: %+v", r)
		}
		var networks []struct{ Name string }
		decode(t, s.run(t, home, nil, "network", "list", "-o", "json"), &networks)
		if len(networks) != 0 {
			t.Fatalf("networks after delete: %+v", networks)
		}
	})
}

// decode checks that r succeeded and decodes its JSON output into v.
func decode(t *testing.T, r result, v any) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("flexctl exited %d: %s", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("flexctl output %q: %v", r.stdout, err)
	}
}

// userCodeLine is login's prompt: the verification URL and the code.
var userCodeLine = regexp.MustCompile(`open (\S+)`)

// login runs flexctl login with env and signs in as user at the URL it
// prints, as a person would in a browser: the provider's device page with
// the code filled in, the username and password posted.
func login(t *testing.T, s *stack, home string, env []string, user, password string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, "login")
	cmd.Env = append([]string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config")}, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	var verify *url.URL
	var printed strings.Builder
	for verify == nil && sc.Scan() {
		printed.WriteString(sc.Text() + "\n")
		if m := userCodeLine.FindStringSubmatch(sc.Text()); m != nil {
			if verify, err = url.Parse(m[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if verify == nil {
		cmd.Wait()
		t.Fatalf("flexctl login printed no URL:\n%s", printed.String())
	}
	rest := make(chan string, 1)
	go func() { b, _ := io.ReadAll(stderr); rest <- string(b) }()
	if verify.Path != devidp.DevicePath || !strings.HasPrefix(verify.String(), s.h.IDP(t).Issuer()) {
		t.Fatalf("login URL %s is not the provider's device page", verify)
	}
	code := verify.Query().Get("user_code")
	if code == "" || !strings.Contains(printed.String(), code) {
		t.Fatalf("login printed no user code:\n%s", printed.String())
	}
	form := url.Values{"user_code": {code}, "username": {user}, "password": {password}}
	res, err := http.PostForm(s.h.IDP(t).Issuer()+devidp.DevicePath, form)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("device sign-in: %s", res.Status)
	}
	out := <-rest // all read before Wait closes the pipe
	err = cmd.Wait()
	if err != nil {
		t.Fatalf("flexctl login: %v\n%s%s", err, printed.String(), out)
	}
	if !strings.Contains(out, "logged in: context default") {
		t.Errorf("flexctl login said:\n%s%s", printed.String(), out)
	}
}

// saTest drives flexctl with service accounts' tokens of VDC red, made by
// the platform admin through the API, with no login and no context: a
// MEMBER account creates (--wait), lists and deletes a VM; a VIEWER
// account is refused a mutation (exit 1, FORBIDDEN) and changes nothing;
// the MEMBER account with VDC blue's header gets NOT_FOUND for blue's
// network; once deleted, its token is refused with the 401's reason.
func saTest(t *testing.T, s *stack, base []string, netID string) {
	type issued struct {
		ServiceAccount struct{ ID string }
		Token          string
	}
	create := func(name, role string) issued {
		var out issued
		s.h.GraphQL(t, "admin", "red", `mutation($n: String!, $r: VDCRole!) { createServiceAccount(input: {name: $n, role: $r}) {
		  serviceAccount { id } token } }`, map[string]any{"n": name, "r": role}).OK(t).Into(t, "createServiceAccount", &out)
		if !strings.HasPrefix(out.Token, "fpsa_") {
			t.Fatalf("account %s: token %.8q…", name, out.Token)
		}
		return out
	}
	ci, ro := create("ci", "MEMBER"), create("ro", "VIEWER")
	as := func(tok, vdc string) []string {
		return append(append([]string(nil), base...), flexctl.EnvVDC+"="+vdc, flexctl.EnvToken+"="+tok)
	}
	home := t.TempDir() // no config file: the environment only
	var vm struct{ ID, Name, Status string }
	decode(t, s.run(t, home, as(ci.Token, "red"), "vm", "create", "bot", "--zone", "alpha", "--image", "tiny", "--compute-profile", "small",
		"--storage-profile", "ssd", "--disk-gib", "4", "--user", "ubuntu", "--nic", netID, "--wait", "-o", "json"), &vm)
	if vm.ID == "" || vm.Name != "bot" || vm.Status != "RUNNING" {
		t.Fatalf("the account's VM: %+v", vm)
	}
	var vms []struct{ ID string }
	decode(t, s.run(t, home, as(ci.Token, "red"), "vm", "list", "-o", "json"), &vms)
	if !slices.ContainsFunc(vms, func(v struct{ ID string }) bool { return v.ID == vm.ID }) {
		t.Fatalf("the account's vm list: %+v", vms)
	}

	r := s.run(t, home, as(ro.Token, "red"), "network", "create", "ro", "--zone", "alpha", "--cidr", "10.9.0.0/24", "--gateway", "10.9.0.1")
	if r.code != flexctl.ExitRefused || !strings.HasPrefix(r.stderr, "error: ") || !strings.HasSuffix(strings.TrimSpace(r.stderr), "(FORBIDDEN)") {
		t.Errorf("a viewer account's mutation: %+v", r)
	}
	r = s.run(t, home, as(ro.Token, "red"), "vm", "delete", vm.ID)
	if r.code != flexctl.ExitRefused || !strings.Contains(r.stderr, "(FORBIDDEN)") {
		t.Errorf("a viewer account's vm delete: %+v", r)
	}

	var blueNet struct{ ID string }
	s.h.GraphQL(t, "bob", "blue", `mutation { createNetwork(input: {name: "bluelan", zone: "alpha", cidr: "10.2.0.0/24", gateway: "10.2.0.1"}) { id } }`, nil).
		OK(t).Into(t, "createNetwork", &blueNet)
	for _, args := range [][]string{{"network", "delete", blueNet.ID}, {"network", "list"}, {"vm", "get", vm.ID}} {
		r := s.run(t, home, as(ci.Token, "blue"), args...)
		if r.code != flexctl.ExitRefused || !strings.HasSuffix(strings.TrimSpace(r.stderr), "(NOT_FOUND)") {
			t.Errorf("the red account in blue: %v: %+v", args, r)
		}
	}
	s.h.GraphQL(t, "bob", "blue", `mutation($id: ID!) { deleteNetwork(id: $id) { id } }`, map[string]any{"id": blueNet.ID}).OK(t)

	var op struct{ State string }
	decode(t, s.run(t, home, as(ci.Token, "red"), "vm", "delete", vm.ID, "--wait", "-o", "json"), &op)
	if op.State != "SUCCEEDED" {
		t.Fatalf("the account's vm delete: %+v", op)
	}
	if r := s.run(t, home, as(ci.Token, "red"), "vm", "get", vm.ID); r.code != flexctl.ExitRefused || !strings.Contains(r.stderr, "(NOT_FOUND)") {
		t.Fatalf("vm get after the account's delete: %+v", r)
	}

	s.h.GraphQL(t, "admin", "red", `mutation($id: ID!) { deleteServiceAccount(id: $id) { id } }`, map[string]any{"id": ci.ServiceAccount.ID}).OK(t)
	poll.True(t, 10*time.Second, "the deleted account's token refused", func() bool {
		r = s.run(t, home, as(ci.Token, "red"), "vm", "list")
		return r.code != 0
	})
	if r.code != flexctl.ExitRefused || !strings.Contains(r.stderr, "does not exist") || !strings.Contains(r.stderr, "(UNAUTHENTICATED)") {
		t.Errorf("a deleted account's token: %+v", r)
	}
	s.h.GraphQL(t, "admin", "red", `mutation($id: ID!) { deleteServiceAccount(id: $id) { id } }`, map[string]any{"id": ro.ServiceAccount.ID}).OK(t)
}

// lbTest creates a load balancer on the VM vmID with flexctl lb create
// --wait, which follows it until the zone's replica reports its checked
// backend healthy (progress lines on stderr), lists and deletes it.
func lbTest(t *testing.T, s *stack, home, vmID string) {
	in := filepath.Join(t.TempDir(), "lb.yaml")
	spec := `name: shop
zone: alpha
pools:
- name: web
  healthCheck: {protocol: TCP}
  backends: [{vmId: ` + vmID + `, port: 80}]
listeners:
- {name: tcp, protocol: TCP, port: 80, pool: web}
`
	if err := os.WriteFile(in, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan result, 1)
	go func() { done <- s.run(t, home, nil, "lb", "create", "-f", in, "--wait", "-o", "json") }()
	var listed []struct{ ID, Name string }
	poll.True(t, 30*time.Second, "the balancer listed", func() bool {
		select {
		case r := <-done:
			t.Fatalf("lb create --wait ended before its backend was healthy: %+v", r)
		default:
		}
		decode(t, s.run(t, home, nil, "lb", "list", "-o", "json"), &listed)
		return len(listed) == 1
	})
	cfg := s.replica.Await(t, 30*time.Second, func(c lbconfig.Config) bool { return len(c.Balancers) == 1 })
	select {
	case r := <-done:
		t.Fatalf("lb create --wait ended before its backend was healthy: %+v", r)
	default:
	}
	b := cfg.Balancers[0]
	s.replica.SetBackends([]lbconfig.BackendStatus{{Balancer: b.ID, Pool: b.Pools[0].Name, Backend: b.Pools[0].Backends[0].ID, Healthy: true, Checked: time.Now()}})
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("lb create --wait did not end once its backend was healthy")
	}
	var lb struct {
		ID, Name, PublicAddress string
		Pools                   []struct{ Backends []struct{ Health string } }
	}
	decode(t, r, &lb)
	if lb.ID != listed[0].ID || lb.Name != "shop" || !strings.HasPrefix(lb.PublicAddress, "203.0.113.") || len(lb.Pools) != 1 || lb.Pools[0].Backends[0].Health != "HEALTHY" {
		t.Fatalf("lb create --wait: %+v", lb)
	}
	if !strings.Contains(r.stderr, "load balancer shop: 0/1 checked backends healthy") || !strings.Contains(r.stderr, "load balancer shop: 1/1 checked backends healthy") {
		t.Errorf("lb create --wait progress:\n%s", r.stderr)
	}
	if r := s.run(t, home, nil, "lb", "list"); r.code != 0 || !strings.HasPrefix(r.stdout, "ID ") || !strings.Contains(r.stdout, "tcp:80/TCP") || !strings.Contains(r.stdout, "web(1)") {
		t.Errorf("lb list: %+v", r)
	}
	if r := s.run(t, home, nil, "lb", "delete", lb.ID); r.code != 0 || !strings.Contains(r.stdout, lb.ID) {
		t.Fatalf("lb delete: %+v", r)
	}
	decode(t, s.run(t, home, nil, "lb", "list", "-o", "json"), &listed)
	if len(listed) != 0 {
		t.Fatalf("lb list after delete: %+v", listed)
	}
	s.replica.Await(t, 30*time.Second, func(c lbconfig.Config) bool { return len(c.Balancers) == 0 })
}

// kubeTest creates a managed Kubernetes cluster with flexctl, lists it,
// writes its kubeconfig to a file (mode 0600) once its control plane (the
// stand-in) is ready, and deletes it.
func kubeTest(t *testing.T, s *stack, home, netID string) {
	var kc struct{ ID, Name, Version string }
	decode(t, s.run(t, home, nil, "kubernetes", "create", "ops", "--zone", "alpha", "--version", "v1.37.2", "--network", netID, "-o", "json"), &kc)
	if kc.ID == "" || kc.Name != "ops" || kc.Version != "v1.37.2" {
		t.Fatalf("kubernetes create: %+v", kc)
	}
	var listed []struct {
		ID                string
		ControlPlaneReady bool
	}
	poll.True(t, time.Minute, "the control plane ready", func() bool {
		decode(t, s.run(t, home, nil, "kubernetes", "list", "-o", "json"), &listed)
		return len(listed) == 1 && listed[0].ID == kc.ID && listed[0].ControlPlaneReady
	})
	file := filepath.Join(t.TempDir(), "ops.kubeconfig")
	r := s.run(t, home, nil, "kubernetes", "kubeconfig", kc.ID, "-f", file)
	if r.code != 0 || !strings.HasPrefix(r.stderr, "kubeconfig written to "+file) {
		t.Fatalf("kubernetes kubeconfig -f: %+v", r)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The stand-in control plane's kubeconfig is a text naming the
	// credential the API issued: alice's, as a member.
	if st.Mode().Perm() != 0o600 || !strings.Contains(string(b), "user: oidc:alice\n") || !strings.Contains(string(b), "groups: cluster-admin\n") {
		t.Errorf("kubeconfig file (mode %v):\n%s", st.Mode().Perm(), b)
	}
	if r := s.run(t, home, nil, "kubernetes", "delete", kc.ID); r.code != 0 || !strings.Contains(r.stdout, kc.ID) {
		t.Fatalf("kubernetes delete: %+v", r)
	}
}

// backupTest backs VM vmID up with --wait (progress lines, the backup
// printed), lists it (the VDC's and the VM's), restores it with --wait as
// a new running VM, which it then deletes, checks that bob of VDC blue
// can neither restore nor delete it (NOT_FOUND), and deletes it.
func backupTest(t *testing.T, s *stack, home string, base []string, vmID string) {
	type backup struct {
		ID, VMName, Status string
		VM                 *struct{ ID string }
		SizeGiB            float64
		Description        *string
	}
	var b backup
	r := s.run(t, home, nil, "backup", "create", vmID, "--description", "before the upgrade", "--wait", "-o", "json")
	decode(t, r, &b)
	if b.ID == "" || b.Status != "SUCCEEDED" || b.VMName != "web" || b.VM == nil || b.VM.ID != vmID || b.SizeGiB <= 0 ||
		b.Description == nil || *b.Description != "before the upgrade" {
		t.Fatalf("backup create --wait: %+v", b)
	}
	if !strings.Contains(r.stderr, "create_backup RUNNING") || !strings.Contains(r.stderr, "create_backup SUCCEEDED") {
		t.Errorf("backup create --wait: no progress lines on stderr:\n%s", r.stderr)
	}
	for _, args := range [][]string{{"backup", "list", "-o", "json"}, {"backup", "list", "--vm", vmID, "-o", "json"}} {
		var listed []backup
		decode(t, s.run(t, home, nil, args...), &listed)
		if len(listed) != 1 || listed[0].ID != b.ID || listed[0].Status != "SUCCEEDED" {
			t.Fatalf("%v: %+v", args, listed)
		}
	}
	if r := s.run(t, home, nil, "backup", "list"); r.code != 0 || !strings.HasPrefix(r.stdout, "ID ") || !strings.Contains(r.stdout, b.ID) {
		t.Fatalf("backup list: %+v", r)
	}

	bob := append(base, flexctl.EnvVDC+"=blue", flexctl.EnvToken+"="+s.h.Token(t, "bob"))
	scheduleTest(t, s, home, bob, vmID)
	for _, args := range [][]string{{"backup", "restore", b.ID, "stolen"}, {"backup", "delete", b.ID}} {
		if r := s.run(t, t.TempDir(), bob, args...); r.code != flexctl.ExitRefused || !strings.HasSuffix(strings.TrimSpace(r.stderr), "(NOT_FOUND)") {
			t.Errorf("bob's %v: %+v", args, r)
		}
	}

	var v struct{ ID, Name, Status string }
	r = s.run(t, home, nil, "backup", "restore", b.ID, "web-copy", "--wait", "-o", "json")
	decode(t, r, &v)
	if v.ID == "" || v.ID == vmID || v.Name != "web-copy" || v.Status != "RUNNING" {
		t.Fatalf("backup restore --wait: %+v", v)
	}
	if !strings.Contains(r.stderr, "create_vm SUCCEEDED") {
		t.Errorf("backup restore --wait: no progress lines on stderr:\n%s", r.stderr)
	}
	var op struct{ State string }
	decode(t, s.run(t, home, nil, "vm", "delete", v.ID, "--wait", "-o", "json"), &op)
	if op.State != "SUCCEEDED" {
		t.Fatalf("vm delete of the restored VM: %+v", op)
	}

	if r := s.run(t, home, nil, "backup", "delete", b.ID); r.code != 0 || !strings.Contains(r.stdout, b.ID) {
		t.Fatalf("backup delete: %+v", r)
	}
	var listed []backup
	decode(t, s.run(t, home, nil, "backup", "list", "-o", "json"), &listed)
	if len(listed) != 0 {
		t.Fatalf("backup list after delete: %+v", listed)
	}
}

// scheduleTest sets VM vmID's backup schedule, shows it (table and JSON),
// has a bad schedule refused naming input.schedule and another VDC's
// user (env bob) refused NOT_FOUND for every schedule command, then
// removes it.
func scheduleTest(t *testing.T, s *stack, home string, bob []string, vmID string) {
	type schedule struct {
		Schedule             string
		KeepLast, KeepWeekly *int
		KeepDaily            *int
		State                string
	}
	var sc schedule
	decode(t, s.run(t, home, nil, "backup", "schedule", "set", vmID, "--schedule", "mon..fri 02:00", "--keep-last", "3", "--keep-weekly", "2", "-o", "json"), &sc)
	if sc.Schedule != "mon..fri 02:00" || sc.KeepLast == nil || *sc.KeepLast != 3 || sc.KeepWeekly == nil || *sc.KeepWeekly != 2 || sc.KeepDaily != nil || sc.State != "ACTIVE" {
		t.Fatalf("backup schedule set: %+v", sc)
	}
	sc = schedule{}
	decode(t, s.run(t, home, nil, "backup", "schedule", "show", vmID, "-o", "json"), &sc)
	if sc.Schedule != "mon..fri 02:00" || sc.KeepLast == nil || *sc.KeepLast != 3 || sc.State != "ACTIVE" {
		t.Fatalf("backup schedule show: %+v", sc)
	}
	if r := s.run(t, home, nil, "backup", "schedule", "show", vmID); r.code != 0 || !regexp.MustCompile(`(?m)^VM-ID +SCHEDULE .*\n`+vmID+` +mon\.\.fri 02:00 +3 +2 +ACTIVE`).MatchString(r.stdout) {
		t.Fatalf("backup schedule show (table): %+v", r)
	}

	r := s.run(t, home, nil, "backup", "schedule", "set", vmID, "--schedule", "whenever")
	if r.code != flexctl.ExitRefused || !strings.Contains(r.stderr, "input.schedule") || !strings.HasSuffix(strings.TrimSpace(r.stderr), "(BAD_USER_INPUT)") {
		t.Fatalf("a bad schedule: %+v", r)
	}
	for _, args := range [][]string{
		{"backup", "schedule", "set", vmID, "--schedule", "daily"},
		{"backup", "schedule", "show", vmID},
		{"backup", "schedule", "remove", vmID},
	} {
		if r := s.run(t, t.TempDir(), bob, args...); r.code != flexctl.ExitRefused || !strings.HasSuffix(strings.TrimSpace(r.stderr), "(NOT_FOUND)") {
			t.Errorf("bob's %v: %+v", args, r)
		}
	}
	sc = schedule{}
	decode(t, s.run(t, home, nil, "backup", "schedule", "show", vmID, "-o", "json"), &sc)
	if sc.Schedule != "mon..fri 02:00" {
		t.Fatalf("the schedule after the refused changes: %+v", sc)
	}

	if r := s.run(t, home, nil, "backup", "schedule", "remove", vmID); r.code != 0 || !strings.Contains(r.stdout, "(none)") {
		t.Fatalf("backup schedule remove: %+v", r)
	}
	if r := s.run(t, home, nil, "backup", "schedule", "show", vmID, "-o", "json"); r.code != 0 || strings.TrimSpace(r.stdout) != "null" {
		t.Fatalf("backup schedule show after remove: %+v", r)
	}
}

// diskTest attaches a disk to the running VM vmID, grows it, refuses to
// shrink it, detaches it, and resizes the VM to "large" with --reboot
// and --wait, checking each through flexctl's own reads.
func diskTest(t *testing.T, s *stack, home, vmID string) {
	type disk struct {
		Slot    string
		Boot    bool
		SizeGiB float64
	}
	var attached []disk
	decode(t, s.run(t, home, nil, "disk", "attach", vmID, "--size-gib", "2", "-o", "json"), &attached)
	if len(attached) != 1 || attached[0].Boot || attached[0].SizeGiB != 2 || attached[0].Slot == "" {
		t.Fatalf("disk attach: %+v", attached)
	}
	slot := attached[0].Slot
	var grown []disk
	decode(t, s.run(t, home, nil, "disk", "resize", vmID, slot, "--size-gib", "3", "-o", "json"), &grown)
	if len(grown) != 1 || grown[0].Slot != slot || grown[0].SizeGiB != 3 {
		t.Fatalf("disk resize: %+v", grown)
	}
	if r := s.run(t, home, nil, "disk", "resize", vmID, slot, "--size-gib", "1"); r.code != flexctl.ExitRefused || !strings.Contains(r.stderr, "(BAD_USER_INPUT)") {
		t.Errorf("a smaller disk: %+v", r)
	}
	var listed []disk
	decode(t, s.run(t, home, nil, "disk", "list", vmID, "-o", "json"), &listed)
	if len(listed) != 2 || !slices.ContainsFunc(listed, func(d disk) bool { return d.Slot == slot && d.SizeGiB == 3 }) {
		t.Fatalf("disk list: %+v", listed)
	}
	if r := s.run(t, home, nil, "disk", "list", vmID); r.code != 0 || !strings.HasPrefix(r.stdout, "SLOT ") || !strings.Contains(r.stdout, slot) {
		t.Errorf("disk list as a table: %+v", r)
	}
	var left []disk
	decode(t, s.run(t, home, nil, "disk", "detach", vmID, slot, "-o", "json"), &left)
	if len(left) != 1 || !left[0].Boot {
		t.Fatalf("disk detach left %+v", left)
	}

	var op struct{ State, Kind string }
	decode(t, s.run(t, home, nil, "vm", "resize", vmID, "--compute-profile", "large", "--reboot", "--wait", "-o", "json"), &op)
	if op.State != "SUCCEEDED" || op.Kind != "RESIZE_VM" {
		t.Fatalf("vm resize: %+v", op)
	}
	var v struct {
		Status    string
		Vcpus     int
		MemoryMiB int
	}
	decode(t, s.run(t, home, nil, "vm", "get", vmID, "-o", "json"), &v)
	if v.Vcpus != 2 || v.MemoryMiB != 1024 || v.Status != "RUNNING" {
		t.Fatalf("after vm resize: %+v", v)
	}
}
