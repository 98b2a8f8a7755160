package compute_test

import (
	"slices"
	"testing"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/agenttest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
)

// TestUserDataSnippet: a VM created with user-data gets it as its real
// cloud-init user-data: the agent writes a snippet on the VM's node and
// the VM's cicustom names it before its first start; deleting the VM
// deletes the snippet.
func TestUserDataSnippet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	z := e.zones[0]
	cfg := e.cfg
	cfg.Snippets = agenttest.Snippets(t, z)
	svc := e.newService(cfg)
	ctx := vmtest.Ctx(t)
	in := e.input(z.Name, "worker-1")
	in.UserData = []byte("#cloud-config\nruncmd:\n  - [kubeadm, join, --config, /run/kubeadm/kubeadm-join-config.yaml]\n")
	_, op, err := svc.CreateVM(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	final := e.wait(svc, "blue", op.ID)
	if final.State != compute.OpSucceeded {
		t.Fatalf("create: %+v", final)
	}
	vm, err := svc.VM(ctx, "blue", final.VMID)
	if err != nil {
		t.Fatal(err)
	}
	if vm.Status != compute.StatusRunning {
		t.Fatalf("VM %+v, want running", vm)
	}
	if got := agenttest.UserData(t, z, vm.Node, vm.Ref.VMID); got != string(in.UserData) {
		t.Fatalf("cloud-init user-data %q, want the create's", got)
	}
	if vols := agenttest.SnippetVolumes(t, z, vm.Node); len(vols) != 1 {
		t.Fatalf("snippets on %s: %v, want the VM's one", vm.Node, vols)
	}
	if del, err := svc.DeleteVM(ctx, "blue", vm.ID); err != nil || del.State != compute.OpSucceeded {
		t.Fatalf("delete: %+v %v", del, err)
	}
	for _, node := range z.Sim.NodeNames() {
		if vols := agenttest.SnippetVolumes(t, z, node); !slices.Equal(vols, nil) {
			t.Fatalf("snippets on %s after delete: %v", node, vols)
		}
	}
}
