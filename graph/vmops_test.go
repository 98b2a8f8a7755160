package graph_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/compute/images"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
)

const sshKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq0kYxJ9ehr0wF7rJ1aA0Yq8hZ3k2wq1n0X6cYzK7fU bob@laptop"

type gqlOp struct {
	ID    string
	Kind  string
	State string
	Step  string
	Error *string
	VMID  *string `json:"vmId"`
}

// opError is o's error, or "no error".
func opError(o gqlOp) string {
	if o.Error == nil {
		return "no error"
	}
	return *o.Error
}

type gqlVM struct {
	ID          string
	Name        string
	Status      string
	IPAddresses []string
	Zone        struct{ Name string }
}

// subscribe runs a subscription over the websocket (gqltest.Subscribe)
// and returns the data of every "next" message until the server
// completes it, failing the test on an error or an early end.
func subscribe(t *testing.T, url, token, vdc, query string) []json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	msgs, err := gqltest.Subscribe(ctx, url, map[string]any{"Authorization": "Bearer " + token, gqltest.VDCHeader: vdc}, query)
	var out []json.RawMessage
	for _, m := range msgs {
		switch m.Type {
		case "next":
			out = append(out, m.Payload)
		case "error", "connection_error":
			t.Fatalf("subscription error: %s", m.Payload)
		}
	}
	if err != nil || len(msgs) == 0 || msgs[len(msgs)-1].Type != "complete" {
		t.Fatalf("subscription ended: %v (after %d messages)", err, len(out))
	}
	return out
}

// seedVMs fills the catalog as an admin (compute profile "small", storage
// profile "ssd" on local-lvm in every zone, image "tiny" served over
// loopback) and creates blue's network "lan" (10.1.0.0/24) in each zone; it
// returns the networks' ids by zone.
func seedVMs(t *testing.T, h *meshtest.Harness, zones ...string) map[string]string {
	t.Helper()
	seedCatalog(t, h, zones...)
	return createNetworks(t, h, "bob", "blue", zones...)
}

// seedCatalog creates the catalog seedVMs does: the compute profile
// "small", the storage profile "ssd" on zones' local-lvm and the image
// "tiny", served until t ends.
func seedCatalog(t testing.TB, h *meshtest.Harness, zones ...string) {
	t.Helper()
	url, sum := vmtest.ImageServer(t, 3<<20)
	var pools []any
	for _, z := range zones {
		pools = append(pools, map[string]any{"zone": z, "pool": "local-lvm"})
	}
	h.GraphQL(t, "admin", "", `mutation($u: String!, $c: String!, $p: [ZonePoolInput!]!) {
	  createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name }
	  createStorageProfile(input: {name: "ssd", tier: "ssd", readMBps: 200, writeMBps: 100, pools: $p}) { name }
	  createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name } }`,
		map[string]any{"u": url, "c": sum, "p": pools}).OK(t)
}

// createNetworks creates the network "lan" (10.1.0.0/24) of user in vdc in
// each of zones and returns their ids by zone.
func createNetworks(t testing.TB, h *meshtest.Harness, user, vdc string, zones ...string) map[string]string {
	t.Helper()
	nets := map[string]string{}
	for _, z := range zones {
		var n struct{ ID string }
		h.GraphQL(t, user, vdc, `mutation($z: String!) { createNetwork(input: {name: "lan", zone: $z, cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`,
			map[string]any{"z": z}).OK(t).Into(t, "createNetwork", &n)
		nets[z] = n.ID
	}
	return nets
}

// awaitCreate polls the create operation op of user in vdc until it
// succeeds (failing the test if it fails) and returns the VM's id.
func awaitCreate(t testing.TB, h *meshtest.Harness, user, vdc, op string) string {
	t.Helper()
	var id string
	poll.True(t, 60*time.Second, "the create "+op, func() bool {
		var o gqlOp
		h.GraphQL(t, user, vdc, `query($id: ID!) { operation(id: $id) { state step error vmId } }`,
			map[string]any{"id": op}).OK(t).Into(t, "operation", &o)
		if o.State == "FAILED" {
			t.Fatalf("create %s failed at %s: %v", op, o.Step, *o.Error)
		}
		if o.VMID != nil {
			id = *o.VMID
		}
		return o.State == "SUCCEEDED"
	})
	return id
}

