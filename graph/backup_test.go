package graph_test

import (
	"bytes"
	"crypto/rand"
	"os"
	"slices"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/gqltest"
)

type gqlBackup struct {
	ID          string
	VM          *struct{ ID string }
	VMName      string
	Zone        struct{ Name string }
	SizeGiB     float64
	Status      string
	Message     *string
	Description *string
}

const backupFields = `id vm { id } vmName zone { name } sizeGiB status message description`

// TestBackupsEndToEnd: a VM is backed up to the zone's BACKUP profile's
// storage while it runs; its backup is listed on the VM and in the VDC,
// never in another VDC, where it cannot be deleted or restored either
// (NOT_FOUND); a restore makes a new VM with a new MAC and address and
// the disk's bytes of the backed-up one, and a second restore to the
// same name is CONFLICT; the backup outlives its VM and is then deleted.
func TestBackupsEndToEnd(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "backups")
	src := createBlueVM(t, h, tn, "src")

	// What the guest wrote on its disk before the backup.
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	f, err := os.OpenFile(diskFile(t, h, src, "scsi0"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 1<<30); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// takeBackup backs VM vm up and waits until the backup is written.
	takeBackup := func(vm string) {
		t.Helper()
		var op gqlOp
		h.GraphQL(t, tn.bob, tn.blue, `mutation($vm: ID!) { createBackup(vm: $vm, input: {description: "before the upgrade"}) { id kind state vmId } }`,
			map[string]any{"vm": vm}).OK(t).Into(t, "createBackup", &op)
		if op.Kind != "CREATE_BACKUP" || op.VMID == nil || *op.VMID != vm {
			t.Fatalf("createBackup: %+v", op)
		}
		awaitOp(t, h, tn.bob, tn.blue, &op, "the backup")
	}
	takeBackup(src)
	var onVM struct{ Backups []gqlBackup }
	h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { vm(id: $id) { backups { `+backupFields+` } } }`, map[string]any{"id": src}).OK(t).Into(t, "vm", &onVM)
	if len(onVM.Backups) != 1 {
		t.Fatalf("the VM's backups: %+v", onVM.Backups)
	}
	b := onVM.Backups[0]
	if b.Status != "SUCCEEDED" || b.VM == nil || b.VM.ID != src || b.VMName != "src" || b.Zone.Name != "alpha" ||
		b.SizeGiB <= 0 || b.Description == nil || *b.Description != "before the upgrade" || b.Message != nil {
		t.Fatalf("backup: %+v", b)
	}
	list := func(user, vdc string) []gqlBackup {
		var c struct {
			Nodes      []gqlBackup
			TotalCount int
		}
		h.GraphQL(t, user, vdc, `{ backups(first: 10) { nodes { `+backupFields+` } totalCount } }`, nil).OK(t).Into(t, "backups", &c)
		return c.Nodes
	}
	if l := list(tn.bob, tn.blue); len(l) != 1 || l[0].ID != b.ID {
		t.Fatalf("the VDC's backups: %+v", l)
	}

	// Another VDC sees nothing of it, and cannot touch it.
	if l := list(tn.alice, tn.red); len(l) != 0 {
		t.Errorf("red lists blue's backups: %+v", l)
	}
	const restore = `mutation($in: RestoreBackupInput!) { restoreBackup(input: $in) { id kind state vmId } }`
	for _, c := range []struct {
		user, vdc, query string
		vars             map[string]any
		code, field      string
	}{
		{tn.alice, tn.red, `mutation($id: ID!) { deleteBackup(id: $id) { id } }`, map[string]any{"id": b.ID}, "NOT_FOUND", "id"},
		{tn.alice, tn.red, restore, map[string]any{"in": map[string]any{"backup": b.ID, "name": "stolen"}}, "NOT_FOUND", "input.backup"},
		{tn.alice, tn.red, `mutation($vm: ID!) { createBackup(vm: $vm) { id } }`, map[string]any{"vm": src}, "NOT_FOUND", ""},
		{tn.bob, tn.blue, restore, map[string]any{"in": map[string]any{"backup": "bm9wZQ", "name": "x"}}, "NOT_FOUND", "input.backup"},
		{tn.bob, tn.blue, restore, map[string]any{"in": map[string]any{"backup": b.ID, "name": "Not_A_Name"}}, "BAD_USER_INPUT", "input.name"},
		{tn.bob, tn.blue, restore, map[string]any{"in": map[string]any{"backup": b.ID, "name": "src"}}, "CONFLICT", "input.name"},
		{tn.bob, tn.blue, `mutation($vm: ID!) { createBackup(vm: $vm, input: {storageProfile: "ssd"}) { id } }`, map[string]any{"vm": src}, "BAD_USER_INPUT", "input.storageProfile"},
		{tn.bob, tn.blue, createVM, map[string]any{"in": map[string]any{"name": "nodisk", "zone": "alpha", "image": "tiny",
			"computeProfile": "small", "storageProfile": "backups", "diskGiB": 4, "user": "bob", "nics": []any{map[string]any{"network": tn.net}}}}, "BAD_USER_INPUT", "input.storageProfile"},
	} {
		r := h.GraphQL(t, c.user, c.vdc, c.query, c.vars)
		if r.Code(t) != c.code || fieldOf(t, r) != c.field {
			t.Errorf("%s in %s: %s %v: %s, want %s %s", c.user, c.vdc, c.query, c.vars, r.Raw, c.code, c.field)
		}
	}

	// Two restores to one name at once: one makes the VM, the other is
	// CONFLICT.
	answers := make(chan *gqltest.Response, 2)
	for range 2 {
		go func() {
			answers <- h.GraphQL(t, tn.bob, tn.blue, restore, map[string]any{"in": map[string]any{"backup": b.ID, "name": "copy"}})
		}()
	}
	var op gqlOp
	var codes []string
	for range 2 {
		r := <-answers
		if c := r.Codes(); len(c) > 0 {
			codes = append(codes, c...)
			continue
		}
		codes = append(codes, "created")
		r.Into(t, "restoreBackup", &op)
	}
	if slices.Sort(codes); !slices.Equal(codes, []string{"CONFLICT", "created"}) {
		t.Fatalf("two restores to one name answered %q, want one created and one CONFLICT", codes)
	}
	restored := awaitCreate(t, h, tn.bob, tn.blue, op.ID)
	if restored == src {
		t.Fatal("the restore answered the source VM")
	}
	type nic struct {
		MAC         string
		IPAddresses []string
	}
	var a, c struct {
		Name   string
		Status string
		Nics   []nic
	}
	const vmq = `query($id: ID!) { vm(id: $id) { name status nics { mac ipAddresses } } }`
	h.GraphQL(t, tn.bob, tn.blue, vmq, map[string]any{"id": src}).OK(t).Into(t, "vm", &a)
	h.GraphQL(t, tn.bob, tn.blue, vmq, map[string]any{"id": restored}).OK(t).Into(t, "vm", &c)
	if c.Name != "copy" || c.Status != "RUNNING" || len(c.Nics) != 1 || len(a.Nics) != 1 || c.Nics[0].MAC == a.Nics[0].MAC ||
		len(c.Nics[0].IPAddresses) != 1 || len(a.Nics[0].IPAddresses) != 1 || c.Nics[0].IPAddresses[0] == a.Nics[0].IPAddresses[0] {
		t.Fatalf("restored %+v from %+v: want a running VM named copy with its own MAC and address", c, a)
	}
	got := make([]byte, len(data))
	rf, err := os.Open(diskFile(t, h, restored, "scsi0"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = rf.ReadAt(got, 1<<30)
	rf.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the restored disk does not hold the backed-up bytes (%v)", err)
	}

	// deleteVM(keepBackups: false) takes the VM's backups with it.
	takeBackup(restored)
	if l := list(tn.bob, tn.blue); len(l) != 2 {
		t.Fatalf("with the restored VM's backup: %+v", l)
	}
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { deleteVM(id: $id, keepBackups: false) { state } }`, map[string]any{"id": restored}).OK(t)
	if l := list(tn.bob, tn.blue); len(l) != 1 || l[0].ID != b.ID {
		t.Fatalf("after deleteVM(keepBackups: false): %+v", l)
	}

	// The backup outlives its VM, then is deleted.
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { deleteVM(id: $id) { state } }`, map[string]any{"id": src}).OK(t)
	if l := list(tn.bob, tn.blue); len(l) != 1 || l[0].VM != nil || l[0].VMName != "src" {
		t.Fatalf("after the VM's delete: %+v", l)
	}
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { deleteBackup(id: $id) { id } }`, map[string]any{"id": b.ID}).OK(t)
	if l := list(tn.bob, tn.blue); len(l) != 0 {
		t.Fatalf("after deleteBackup: %+v", l)
	}
	if r := h.GraphQL(t, tn.bob, tn.blue, restore, map[string]any{"in": map[string]any{"backup": b.ID, "name": "late"}}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("restoring a deleted backup: %s", r.Raw)
	}
}
