package pvesim_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

var upidRE = regexp.MustCompile(`^UPID:pve[0-9]+:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:[a-z]+:[^:]*:[^:]+:$`)

// newVM creates VM vmid on node with a 4G disk and waits for the create task.
func newVM(t *testing.T, cl *proxmox.Client, node string, vmid int, opts ...proxmox.VirtualMachineOption) *proxmox.VirtualMachine {
	t.Helper()
	ctx := testCtx(t)
	n, err := cl.Node(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]proxmox.VirtualMachineOption{
		{Name: "memory", Value: 1024},
		{Name: "scsi0", Value: "local-lvm:4"},
		{Name: "net0", Value: "virtio,bridge=vmbr0"},
	}, opts...)
	task, err := n.NewVirtualMachine(ctx, vmid, opts...)
	waitOK(t, ctx, task, err)
	if !upidRE.MatchString(string(task.UPID)) {
		t.Fatalf("UPID %q is not Proxmox-shaped", task.UPID)
	}
	vm, err := n.VirtualMachine(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

func TestDigestConflicts(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	vm := newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "tags", Value: "a;b"})
	stale := vm.VirtualMachineConfig.Digest
	if len(stale) != 40 {
		t.Fatalf("digest %q is not a SHA-1", stale)
	}
	if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "name", Value: "first"}, proxmox.VirtualMachineOption{Name: "digest", Value: stale}); err != nil {
		t.Fatalf("write with the current digest: %v", err)
	}
	err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "name", Value: "second"}, proxmox.VirtualMachineOption{Name: "digest", Value: stale})
	if err == nil || err.Error() != "500 detected modified configuration - file changed by other user? Try again." {
		t.Fatalf("write with a stale digest: %v", err)
	}
	if _, err := vm.ResizeDisk(ctx, "scsi0", "+1G"); err != nil {
		t.Fatal(err)
	}
	r := call(t, c, testToken, http.MethodPut, "/nodes/pve1/qemu/100/resize", url.Values{"disk": {"scsi0"}, "size": {"+1G"}, "digest": {stale}})
	if r.status != http.StatusInternalServerError || !strings.Contains(r.reason, "detected modified configuration") {
		t.Fatalf("resize with a stale digest: %s", r.reason)
	}
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if vm.VirtualMachineConfig.Name != "first" || vm.VirtualMachineConfig.Digest == stale {
		t.Fatalf("name %q digest %s after a refused write", vm.VirtualMachineConfig.Name, vm.VirtualMachineConfig.Digest)
	}
	// delete= removes keys; a deleted disk becomes unused0.
	cur := vm.VirtualMachineConfig.Digest
	if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "delete", Value: "tags,scsi0"}, proxmox.VirtualMachineOption{Name: "digest", Value: cur}); err != nil {
		t.Fatal(err)
	}
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := vm.VirtualMachineConfig
	if cfg.Tags != "" || cfg.SCSIs["scsi0"] != "" || cfg.Unuseds["unused0"] != "local-lvm:vm-100-disk-0" {
		t.Fatalf("after delete: tags %q scsi0 %q unused %v", cfg.Tags, cfg.SCSIs["scsi0"], cfg.Unuseds)
	}
}

func TestResizeGrowsOnly(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	vm := newVM(t, cl, "pve1", 100)
	task, err := vm.ResizeDisk(ctx, "scsi0", "10G")
	waitOK(t, ctx, task, err)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if got := vm.VirtualMachineConfig.SCSIs["scsi0"]; got != "local-lvm:vm-100-disk-0,size=10G" {
		t.Fatalf("after absolute resize: %q", got)
	}
	if _, err := vm.ResizeDisk(ctx, "scsi0", "5G"); err == nil || err.Error() != "500 shrinking disks is not supported" {
		t.Fatalf("shrink: %v", err)
	}
	if _, err := vm.ResizeDisk(ctx, "scsi9", "+1G"); err == nil || !strings.Contains(err.Error(), "disk 'scsi9' does not exist") {
		t.Fatalf("missing disk: %v", err)
	}
	if _, err := vm.ResizeDisk(ctx, "scsi0", "lots"); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("bad size: %v", err)
	}
	r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/local-lvm/content", nil)
	vol := r.data.([]any)[0].(map[string]any)
	if vol["size"].(float64) != 10<<30 {
		t.Fatalf("volume size %v", vol["size"])
	}
}

