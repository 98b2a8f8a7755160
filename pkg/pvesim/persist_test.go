package pvesim_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

// canonical renders an API answer with every list sorted, so answers built from maps
// compare regardless of order.
func canonical(v any) string {
	var norm func(v any) any
	norm = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			out := make(map[string]any, len(v))
			for k, e := range v {
				out[k] = norm(e)
			}
			return out
		case []any:
			items := make([]string, len(v))
			for i, e := range v {
				b, _ := json.Marshal(norm(e))
				items[i] = string(b)
			}
			sort.Strings(items)
			out := make([]any, len(items))
			for i, s := range items {
				out[i] = json.RawMessage(s)
			}
			return out
		}
		return v
	}
	b, _ := json.Marshal(norm(v))
	return string(b)
}

// observe reads everything a user could see of the model that does not move with the
// clock (configs with digests, pending changes, SDN, IPAM, pools, storage, tasks).
func observe(t *testing.T, c *pvesim.Cluster, extra ...string) map[string]string {
	t.Helper()
	paths := append([]string{
		"/nodes/pve1/qemu/100/config", "/nodes/pve1/qemu/100/pending", "/nodes/pve2/qemu/101/config",
		"/nodes/pve1/qemu/9000/config",
		"/cluster/sdn/zones?pending=1", "/cluster/sdn/vnets?pending=1", "/cluster/sdn/vnets?running=1",
		"/cluster/sdn/vnets/vdc1/subnets?pending=1", "/cluster/sdn/ipams/pve/status",
		"/pools", "/cluster/nextid", "/nodes/pve1/network", "/nodes/pve2/network",
		"/nodes/pve1/storage/local-lvm/content", "/nodes/pve2/storage/local-lvm/content",
		"/nodes/pve1/storage/shared/content", "/nodes/pve1/storage/local/content",
		"/nodes/pve1/tasks?limit=1000", "/nodes/pve2/tasks?limit=1000",
	}, extra...)
	out := map[string]string{}
	for _, p := range paths {
		path, query, _ := strings.Cut(p, "?")
		form, _ := url.ParseQuery(query)
		r := call(t, c, testToken, http.MethodGet, path, form)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %s %s", p, r.reason, r.body)
		}
		out[p] = canonical(r.data)
	}
	return out
}

func vmStatus(t *testing.T, c *pvesim.Cluster, node string, vmid int) string {
	t.Helper()
	r := call(t, c, testToken, http.MethodGet, fmt.Sprintf("/nodes/%s/qemu/%d/status/current", node, vmid), nil)
	if r.status != http.StatusOK {
		t.Fatalf("status of %d: %s", vmid, r.reason)
	}
	return r.data.(map[string]any)["status"].(string)
}

func TestStateFileSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := pvesim.Config{
		Cluster: "lab", Nodes: 2, StateFile: filepath.Join(dir, "state", "pvesim-state.json"), CertDir: filepath.Join(dir, "certs"),
		// shutdowns take an hour, so one is still running when the simulator stops
		Timing: pvesim.Timing{Shutdown: time.Hour},
	}
	c := startCluster(t, cfg)
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)

	sdnVnet(t, c, "tenants", "vdc1")
	for _, step := range []struct {
		method, path string
		form         url.Values
	}{
		{http.MethodPost, "/cluster/sdn/vnets", url.Values{"vnet": {"vdc2"}, "zone": {"tenants"}, "alias": {"not applied yet"}}},
		{http.MethodPost, "/pools", url.Values{"poolid": {"tenant-a"}, "comment": {"Tenant A"}}},
	} {
		if r := call(t, c, testToken, step.method, step.path, step.form); r.status != http.StatusOK {
			t.Fatalf("%s %s: %s", step.method, step.path, r.reason)
		}
	}
	makeTemplate(t, cl, 9000)
	web := newVM(t, cl, "pve1", 100,
		proxmox.VirtualMachineOption{Name: "name", Value: "web-1"},
		proxmox.VirtualMachineOption{Name: "pool", Value: "tenant-a"},
		proxmox.VirtualMachineOption{Name: "agent", Value: "1"},
		proxmox.VirtualMachineOption{Name: "net1", Value: "virtio,bridge=vdc1"},
		proxmox.VirtualMachineOption{Name: "ipconfig1", Value: "ip=dhcp"},
		proxmox.VirtualMachineOption{Name: "tags", Value: "tenant-a;vdc-1"},
	)
	task, err := web.Start(ctx)
	waitOK(t, ctx, task, err)
	// memory is not hot-pluggable: the change waits for the next boot
	task, err = web.Config(ctx, proxmox.VirtualMachineOption{Name: "memory", Value: 2048})
	waitOK(t, ctx, task, err)
	n1, err := cl.Node(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	src, err := n1.VirtualMachine(ctx, 9000)
	if err != nil {
		t.Fatal(err)
	}
	_, task, err = src.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 101, Name: "db-1", Target: "pve2"})
	waitOK(t, ctx, task, err)
	if r := call(t, c, testToken, http.MethodPost, "/cluster/sdn/vnets/vdc1/ips", url.Values{"zone": {"tenants"}, "ip": {"10.50.0.42"}, "mac": {"bc:24:11:00:00:42"}}); r.status != http.StatusOK {
		t.Fatalf("IP mapping: %s", r.reason)
	}
	// A snapshot, an uploaded file and a protected guest.
	task, err = web.NewSnapshot(ctx, "before-upgrade")
	waitOK(t, ctx, task, err)
	local, err := n1.Storage(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	task, err = local.UploadString("iso", "seed.iso", "cloud-init seed")
	waitOK(t, ctx, task, err)
	seedSum := c.VolumeSHA256ForTest("pve1", "local:iso/seed.iso")
	if r := call(t, c, testToken, http.MethodPut, "/nodes/pve2/qemu/101/config", url.Values{"protection": {"1"}}); r.status != http.StatusOK {
		t.Fatalf("protect: %s", r.reason)
	}
	shutdown, err := web.Shutdown(ctx)
	if err != nil {
		t.Fatal(err)
	}
	addrs := agentAddresses(t, cl, 100)
	snapshots := []string{"/nodes/pve1/qemu/100/snapshot", "/nodes/pve1/qemu/100/snapshot/before-upgrade/config"}
	before := observe(t, c, snapshots...)
	identity, fp := c.Identity(), c.Fingerprint()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	c2 := startCluster(t, cfg)
	if c2.Identity() != identity || c2.Fingerprint() != fp {
		t.Fatal("cluster identity changed across the restart")
	}
	// The shutdown the restart interrupted is history now, like a worker lost in a reboot.
	r := call(t, c2, testToken, http.MethodGet, "/nodes/pve1/tasks/"+string(shutdown.UPID)+"/status", nil)
	if st := r.data.(map[string]any); st["status"] != "stopped" || st["exitstatus"] != "unexpected status" {
		t.Fatalf("interrupted task after the restart: %v", st)
	}
	after := observe(t, c2, snapshots...)
	var tasks []any
	_ = json.Unmarshal([]byte(after["/nodes/pve1/tasks?limit=1000"]), &tasks)
	kept := []any{}
	for _, e := range tasks {
		if e.(map[string]any)["upid"] != string(shutdown.UPID) {
			kept = append(kept, e)
		}
	}
	if len(kept) != len(tasks)-1 {
		t.Fatalf("the interrupted shutdown is not in the task history: %v", tasks)
	}
	after["/nodes/pve1/tasks?limit=1000"] = canonical(kept)
	for p, want := range before {
		if after[p] != want {
			t.Errorf("GET %s after the restart:\n got %s\nwant %s", p, after[p], want)
		}
	}
	if s := vmStatus(t, c2, "pve1", 100); s != "running" {
		t.Fatalf("VM 100 is %s after the restart, want running", s)
	}
	if got := c2.VolumeSHA256ForTest("pve1", "local:iso/seed.iso"); got == "" || got != seedSum {
		t.Fatalf("uploaded content after the restart: sha256 %q, want %q", got, seedSum)
	}
	if r := call(t, c2, testToken, http.MethodDelete, "/nodes/pve2/qemu/101", nil); r.reason != "500 can't remove VM 101 - protection mode enabled" {
		t.Fatalf("deleting the protected VM after the restart: %s", r.reason)
	}
	cl2 := pveClient(t, c2, testTokenID, testTokenSecret)
	if got := agentAddresses(t, cl2, 100); got != addrs {
		t.Fatalf("guest addresses after the restart: %s, want %s", got, addrs)
	}
	// The restarted cluster goes on from where it was: the next VMID and a new task.
	newVM(t, cl2, "pve2", 102)
	if r := call(t, c2, testToken, http.MethodGet, "/cluster/nextid", nil); r.data != "103" {
		t.Fatalf("nextid after creating 102: %v", r.data)
	}
}

