package compute_test

import (
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
)

// TestReusedVMIDHidesTheEarlierGuestsTasks: a VM that gets the VMID of a
// deleted one (Proxmox hands out the lowest free VMID, shared by every VDC
// of the cluster) shows none of the deleted guest's tasks in its history,
// and their operation ids are NOT_FOUND for its VDC; its own tasks show.
// It holds for a VM of another VDC and of the same VDC.
func TestReusedVMIDHidesTheEarlierGuestsTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	e.stage(e.zones[0])
	ctx := vmtest.Ctx(t)
	create := func(in compute.CreateInput) *compute.VM {
		t.Helper()
		_, op, err := e.svc.CreateVM(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		fin := e.wait(e.svc, in.VDC, op.ID)
		if fin.State != compute.OpSucceeded {
			t.Fatalf("create %s: %+v", in.Name, fin)
		}
		vm, err := e.svc.VM(ctx, in.VDC, fin.VMID)
		if err != nil {
			t.Fatal(err)
		}
		return vm
	}
	power := func(vdc, id string, do func() (*compute.Operation, error)) compute.Operation {
		t.Helper()
		op, err := do()
		if err != nil {
			t.Fatal(err)
		}
		fin := e.wait(e.svc, vdc, op.ID)
		if fin.State != compute.OpSucceeded {
			t.Fatalf("%s of %s: %+v", op.Kind, id, fin)
		}
		return fin
	}
	for _, vdcB := range []string{"red", "blue"} {
		t.Run(vdcB, func(t *testing.T) {
			a := create(e.input("alpha", "first"))
			power("blue", a.ID, func() (*compute.Operation, error) { return e.svc.StopVM(ctx, "blue", a.ID) })
			startA := power("blue", a.ID, func() (*compute.Operation, error) { return e.svc.StartVM(ctx, "blue", a.ID) })
			histA, err := e.svc.History(ctx, "blue", a.ID, compute.MaxHistory)
			if err != nil {
				t.Fatal(err)
			}
			if del, err := e.svc.DeleteVM(ctx, "blue", a.ID); err != nil || del.State != compute.OpSucceeded {
				t.Fatalf("delete: %+v, %v", del, err)
			}
			// Proxmox keeps task start times in seconds, and a task of the
			// second of a create counts as the VM's: B is created in a
			// later second than A's last task.
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))

			in := e.input("alpha", "second")
			if vdcB == "red" {
				in.VDC, in.NICs = "red", []compute.NICInput{{Network: e.red["alpha"]}}
			}
			b := create(in)
			if b.Ref.VMID != a.Ref.VMID || b.Node != a.Node {
				t.Fatalf("B is guest %d on %s, want A's VMID %d on %s reused", b.Ref.VMID, b.Node, a.Ref.VMID, a.Node)
			}
			stopB := power(vdcB, b.ID, func() (*compute.Operation, error) { return e.svc.StopVM(ctx, vdcB, b.ID) })

			hist, err := e.svc.History(ctx, vdcB, b.ID, compute.MaxHistory)
			if err != nil {
				t.Fatal(err)
			}
			var created time.Time
			for _, op := range hist {
				if op.Kind == compute.OpCreate {
					created = op.Started
				}
			}
			if created.IsZero() {
				t.Fatalf("B's history has no create: %+v", hist)
			}
			seen := map[string]bool{}
			for _, op := range hist {
				seen[op.ID] = true
				if op.Started.Truncate(time.Second).Before(created.Truncate(time.Second)) {
					t.Errorf("B's history has %s %s of %s, before B's create at %s", op.Kind, op.Step, op.Started, created)
				}
				if _, err := e.svc.Operation(ctx, vdcB, op.ID); err != nil {
					t.Errorf("B's operation %+v: %v", op, err)
				}
			}
			if !seen[stopB.ID] {
				t.Errorf("B's history lacks its stop %s: %+v", stopB.ID, hist)
			}
			for _, op := range histA {
				if op.Kind == compute.OpCreate {
					continue
				}
				if seen[op.ID] {
					t.Errorf("B's history has A's %s %s", op.Kind, op.Step)
				}
				if _, err := e.svc.Operation(ctx, vdcB, op.ID); !compute.IsKind(err, compute.KindNotFound) {
					t.Errorf("A's %s %s for %s: %v, want NOT_FOUND", op.Kind, op.Step, vdcB, err)
				}
			}
			if _, err := e.svc.Operation(ctx, vdcB, startA.ID); !compute.IsKind(err, compute.KindNotFound) {
				t.Errorf("A's start for %s: %v, want NOT_FOUND", vdcB, err)
			}
		})
	}
}