func TestLocks(t *testing.T) {
	t.Parallel()
	// A slow full clone (4 GiB at 500ms/GiB) keeps the clone lock long enough to observe it.
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 2, Timing: pvesim.Timing{PerGiB: 500 * time.Millisecond}})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	src := newVM(t, cl, "pve1", 100)
	_, clone, err := src.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 101, Full: true, Name: "copy"})
	if err != nil {
		t.Fatal(err)
	}
	r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/101/config", nil)
	if got := r.data.(map[string]any)["lock"]; got != "clone" {
		t.Fatalf("lock during clone = %v", got)
	}
	r = call(t, c, testToken, http.MethodPut, "/nodes/pve1/qemu/101/config", url.Values{"name": {"x"}})
	if r.status != http.StatusInternalServerError || r.reason != "500 VM is locked (clone)" {
		t.Fatalf("config of a locked VM: %q", r.reason)
	}
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/101/migrate", url.Values{"target": {"pve2"}})
	if r.reason != "500 VM is locked (clone)" {
		t.Fatalf("migrate of a locked VM: %q", r.reason)
	}
	r = call(t, c, testToken, http.MethodDelete, "/nodes/pve1/qemu/101", nil)
	if r.reason != "500 VM is locked (clone)" {
		t.Fatalf("delete of a locked VM: %q", r.reason)
	}
	n1, _ := cl.Node(ctx, "pve1")
	locked := &proxmox.VirtualMachine{}
	locked.New(cl, n1.Name, 101)
	task, err := locked.Start(ctx)
	if exit := waitFailed(t, ctx, task, err); exit != "VM is locked (clone)" {
		t.Fatalf("start of a locked VM: %q", exit)
	}
	waitOK(t, ctx, clone, nil)
	vm, err := n1.VirtualMachine(ctx, 101)
	if err != nil {
		t.Fatal(err)
	}
	if vm.Lock != "" || vm.VirtualMachineConfig.Lock != "" {
		t.Fatalf("lock after clone: %q", vm.Lock)
	}
	task, err = vm.Start(ctx)
	waitOK(t, ctx, task, err)
	// Rules that do not depend on locks.
	if _, err := vm.Delete(ctx, nil); err == nil || err.Error() != "500 VM 101 is running - destroy failed" {
		t.Fatalf("delete running: %v", err)
	}
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/101/migrate", url.Values{"target": {"pve2"}})
	if r.reason != "500 can't migrate running VM without --online" {
		t.Fatalf("offline migrate of a running VM: %q", r.reason)
	}
	task, err = vm.Migrate(ctx, &proxmox.VirtualMachineMigrateOptions{Target: "pve2", Online: true})
	if exit := waitFailed(t, ctx, task, err); !strings.Contains(exit, "with-local-disks") {
		t.Fatalf("live migration with local disks, no with-local-disks: %q", exit)
	}
	if _, err := src.ConvertToTemplate(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCloneRules(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 2})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	vm := newVM(t, cl, "pve1", 100)
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/clone", url.Values{"newid": {"101"}, "full": {"0"}}); r.status != http.StatusBadRequest || r.errors["full"] == "" {
		t.Fatalf("linked clone of a VM: %s", r.body)
	}
	if _, _, err := vm.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 101, Full: true, Target: "pve2"}); err == nil || !strings.Contains(err.Error(), "can't clone VM to node 'pve2' (VM uses local storage)") {
		t.Fatalf("clone of local disks to another node: %v", err)
	}
	task, err := vm.ConvertToTemplate(ctx)
	waitOK(t, ctx, task, err)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	task, err = vm.Start(ctx)
	if exit := waitFailed(t, ctx, task, err); exit != "you can't start a vm if it's a template" {
		t.Fatalf("start of a template: %q", exit)
	}
	// Linked clone from a template shares the base volume.
	_, task, err = vm.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 102, Name: "linked"})
	waitOK(t, ctx, task, err)
	r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/102/config", nil)
	if got := r.data.(map[string]any)["scsi0"]; got != "local-lvm:base-100-disk-0/vm-102-disk-0,size=4G" {
		t.Fatalf("linked clone disk %v", got)
	}
	task, err = vm.Delete(ctx, nil)
	if err == nil {
		t.Fatalf("deleting a template with linked clones started %v", task)
	}
}

