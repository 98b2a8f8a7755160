package agent

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/flexplane/flexplane/pkg/pvesim"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// TestPBSEntryChecked: the agent forwards a new storage entry only when it
// is a pbs entry for backups on the server, datastore, user and
// fingerprint of one the operator made, in a namespace below its own, and
// carries no secret or key of its own.
func TestPBSEntryChecked(t *testing.T) {
	t.Parallel()
	fp := strings.TrimSuffix(strings.Repeat("ab:", 32), ":")
	bases := []pbsBase{
		{Storage: "local", Type: "dir"},
		{Storage: "pbs", Type: "pbs", Server: "pbs.example", Datastore: "tank", Username: "pve@pbs!fp", Fingerprint: fp, Namespace: "flexplane"},
		{Storage: "pbs2", Type: "pbs", Server: "pbs2.example", Datastore: "t2", Username: "u@pbs", Port: float64(8008)},
	}
	ok := func() map[string]string {
		return map[string]string{"storage": "pbs-v1", "type": "pbs", "server": "pbs.example", "datastore": "tank",
			"namespace": "flexplane/v1", "username": "pve@pbs!fp", "fingerprint": strings.ToUpper(fp), "content": "backup"}
	}
	if err := checkPBSEntry(ok(), bases); err != nil {
		t.Errorf("a VDC's entry below the operator's: %v", err)
	}
	root := map[string]string{"storage": "pbs2-v1", "type": "pbs", "server": "pbs2.example", "datastore": "t2", "namespace": "v1",
		"username": "u@pbs", "port": "8008"}
	if err := checkPBSEntry(root, bases); err != nil {
		t.Errorf("a VDC's entry below a datastore's root: %v", err)
	}
	for name, change := range map[string]func(map[string]string){
		"another server":         func(p map[string]string) { p["server"] = "evil.example" },
		"another datastore":      func(p map[string]string) { p["datastore"] = "other" },
		"another user":           func(p map[string]string) { p["username"] = "root@pam" },
		"another fingerprint":    func(p map[string]string) { p["fingerprint"] = strings.Repeat("00:", 31) + "00" },
		"another port":           func(p map[string]string) { p["port"] = "9000" },
		"a namespace beside":     func(p map[string]string) { p["namespace"] = "other/v1" },
		"the operator's own":     func(p map[string]string) { p["namespace"] = "flexplane" },
		"a namespace's prefix":   func(p map[string]string) { p["namespace"] = "flexplanex/v1" },
		"no namespace":           func(p map[string]string) { delete(p, "namespace") },
		"a directory storage":    func(p map[string]string) { p["type"] = "dir"; p["path"] = "/" },
		"disks":                  func(p map[string]string) { p["content"] = "images" },
		"its own password":       func(p map[string]string) { p["password"] = "x" },
		"its own encryption key": func(p map[string]string) { p["encryption-key"] = "autogen" },
	} {
		p := ok()
		change(p)
		if err := checkPBSEntry(p, bases); err == nil {
			t.Errorf("%s: allowed", name)
		}
	}
}

// TestPBSEntryThroughAgent: a VDC's entry the orchestrator asks for (JSON,
// as its client sends it, without a secret) is added on (simulated)
// Proxmox with the agent's secret; one on a server of the caller's own is
// refused before Proxmox sees it.
func TestPBSEntryThroughAgent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, p := startSim(t, pvesim.Config{Cluster: "lab", Nodes: 1})
	resp, err := p.do(ctx, http.MethodPost, "/storage", "", []byte("storage=pbs&type=pbs&server=pbs.example&datastore=tank&namespace=flexplane&username=pve%40pbs"),
		"application/x-www-form-urlencoded")
	if err != nil || resp.status != http.StatusOK {
		t.Fatalf("the operator's entry: %d %s %v", resp.status, resp.reason, err)
	}
	a := &Agent{cfg: Config{NodeName: "pve1", PBSPassword: "pbs-secret"}, pve: p, log: slog.New(slog.DiscardHandler)}
	req := &agentv1.ProxyRequest{Method: "POST", Path: "/storage", ContentType: "application/json",
		Body: []byte(`{"storage":"pbs-shop","type":"pbs","server":"pbs.example","datastore":"tank","namespace":"flexplane/shop","username":"pve@pbs","content":"backup"}`)}
	checked, err := a.pbsEntry(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var sent map[string]any
	if err := json.Unmarshal(checked.GetBody(), &sent); err != nil || sent["password"] != "pbs-secret" {
		t.Errorf("forwarded %s, %v: want the agent's secret added", checked.GetBody(), err)
	}
	resp, err = p.do(ctx, http.MethodPost, "/storage", "", checked.GetBody(), checked.GetContentType())
	if err != nil || resp.status != http.StatusOK {
		t.Fatalf("the VDC's entry: %d %s %v", resp.status, resp.reason, err)
	}
	var cfg struct {
		Data map[string]any `json:"data"`
	}
	resp, err = p.do(ctx, http.MethodGet, "/storage/pbs-shop", "", nil, "")
	if err != nil || json.Unmarshal(resp.body, &cfg) != nil || cfg.Data["namespace"] != "flexplane/shop" {
		t.Errorf("the VDC's entry on Proxmox: %s %v", resp.body, err)
	}
	evil := proto.Clone(req).(*agentv1.ProxyRequest)
	evil.Body = []byte(`{"storage":"pbs-evil","type":"pbs","server":"evil.example","datastore":"tank","namespace":"flexplane/shop","username":"pve@pbs"}`)
	if _, err := a.pbsEntry(ctx, evil); err == nil {
		t.Error("an entry on another server was allowed")
	}
}
