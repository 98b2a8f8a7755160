package graph_test

import (
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
)

type gqlVMDetail struct {
	HighAvailability bool
	Nics             []struct {
		Index   int
		Network *struct{ ID, Name string }
		Bridge  string
		Model   string
		Mac     string
		IPs     []string `json:"ipAddresses"`
	}
	Disks []struct {
		Slot           string
		SizeGiB        float64
		Storage        string
		StorageProfile *struct{ Name string }
		ReadMBps       *int
		WriteMBps      *int
		ReadIops       *int
		WriteIops      *int
	}
	Operations []gqlOp
}

const vmDetail = `query($id: ID!, $n: Int) { vm(id: $id) { highAvailability
  nics { index network { id name } bridge model mac ipAddresses }
  disks { slot sizeGiB storage storageProfile { name } readMBps writeMBps readIops writeIops }
  operations(first: $n) { id kind state step error vmId } } }`

// TestVMDetail reads a VM's NICs, disks and operations through the full
// harness: its NIC on the VDC's network with the IPAM's address, its disk
// with the storage profile's limits, the create and the power actions from
// Proxmox's task history (their ids answer operation too), and another
// VDC's member gets NOT_FOUND for all of it. The VDC's usage counts the VM.
func TestVMDetail(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "detail")

	var created struct {
		VM        *gqlVM
		Operation gqlOp
	}
	h.GraphQL(t, tn.bob, tn.blue, createVM, map[string]any{"in": map[string]any{"name": "web", "zone": "alpha", "image": "tiny",
		"computeProfile": "small", "storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": tn.net}},
		"sshKeys": []string{sshKey}, "user": "bob"}}).OK(t).Into(t, "createVM", &created)
	id := awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)

	var vm gqlVMDetail
	h.GraphQL(t, tn.bob, tn.blue, vmDetail, map[string]any{"id": id}).OK(t).Into(t, "vm", &vm)
	if len(vm.Nics) != 1 {
		t.Fatalf("nics: %+v", vm.Nics)
	}
	nic := vm.Nics[0]
	if nic.Index != 0 || nic.Network == nil || nic.Network.ID != tn.net || nic.Network.Name != "lan" || nic.Bridge == "" ||
		nic.Model != "virtio" || !regexp.MustCompile(`^([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}$`).MatchString(nic.Mac) ||
		len(nic.IPs) != 1 || nic.IPs[0] != "10.1.0.2" {
		t.Errorf("nic: %+v (network %+v)", nic, nic.Network)
	}
	if len(vm.Disks) != 1 {
		t.Fatalf("disks: %+v", vm.Disks)
	}
	if vm.HighAvailability {
		t.Error("a VM on local storage (local-lvm) is highly available")
	}
	d := vm.Disks[0]
	if d.Slot != "scsi0" || d.SizeGiB != 4 || d.Storage != "local-lvm" || d.StorageProfile == nil || d.StorageProfile.Name != "ssd" ||
		d.ReadMBps == nil || *d.ReadMBps != 200 || d.WriteMBps == nil || *d.WriteMBps != 100 || d.ReadIops != nil || d.WriteIops != nil {
		t.Errorf("disk: %+v", d)
	}
	kinds := func(ops []gqlOp) (out []string) {
		for _, o := range ops {
			out = append(out, o.Kind+" "+o.State)
		}
		return out
	}
	// The create started the VM: its start task is in the history too.
	if got := kinds(vm.Operations); len(got) != 2 || got[0] != "START_VM SUCCEEDED" || got[1] != "CREATE_VM SUCCEEDED" {
		t.Errorf("operations after the create: %v", got)
	}
	for _, o := range vm.Operations {
		if o.VMID == nil || *o.VMID != id {
			t.Errorf("operation %+v: vmId, want %s", o, id)
		}
	}
	// The same history as a connection, a page of one at a time; and an
	// operation is a Node.
	var paged []gqlOp
	var after *string
	for range 4 {
		var c struct {
			OperationsConnection struct {
				Nodes    []gqlOp
				PageInfo struct {
					HasNextPage bool
					EndCursor   *string
				}
				TotalCount int
			}
		}
		h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!, $after: String) { vm(id: $id) { operationsConnection(first: 1, after: $after) { nodes { id kind state vmId } pageInfo { hasNextPage endCursor } totalCount } } }`,
			map[string]any{"id": id, "after": after}).OK(t).Into(t, "vm", &c)
		paged = append(paged, c.OperationsConnection.Nodes...)
		if c.OperationsConnection.TotalCount != 2 || !c.OperationsConnection.PageInfo.HasNextPage {
			break
		}
		after = c.OperationsConnection.PageInfo.EndCursor
	}
	if got := kinds(paged); !slices.Equal(got, kinds(vm.Operations)) {
		t.Errorf("operationsConnection by pages of 1 = %v, operations = %v", got, kinds(vm.Operations))
	}
	var n struct {
		Typename string `json:"__typename"`
		Kind     string
	}
	h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { node(id: $id) { __typename ... on Operation { kind } } }`, map[string]any{"id": vm.Operations[1].ID}).OK(t).Into(t, "node", &n)
	if n.Typename != "Operation" || n.Kind != "CREATE_VM" {
		t.Errorf("node(operation id) = %+v", n)
	}
	if r := h.GraphQL(t, tn.alice, tn.red, `query($id: ID!) { node(id: $id) { id } }`, map[string]any{"id": vm.Operations[1].ID}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("another VDC's operation as a node: %s", r.Raw)
	}
	var op gqlOp
	h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { operation(id: $id) { kind state } }`, map[string]any{"id": vm.Operations[1].ID}).OK(t).Into(t, "operation", &op)
	if op.Kind != "CREATE_VM" || op.State != "SUCCEEDED" {
		t.Errorf("operation(id) of the history's create: %+v", op)
	}

	// The live counters grow while it runs.
	type counters struct{ NetInBytes, NetOutBytes, DiskReadBytes, DiskWriteBytes float64 }
	const countersQuery = `query($id: ID!) { vm(id: $id) { netInBytes netOutBytes diskReadBytes diskWriteBytes } }`
	var first, later counters
	h.GraphQL(t, tn.bob, tn.blue, countersQuery, map[string]any{"id": id}).OK(t).Into(t, "vm", &first)
	poll.True(t, 10*time.Second, "the VM's network counter to grow", func() bool {
		h.GraphQL(t, tn.bob, tn.blue, countersQuery, map[string]any{"id": id}).OK(t).Into(t, "vm", &later)
		return later.NetInBytes > first.NetInBytes
	})
	if later.NetOutBytes <= 0 || later.DiskReadBytes <= 0 || later.DiskWriteBytes <= 0 ||
		later.NetOutBytes < first.NetOutBytes || later.DiskWriteBytes < first.DiskWriteBytes {
		t.Errorf("counters %+v after %+v", later, first)
	}

	// A stop: newest first, the same id stopVM returned.
	var stop gqlOp
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { stopVM(id: $id) { id } }`, map[string]any{"id": id}).OK(t).Into(t, "stopVM", &stop)
	poll.True(t, 20*time.Second, "the stop in the history", func() bool {
		h.GraphQL(t, tn.bob, tn.blue, vmDetail, map[string]any{"id": id, "n": 1}).OK(t).Into(t, "vm", &vm)
		return len(vm.Operations) == 1 && vm.Operations[0].State == "SUCCEEDED"
	})
	if o := vm.Operations[0]; o.ID != stop.ID || o.Kind != "STOP_VM" || o.Step != "qmstop" {
		t.Errorf("newest operation %+v, want stopVM's %s", o, stop.ID)
	}
	h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { operation(id: $id) { kind state } }`, map[string]any{"id": vm.Operations[0].ID}).OK(t).Into(t, "operation", &op)
	if op.Kind != "STOP_VM" || op.State != "SUCCEEDED" {
		t.Errorf("operation(id) of the history's stop: %+v", op)
	}
	for _, n := range []int{0, 101} {
		if r := h.GraphQL(t, tn.bob, tn.blue, vmDetail, map[string]any{"id": id, "n": n}); r.Code(t) != "BAD_USER_INPUT" {
			t.Errorf("operations(first: %d): %s", n, r.Raw)
		}
	}

	// The VDC's usage counts it, as its quotas do; red uses nothing.
	var usage struct {
		Usage struct{ Vcpus, MemoryMiB, StorageGiB, Vms int }
	}
	h.GraphQL(t, tn.bob, tn.blue, `query($n: String!) { vdc(name: $n) { usage { vcpus memoryMiB storageGiB vms } } }`, map[string]any{"n": tn.blue}).OK(t).Into(t, "vdc", &usage)
	if u := usage.Usage; u.Vms != 1 || u.Vcpus != 1 || u.MemoryMiB != 512 || u.StorageGiB != 4 {
		t.Errorf("blue's usage %+v, want 1 VM, 1 vCPU, 512 MiB, 4 GiB", u)
	}
	h.GraphQL(t, tn.alice, tn.red, `{ currentVDC { usage { vcpus memoryMiB storageGiB vms } } }`, nil).OK(t).Into(t, "currentVDC", &usage)
	if u := usage.Usage; u != (struct{ Vcpus, MemoryMiB, StorageGiB, Vms int }{}) {
		t.Errorf("red's usage %+v, want none", u)
	}

	// Another VDC's member: NOT_FOUND, and nothing of it in their list.
	if r := h.GraphQL(t, tn.alice, tn.red, vmDetail, map[string]any{"id": id}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("vm detail from red: %s", r.Raw)
	}
	var theirs []gqlVMDetail
	h.GraphQL(t, tn.alice, tn.red, `{ vms(first: 10) { nics { mac } disks { slot } operations(first: 5) { id } } }`, nil).OK(t).Into(t, "vms", &theirs)
	if len(theirs) != 0 {
		t.Errorf("red's VMs: %+v", theirs)
	}
}
