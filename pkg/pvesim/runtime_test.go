package pvesim_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

func TestGuestAgentAddresses(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 2})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	sdnVnet(t, c, "tenants", "vdc1")
	vm := newVM(t, cl, "pve1", 100,
		proxmox.VirtualMachineOption{Name: "agent", Value: "enabled=1"},
		proxmox.VirtualMachineOption{Name: "net1", Value: "virtio,bridge=vdc1"},
		proxmox.VirtualMachineOption{Name: "ipconfig0", Value: "ip=10.9.0.7/24,gw=10.9.0.1"},
		proxmox.VirtualMachineOption{Name: "ipconfig1", Value: "ip=dhcp"},
	)
	if _, err := vm.AgentGetNetworkIFaces(ctx); err == nil || err.Error() != "500 VM 100 is not running" {
		t.Fatalf("agent of a stopped VM: %v", err)
	}
	mac := strings.SplitN(strings.SplitN(vm.VirtualMachineConfig.Nets["net1"], ",", 2)[0], "=", 2)[1]
	if r := call(t, c, testToken, http.MethodPost, "/cluster/sdn/vnets/vdc1/ips", url.Values{"zone": {"tenants"}, "ip": {"10.50.0.42"}, "mac": {mac}}); r.status != http.StatusOK {
		t.Fatalf("IP mapping: %s", r.body)
	}
	task, err := vm.Start(ctx)
	waitOK(t, ctx, task, err)
	ifaces, err := vm.AgentGetNetworkIFaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, i := range ifaces {
		for _, a := range i.IPAddresses {
			if a.IPAddressType == "ipv4" {
				got[i.Name] = a.IPAddress
			}
		}
	}
	// go-proxmox leaves out the loopback interface.
	if len(got) != 2 || got["ens18"] != "10.9.0.7" || got["ens19"] != "10.50.0.42" {
		t.Fatalf("agent addresses: %v", got)
	}

	// A NIC without a mapping gets the next free address of the DHCP range at start,
	// and gives it back when the guest is destroyed.
	other := newVM(t, cl, "pve1", 101,
		proxmox.VirtualMachineOption{Name: "agent", Value: "1"},
		proxmox.VirtualMachineOption{Name: "net0", Value: "virtio,bridge=vdc1"},
		proxmox.VirtualMachineOption{Name: "ipconfig0", Value: "ip=dhcp"},
	)
	task, err = other.Start(ctx)
	waitOK(t, ctx, task, err)
	ifaces, err = other.AgentGetNetworkIFaces(ctx)
	if err != nil || len(ifaces) != 1 || len(ifaces[0].IPAddresses) == 0 || ifaces[0].IPAddresses[0].IPAddress != "10.50.0.100" {
		t.Fatalf("DHCP address of VM 101: %v %+v", err, ifaces)
	}
	task, err = other.Stop(ctx)
	waitOK(t, ctx, task, err)
	task, err = other.Delete(ctx, nil)
	waitOK(t, ctx, task, err)
	r := call(t, c, testToken, http.MethodGet, "/cluster/sdn/ipams/pve/status", nil)
	if strings.Contains(string(r.body), "10.50.0.100") || !strings.Contains(string(r.body), "10.50.0.42") {
		t.Fatalf("IPAM after deleting VM 101: %s", r.body)
	}

	task, err = vm.Pause(ctx)
	waitOK(t, ctx, task, err)
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/status/current", nil); r.data.(map[string]any)["qmpstatus"] != "paused" {
		t.Fatalf("after suspend: %s", r.body)
	}
	task, err = vm.Resume(ctx)
	waitOK(t, ctx, task, err)
	task, err = vm.Resume(ctx)
	if exit := waitFailed(t, ctx, task, err); exit != "VM 100 is not paused" {
		t.Fatalf("resume of a running VM: %q", exit)
	}
	rrd, err := vm.RRDData(ctx, proxmox.TimeframeHour)
	if err != nil {
		t.Fatal(err)
	}
	if len(rrd) != 70 || rrd[69].MaxMem != 1024<<20 || rrd[0].CPU != 0 {
		t.Fatalf("rrddata: %d points, last %+v, first %+v", len(rrd), rrd[69], rrd[0])
	}
	r = call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/migrate", url.Values{"target": {"pve2"}})
	pre := r.data.(map[string]any)
	if pre["running"] != true || len(pre["allowed_nodes"].([]any)) != 1 || len(pre["local_disks"].([]any)) != 1 {
		t.Fatalf("migrate preconditions: %s", r.body)
	}
}

