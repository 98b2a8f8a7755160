//go:build linux

package graph_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestVDCNetworkSpansTheZone creates VMs through GraphQL in a zone of two nodes with
// the simulator's data plane (real namespaces, bridges, VXLAN, veths): two VMs of one
// VDC on different nodes talk over their network; two VMs of another VDC with the
// same range on the same two nodes reach neither of them.
func TestVDCNetworkSpansTheZone(t *testing.T) {
	t.Parallel()
	nettest.NeedRoot(t)
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2}),
		meshtest.WithAPI(meshtest.APISpec{}), meshtest.WithDataPlane())
	h.WaitOnline(t, 30*time.Second)
	seedSharedStorage(t, h)
	users := map[string]string{"red": "alice", "blue": "bob"}
	nets := map[string]string{}
	for vdc, user := range users {
		var n struct{ ID string }
		h.GraphQL(t, user, vdc, `mutation { createNetwork(input: {name: "lan", zone: "alpha", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`, nil).
			OK(t).Into(t, "createNetwork", &n)
		nets[vdc] = n.ID
	}
	c := h.Clusters[0].Proxmox(t)
	// Blue's first addresses are reserved, so that its VMs' addresses are not red's:
	// a blue VM dialing a red address would otherwise reach its own VDC's VM.
	blueVNet := tenancy.VNetID("blue", "lan")
	for i := 2; i <= 9; i++ {
		if err := c.Post(vmtest.Ctx(t), "/cluster/sdn/vnets/"+blueVNet+"/ips", map[string]any{"zone": tenancy.SDNZoneID("blue"), "ip": fmt.Sprintf("10.1.0.%d", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	type vmInfo struct {
		vmid int
		ip   string
	}
	vms := map[string]vmInfo{}
	for _, name := range []string{"red-1", "red-2", "blue-1", "blue-2"} {
		vdc, _, _ := strings.Cut(name, "-")
		var created struct{ Operation gqlOp }
		h.GraphQL(t, users[vdc], vdc, createVM, map[string]any{"in": map[string]any{
			"name": name, "zone": "alpha", "image": "tiny", "computeProfile": "small", "storageProfile": "shared",
			"diskGiB": 4, "nics": []any{map[string]any{"network": nets[vdc]}}, "sshKeys": []string{sshKey}, "user": "ops"}}).
			OK(t).Into(t, "createVM", &created)
		id := awaitCreate(t, h, users[vdc], vdc, created.Operation.ID)
		var vm gqlVM
		poll.True(t, 60*time.Second, name+" running with its address", func() bool {
			h.GraphQL(t, users[vdc], vdc, `query($id: ID!) { vm(id: $id) { id name status ipAddresses } }`, map[string]any{"id": id}).
				OK(t).Into(t, "vm", &vm)
			return vm.Status == "RUNNING" && len(vm.IPAddresses) > 0
		})
		vms[name] = vmInfo{vmid: vmidOf(t, c, name), ip: vm.IPAddresses[0]}
	}
	// The second VM of each VDC runs on the other node than the first:
	// placement spread them, else it moves there (an operator's migration).
	for _, name := range []string{"red-2", "blue-2"} {
		node := nodeOf(t, c, vms[name].vmid)
		first := strings.TrimSuffix(name, "-2") + "-1"
		if node != nodeOf(t, c, vms[first].vmid) {
			continue
		}
		other := map[string]string{"pve1": "pve2", "pve2": "pve1"}[node]
		var upid proxmox.UPID
		if err := c.Post(vmtest.Ctx(t), fmt.Sprintf("/nodes/%s/qemu/%d/migrate", node, vms[name].vmid), map[string]any{"target": other, "online": 1}, &upid); err != nil {
			t.Fatal(err)
		}
		task := proxmox.NewTask(upid, c)
		if err := task.Wait(vmtest.Ctx(t), 50*time.Millisecond, time.Minute); err != nil || task.IsFailed {
			t.Fatalf("migrate %s: %v %s", name, err, task.ExitStatus)
		}
	}
	if a, b := nodeOf(t, c, vms["red-1"].vmid), nodeOf(t, c, vms["red-2"].vmid); a == b {
		t.Fatalf("red's VMs are both on %s", a)
	}
	p := h.Clusters[0].Plane
	for name, v := range vms {
		nettest.Serve(t, p.GuestNS(v.vmid), 8080, name)
	}
	for _, pair := range [][2]string{{"red-1", "red-2"}, {"red-2", "red-1"}, {"blue-1", "blue-2"}} {
		got := nettest.WaitReach(t, p.GuestNS(vms[pair[0]].vmid), vms[pair[1]].ip+":8080", 30*time.Second)
		if !strings.HasPrefix(got, pair[1]+" from "+vms[pair[0]].ip+":") {
			t.Errorf("%s → %s answered %q", pair[0], pair[1], got)
		}
	}
	for _, from := range []string{"blue-1", "blue-2"} {
		for _, to := range []string{"red-1", "red-2"} {
			if vms[to].ip == vms["blue-1"].ip || vms[to].ip == vms["blue-2"].ip {
				t.Fatalf("red's %s and a blue VM share an address: %v", to, vms)
			}
			if got := nettest.Reach(p.GuestNS(vms[from].vmid), vms[to].ip+":8080", 2*time.Second); got != "" {
				t.Errorf("%s of blue reached %s of red: %q", from, to, got)
			}
		}
	}
}

// seedSharedStorage makes the catalog of a data plane test in zone alpha:
// compute profile small, storage profile shared (the zone's shared pool),
// image tiny.
func seedSharedStorage(t testing.TB, h *meshtest.Harness) {
	t.Helper()
	url, sum := vmtest.ImageServer(t, 3<<20)
	h.GraphQL(t, "admin", "", `mutation($u: String!, $c: String!) {
	  createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name }
	  createStorageProfile(input: {name: "shared", tier: "ssd", readMBps: 200, writeMBps: 100, pools: [{zone: "alpha", pool: "shared"}]}) { name }
	  createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name } }`,
		map[string]any{"u": url, "c": sum}).OK(t)
}

// vmidOf is the VMID of the guest named name.
func vmidOf(t testing.TB, c *proxmox.Client, name string) int {
	t.Helper()
	id := guestID(t, c, name)
	if id == 0 {
		t.Fatalf("no guest %s", name)
	}
	return id
}

// guestID is the VMID of the guest named name, 0 while there is none.
func guestID(t testing.TB, c *proxmox.Client, name string) int {
	t.Helper()
	var rs []struct {
		VMID int    `json:"vmid"`
		Name string `json:"name"`
	}
	if err := c.Get(vmtest.Ctx(t), "/cluster/resources?type=vm", &rs); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Name == name {
			return r.VMID
		}
	}
	return 0
}

// nodeOf is the node of guest vmid.
func nodeOf(t *testing.T, c *proxmox.Client, vmid int) string {
	t.Helper()
	var rs []struct {
		VMID int    `json:"vmid"`
		Node string `json:"node"`
	}
	if err := c.Get(vmtest.Ctx(t), "/cluster/resources?type=vm", &rs); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.VMID == vmid {
			return r.Node
		}
	}
	t.Fatalf("no guest %d", vmid)
	return ""
}

// TestUserDataRunsInTheVM creates a VM through GraphQL with a cloud-config
// whose write_files and runcmd the simulator's data plane runs at its first
// start: another VM of the VDC reaches the server its runcmd started, which
// serves the file its write_files wrote (inside the VM's root directory).
// Moved to the other host, the VM keeps its user-data; deleted, its snippet
// goes from both hosts.
func TestUserDataRunsInTheVM(t *testing.T) {
	t.Parallel()
	nettest.NeedRoot(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("no python3 to serve from the guest: make python3 installs it (make test does)")
	}
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2, Snippets: true}),
		meshtest.WithAPI(meshtest.APISpec{}), meshtest.WithDataPlane())
	h.WaitOnline(t, 30*time.Second)
	nets := seedVMs(t, h, "alpha")
	userData := "#cloud-config\nwrite_files:\n  - path: /srv/hello.txt\n    content: hello from cloud-init\n" +
		"  - path: /srv/serve.py\n    content: |\n" + nettest.Indent(nettest.FileServerPy, 6) + "\n" +
		"runcmd:\n  - python3 srv/serve.py >/dev/null 2>&1 &\n"
	c := h.Clusters[0].Proxmox(t)
	ids, ips, vmids := map[string]string{}, map[string]string{}, map[string]int{}
	for _, name := range []string{"web", "probe"} {
		in := map[string]any{"name": name, "zone": "alpha", "image": "tiny", "computeProfile": "small", "storageProfile": "ssd",
			"diskGiB": 4, "nics": []any{map[string]any{"network": nets["alpha"]}}, "sshKeys": []string{sshKey}, "user": "ops"}
		if name == "web" {
			in["userData"] = userData
		}
		var created struct{ Operation gqlOp }
		h.GraphQL(t, "bob", "blue", createVM, map[string]any{"in": in}).OK(t).Into(t, "createVM", &created)
		ids[name] = awaitCreate(t, h, "bob", "blue", created.Operation.ID)
		var vm gqlVM
		poll.True(t, 60*time.Second, name+" running with its address", func() bool {
			h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { status ipAddresses } }`, map[string]any{"id": ids[name]}).OK(t).Into(t, "vm", &vm)
			return vm.Status == "RUNNING" && len(vm.IPAddresses) > 0
		})
		ips[name], vmids[name] = vm.IPAddresses[0], vmidOf(t, c, name)
	}
	p := h.Clusters[0].Plane
	if got := nettest.WaitReach(t, p.GuestNS(vmids["probe"]), ips["web"]+":7100", 30*time.Second); got != "hello from cloud-init" {
		t.Fatalf("the VM's server answered %q", got)
	}
	node := nodeOf(t, c, vmids["web"])
	if b, err := os.ReadFile(filepath.Join(h.Clusters[0].Sim.GuestRoot(node, vmids["web"]), "srv/hello.txt")); err != nil || string(b) != "hello from cloud-init" {
		t.Errorf("the file write_files wrote: %q %v", b, err)
	}
	userDataOn := func(node string) string {
		var s string
		if err := c.Get(vmtest.Ctx(t), fmt.Sprintf("/nodes/%s/qemu/%d/cloudinit/dump?type=user", node, vmids["web"]), &s); err != nil {
			t.Fatalf("user-data on %s: %v", node, err)
		}
		return s
	}
	before := userDataOn(node)

	other := map[string]string{"pve1": "pve2", "pve2": "pve1"}[node]
	var op gqlOp
	h.GraphQL(t, "bob", "blue", migrateVM, map[string]any{"in": map[string]any{"id": ids["web"], "host": other}}).OK(t).Into(t, "migrateVM", &op)
	poll.True(t, 60*time.Second, "the move", func() bool {
		h.GraphQL(t, "bob", "blue", `query($id: ID!) { operation(id: $id) { state error } }`, map[string]any{"id": op.ID}).OK(t).Into(t, "operation", &op)
		if op.State == "FAILED" {
			t.Fatalf("move: %s", opError(op))
		}
		return op.State == "SUCCEEDED"
	})
	if got := nodeOf(t, c, vmids["web"]); got != other {
		t.Fatalf("the VM is on %s, want %s", got, other)
	}
	if after := userDataOn(other); after != before || !strings.Contains(after, "srv/serve.py") {
		t.Errorf("user-data after the move:\n%s\nbefore:\n%s", after, before)
	}

	h.GraphQL(t, "bob", "blue", `mutation($id: ID!) { deleteVM(id: $id) { state } }`, map[string]any{"id": ids["web"]}).OK(t).Into(t, "deleteVM", &op)
	if op.State != "SUCCEEDED" {
		t.Fatalf("deleteVM: %+v", op)
	}
	for _, n := range []string{"pve1", "pve2"} {
		var vols []struct {
			VolID string `json:"volid"`
		}
		if err := c.Get(vmtest.Ctx(t), "/nodes/"+n+"/storage/local/content?content=snippets", &vols); err != nil {
			t.Fatal(err)
		}
		if len(vols) != 0 {
			t.Errorf("snippets on %s after the delete: %v", n, vols)
		}
	}
}