func TestSDNPendingAndApply(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 2})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	for _, f := range []url.Values{
		{"zone": {"vl"}, "type": {"vlan"}},
		{"zone": {"vx"}, "type": {"vxlan"}},
	} {
		if r := call(t, c, testToken, http.MethodPost, "/cluster/sdn/zones", f); r.status != http.StatusBadRequest {
			t.Fatalf("zone %v without its required option: %s", f, r.reason)
		}
	}
	for _, f := range []url.Values{
		{"zone": {"vl"}, "type": {"vlan"}, "bridge": {"vmbr0"}},
		{"zone": {"vx"}, "type": {"vxlan"}, "peers": {"10.0.0.1,10.0.0.2"}},
		{"zone": {"sz"}, "type": {"simple"}},
	} {
		if r := call(t, c, testToken, http.MethodPost, "/cluster/sdn/zones", f); r.status != http.StatusOK {
			t.Fatalf("zone %v: %s %s", f, r.reason, r.body)
		}
	}
	if r := call(t, c, testToken, http.MethodPost, "/cluster/sdn/vnets", url.Values{"vnet": {"vn1"}, "zone": {"vl"}}); r.status != http.StatusBadRequest {
		t.Fatalf("vlan vnet without tag: %s", r.reason)
	}
	if r := call(t, c, testToken, http.MethodPost, "/cluster/sdn/vnets", url.Values{"vnet": {"vn1"}, "zone": {"vl"}, "tag": {"42"}}); r.status != http.StatusOK {
		t.Fatalf("vnet: %s %s", r.reason, r.body)
	}
	r := call(t, c, testToken, http.MethodGet, "/cluster/sdn/vnets", url.Values{"pending": {"1"}})
	vn := r.data.([]any)[0].(map[string]any)
	if vn["state"] != "new" || vn["pending"].(map[string]any)["tag"] != float64(42) {
		t.Fatalf("pending vnet: %v", vn)
	}
	if r := call(t, c, testToken, http.MethodGet, "/cluster/sdn/vnets", url.Values{"running": {"1"}}); len(r.data.([]any)) != 0 {
		t.Fatalf("running vnets before apply: %s", r.body)
	}
	// A guest on the vnet cannot start until the configuration is applied.
	vm := newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "net1", Value: "virtio,bridge=vn1"})
	task, err := vm.Start(ctx)
	if exit := waitFailed(t, ctx, task, err); exit != "bridge 'vn1' does not exist" {
		t.Fatalf("start before apply: %q", exit)
	}
	cluster, err := cl.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	task, err = cluster.SDNApply(ctx)
	waitOK(t, ctx, task, err)
	r = call(t, c, testToken, http.MethodGet, "/cluster/sdn/vnets", url.Values{"pending": {"1"}})
	if vn := r.data.([]any)[0].(map[string]any); vn["state"] != nil || vn["tag"] != float64(42) {
		t.Fatalf("vnet after apply: %v", vn)
	}
	task, err = vm.Start(ctx)
	waitOK(t, ctx, task, err)
	zones, err := cluster.SDNZones(ctx)
	if err != nil || len(zones) != 3 {
		t.Fatalf("zones through go-proxmox: %v %+v", err, zones)
	}
	if r := call(t, c, testToken, http.MethodPost, "/cluster/sdn/vnets/vn1/subnets", url.Values{
		"subnet": {"10.60.0.0/24"}, "type": {"subnet"}, "gateway": {"10.60.0.1"},
		"dhcp-range": {"start-address=10.60.0.10,end-address=10.60.0.20", "start-address=10.60.0.100,end-address=10.60.0.200"},
	}); r.status != http.StatusOK {
		t.Fatalf("subnet: %s", r.body)
	}
	if r := call(t, c, testToken, http.MethodPost, "/cluster/sdn/vnets/vn1/subnets", url.Values{
		"subnet": {"10.60.0.128/25"}, "type": {"subnet"},
	}); r.status != http.StatusInternalServerError || !strings.Contains(r.reason, "overlaps") {
		t.Fatalf("overlapping subnet: %s", r.reason)
	}
	subnets, err := cluster.SDNSubnets(ctx, "vn1")
	if err != nil || len(subnets) != 1 {
		t.Fatalf("subnets through go-proxmox: %v %+v", err, subnets)
	}
	if s := subnets[0]; s.ID != "vl-10.60.0.0-24" || s.CIDR != "10.60.0.0/24" || s.Gateway != "10.60.0.1" || len(s.DhcpRange) != 2 || s.DhcpRange[1].EndAddress != "10.60.0.200" {
		t.Fatalf("subnet through go-proxmox: %+v", s)
	}
	res, err := cluster.Resources(ctx, "sdn")
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2*3*2 {
		t.Fatalf("sdn resources: %d entries", len(res))
	}
	// A change is pending until applied again.
	if r := call(t, c, testToken, http.MethodPut, "/cluster/sdn/zones/vl", url.Values{"mtu": {"1400"}}); r.status != http.StatusOK {
		t.Fatalf("update zone: %s", r.body)
	}
	r = call(t, c, testToken, http.MethodGet, "/cluster/sdn/zones/vl", url.Values{"pending": {"1"}})
	z := r.data.(map[string]any)
	if z["state"] != "changed" || z["pending"].(map[string]any)["mtu"] != float64(1400) || z["bridge"] != "vmbr0" {
		t.Fatalf("changed zone: %v", z)
	}
	if r := call(t, c, testToken, http.MethodDelete, "/cluster/sdn/zones/vl", nil); r.status != http.StatusInternalServerError {
		t.Fatalf("deleting a zone in use: %s", r.reason)
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 3})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	vm := newVM(t, cl, "pve2", 100)
	task, err := vm.Start(ctx)
	waitOK(t, ctx, task, err)

	c.SetLatency(80 * time.Millisecond)
	start := time.Now()
	if _, err := cl.Version(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Fatalf("request took %v with 80ms latency", d)
	}
	c.SetLatency(0)

	c.FailRequests("GET", "/nodes/*/qemu/*/status/current", 503, 2)
	for i := range 2 {
		r := call(t, c, testToken, http.MethodGet, "/nodes/pve2/qemu/100/status/current", nil)
		if r.status != 503 {
			t.Fatalf("injected failure %d: %s", i, r.reason)
		}
	}
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve2/qemu/100/status/current", nil); r.status != http.StatusOK {
		t.Fatalf("after the injected failures: %s", r.reason)
	}
	c.FailRequests("POST", "/nodes/{node}/qemu/{vmid}/clone", 500, 1)
	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve2/qemu/100/clone", url.Values{"newid": {"101"}}); r.status != 500 || !strings.Contains(r.reason, "simulated failure") {
		t.Fatalf("template-pattern failure: %s", r.reason)
	}

	c.SetNodeOnline("pve2", false)
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve2/status", nil); r.status != 595 {
		t.Fatalf("offline node status: %s", r.reason)
	}
	res, err := (&proxmox.Cluster{}).New(cl).Resources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res {
		switch {
		case e.ID == "node/pve2" && e.Status != "offline",
			e.ID == "qemu/100" && e.Status != "unknown",
			e.Type == "storage" && e.Node == "pve2" && e.Status != "unknown":
			t.Errorf("%s while pve2 is offline: status %q", e.ID, e.Status)
		}
	}
	cluster, err := cl.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range cluster.Nodes {
		if (n.Name == "pve2") == (n.Online == 1) {
			t.Errorf("cluster status: %s online=%d", n.Name, n.Online)
		}
	}
	if cluster.Quorate != 1 {
		t.Fatal("2 of 3 nodes should keep quorum")
	}
	c.SetNodeOnline("pve2", true)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if vm.Status != "stopped" {
		t.Fatalf("guest of a node that went down: %q", vm.Status)
	}
}

