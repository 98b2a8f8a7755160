package graph_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"
	"k8s.io/utils/ptr"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// diskPath is the file of volume volid on node, as Proxmox names it.
func diskPath(t *testing.T, ctx context.Context, c *proxmox.Client, node, volid string) string {
	t.Helper()
	storage, _, _ := strings.Cut(volid, ":")
	var v struct{ Path string }
	if err := c.Get(ctx, "/nodes/"+node+"/storage/"+storage+"/content/"+volid, &v); err != nil {
		t.Fatalf("volume %s: %v", volid, err)
	}
	return v.Path
}

func sha(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := shaPrefix(t, path, fi.Size())
	return sum
}

// TestMigrateAcrossZones moves a running VM with two disks and two NICs
// from alpha to beta through GraphQL: the disks arrive byte-identical
// (checksums of the simulators' disk files), one NIC goes to the network
// of the same name, the other to the one given; the VM runs in beta with
// its addresses claimed there with its backup schedule, and nothing of it
// is left in alpha.
// Preflight refusals come first and change nothing.
func TestMigrateAcrossZones(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2, Snippets: true}, meshtest.ClusterSpec{Name: "beta", Nodes: 1, Snippets: true}),
		meshtest.WithAPI(meshtest.APISpec{}))
	h.WaitOnline(t, 30*time.Second)
	nets := seedVMs(t, h, "alpha", "beta")
	var lan2 = map[string]string{}
	for z, cidr := range map[string]string{"alpha": "10.2.0.0/24", "beta": "10.3.0.0/24"} {
		var n struct{ ID string }
		h.GraphQL(t, "bob", "blue", `mutation($z: String!, $c: String!, $g: String!) { createNetwork(input: {name: "lan2-`+z+`", zone: $z, cidr: $c, gateway: $g}) { id } }`,
			map[string]any{"z": z, "c": cidr, "g": cidr[:len(cidr)-4] + "1"}).OK(t).Into(t, "createNetwork", &n)
		lan2[z] = n.ID
	}
	// It is in a placement group of alpha, which it leaves on the move.
	var pair struct{ ID string }
	h.GraphQL(t, "bob", "blue", `mutation { createPlacementGroup(input: {name: "pair", zone: "alpha", policy: SPREAD}) { id } }`, nil).
		OK(t).Into(t, "createPlacementGroup", &pair)
	var created struct{ Operation gqlOp }
	h.GraphQL(t, "bob", "blue", createVM, map[string]any{"in": map[string]any{"name": "traveller", "zone": "alpha", "image": "tiny", "placementGroup": "pair",
		"computeProfile": "small", "storageProfile": "ssd", "diskGiB": 1,
		"nics":    []any{map[string]any{"network": nets["alpha"]}, map[string]any{"network": lan2["alpha"]}},
		"sshKeys": []string{sshKey}, "user": "bob", "userData": "#cloud-config\nruncmd:\n  - echo traveller-marker\n"}}).OK(t).Into(t, "createVM", &created)
	id := awaitCreate(t, h, "bob", "blue", created.Operation.ID)

	ctx := t.Context()
	alpha, beta := h.Zone(t, h.Clusters[0]), h.Zone(t, h.Clusters[1])
	ac, bc := h.Orchestrator.Zones().Client(alpha.ID), h.Orchestrator.Zones().Client(beta.ID)
	g, ok, err := pveapi.FindGuest(ctx, ac, mustRef(t, id))
	if err != nil || !ok {
		t.Fatalf("the VM's guest: %v %v", ok, err)
	}
	// A second disk, and real bytes on both.
	if _, err := pveapi.Run(ctx, ac, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/config", g.Node, g.VMID), map[string]any{"scsi1": "local-lvm:1"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := pveapi.GuestConfig(ctx, ac, g.Node, g.VMID)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for _, k := range []string{"scsi0", "scsi1"} {
		vol, _, _ := strings.Cut(cfg.Str(k), ",")
		p := diskPath(t, ctx, ac, g.Node, vol)
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		data := make([]byte, 2<<20)
		_, _ = rand.Read(data)
		for _, off := range []int64{0, 300 << 20, 1<<30 - 2<<20} {
			if _, err := f.WriteAt(data, off); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		sums[k] = sha(t, p)
	}

	mv := func(in map[string]any) *meshtest.GraphQLResponse {
		return h.GraphQL(t, "bob", "blue", migrateVM, map[string]any{"in": in})
	}
	// Refusals before any disk I/O.
	if r := mv(map[string]any{"id": id, "zone": "gamma"}); r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != "input.zone" {
		t.Errorf("unknown zone: %s", r.Raw)
	}
	if r := mv(map[string]any{"id": id, "zone": "beta"}); r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != "input.networks" {
		t.Errorf("lan2-alpha has no namesake in beta: %s", r.Raw)
	}
	if r := mv(map[string]any{"id": id, "zone": "beta", "networks": []any{map[string]any{"from": lan2["alpha"], "to": lan2["alpha"]}}}); r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != "input.networks[0].to" {
		t.Errorf("a target network of the wrong zone: %s", r.Raw)
	}
	// The agents do not allow snapshots: the cluster's own API does.
	direct := simClient(t, h.Clusters[0])
	if _, err := pveapi.Run(ctx, direct, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/snapshot", g.Node, g.VMID), map[string]any{"snapname": "before"}); err != nil {
		t.Fatal(err)
	}
	good := map[string]any{"id": id, "zone": "beta", "networks": []any{map[string]any{"from": lan2["alpha"], "to": lan2["beta"]}}}
	if r := mv(good); r.Code(t) != "CONFLICT" {
		t.Errorf("a VM with a snapshot: %s", r.Raw)
	}
	if _, err := pveapi.Run(ctx, direct, "DELETE", fmt.Sprintf("/nodes/%s/qemu/%d/snapshot/before", g.Node, g.VMID), map[string]any{}); err != nil {
		t.Fatal(err)
	}
	// A replication job (to the other node of alpha) does not cross zones.
	other := map[string]string{"pve1": "pve2", "pve2": "pve1"}[g.Node]
	job := fmt.Sprintf("%d-0", g.VMID)
	if _, err := pveapi.Run(ctx, direct, "POST", "/cluster/replication", map[string]any{"id": job, "target": other, "type": "local"}); err != nil {
		t.Fatal(err)
	}
	if r := mv(good); r.Code(t) != "CONFLICT" || !strings.Contains(r.Errors[0].Message, "replication job "+job) {
		t.Errorf("a replicated VM: %s", r.Raw)
	}
	if _, err := pveapi.Run(ctx, direct, "DELETE", "/cluster/replication/"+job, map[string]any{}); err != nil {
		t.Fatal(err)
	}
	// The copy of the disks (2 GiB) must fit the VDC's storage quota.
	setStorage := func(gib int) {
		h.GraphQL(t, "admin", "", `mutation($g: Int!) { updateVDC(input: {name: "blue", quotas: {vcpus: 64, memoryMiB: 131072, storageGiB: $g, vms: 20}}) { name } }`,
			map[string]any{"g": gib}).OK(t)
	}
	setStorage(2)
	if r := mv(good); r.Code(t) != "QUOTA_EXCEEDED" || !strings.Contains(r.Errors[0].Message, "storageGiB") {
		t.Errorf("a move beyond the storage quota: %s", r.Raw)
	}
	setStorage(2000)
	if r := h.GraphQL(t, "alice", "red", migrateVM, map[string]any{"in": good}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("another VDC's VM: %s", r.Raw)
	}
	if maps, _ := pveapi.IPAMStatus(ctx, bc); countMACs(maps) != 0 {
		t.Fatalf("the refusals claimed addresses in beta: %+v", maps)
	}

	// Its backup schedule goes along (a BACKUP profile in each zone).
	h.GraphQL(t, "admin", "", `mutation { createStorageProfile(input: {name: "backups", tier: "backup", kind: BACKUP,
	  pools: [{zone: "alpha", pool: "local"}, {zone: "beta", pool: "local"}]}) { name } }`, nil).OK(t)
	h.GraphQL(t, "bob", "blue", `mutation($id: ID!) { setBackupSchedule(input: {vm: $id, schedule: "sat 03:30", keepLast: 2}) { id } }`,
		map[string]any{"id": id}).OK(t)

	var op gqlMigrateOp
	mv(good).OK(t).Into(t, "migrateVM", &op)
	var last gqlMigrateOp
	poll.True(t, 120*time.Second, "the move", func() bool {
		h.GraphQL(t, "bob", "blue", `query($id: ID!) { operation(id: $id) { state step error vmId progress { bytesMoved bytesTotal bytesPerSecond } } }`,
			map[string]any{"id": op.ID}).OK(t).Into(t, "operation", &last)
		if last.State == "FAILED" {
			t.Fatalf("the move failed at step %s: %s", last.Step, ptr.Deref(last.Error, ""))
		}
		return last.State == "SUCCEEDED"
	})
	if p := last.Progress; p == nil || p.BytesTotal != 2<<30 || p.BytesMoved != p.BytesTotal {
		t.Errorf("progress at the end: %+v", p)
	}

	// Nothing of it is left in alpha.
	if _, ok, _ := pveapi.FindGuest(ctx, ac, g.VMID); ok {
		t.Errorf("the source is still in alpha")
	}
	if maps, _ := pveapi.IPAMStatus(ctx, ac); countMACs(maps) != 0 {
		t.Errorf("alpha still holds the VM's addresses: %+v", maps)
	}
	// In beta it runs, with both disks byte-identical and both NICs.
	var vms []struct {
		ID, Status  string
		IPAddresses []string
		Zone        struct{ Name string }
	}
	h.GraphQL(t, "bob", "blue", `{ vms { id status ipAddresses zone { name } } }`, nil).OK(t).Into(t, "vms", &vms)
	if len(vms) != 1 || vms[0].ID != id || vms[0].Zone.Name != "beta" || vms[0].Status != "RUNNING" || len(vms[0].IPAddresses) != 2 {
		t.Fatalf("vms after the move: %+v (want %s in beta)", vms, id)
	}
	// The backup schedule is beta's job now; alpha has none left.
	var sched struct {
		BackupSchedule *struct {
			Schedule string
			KeepLast *int
			State    string
		}
	}
	h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { backupSchedule { schedule keepLast state } } }`, map[string]any{"id": id}).
		OK(t).Into(t, "vm", &sched)
	if s := sched.BackupSchedule; s == nil || s.Schedule != "sat 03:30" || s.KeepLast == nil || *s.KeepLast != 2 || s.State != "ACTIVE" {
		t.Errorf("the moved VM's backup schedule: %+v", s)
	}
	if jobs, err := pveapi.BackupJobs(ctx, ac); err != nil || len(jobs) != 0 {
		t.Errorf("alpha's backup jobs after the move: %+v %v", jobs, err)
	}
	// A placement group is zonal: the VM left alpha's, which is empty.
	var moved struct{ PlacementGroup *struct{ ID string } }
	h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { placementGroup { id } } }`, map[string]any{"id": id}).OK(t).Into(t, "vm", &moved)
	if moved.PlacementGroup != nil {
		t.Errorf("the VM is still in placement group %s after moving to beta", moved.PlacementGroup.ID)
	}
	h.GraphQL(t, "bob", "blue", `mutation($id: ID!) { deletePlacementGroup(id: $id) { id } }`, map[string]any{"id": pair.ID}).OK(t)
	// Its cloud-init user-data came along: a snippet in beta named by the
	// target's cicustom; alpha's is gone.
	bdirect := simClient(t, h.Clusters[1])
	var bg []struct {
		VMID       int
		Name, Node string
	}
	if err := bdirect.Get(ctx, "/cluster/resources?type=vm", &bg); err != nil || len(bg) == 0 {
		t.Fatalf("beta's guests: %+v %v", bg, err)
	}
	found := false
	for _, bgst := range bg {
		if bgst.Name != "traveller" {
			continue
		}
		found = true
		var data string
		if err := bdirect.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/cloudinit/dump?type=user", bgst.Node, bgst.VMID), &data); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(data, "traveller-marker") || !strings.Contains(data, "user: bob") {
			t.Errorf("the user-data in beta:\n%s", data)
		}
	}
	if !found {
		t.Errorf("no guest traveller in beta: %+v", bg)
	}
	for _, node := range []string{"pve1", "pve2"} {
		var vols []struct {
			VolID string `json:"volid"`
		}
		if err := direct.Get(ctx, "/nodes/"+node+"/storage/local/content?content=snippets", &vols); err != nil || len(vols) != 0 {
			t.Errorf("alpha's snippets on %s after the move: %v %v", node, vols, err)
		}
	}
	// vm(id) finds it under the id it kept, with its addresses in beta;
	// for another VDC it does not exist.
	if st, _, addrs := vmHost(t, h, "bob", "blue", id); st != "RUNNING" || len(addrs) != 2 {
		t.Errorf("vm(id) after the move: %s %v", st, addrs)
	}
	if r := h.GraphQL(t, "alice", "red", `query($id: ID!) { vm(id: $id) { id } }`, map[string]any{"id": id}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("vm(id) of the moved VM from red: %s", r.Raw)
	}
	// A power action on it is an operation that can be followed, of the
	// VM under the id it kept; another VDC cannot follow it.
	var stop gqlOp
	h.GraphQL(t, "bob", "blue", `mutation($id: ID!) { stopVM(id: $id) { id state } }`, map[string]any{"id": id}).OK(t).Into(t, "stopVM", &stop)
	var stopped struct{ State, VMID string }
	poll.True(t, 60*time.Second, "the stop of the moved VM", func() bool {
		h.GraphQL(t, "bob", "blue", `query($id: ID!) { operation(id: $id) { state vmId } }`,
			map[string]any{"id": stop.ID}).OK(t).Into(t, "operation", &stopped)
		return stopped.State == "SUCCEEDED"
	})
	if stopped.VMID != id {
		t.Errorf("the stop's operation names VM %s, want the kept id %s", stopped.VMID, id)
	}
	if r := h.GraphQL(t, "alice", "red", `query($id: ID!) { operation(id: $id) { state } }`, map[string]any{"id": stop.ID}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("the stop's operation from red: %s", r.Raw)
	}
	if st, _, _ := vmHost(t, h, "bob", "blue", id); st != "STOPPED" {
		t.Errorf("the moved VM after its stop: %s", st)
	}
	h.GraphQL(t, "bob", "blue", `mutation($id: ID!) { startVM(id: $id) { id } }`, map[string]any{"id": id}).OK(t)
	poll.True(t, 60*time.Second, "the moved VM running again", func() bool {
		st, _, _ := vmHost(t, h, "bob", "blue", id)
		return st == "RUNNING"
	})
	// A new VM in alpha does not take the VMID the moved one's id keeps.
	var again struct{ Operation gqlOp }
	h.GraphQL(t, "bob", "blue", createVM, map[string]any{"in": map[string]any{"name": "newcomer", "zone": "alpha", "image": "tiny",
		"computeProfile": "small", "storageProfile": "ssd", "diskGiB": 1, "nics": []any{map[string]any{"network": nets["alpha"]}},
		"sshKeys": []string{sshKey}, "user": "bob"}}).OK(t).Into(t, "createVM", &again)
	if fresh := awaitCreate(t, h, "bob", "blue", again.Operation.ID); fresh == id {
		t.Errorf("the new VM in alpha got the moved VM's id %s", id)
	}
	var both []struct{ ID, Name string }
	h.GraphQL(t, "bob", "blue", `{ vms { id name } }`, nil).OK(t).Into(t, "vms", &both)
	if len(both) != 2 || both[0].ID == both[1].ID {
		t.Errorf("vms with the newcomer: %+v", both)
	}
	var named struct{ Name string }
	h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { name } }`, map[string]any{"id": id}).OK(t).Into(t, "vm", &named)
	if named.Name != "traveller" {
		t.Errorf("vm(id) with the newcomer: %+v", named)
	}
	gs, err := pveapi.Guests(ctx, bc)
	if err != nil {
		t.Fatal(err)
	}
	var tg pveapi.Resource
	for _, x := range gs {
		if x.Template != 1 {
			tg = x
		}
	}
	tcfg, err := pveapi.GuestConfig(ctx, bc, tg.Node, tg.VMID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scsi0", "scsi1"} {
		vol, _, _ := strings.Cut(tcfg.Str(k), ",")
		if got := sha(t, diskPath(t, ctx, bc, tg.Node, vol)); got != sums[k] {
			t.Errorf("%s arrived with sha256 %s, left with %s", k, got, sums[k])
		}
	}
	for i, want := range []string{"virtio=", "virtio="} {
		if n := tcfg.Str(fmt.Sprintf("net%d", i)); len(n) < len(want) {
			t.Errorf("net%d in beta: %q", i, n)
		}
	}
}

func countMACs(ms []pveapi.IPMapping) int {
	n := 0
	for _, m := range ms {
		if m.Gateway == 0 && m.MAC != "" {
			n++
		}
	}
	return n
}

func mustRef(t *testing.T, id string) int {
	t.Helper()
	ref, err := tenancy.ParseVMID(id)
	if err != nil {
		t.Fatal(err)
	}
	return ref.VMID
}

// simClient talks to a simulated cluster's API directly with its token, as
// its operator would.
func simClient(t testing.TB, c *meshtest.Cluster) *proxmox.Client {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.Sim.CACertPEM())
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	id, secret, _ := strings.Cut(c.Token, "=")
	return proxmox.NewClient(c.Sim.URL()+"/api2/json", proxmox.WithHTTPClient(&http.Client{Transport: tr}), proxmox.WithAPIToken(id, secret))
}
