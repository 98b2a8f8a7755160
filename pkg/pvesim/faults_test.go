package pvesim_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

// TestFaultsOnDemand: a fault posted to the control handler applies to the
// requests it matches, as many times as it says, then they answer again; a
// lock timeout answers what Proxmox does (500, "can't lock file
// '/var/lock/qemu-server/lock-N.conf' - got timeout") after its delay and
// changes nothing; a bad fault is refused.
func TestFaultsOnDemand(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 1})
	ctl := httptest.NewServer(c.ControlHandler())
	t.Cleanup(ctl.Close)
	post := func(body string) int {
		t.Helper()
		resp, err := http.Post(ctl.URL+"/faults", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	create := url.Values{"vmid": {"100"}, "name": {"a"}}
	if code := post(`{"method": "post", "path": "/nodes/{node}/qemu", "lockTimeout": true, "delay": "200ms", "count": 2}`); code != http.StatusNoContent {
		t.Fatalf("post fault: %d", code)
	}
	for range 2 {
		began := time.Now()
		r := call(t, c, testToken, "POST", "/nodes/pve1/qemu", create)
		if r.status != 500 || !strings.Contains(r.reason, "can't lock file") || !strings.Contains(r.reason, "got timeout") {
			t.Fatalf("with a lock timeout injected: %d %q", r.status, r.reason)
		}
		if d := time.Since(began); d < 200*time.Millisecond {
			t.Errorf("answered after %v, before the fault's delay", d)
		}
	}
	if r := call(t, c, testToken, "GET", "/nodes/pve1/qemu", nil); r.status != 200 || len(r.data.([]any)) != 0 {
		t.Fatalf("the refused creates made guests: %d %v", r.status, r.data)
	}
	if r := call(t, c, testToken, "POST", "/nodes/pve1/qemu", create); r.status != 200 {
		t.Fatalf("after the fault's count: %d %q", r.status, r.reason)
	}
	// A config write of guest 100 that times out names its lock file.
	if code := post(`{"path": "/nodes/*/qemu/*/config", "lockTimeout": true, "count": 1}`); code != http.StatusNoContent {
		t.Fatalf("post fault: %d", code)
	}
	r := call(t, c, testToken, "POST", "/nodes/pve1/qemu/100/config", url.Values{"cores": {"2"}})
	if want := pvesim.LockTimeoutMessage("100"); r.status != 500 || !strings.Contains(r.reason, want) {
		t.Errorf("config with a lock timeout: %d %q, want 500 %q", r.status, r.reason, want)
	}
	// 500s, then removed.
	if code := post(`{"method": "GET", "path": "/cluster/resources", "status": 500, "message": "boom", "count": 100}`); code != http.StatusNoContent {
		t.Fatalf("post fault: %d", code)
	}
	if r := call(t, c, testToken, "GET", "/cluster/resources", nil); r.status != 500 || !strings.Contains(r.reason, "boom") {
		t.Errorf("with a 500 injected: %d %q", r.status, r.reason)
	}
	post(`{"method": "GET", "path": "/cluster/resources", "count": 0}`)
	if r := call(t, c, testToken, "GET", "/cluster/resources", nil); r.status != 200 {
		t.Errorf("after the fault was removed: %d %q", r.status, r.reason)
	}
	for _, bad := range []string{`{"path": "/x", "delay": "soon", "count": 1}`, `{"count": 1}`, `{"path": "/x", "colour": 1}`, `[`} {
		if code := post(bad); code != http.StatusBadRequest {
			t.Errorf("fault %s: %d, want 400", bad, code)
		}
	}
}
