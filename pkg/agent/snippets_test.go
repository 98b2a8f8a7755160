package agent

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/agent/privhelper"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// TestSnippets: the agent writes a VM's cloud-init user-data into a
// snippets storage of its (simulated) node, which Proxmox then lists, a
// VM's cicustom names and cloudinit/dump reads; delete removes it. Bad
// names, traversal and oversize data are INVALID_ARGUMENT, a storage
// without snippets FAILED_PRECONDITION, and none of them writes a file.
// All of it in the agent's own process, and again through a privileged
// helper on its socket, whose snippet directory is the node's local
// storage's.
func TestSnippets(t *testing.T) {
	t.Parallel()
	t.Run("in process", func(t *testing.T) { t.Parallel(); testSnippets(t, false) })
	t.Run("through the helper", func(t *testing.T) { t.Parallel(); testSnippets(t, true) })
}

func testSnippets(t *testing.T, viaHelper bool) {
	root := t.TempDir()
	sim, p := startSim(t, pvesim.Config{Cluster: "lab", Nodes: 2, FileRoot: root})
	ctx := t.Context()
	call := func(method, path, form string) pveResponse {
		t.Helper()
		resp, err := p.do(ctx, method, path, "", []byte(form), "application/x-www-form-urlencoded")
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	get := func(path, query string, v any) error {
		t.Helper()
		resp, err := p.do(ctx, http.MethodGet, path, query, nil, "")
		if err != nil {
			return err
		}
		if resp.status != http.StatusOK {
			return fmt.Errorf("GET %s: %d %s", path, resp.status, resp.reason)
		}
		return decodeData(resp.body, v)
	}
	svc := &service{a: &Agent{cfg: Config{NodeName: "pve1", FileRoot: sim.NodeRoot("pve1")}, pve: p, log: slog.New(slog.DiscardHandler)}}
	if viaHelper {
		svc.a.helper = startHelper(t, privhelper.Config{SnippetDirs: []string{filepath.Join(sim.NodeRoot("pve1"), "var", "lib", "vz", "snippets")}})
	}

	// Snippets are not allowed on local until the operator says so.
	if _, err := svc.WriteSnippet(ctx, &agentv1.WriteSnippetRequest{Storage: "local", Name: "a.yaml", Data: []byte("x")}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("snippet on a storage without snippets content: %v, want FailedPrecondition", err)
	}
	if r := call(http.MethodPut, "/storage/local", "content="+url.QueryEscape("backup,import,iso,vztmpl,snippets")); r.status != http.StatusOK {
		t.Fatalf("enable snippets on local: %d %s", r.status, r.reason)
	}

	userData := "#cloud-config\nruncmd:\n  - kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef\n"
	w, err := svc.WriteSnippet(ctx, &agentv1.WriteSnippetRequest{Storage: "local", Name: "vm-100-user.yaml", Data: []byte(userData)})
	if err != nil {
		t.Fatal(err)
	}
	if w.GetVolume() != "local:snippets/vm-100-user.yaml" {
		t.Fatalf("volume %q", w.GetVolume())
	}
	var content []struct {
		VolID  string `json:"volid"`
		Format string `json:"format"`
		Size   int64  `json:"size"`
	}
	if err := get("/nodes/pve1/storage/local/content", "content=snippets", &content); err != nil {
		t.Fatal(err)
	}
	if len(content) != 1 || content[0].VolID != w.GetVolume() || content[0].Format != "snippet" || content[0].Size != int64(len(userData)) {
		t.Fatalf("snippets of local on pve1: %+v", content)
	}
	// local is the node's own: pve2 does not have it.
	var other []map[string]any
	if err := get("/nodes/pve2/storage/local/content", "content=snippets", &other); err != nil || len(other) != 0 {
		t.Fatalf("snippets of local on pve2: %v %v", other, err)
	}

	// A VM names it in cicustom; its cloud-init user-data is the snippet.
	if r := call(http.MethodPost, "/nodes/pve1/qemu", "vmid=100&name=w-1"); r.status != http.StatusOK {
		t.Fatalf("create VM: %d %s", r.status, r.reason)
	}
	// The create is a task: the VM is locked until it ends.
	poll.Until(t, 30*time.Second, "the VM's create task ended", func() error {
		var cfg map[string]any
		if err := get("/nodes/pve1/qemu/100/config", "", &cfg); err != nil {
			return err
		}
		if lock, ok := cfg["lock"]; ok {
			return fmt.Errorf("locked (%v)", lock)
		}
		return nil
	})
	for _, bad := range []string{"user=local:snippets/missing.yaml", "user=local-lvm:snippets/vm-100-user.yaml", "users=" + w.GetVolume(), "user=local:iso/vm-100-user.yaml"} {
		if r := call(http.MethodPut, "/nodes/pve1/qemu/100/config", "cicustom="+url.QueryEscape(bad)); r.status != http.StatusBadRequest {
			t.Fatalf("cicustom %q: %d %s, want 400", bad, r.status, r.reason)
		}
	}
	if r := call(http.MethodPut, "/nodes/pve1/qemu/100/config", "cicustom="+url.QueryEscape("user="+w.GetVolume())); r.status != http.StatusOK {
		t.Fatalf("cicustom: %d %s", r.status, r.reason)
	}
	var dump string
	if err := get("/nodes/pve1/qemu/100/cloudinit/dump", "type=user", &dump); err != nil || dump != userData {
		t.Fatalf("cloud-init user-data %q (%v), want the snippet", dump, err)
	}

	files := func() []string {
		t.Helper()
		var out []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				out = append(out, path)
			}
			return nil
		})
		slices.Sort(out)
		return out
	}
	before := files()
	for _, tc := range []struct {
		storage, name string
		size          int
		want          codes.Code
	}{
		{"local", "", 1, codes.InvalidArgument},
		{"local", "../../../etc/passwd", 1, codes.InvalidArgument},
		{"local", "a/b.yaml", 1, codes.InvalidArgument},
		{"local", "..", 1, codes.InvalidArgument},
		{"local", "a..yaml", 1, codes.InvalidArgument},
		{"local", ".hidden", 1, codes.InvalidArgument},
		{"local", "a\x00b", 1, codes.InvalidArgument},
		{"local", strings.Repeat("a", 129), 1, codes.InvalidArgument},
		{"local", "big.yaml", MaxSnippetBytes + 1, codes.InvalidArgument},
		{"../local", "a.yaml", 1, codes.InvalidArgument},
		{"local-lvm", "a.yaml", 1, codes.FailedPrecondition},
		{"shared", "a.yaml", 1, codes.FailedPrecondition},
		{"nosuch", "a.yaml", 1, codes.NotFound},
	} {
		_, err := svc.WriteSnippet(ctx, &agentv1.WriteSnippetRequest{Storage: tc.storage, Name: tc.name, Data: make([]byte, tc.size)})
		if status.Code(err) != tc.want {
			t.Errorf("write %s:%q (%d bytes): %v, want %s", tc.storage, tc.name, tc.size, err, tc.want)
		}
		if _, err := svc.DeleteSnippet(ctx, &agentv1.DeleteSnippetRequest{Storage: tc.storage, Name: tc.name}); tc.size == 1 && status.Code(err) != tc.want {
			t.Errorf("delete %s:%q: %v, want %s", tc.storage, tc.name, err, tc.want)
		}
	}
	if after := files(); !slices.Equal(before, after) {
		t.Fatalf("refused calls changed files: %v -> %v", before, after)
	}

	d, err := svc.DeleteSnippet(ctx, &agentv1.DeleteSnippetRequest{Storage: "local", Name: "vm-100-user.yaml"})
	if err != nil || !d.GetDeleted() {
		t.Fatalf("delete: %v %v", d, err)
	}
	if err := get("/nodes/pve1/storage/local/content", "content=snippets", &content); err != nil || len(content) != 0 {
		t.Fatalf("snippets after delete: %+v %v", content, err)
	}
	if d, err := svc.DeleteSnippet(ctx, &agentv1.DeleteSnippetRequest{Storage: "local", Name: "vm-100-user.yaml"}); err != nil || d.GetDeleted() {
		t.Fatalf("second delete: %v %v", d, err)
	}
}