func TestClusterIdentity(t *testing.T) {
	t.Parallel()
	standalone := startCluster(t, pvesim.Config{})
	lab := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 2})
	ctx := testCtx(t)

	cluster, err := pveClient(t, standalone, testTokenID, testTokenSecret).Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cluster.Name != "" || len(cluster.Nodes) != 1 || cluster.Nodes[0].Name != "pve1" {
		t.Fatalf("standalone cluster status: %+v", cluster)
	}
	cluster, err = pveClient(t, lab, testTokenID, testTokenSecret).Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cluster.Name != "lab" || len(cluster.Nodes) != 2 || cluster.Quorate != 1 {
		t.Fatalf("lab cluster status: %+v", cluster)
	}

	if standalone.Identity() == lab.Identity() || standalone.Fingerprint() == lab.Fingerprint() {
		t.Fatal("two clusters share an identity or a certificate")
	}
	for _, node := range []string{"pve1", "pve2"} {
		n, err := pveClient(t, lab, testTokenID, testTokenSecret).Node(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		certs, err := n.GetCustomCertificates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ssl *proxmox.NodeCertificate
		for _, cert := range *certs {
			if cert.Filename == "/etc/pve/nodes/"+node+"/pve-ssl.pem" {
				ssl = cert
			}
		}
		if ssl == nil {
			t.Fatalf("%s: no pve-ssl.pem in %+v", node, certs)
		}
		if !strings.Contains(ssl.Issuer, "OU="+lab.Identity()) {
			t.Errorf("%s: issuer %q lacks the cluster identity", node, ssl.Issuer)
		}
		if node == "pve1" && ssl.Fingerprint != lab.Fingerprint() {
			t.Errorf("pve1 fingerprint %s, served %s", ssl.Fingerprint, lab.Fingerprint())
		}
	}
}

