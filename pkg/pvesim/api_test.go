package pvesim_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

func TestAuthentication(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	for _, tc := range []struct{ name, token string }{
		{"missing", ""},
		{"wrong secret", testTokenID + "=nope"},
		{"unknown token", "root@pam!other=" + testTokenSecret},
		{"malformed", "garbage"},
	} {
		r := call(t, c, tc.token, http.MethodGet, "/version", nil)
		if r.status != http.StatusUnauthorized || len(r.body) != 0 {
			t.Errorf("%s: got %d %q, want 401 with an empty body", tc.name, r.status, r.body)
		}
	}
	if r := call(t, c, testToken, http.MethodGet, "/version", nil); r.status != http.StatusOK {
		t.Fatalf("valid token: %s", r.reason)
	}
	// A large body refused before it is read still gets its answer.
	big := url.Values{"description": {strings.Repeat("x", 4<<20)}}
	if r := call(t, c, "", http.MethodPost, "/nodes/pve1/qemu", big); r.status != http.StatusUnauthorized {
		t.Fatalf("unauthenticated large POST: %s", r.reason)
	}
	cl := pveClient(t, c, testTokenID, "wrong")
	if _, err := cl.Version(testCtx(t)); !proxmox.IsNotAuthorized(err) {
		t.Fatalf("go-proxmox with a wrong secret: %v, want not authorized", err)
	}
}

func TestUnknownPathIs501(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/no-such-thing", nil)
	if r.status != http.StatusNotImplemented || !strings.Contains(r.reason, "Method 'GET /nodes/pve1/no-such-thing' not implemented") {
		t.Fatalf("got %q", r.reason)
	}
	r = call(t, c, testToken, http.MethodDelete, "/version", nil)
	if r.status != http.StatusNotImplemented {
		t.Fatalf("DELETE /version: got %q, want 501", r.reason)
	}
}

func TestParameterValidation(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{
		"vmid": {"100"}, "cores": {"many"}, "bogus": {"1"}, "net0": {"virtio,bridge=vmbr0,tag=99999"},
	})
	if r.status != http.StatusBadRequest || !strings.HasSuffix(r.reason, "Parameter verification failed.") {
		t.Fatalf("got %q", r.reason)
	}
	for _, k := range []string{"cores", "bogus", "net0"} {
		if r.errors[k] == "" {
			t.Errorf("no error for %s in %v", k, r.errors)
		}
	}
	// Nothing changed: the VMID is still free.
	if r := call(t, c, testToken, http.MethodGet, "/cluster/nextid", url.Values{"vmid": {"100"}}); r.status != http.StatusOK {
		t.Fatalf("VMID 100 taken after a rejected create: %s", r.body)
	}
	r = call(t, c, testToken, http.MethodGet, "/cluster/resources", url.Values{"type": {"lxc"}})
	if r.status != http.StatusBadRequest || r.errors["type"] == "" {
		t.Fatalf("bad enum: %d %v", r.status, r.errors)
	}
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"name": {"x"}})
	if r.status != http.StatusBadRequest || r.errors["vmid"] == "" {
		t.Fatalf("missing vmid: %d %v", r.status, r.errors)
	}
}

func TestTokenPrivileges(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Nodes: 2})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	node, err := cl.Node(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	task, err := node.NewVirtualMachine(ctx, 100, proxmox.VirtualMachineOption{Name: "memory", Value: 1024})
	waitOK(t, ctx, task, err)

	const limited = "ops@pve!audit=ops-secret"
	c.AddToken(limited, map[string][]string{"/vms/100": {"VM.Audit"}})
	if r := call(t, c, limited, http.MethodGet, "/nodes/pve1/qemu/100/config", nil); r.status != http.StatusOK {
		t.Fatalf("audit token reading config: %s", r.reason)
	}
	r := call(t, c, limited, http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"memory": {"2048"}})
	if r.status != http.StatusForbidden || !strings.Contains(r.reason, "Permission check failed (/vms/100, VM.Config.Disk|") {
		t.Fatalf("audit token writing config: %q", r.reason)
	}
	// A token that may change options but not memory passes the schema's check and
	// fails the per-key one.
	const options = "ops@pve!options=ops-secret"
	c.AddToken(options, map[string][]string{"/vms": {"VM.Audit", "VM.Config.Options"}})
	r = call(t, c, options, http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"memory": {"2048"}, "name": {"renamed"}})
	if r.status != http.StatusForbidden || !strings.Contains(r.reason, "Permission check failed (/vms/100, VM.Config.Memory)") {
		t.Fatalf("options token writing memory: %q", r.reason)
	}
	if r := call(t, c, options, http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"name": {"renamed"}}); r.status != http.StatusOK {
		t.Fatalf("options token renaming: %q", r.reason)
	}
	if r := call(t, c, limited, http.MethodGet, "/nodes/pve1/qemu/101/config", nil); r.status != http.StatusForbidden {
		t.Fatalf("audit token reading another VM: %q", r.reason)
	}
	// The config is unchanged.
	r = call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", nil)
	if got := r.data.(map[string]any)["memory"]; got != "1024" {
		t.Fatalf("memory = %v after a forbidden write", got)
	}
	if got := r.data.(map[string]any)["name"]; got != "renamed" {
		t.Fatalf("name = %v after an allowed write", got)
	}
}
