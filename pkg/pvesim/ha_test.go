package pvesim_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

// haGuest is a guest as /cluster/resources lists it, with its HA state.
type haGuest struct{ node, status, hastate string }

func haGuests(t *testing.T, c *pvesim.Cluster) map[string]haGuest {
	t.Helper()
	r := call(t, c, testToken, http.MethodGet, "/cluster/resources", url.Values{"type": {"vm"}})
	out := map[string]haGuest{}
	for _, e := range r.data.([]any) {
		m := e.(map[string]any)
		hs, _ := m["hastate"].(string)
		out[fmt.Sprint(m["vmid"])] = haGuest{node: m["node"].(string), status: m["status"].(string), hastate: hs}
	}
	return out
}

// TestHAFenceAndRecover: HA resources started by the manager; a node offline is fenced
// after the fence delay and its HA guests on shared storage run again on the least loaded
// node their negative resource-affinity rule allows, while a guest with a local disk is
// left in "error"; the HA status lists the services; a guest in HA is not destroyed without
// purge, and purge removes it from HA.
func TestHAFenceAndRecover(t *testing.T) {
	t.Parallel()
	const delay = 300 * time.Millisecond
	c := startCluster(t, pvesim.Config{Cluster: "ha", Nodes: 3, Timing: pvesim.Timing{FenceDelay: delay}})
	create := func(vmid, node, disk, mem string) {
		r := call(t, c, testToken, http.MethodPost, "/nodes/"+node+"/qemu", url.Values{"vmid": {vmid}, "memory": {mem}, "scsi0": {disk}})
		if r.status != http.StatusOK {
			t.Fatalf("create %s: %s", vmid, r.reason)
		}
		poll.True(t, 10*time.Second, vmid+" created", func() bool { _, ok := haGuests(t, c)[vmid]; return ok && haGuests(t, c)[vmid].status == "stopped" })
	}
	create("100", "pve2", "shared:1", "1024")
	create("101", "pve1", "shared:1", "1024")
	create("102", "pve2", "local-lvm:1", "1024")
	// 103 is not in HA but holds the most memory: pve1 is the least loaded node, which
	// the negative rule with vm:101 forbids.
	create("103", "pve3", "local-lvm:1", "4096")
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve3/qemu/103/status/start", nil); r.status != http.StatusOK {
		t.Fatalf("start 103: %s", r.reason)
	}
	for _, sid := range []string{"vm:100", "101", "vm:102"} {
		if r := call(t, c, testToken, http.MethodPost, "/cluster/ha/resources", url.Values{"sid": {sid}, "state": {"started"}}); r.status != http.StatusOK {
			t.Fatalf("add %s to HA: %s", sid, r.reason)
		}
	}
	if r := call(t, c, testToken, http.MethodPost, "/cluster/ha/resources", url.Values{"sid": {"vm:100"}}); r.status == http.StatusOK {
		t.Error("a resource added twice")
	}
	if r := call(t, c, testToken, http.MethodPost, "/cluster/ha/resources", url.Values{"sid": {"vm:999"}}); r.status == http.StatusOK {
		t.Error("a resource of no guest added")
	}
	poll.True(t, 10*time.Second, "the HA guests started by the manager", func() bool {
		g := haGuests(t, c)
		return g["100"].status == "running" && g["101"].status == "running" && g["102"].status == "running" && g["103"].status == "running" && g["100"].hastate == "started"
	})
	rule := url.Values{"rule": {"apart"}, "type": {"resource-affinity"}, "affinity": {"negative"}, "resources": {"vm:100,vm:101"}}
	if r := call(t, c, testToken, http.MethodPost, "/cluster/ha/rules", rule); r.status != http.StatusOK {
		t.Fatalf("create the rule: %s", r.reason)
	}
	bad := url.Values{"rule": {"one"}, "type": {"resource-affinity"}, "affinity": {"negative"}, "resources": {"vm:100"}}
	if r := call(t, c, testToken, http.MethodPost, "/cluster/ha/rules", bad); r.status != http.StatusBadRequest {
		t.Errorf("a resource-affinity rule of one resource: %s", r.reason)
	}
	r := call(t, c, testToken, http.MethodGet, "/cluster/ha/rules", url.Values{"resource": {"vm:101"}})
	if rules := r.data.([]any); len(rules) != 1 || rules[0].(map[string]any)["affinity"] != "negative" {
		t.Errorf("rules of vm:101: %v", r.data)
	}

	c.SetNodeOnline("pve2", false)
	offline := time.Now()
	if g := haGuests(t, c)["100"]; g.status != "unknown" || g.hastate != "fence" {
		t.Errorf("on the offline node before the fence delay: %+v", g)
	}
	poll.True(t, 10*time.Second, "vm:100 recovered and running on pve3", func() bool {
		g := haGuests(t, c)["100"]
		return g.node == "pve3" && g.status == "running" && g.hastate == "started"
	})
	if since := time.Since(offline); since < delay {
		t.Errorf("recovered after %v, before the fence delay %v", since, delay)
	}
	if g := haGuests(t, c)["102"]; g.node != "pve2" || g.hastate != "error" {
		t.Errorf("the guest with a local disk: %+v, want left on pve2 in error", g)
	}
	r = call(t, c, testToken, http.MethodGet, "/cluster/ha/status/current", nil)
	var services, fenced []string
	for _, e := range r.data.([]any) {
		m := e.(map[string]any)
		if m["type"] == "service" {
			services = append(services, fmt.Sprintf("%s@%s:%s", m["sid"], m["node"], m["crm_state"]))
		}
	}
	if got := strings.Join(services, " "); got != "vm:100@pve3:started vm:101@pve1:started vm:102@pve2:error" {
		t.Errorf("services: %s", got)
	}
	r = call(t, c, testToken, http.MethodGet, "/cluster/ha/status/manager_status", nil)
	ns := r.data.(map[string]any)["manager_status"].(map[string]any)["node_status"].(map[string]any)
	for n, s := range ns {
		if s == "fence" {
			fenced = append(fenced, n)
		}
	}
	if len(fenced) != 1 || fenced[0] != "pve2" {
		t.Errorf("node status: %v", ns)
	}

	// A stop through the API is the manager's: the guest stays stopped.
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve3/qemu/100/status/stop", nil)
	if r.status != http.StatusOK || !strings.Contains(r.data.(string), ":hastop:") {
		t.Fatalf("stop: %s %v", r.reason, r.data)
	}
	poll.True(t, 10*time.Second, "vm:100 stopped", func() bool { return haGuests(t, c)["100"].status == "stopped" })
	if r := call(t, c, testToken, http.MethodGet, "/cluster/ha/resources/100", nil); r.data.(map[string]any)["state"] != "stopped" {
		t.Errorf("the requested state after a stop: %v", r.data)
	}
	if r := call(t, c, testToken, http.MethodDelete, "/nodes/pve3/qemu/100", nil); r.status == http.StatusOK {
		t.Error("a guest in HA destroyed without purge")
	}
	r = call(t, c, testToken, http.MethodDelete, "/nodes/pve3/qemu/100", url.Values{"purge": {"1"}})
	if r.status != http.StatusOK {
		t.Fatalf("destroy with purge: %s", r.reason)
	}
	poll.True(t, 10*time.Second, "vm:100 gone from HA", func() bool {
		return call(t, c, testToken, http.MethodGet, "/cluster/ha/resources/vm:100", nil).status != http.StatusOK
	})
	if r := call(t, c, testToken, http.MethodGet, "/cluster/ha/rules/apart", nil); r.status == http.StatusOK && strings.Contains(fmt.Sprint(r.data), "vm:100") {
		t.Errorf("the rule still names the purged resource: %v", r.data)
	}
}