func TestNodePowerAndJoinInfo(t *testing.T) {
	t.Parallel()
	// A node takes Timing.Start to boot.
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 2, Timing: pvesim.Timing{Start: time.Second}})
	r := call(t, c, testToken, http.MethodGet, "/cluster/config/join", nil)
	if r.status != http.StatusOK {
		t.Fatal(r.reason)
	}
	nodes := r.data.(map[string]any)["nodelist"].([]any)
	if len(nodes) != 2 || nodes[0].(map[string]any)["pve_fp"] != c.Fingerprint() {
		t.Fatalf("join info: %s", r.body)
	}
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve2/status", url.Values{"command": {"reboot"}}); r.status != http.StatusOK {
		t.Fatal(r.reason)
	}
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve2/status", nil); r.status != 595 {
		t.Fatalf("rebooting node: %s", r.reason)
	}
	poll.True(t, 10*time.Second, "pve2 to come back", func() bool {
		return call(t, c, testToken, http.MethodGet, "/nodes/pve2/status", nil).status == http.StatusOK
	})
	standalone := startCluster(t, pvesim.Config{})
	if r := call(t, standalone, testToken, http.MethodGet, "/cluster/config/join", nil); r.reason != "500 node is not in a cluster, no join info available!" {
		t.Fatalf("join info of a standalone node: %s", r.reason)
	}
}

func TestStorageVolumes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/storage/shared/content", url.Values{"vmid": {"100"}, "filename": {"vm-100-disk-0"}, "size": {"2G"}})
	if r.status != http.StatusOK || r.data != "shared:100/vm-100-disk-0.qcow2" {
		t.Fatalf("alloc: %s", r.body)
	}
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/storage/local-lvm/content", url.Values{"vmid": {"100"}, "filename": {"vm-101-disk-0"}, "size": {"2G"}}); r.status != http.StatusBadRequest {
		t.Fatalf("alloc with a foreign name: %s", r.body)
	}
	vol := "/nodes/pve1/storage/shared/content/shared:100/vm-100-disk-0.qcow2"
	if r := call(t, c, testToken, http.MethodPut, vol, url.Values{"notes": {"golden image"}, "protected": {"1"}}); r.status != http.StatusOK {
		t.Fatalf("notes: %s", r.body)
	}
	if r := call(t, c, testToken, http.MethodDelete, vol, nil); r.reason != "500 volume 'shared:100/vm-100-disk-0.qcow2' is protected" {
		t.Fatalf("delete of a protected volume: %s", r.reason)
	}
	r = call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/shared/content", url.Values{"vmid": {"100"}})
	if v := r.data.([]any)[0].(map[string]any); v["notes"] != "golden image" || v["size"] != float64(2<<30) || v["format"] != "qcow2" {
		t.Fatalf("volume: %v", v)
	}
}

func TestStopTask(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Timing: pvesim.Timing{Start: time.Minute}})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	vm := newVM(t, cl, "pve1", 100)
	task, err := vm.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Ping(ctx); err != nil || !task.IsRunning {
		t.Fatalf("start task: %v running=%v", err, task.IsRunning)
	}
	if err := task.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if exit := waitFailed(t, ctx, task, nil); exit != "interrupted by signal" {
		t.Fatalf("stopped task: %q", exit)
	}
	if err := vm.Ping(ctx); err != nil || vm.Status != "stopped" {
		t.Fatalf("guest after an interrupted start: %v %q", err, vm.Status)
	}
}

