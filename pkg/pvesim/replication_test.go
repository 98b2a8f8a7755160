package pvesim_test

import (
	"net/http"
	"net/url"
	"testing"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

// TestReplicationJobs: a replication job of a guest to another node is
// listed and read back; one to the guest's own node, of a guest that does
// not exist, with an id that is not <guest>-<jobnum> or twice is refused;
// a deleted job is gone.
func TestReplicationJobs(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "c", Nodes: 2})
	ctx := testCtx(t)
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"100"}, "memory": {"512"}})
	if r.status != http.StatusOK {
		t.Fatalf("create: %s", r.reason)
	}
	waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)

	for name, v := range map[string]url.Values{
		"the local node": {"id": {"100-0"}, "target": {"pve1"}, "type": {"local"}},
		"no such guest":  {"id": {"101-0"}, "target": {"pve2"}, "type": {"local"}},
		"no such node":   {"id": {"100-0"}, "target": {"pve9"}, "type": {"local"}},
		"a bad id":       {"id": {"100"}, "target": {"pve2"}, "type": {"local"}},
	} {
		if r := call(t, c, testToken, http.MethodPost, "/cluster/replication", v); r.status == http.StatusOK {
			t.Errorf("%s: created", name)
		}
	}
	job := url.Values{"id": {"100-0"}, "target": {"pve2"}, "type": {"local"}, "schedule": {"*/30"}}
	if r := call(t, c, testToken, http.MethodPost, "/cluster/replication", job); r.status != http.StatusOK {
		t.Fatalf("create the job: %s", r.reason)
	}
	if r := call(t, c, testToken, http.MethodPost, "/cluster/replication", job); r.status == http.StatusOK {
		t.Errorf("the same job twice: created")
	}
	r = call(t, c, testToken, http.MethodGet, "/cluster/replication", nil)
	jobs, _ := r.data.([]any)
	if r.status != http.StatusOK || len(jobs) != 1 {
		t.Fatalf("list: %d %v", r.status, r.data)
	}
	if j := jobs[0].(map[string]any); j["id"] != "100-0" || j["guest"] != float64(100) || j["target"] != "pve2" || j["schedule"] != "*/30" {
		t.Errorf("the job listed: %v", j)
	}
	if r := call(t, c, testToken, http.MethodGet, "/cluster/replication/100-0", nil); r.status != http.StatusOK || r.data.(map[string]any)["jobnum"] != float64(0) {
		t.Errorf("read: %d %v", r.status, r.data)
	}
	if r := call(t, c, testToken, http.MethodDelete, "/cluster/replication/100-0", nil); r.status != http.StatusOK {
		t.Fatalf("delete: %s", r.reason)
	}
	if r := call(t, c, testToken, http.MethodGet, "/cluster/replication", nil); len(r.data.([]any)) != 0 {
		t.Errorf("after the delete: %v", r.data)
	}
}