// stoppedHAGuest creates guest 100 on pve1 with its disk on shared storage and makes it
// an HA resource with requested state stopped.
func stoppedHAGuest(t *testing.T, c *pvesim.Cluster) {
	t.Helper()
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"100"}, "scsi0": {"shared:1"}}); r.status != http.StatusOK {
		t.Fatalf("create: %s", r.reason)
	}
	poll.True(t, 10*time.Second, "100 created", func() bool { return haGuests(t, c)["100"].status == "stopped" })
	if r := call(t, c, testToken, http.MethodPost, "/cluster/ha/resources", url.Values{"sid": {"vm:100"}, "state": {"stopped"}}); r.status != http.StatusOK {
		t.Fatalf("add to HA: %s", r.reason)
	}
}

// TestHARequestsEndWhenQueued: as on Proxmox, an API start, stop or migration of an HA
// guest answers a hastart, hastop or hamigrate task that ends once the request is queued,
// before the guest has started, stopped or moved; the manager then does it on its next
// cycle, in its own qmstart, qmstop or qmigrate task. A strict node-affinity rule that
// leaves out a guest's node makes the manager move it.
func TestHARequestsEndWhenQueued(t *testing.T) {
	t.Parallel()
	// The cycle is long enough that the request's task has ended well before it.
	c := startCluster(t, pvesim.Config{Cluster: "haq", Nodes: 2, Timing: pvesim.Timing{HACycle: 500 * time.Millisecond}})
	stoppedHAGuest(t, c)
	// request sends an API request whose answer is a task of type typ, which must have
	// ended OK at once, with the guest not yet in its new state.
	request := func(path, typ, want string) {
		t.Helper()
		var form url.Values
		if typ == "hamigrate" {
			form = url.Values{"target": {"pve2"}, "online": {"1"}}
		}
		r := call(t, c, testToken, http.MethodPost, path, form)
		if r.status != http.StatusOK || !strings.Contains(r.data.(string), ":"+typ+":") {
			t.Fatalf("%s: %s %v", path, r.reason, r.data)
		}
		upid := r.data.(string)
		node := strings.Split(upid, ":")[1]
		poll.True(t, 10*time.Second, typ+" task ended", func() bool {
			st := call(t, c, testToken, http.MethodGet, "/nodes/"+node+"/tasks/"+upid+"/status", nil).data.(map[string]any)
			return st["status"] == "stopped" && st["exitstatus"] == "OK"
		})
		if log := taskLog(t, c, node, upid); !strings.Contains(log, "Requesting HA") {
			t.Errorf("%s log: %s", typ, log)
		}
		if g := haGuests(t, c)["100"]; want == g.status+"@"+g.node {
			t.Fatalf("%s: the guest was %s before the manager's cycle", typ, want)
		}
		poll.True(t, 10*time.Second, "guest "+want, func() bool { g := haGuests(t, c)["100"]; return g.status+"@"+g.node == want })
	}
	request("/nodes/pve1/qemu/100/status/start", "hastart", "running@pve1")
	request("/nodes/pve1/qemu/100/migrate", "hamigrate", "running@pve2")
	request("/nodes/pve2/qemu/100/status/shutdown", "hastop", "stopped@pve2")

	// A strict node-affinity rule that leaves out the guest's node: the manager moves
	// it to a node the rule names on its next cycle.
	if r := call(t, c, testToken, http.MethodPost, "/cluster/ha/rules", url.Values{"rule": {"only-pve1"}, "type": {"node-affinity"},
		"resources": {"vm:100"}, "nodes": {"pve1"}, "strict": {"1"}}); r.status != http.StatusOK {
		t.Fatalf("add the rule: %s", r.reason)
	}
	poll.True(t, 10*time.Second, "guest moved to pve1", func() bool { g := haGuests(t, c)["100"]; return g.status+"@"+g.node == "stopped@pve1" })
}