// awaitOp polls operation op of user in vdc until it succeeds, failing
// the test if it fails; what names it in the failure.
func awaitOp(t testing.TB, h *meshtest.Harness, user, vdc string, op *gqlOp, what string) {
	t.Helper()
	poll.True(t, 30*time.Second, what, func() bool {
		h.GraphQL(t, user, vdc, `query($id: ID!) { operation(id: $id) { kind state error } }`, map[string]any{"id": op.ID}).OK(t).Into(t, "operation", op)
		if op.State == "FAILED" {
			t.Fatalf("%s failed: %+v", what, op)
		}
		return op.State == "SUCCEEDED"
	})
}

const createVM = `mutation($in: CreateVMInput!) { createVM(input: $in) {
  vm { id name status ipAddresses zone { name } } operation { id kind state step vmId } } }`

// TestVMsEndToEnd drives VMs through the GraphQL API of the full harness
// (orchestrator, mesh, agents, simulated Proxmox) with real tokens: image
// staging by an admin, a VM in each of two zones (one staged on first use)
// followed over a subscription and by polling, RUNNING with its address,
// isolation from another VDC, quota refusal, bad input, stop and delete
// (whose address is free again).
func TestVMsEndToEnd(t *testing.T) {
	t.Parallel()
	vdcs := meshtest.DefaultVDCs()
	for _, v := range vdcs {
		if v.Name == "blue" {
			v.Quotas.VMs = 2
		}
	}
	opts := []meshtest.Option{
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}, meshtest.ClusterSpec{Name: "beta", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{VDCs: vdcs}),
	}
	if os.Getenv("VMOPS_LOG") != "" {
		opts = append(opts, meshtest.WithLogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	}
	h := meshtest.New(t, opts...)
	h.WaitOnline(t, 30*time.Second)
	nets := seedVMs(t, h, "alpha", "beta")
	h.GraphQL(t, "alice", "red", `mutation { createNetwork(input: {name: "lan", zone: "alpha", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`, nil).OK(t)

	// An admin stages the image into alpha; beta stays absent.
	var st struct{ State string }
	h.GraphQL(t, "admin", "", `mutation { stageImage(name: "tiny", zone: "alpha") { state } }`, nil).OK(t).Into(t, "stageImage", &st)
	if st.State != "STAGING" && st.State != "STAGED" {
		t.Fatalf("stageImage: %+v", st)
	}
	if r := h.GraphQL(t, "bob", "blue", `mutation { stageImage(name: "tiny", zone: "alpha") { state } }`, nil); r.Code(t) != "NOT_FOUND" {
		t.Errorf("stageImage by a VDC member: %s", r.Raw)
	}
	poll.True(t, 30*time.Second, "tiny staged in alpha", func() bool {
		var img struct {
			Zones []struct{ Zone, State string }
		}
		h.GraphQL(t, "admin", "", `{ image(name: "tiny") { zones { zone state reason } } }`, nil).OK(t).Into(t, "image", &img)
		states := map[string]string{}
		for _, z := range img.Zones {
			states[z.Zone] = z.State
		}
		if states["beta"] != "ABSENT" {
			t.Fatalf("beta: %+v", img)
		}
		return states["alpha"] == "STAGED"
	})

	in := func(zone, name string) map[string]any {
		return map[string]any{"in": map[string]any{"name": name, "zone": zone, "image": "tiny", "computeProfile": "small",
			"storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": nets[zone]}},
			"sshKeys": []string{sshKey}, "user": "bob"}}
	}
	var created struct {
		VM        *gqlVM
		Operation gqlOp
	}
	// alpha: the VM is there at once, CREATING; its operation is followed
	// over the websocket subscription until it ends.
	h.GraphQL(t, "bob", "blue", createVM, in("alpha", "web-a")).OK(t).Into(t, "createVM", &created)
	if created.VM == nil || created.VM.Status != "CREATING" || created.Operation.State != "RUNNING" || created.Operation.Kind != "CREATE_VM" {
		t.Fatalf("createVM in alpha: %+v", created)
	}
	vmA := created.VM.ID
	msgs := subscribe(t, h.GraphQLURL(), h.Token(t, "bob"), "blue", `subscription { operation(id: "`+created.Operation.ID+`") { state step vmId } }`)
	var last struct{ Data struct{ Operation gqlOp } }
	if err := json.Unmarshal(msgs[len(msgs)-1], &last); err != nil || last.Data.Operation.State != "SUCCEEDED" {
		t.Fatalf("subscription's last message %s (%d messages)", msgs[len(msgs)-1], len(msgs))
	}

	// beta: the first create stages the image; vm is null until the
	// template exists; the operation is polled.
	h.GraphQL(t, "bob", "blue", createVM, in("beta", "web-b")).OK(t).Into(t, "createVM", &created)
	if created.VM != nil || created.Operation.Step != "stage" {
		t.Fatalf("createVM in beta: %+v", created)
	}
	vmB := awaitCreate(t, h, "bob", "blue", created.Operation.ID)

	for zone, id := range map[string]string{"alpha": vmA, "beta": vmB} {
		var vm gqlVM
		h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { id name status ipAddresses zone { name } } }`,
			map[string]any{"id": id}).OK(t).Into(t, "vm", &vm)
		if vm.Status != "RUNNING" || vm.Zone.Name != zone || len(vm.IPAddresses) != 1 || vm.IPAddresses[0] != "10.1.0.2" {
			t.Errorf("%s: %+v", zone, vm)
		}
	}

	// Isolation: every query and mutation of red on blue's VM is NOT_FOUND.
	for name, q := range map[string]string{
		"vm":         `query($id: ID!) { vm(id: $id) { id } }`,
		"startVM":    `mutation($id: ID!) { startVM(id: $id) { id } }`,
		"stopVM":     `mutation($id: ID!) { stopVM(id: $id) { id } }`,
		"shutdownVM": `mutation($id: ID!) { shutdownVM(id: $id) { id } }`,
		"rebootVM":   `mutation($id: ID!) { rebootVM(id: $id) { id } }`,
		"deleteVM":   `mutation($id: ID!) { deleteVM(id: $id) { id } }`,
	} {
		if r := h.GraphQL(t, "alice", "red", q, map[string]any{"id": vmA}); r.Code(t) != "NOT_FOUND" {
			t.Errorf("%s from red: %s", name, r.Raw)
		}
	}
	if r := h.GraphQL(t, "alice", "red", `query($id: ID!) { operation(id: $id) { id } }`, map[string]any{"id": created.Operation.ID}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("operation from red: %s", r.Raw)
	}

	// Quota (2 VMs) and bad input.
	if r := h.GraphQL(t, "bob", "blue", createVM, in("alpha", "third")); r.Code(t) != "QUOTA_EXCEEDED" {
		t.Errorf("third VM: %s", r.Raw)
	}
	bad := in("alpha", "Bad_Name")
	r := h.GraphQL(t, "bob", "blue", createVM, bad)
	if r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != "input.name" {
		t.Errorf("bad name: %s", r.Raw)
	}

	// Stop, then delete: the VM is gone and its address is free again.
	var op gqlOp
	h.GraphQL(t, "bob", "blue", `mutation($id: ID!) { stopVM(id: $id) { id state kind } }`, map[string]any{"id": vmA}).OK(t).Into(t, "stopVM", &op)
	poll.True(t, 20*time.Second, "stop", func() bool {
		var vm gqlVM
		h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { status } }`, map[string]any{"id": vmA}).OK(t).Into(t, "vm", &vm)
		return vm.Status == "STOPPED"
	})
	h.GraphQL(t, "bob", "blue", `query($id: ID!) { operation(id: $id) { state } }`, map[string]any{"id": op.ID}).OK(t).Into(t, "operation", &op)
	if op.State != "SUCCEEDED" {
		t.Errorf("stop operation: %+v", op)
	}
	h.GraphQL(t, "bob", "blue", `mutation($id: ID!) { deleteVM(id: $id) { state kind } }`, map[string]any{"id": vmA}).OK(t).Into(t, "deleteVM", &op)
	if op.State != "SUCCEEDED" || op.Kind != "DELETE_VM" {
		t.Errorf("deleteVM: %+v", op)
	}
	if r := h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { id } }`, map[string]any{"id": vmA}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("vm after delete: %s", r.Raw)
	}
	again := in("alpha", "web-a2")
	again["in"].(map[string]any)["nics"] = []any{map[string]any{"network": nets["alpha"], "address": "10.1.0.2"}}
	h.GraphQL(t, "bob", "blue", createVM, again).OK(t).Into(t, "createVM", &created)
	if created.VM == nil || created.VM.IPAddresses[0] != "10.1.0.2" {
		t.Errorf("re-using the released address: %+v", created)
	}
}

// TestCrashFinishedByNewOrchestrator: a create whose runner dies right
// after the clone (here a compute service the test runs against the
// harness's zone, stopped in its AfterStep) is finished by the next
// orchestrator that starts: the VM ends RUNNING with its one address, once,
// and that orchestrator reports the create's operation SUCCEEDED from what
// Proxmox holds.
func TestCrashFinishedByNewOrchestrator(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{VMRecoverAfter: time.Nanosecond}))
	h.WaitOnline(t, 30*time.Second)
	nets := seedVMs(t, h, "alpha")
	ctx := vmtest.Ctx(t)

	zone := h.Zone(t, h.Clusters[0])
	zs := compute.StaticZones{{ID: zone.ID, Name: zone.Name, Client: h.Orchestrator.Zones().Client(zone.ID)}}
	crashed := make(chan struct{})
	var once sync.Once
	var dying *compute.Service
	dying, err := compute.New(compute.Config{Catalog: h.Catalog(t), Zones: zs, StaleAfter: time.Hour,
		Logger: slog.New(slog.DiscardHandler),
		AfterStep: func(ctx context.Context, _, step string) {
			if step != "clone" {
				return
			}
			once.Do(func() {
				go func() { _ = dying.Shutdown(context.Background()); close(crashed) }()
			})
			<-ctx.Done()
		}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := catalog.Get[*catalog.Image](ctx, h.Catalog(t), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dying.Images().Stager().Ensure(ctx, images.Target{Zone: zone.Name, Client: zs[0].Client, Storages: []string{"local-lvm"}}, img); err != nil {
		t.Fatal(err)
	}
	vm, op, err := dying.CreateVM(ctx, compute.CreateInput{VDC: "blue", Name: "phoenix", Zone: "alpha", Image: "tiny",
		ComputeProfile: "small", StorageProfile: "ssd", DiskGiB: 4, NICs: []compute.NICInput{{Network: nets["alpha"]}}, User: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	<-crashed

	h.RestartOrchestrator(t)
	var got gqlVM
	poll.True(t, 30*time.Second, "the new orchestrator to finish the create", func() bool {
		r := h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { id name status ipAddresses } }`, map[string]any{"id": vm.ID})
		if len(r.Errors) > 0 {
			return false // not listed until its VDC tag is written
		}
		r.Into(t, "vm", &got)
		return got.Status == "RUNNING"
	})
	if got.Name != "phoenix" || len(got.IPAddresses) != 1 || got.IPAddresses[0] != "10.1.0.2" {
		t.Errorf("recovered VM %+v", got)
	}
	poll.True(t, 10*time.Second, "the operation to succeed on the new orchestrator", func() bool {
		var fin gqlOp
		h.GraphQL(t, "bob", "blue", `query($id: ID!) { operation(id: $id) { state step } }`, map[string]any{"id": op.ID}).OK(t).Into(t, "operation", &fin)
		if fin.State == "FAILED" {
			t.Fatalf("operation on the new orchestrator: %+v", fin)
		}
		return fin.State == "SUCCEEDED"
	})
	var vms []gqlVM
	h.GraphQL(t, "bob", "blue", `{ vms { name ipAddresses } }`, nil).OK(t).Into(t, "vms", &vms)
	if len(vms) != 1 {
		t.Errorf("vms after recovery: %+v, want one", vms)
	}
}