// agentAddresses lists a running guest's IPv4 addresses as its agent reports them.
func agentAddresses(t *testing.T, cl *proxmox.Client, vmid int) string {
	t.Helper()
	ctx := testCtx(t)
	n, err := cl.Node(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	vm, err := n.VirtualMachine(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	ifaces, err := vm.AgentGetNetworkIFaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, i := range ifaces {
		for _, a := range i.IPAddresses {
			if a.IPAddressType == "ipv4" {
				out = append(out, i.Name+"="+a.IPAddress)
			}
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatalf("VM %d reports no IPv4 address", vmid)
	}
	return strings.Join(out, " ")
}

func TestStateFileInterruptedCloneIsRemoved(t *testing.T) {
	t.Parallel()
	cfg := pvesim.Config{Cluster: "lab", StateFile: filepath.Join(t.TempDir(), "state.json"), Timing: pvesim.Timing{PerGiB: time.Hour}}
	c := startCluster(t, cfg)
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	n, err := cl.Node(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	// no disk at create (which would take PerGiB time); one added afterwards
	task, err := n.NewVirtualMachine(ctx, 100, proxmox.VirtualMachineOption{Name: "memory", Value: 512})
	waitOK(t, ctx, task, err)
	vm, err := n.VirtualMachine(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	task, err = vm.Config(ctx, proxmox.VirtualMachineOption{Name: "scsi0", Value: "local-lvm:4"})
	waitOK(t, ctx, task, err)
	_, clone, err := vm.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 101, Full: proxmox.IntOrBool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/101/config", nil); r.data.(map[string]any)["lock"] != "clone" {
		t.Fatalf("clone target while cloning: %v", r.data)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := startCluster(t, cfg)
	if r := call(t, c2, testToken, http.MethodGet, "/nodes/pve1/qemu/101/config", nil); r.status != http.StatusInternalServerError {
		t.Fatalf("half-made clone target after the restart: %d %v", r.status, r.data)
	}
	r := call(t, c2, testToken, http.MethodGet, "/nodes/pve1/tasks/"+string(clone.UPID)+"/status", nil)
	if st := r.data.(map[string]any); st["exitstatus"] != "unexpected status" {
		t.Fatalf("interrupted clone task: %v", st)
	}
	if r := call(t, c2, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", nil); r.data.(map[string]any)["lock"] != nil {
		t.Fatalf("source VM after the restart: %v", r.data)
	}
}

func TestStateFileRejectsBadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	c, err := pvesim.Start(pvesim.Config{Cluster: "lab", Nodes: 2, StateFile: good, Tokens: []string{testToken}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	valid, err := os.ReadFile(good)
	if err != nil {
		t.Fatalf("no state file after Close: %v", err)
	}
	for _, tc := range []struct {
		name, content string
		cfg           pvesim.Config
		want          string
	}{
		{"truncated", string(valid[:len(valid)/2]), pvesim.Config{Cluster: "lab", Nodes: 2}, "corrupt"},
		{"not json", "hello", pvesim.Config{Cluster: "lab", Nodes: 2}, "corrupt"},
		{"bad value tag", strings.Replace(string(valid), `["s",`, `["q",`, 1), pvesim.Config{Cluster: "lab", Nodes: 2}, "unknown value tag"},
		{"other version", strings.Replace(string(valid), `"version":1`, `"version":99`, 1), pvesim.Config{Cluster: "lab", Nodes: 2}, "format version 99"},
		{"other cluster", string(valid), pvesim.Config{Cluster: "prod", Nodes: 2}, `state of cluster "lab"`},
		{"fewer nodes", string(valid), pvesim.Config{Cluster: "lab", Nodes: 1}, `node "pve2"`},
	} {
		path := filepath.Join(dir, tc.name+".json")
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		tc.cfg.StateFile, tc.cfg.Tokens = path, []string{testToken}
		c, err := pvesim.Start(tc.cfg)
		if err == nil {
			c.Close()
			t.Errorf("%s: started", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s and saying %q", tc.name, err, path, tc.want)
		}
		if b, _ := os.ReadFile(path); string(b) != tc.content {
			t.Errorf("%s: the refused file was changed", tc.name)
		}
	}
}

// TestStateFileConcurrentMutations creates guests and pools from many callers while the
// state is saved, then checks a restart sees every one of them, and that bursts were
// coalesced into few writes.
func TestStateFileConcurrentMutations(t *testing.T) {
	t.Parallel()
	cfg := pvesim.Config{Cluster: "lab", Nodes: 2, StateFile: filepath.Join(t.TempDir(), "state.json")}
	c := startCluster(t, cfg)
	hc := httpClient(t, c)
	cl := proxmox.NewClient(c.URL()+"/api2/json", proxmox.WithHTTPClient(hc), proxmox.WithAPIToken(testTokenID, testTokenSecret))
	ctx := testCtx(t)
	const callers, each = 8, 15
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node, err := cl.Node(ctx, fmt.Sprintf("pve%d", i%2+1))
			if err != nil {
				errs <- err
				return
			}
			for j := range each {
				vmid := 1000 + i*each + j
				if _, err := node.NewVirtualMachine(ctx, vmid, proxmox.VirtualMachineOption{Name: "name", Value: fmt.Sprintf("vm-%d", vmid)}); err != nil {
					errs <- err
				}
				if err := cl.NewPool(ctx, fmt.Sprintf("p%d", vmid), ""); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	// Connections the client dialed but never used would hold Close for its grace time.
	hc.CloseIdleConnections()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// 240 mutations; writes happen at most every 200 ms plus one at start and one at Close.
	if saves, limit := c.StateSaves(), int64(elapsed/(200*time.Millisecond))+3; saves > limit {
		t.Errorf("%d state file writes for %d mutations in %v, want at most %d", saves, 2*callers*each, elapsed, limit)
	}
	c2 := startCluster(t, cfg)
	r := call(t, c2, testToken, http.MethodGet, "/cluster/resources", url.Values{"type": {"vm"}})
	if n := len(r.data.([]any)); n != callers*each {
		t.Fatalf("%d guests after the restart, want %d", n, callers*each)
	}
	r = call(t, c2, testToken, http.MethodGet, "/pools", nil)
	if n := len(r.data.([]any)); n != callers*each {
		t.Fatalf("%d pools after the restart, want %d", n, callers*each)
	}
}

// TestReadsDoNotWriteState shows the read path pays nothing for persistence: reads never
// schedule a write.
func TestReadsDoNotWriteState(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{StateFile: filepath.Join(t.TempDir(), "state.json")})
	poll.True(t, 5*time.Second, "the first state file write", func() bool { return c.StateSaves() == 1 })
	for range 100 {
		if r := call(t, c, testToken, http.MethodGet, "/cluster/resources", nil); r.status != http.StatusOK {
			t.Fatal(r.reason)
		}
	}
	if c.StateSavePending() || c.StateSaves() != 1 {
		t.Fatalf("reads scheduled a state file write (%d writes)", c.StateSaves())
	}
	if r := call(t, c, testToken, http.MethodPost, "/pools", url.Values{"poolid": {"a"}}); r.status != http.StatusOK {
		t.Fatal(r.reason)
	}
	poll.True(t, 5*time.Second, "the write after a change", func() bool { return c.StateSaves() == 2 })
	for range 100 {
		call(t, c, testToken, http.MethodGet, "/pools", nil)
	}
	if c.StateSavePending() || c.StateSaves() != 2 {
		t.Fatalf("reads scheduled a state file write (%d writes)", c.StateSaves())
	}
}

// BenchmarkReadsWhileSaving measures GET /nodes/pve1/qemu/{vmid}/config on a cluster of
// 500 guests with and without a state file while another caller changes a pool comment
// every 5 ms, so with the file a write of the whole model happens every 200 ms.
func BenchmarkReadsWhileSaving(b *testing.B) {
	for _, mode := range []string{"memory", "state-file"} {
		b.Run(mode, func(b *testing.B) {
			cfg := pvesim.Config{Cluster: "bench"}
			if mode == "state-file" {
				cfg.StateFile = filepath.Join(b.TempDir(), "state.json")
			}
			c := startCluster(b, cfg)
			ctx := testCtx(b)
			cl := pveClient(b, c, testTokenID, testTokenSecret)
			node, err := cl.Node(ctx, "pve1")
			if err != nil {
				b.Fatal(err)
			}
			for i := range 500 {
				if _, err := node.NewVirtualMachine(ctx, 1000+i, proxmox.VirtualMachineOption{Name: "scsi0", Value: "local-lvm:4"}); err != nil {
					b.Fatal(err)
				}
			}
			if err := cl.NewPool(ctx, "p", ""); err != nil {
				b.Fatal(err)
			}
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					req, _ := http.NewRequestWithContext(ctx, http.MethodPut, c.URL()+"/api2/json/pools/p", strings.NewReader(fmt.Sprintf("comment=c%d", i)))
					req.Header.Set("Authorization", "PVEAPIToken="+testToken)
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
					if resp, err := sharedClient(b, c).Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			}()
			hc := httpClient(b, c)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api2/json/nodes/pve1/qemu/%d/config", c.URL(), 1000+i%500), nil)
					req.Header.Set("Authorization", "PVEAPIToken="+testToken)
					resp, err := hc.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
			b.StopTimer()
			close(stop)
			<-done
			b.ReportMetric(float64(c.StateSaves()), "saves")
		})
	}
}

// TestStateFileSaveFailure shows that a state file which cannot be written makes Close
// fail with an error naming it, rather than losing the last changes silently.
func TestStateFileSaveFailure(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	cfg := pvesim.Config{StateFile: filepath.Join(dir, "state.json"), Tokens: []string{testToken}}
	c, err := pvesim.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	poll.True(t, 5*time.Second, "the first state file write", func() bool { return c.StateSaves() == 1 })
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if r := call(t, c, testToken, http.MethodPost, "/pools", url.Values{"poolid": {"lost"}}); r.status != http.StatusOK {
		t.Fatal(r.reason)
	}
	if err := c.Close(); err == nil || !strings.Contains(err.Error(), "state.json") {
		t.Fatalf("Close with an unwritable state file: %v, want an error naming it", err)
	}
}