// TestHAStartRetriedWhileLocked: as Proxmox's CRM and LRM, the manager keeps a service's
// requested state and drives it there every round: a start queued while the guest is
// locked (a backup, a clone, a create) is not lost but done once the lock is gone.
func TestHAStartRetriedWhileLocked(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "halock", Nodes: 1, Timing: pvesim.Timing{HACycle: 50 * time.Millisecond}})
	stoppedHAGuest(t, c)
	if r := call(t, c, testToken, http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"lock": {"backup"}}); r.status != http.StatusOK {
		t.Fatalf("lock: %s", r.reason)
	}
	r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/status/start", nil)
	if r.status != http.StatusOK || !strings.Contains(r.data.(string), ":hastart:") {
		t.Fatalf("start: %s %v", r.reason, r.data)
	}
	// service reads the service's states in the HA status.
	service := func() string {
		for _, e := range call(t, c, testToken, http.MethodGet, "/cluster/ha/status/current", nil).data.([]any) {
			if m := e.(map[string]any); m["sid"] == "vm:100" {
				return fmt.Sprintf("%s/%s", m["request_state"], m["crm_state"])
			}
		}
		return ""
	}
	// The manager took the request (the service is started) and met the lock.
	poll.True(t, 10*time.Second, "the request taken by the manager", func() bool { return service() == "started/started" })
	if g := haGuests(t, c)["100"]; g.status != "stopped" {
		t.Fatalf("the locked guest is %s", g.status)
	}
	if r := call(t, c, testToken, http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"delete": {"lock"}, "skiplock": {"1"}}); r.status != http.StatusOK {
		t.Fatalf("unlock: %s", r.reason)
	}
	poll.True(t, 10*time.Second, "the guest started once unlocked", func() bool {
		g := haGuests(t, c)["100"]
		return g.status == "running" && g.hastate == "started"
	})
	if got := service(); got != "started/started" {
		t.Errorf("the service: %s, want started/started", got)
	}
}