func TestPowerOperations(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	vm := newVM(t, cl, "pve1", 100)
	if _, err := vm.Reboot(ctx); err == nil || err.Error() != "500 VM 100 not running" {
		t.Fatalf("reboot of a stopped VM: %v", err)
	}
	task, err := vm.Shutdown(ctx)
	if exit := waitFailed(t, ctx, task, err); exit != "VM 100 not running" {
		t.Fatalf("shutdown of a stopped VM: %q", exit)
	}
	task, err = vm.Start(ctx)
	waitOK(t, ctx, task, err)
	task, err = vm.Start(ctx)
	if exit := waitFailed(t, ctx, task, err); exit != "VM 100 already running" {
		t.Fatalf("second start: %q", exit)
	}
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	pid := vm.PID
	task, err = vm.Reboot(ctx)
	waitOK(t, ctx, task, err)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if vm.Status != "running" || vm.PID == pid {
		t.Fatalf("after reboot: status %q pid %d (was %d)", vm.Status, vm.PID, pid)
	}
	task, err = vm.Shutdown(ctx)
	waitOK(t, ctx, task, err)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if vm.Status != "stopped" || vm.Uptime != 0 || vm.NetIn == 0 {
		t.Fatalf("after shutdown: status %q uptime %d netin %d", vm.Status, vm.Uptime, vm.NetIn)
	}
	r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/tasks", url.Values{"vmid": {"100"}})
	if list := r.data.([]any); len(list) != 6 {
		t.Fatalf("task list for VM 100 has %d entries: %s", len(list), r.body)
	}
}