func TestNodeNetworkPendingAndApply(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 2})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve2/network", url.Values{"iface": {"vmbr9"}, "type": {"bridge"}, "bridge_ports": {"eno9"}}); r.status != http.StatusBadRequest {
		t.Fatalf("bridge on a missing port: %s", r.body)
	}
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve2/network", url.Values{"iface": {"vmbr9"}, "type": {"bridge"}, "bridge_vlan_aware": {"1"}}); r.status != http.StatusOK {
		t.Fatalf("create bridge: %s", r.body)
	}
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve2/network", url.Values{"iface": {"vmbr9"}, "type": {"bridge"}}); r.status != http.StatusBadRequest {
		t.Fatalf("duplicate bridge: %s", r.body)
	}
	vm := newVM(t, cl, "pve2", 100, proxmox.VirtualMachineOption{Name: "net1", Value: "virtio,bridge=vmbr9"})
	task, err := vm.Start(ctx)
	if exit := waitFailed(t, ctx, task, err); exit != "bridge 'vmbr9' does not exist" {
		t.Fatalf("start on a pending bridge: %q", exit)
	}
	node, err := cl.Node(ctx, "pve2")
	if err != nil {
		t.Fatal(err)
	}
	bridges, err := node.Networks(ctx, "bridge")
	if err != nil {
		t.Fatal(err)
	}
	if len(bridges) != 3 {
		t.Fatalf("bridges of pve2 with the pending one: %d", len(bridges))
	}
	task, err = node.NetworkReload(ctx)
	waitOK(t, ctx, task, err)
	task, err = vm.Start(ctx)
	waitOK(t, ctx, task, err)
	// pve1 has no vmbr9; a pending change can be reverted.
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/network", url.Values{"type": {"bridge"}}); len(r.data.([]any)) != 2 {
		t.Fatalf("pve1 bridges: %s", r.body)
	}
	call(t, c, testToken, http.MethodPost, "/nodes/pve1/network", url.Values{"iface": {"vmbr5"}, "type": {"bridge"}})
	if r := call(t, c, testToken, http.MethodDelete, "/nodes/pve1/network", nil); r.status != http.StatusOK {
		t.Fatalf("revert: %s", r.body)
	}
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/network", url.Values{"type": {"bridge"}}); len(r.data.([]any)) != 2 {
		t.Fatalf("pve1 bridges after revert: %s", r.body)
	}
}

// TestNodeRRDDataFollowsGuests: a node's rrddata is the load of the guests
// that run on it, over its idle base: a running guest of 8 GiB and 4 cores
// shows in its node's memory and CPU, a stopped one does not, and every
// timeframe of the schema answers 70 points.
func TestNodeRRDDataFollowsGuests(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 2})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	busy := newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "memory", Value: "8192"}, proxmox.VirtualMachineOption{Name: "cores", Value: "4"})
	newVM(t, cl, "pve2", 101, proxmox.VirtualMachineOption{Name: "memory", Value: "8192"}) // stopped
	task, err := busy.Start(ctx)
	waitOK(t, ctx, task, err)
	last := func(node, timeframe string) map[string]any {
		t.Helper()
		r := call(t, c, testToken, http.MethodGet, "/nodes/"+node+"/rrddata", url.Values{"timeframe": {timeframe}, "cf": {"AVERAGE"}})
		pts, ok := r.data.([]any)
		if r.status != http.StatusOK || !ok || len(pts) != 70 {
			t.Fatalf("%s rrddata %s: %d %s", node, timeframe, r.status, r.body)
		}
		return pts[69].(map[string]any)
	}
	for _, tf := range []string{"hour", "day", "week", "month", "year", "decade"} {
		if p := last("pve1", tf); p["cpu"] == nil || p["memused"] == nil || p["time"] == nil {
			t.Errorf("pve1 %s: last point %v", tf, p)
		}
	}
	p1, p2 := last("pve1", "hour"), last("pve2", "hour")
	// The guest boots (40-70 % of 4 cores) and uses part of its memory.
	if mem := p1["memused"].(float64) - p2["memused"].(float64); mem < 64<<20 || mem > 9<<30 {
		t.Errorf("pve1 uses %.0f MiB more than pve2, want the running guest's memory", mem/(1<<20))
	}
	if cpu := p1["cpu"].(float64) - p2["cpu"].(float64); cpu < 0.05 {
		t.Errorf("pve1's CPU %.3f, pve2's %.3f: the booting guest does not show", p1["cpu"], p2["cpu"])
	}
	if p1["netin"].(float64) <= 0 || p2["netin"].(float64) != 0 || p1["memtotal"] != p2["memtotal"] {
		t.Errorf("pve1 %v, pve2 %v", p1, p2)
	}
	// The guest's own rrddata has data in its current slot.
	rrd, err := busy.RRDData(ctx, proxmox.TimeframeHour)
	if err != nil || rrd[69].CPU == 0 || rrd[69].Mem == 0 {
		t.Fatalf("guest rrddata: %v %+v", err, rrd[69])
	}
	task, err = busy.Stop(ctx)
	waitOK(t, ctx, task, err)
	if p := last("pve1", "hour"); p["netin"].(float64) != 0 {
		t.Errorf("after the stop: %v", p)
	}
}