func TestPools(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	for _, id := range []string{"a", "b"} {
		if err := cl.NewPool(ctx, id, "pool "+id); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.NewPool(ctx, "a", ""); err == nil || err.Error() != "500 pool 'a' already exists" {
		t.Fatalf("duplicate pool: %v", err)
	}
	newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "pool", Value: "a"})
	a, err := cl.Pool(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// As Proxmox lists them: /cluster/resources's fields less pool, tags
	// and lock.
	if len(a.Members) != 1 || a.Members[0].VMID != 100 || a.Members[0].Node != "pve1" || a.Members[0].Status != "stopped" ||
		a.Members[0].MaxMem != 1<<30 || a.Members[0].Pool != "" || a.Members[0].Tags != "" {
		t.Fatalf("pool a members: %+v", a.Members)
	}
	var typed []struct{ Members []map[string]any }
	if err := cl.Get(ctx, "/pools?poolid=a&type=qemu", &typed); err != nil || len(typed) != 1 || len(typed[0].Members) != 1 {
		t.Fatalf("pool a's qemu members: %+v, %v", typed, err)
	}
	if err := cl.Get(ctx, "/pools?poolid=a&type=storage", &typed); err != nil || len(typed) != 1 || len(typed[0].Members) != 0 {
		t.Fatalf("pool a's storage members: %+v, %v", typed, err)
	}
	if err := cl.Get(ctx, "/pools?poolid=nope", &typed); err == nil || !strings.Contains(err.Error(), "pool 'nope' does not exist") {
		t.Fatalf("an absent pool: %v", err)
	}
	b, err := cl.Pool(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update(ctx, &proxmox.PoolUpdateOption{VirtualMachines: "100"}); err == nil || !strings.Contains(err.Error(), "VM 100 belongs already to pool 'a'") {
		t.Fatalf("adding a member of another pool: %v", err)
	}
	if err := b.Update(ctx, &proxmox.PoolUpdateOption{VirtualMachines: "100", AllowMove: true}); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx); err != nil {
		t.Fatalf("deleting the emptied pool: %v", err)
	}
	if err := b.Delete(ctx); err == nil || err.Error() != "500 pool 'b' is not empty" {
		t.Fatalf("deleting a pool with members: %v", err)
	}
	if err := b.Update(ctx, &proxmox.PoolUpdateOption{VirtualMachines: "100", Delete: true}); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Pool(ctx, "b"); err == nil {
		t.Fatal("pool b still exists")
	}
}

func TestPendingChanges(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	vm := newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "cores", Value: 1})
	task, err := vm.Start(ctx)
	waitOK(t, ctx, task, err)
	// memory and cores wait for the next boot; the name applies at once.
	if err := vm.ConfigSync(ctx,
		proxmox.VirtualMachineOption{Name: "memory", Value: 4096},
		proxmox.VirtualMachineOption{Name: "cores", Value: 4},
		proxmox.VirtualMachineOption{Name: "name", Value: "renamed"},
	); err != nil {
		t.Fatal(err)
	}
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if vm.MaxMem != 1024<<20 || vm.CPUs != 1 || vm.Name != "renamed" {
		t.Fatalf("running guest: maxmem %d cpus %d name %q", vm.MaxMem, vm.CPUs, vm.Name)
	}
	if *vm.VirtualMachineConfig.Cores != 4 || vm.VirtualMachineConfig.Memory != 4096 {
		t.Fatalf("config with pending changes: cores %d memory %d", *vm.VirtualMachineConfig.Cores, vm.VirtualMachineConfig.Memory)
	}
	r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/100/config", url.Values{"current": {"1"}})
	if cur := r.data.(map[string]any); cur["cores"] != float64(1) || cur["memory"] != "1024" {
		t.Fatalf("current config: %s", r.body)
	}
	pending, err := vm.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for _, p := range *pending {
		if p.Pending != nil {
			got[p.Key] = p.Pending
		}
	}
	if len(got) != 2 || got["cores"] != float64(4) || got["memory"] != "4096" {
		t.Fatalf("pending: %v", got)
	}
	// Reverting drops a pending change; a reboot applies the rest.
	if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "revert", Value: "cores"}); err != nil {
		t.Fatal(err)
	}
	task, err = vm.Reboot(ctx)
	waitOK(t, ctx, task, err)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if vm.MaxMem != 4096<<20 || vm.CPUs != 1 {
		t.Fatalf("after reboot: maxmem %d cpus %d", vm.MaxMem, vm.CPUs)
	}
	if pending, err := vm.Pending(ctx); err != nil || len(*pending) == 0 {
		t.Fatalf("pending after reboot: %v", err)
	} else {
		for _, p := range *pending {
			if p.Pending != nil {
				t.Fatalf("still pending after reboot: %+v", p)
			}
		}
	}
}

func TestCertDirKeepsIdentity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := pvesim.Start(pvesim.Config{Cluster: "lab", Nodes: 2, Tokens: []string{testToken}, CertDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	id, fp := first.Identity(), first.Fingerprint()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 3, CertDir: dir})
	if again.Identity() != id || again.Fingerprint() != fp {
		t.Fatalf("restart changed identity %s->%s or fingerprint %s->%s", id, again.Identity(), fp, again.Fingerprint())
	}
	// The added node's certificate is signed by the same CA: the client trusts it.
	if r := call(t, again, testToken, http.MethodGet, "/nodes/pve3/certificates/info", nil); r.status != http.StatusOK || !strings.Contains(string(r.body), id) {
		t.Fatalf("pve3 certificate: %s", r.body)
	}
	if fresh := startCluster(t, pvesim.Config{Cluster: "lab"}); fresh.Identity() == id {
		t.Fatal("a cluster without CertDir reused the identity")
	}
}

func TestNodeEndpoints(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 3})
	ctx := testCtx(t)
	if c.NodeURL("pve1") != c.URL() || c.NodeURL("pve9") != "" || c.NodeFingerprint("pve2") == c.Fingerprint() {
		t.Fatalf("endpoints: %s %s %s", c.URL(), c.NodeURL("pve1"), c.NodeURL("pve9"))
	}
	hc := httpClient(t, c)
	get := func(node, path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.NodeURL(node)+"/api2/json"+path, nil)
		req.Header.Set("Authorization", "PVEAPIToken="+testToken)
		return hc.Do(req)
	}
	resp, err := get("pve2", "/cluster/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := fingerprint(resp.TLS.PeerCertificates[0].Raw); got != c.NodeFingerprint("pve2") {
		t.Fatalf("pve2 serves %s, want its own certificate %s", got, c.NodeFingerprint("pve2"))
	}
	var status struct {
		Data []struct {
			Name  string `json:"name"`
			Local int    `json:"local"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&status); err != nil {
		t.Fatal(err)
	}
	for _, n := range status.Data {
		if n.Name != "" && (n.Local == 1) != (n.Name == "pve2") {
			t.Errorf("status at pve2: %s local=%d", n.Name, n.Local)
		}
	}
	c.SetNodeOnline("pve2", false)
	if resp, err := get("pve2", "/version"); err == nil {
		resp.Body.Close()
		t.Fatalf("offline node answered %s", resp.Status)
	}
	if r := call(t, c, testToken, http.MethodGet, "/nodes/pve2/status", nil); r.status != 595 {
		t.Fatalf("offline node through pve1: %s", r.reason)
	}
	c.SetNodeOnline("pve2", true)
	resp, err = get("pve2", "/version")
	if err != nil {
		t.Fatalf("node back online: %v", err)
	}
	resp.Body.Close()
}

func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}

func TestTimingGrowsWithDiskSize(t *testing.T) {
	t.Parallel()
	const perGiB = 15 * time.Millisecond
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 2, Timing: pvesim.Timing{PerGiB: perGiB}})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	small := newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "scsi1", Value: "local-lvm:1"}) // 4G + 1G
	big := newVM(t, cl, "pve1", 200, proxmox.VirtualMachineOption{Name: "scsi1", Value: "local-lvm:16"})  // 4G + 16G
	for _, tc := range []struct {
		vm   *proxmox.VirtualMachine
		gib  int
		name string
	}{{small, 5, "small"}, {big, 20, "big"}} {
		start := time.Now()
		_, task, err := tc.vm.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: int(tc.vm.VMID) + 1, Full: true})
		waitOK(t, ctx, task, err)
		if d, want := time.Since(start), time.Duration(tc.gib)*perGiB; d < want {
			t.Errorf("full clone of %s (%d GiB) took %v, want at least %v", tc.name, tc.gib, d, want)
		}
		start = time.Now()
		task, err = tc.vm.Migrate(ctx, &proxmox.VirtualMachineMigrateOptions{Target: "pve2"})
		waitOK(t, ctx, task, err)
		if d, want := time.Since(start), time.Duration(tc.gib)*perGiB; d < want {
			t.Errorf("migration of %s (%d GiB of local disks) took %v, want at least %v", tc.name, tc.gib, d, want)
		}
	}
}
