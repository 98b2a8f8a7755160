package compute_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/agenttest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// snippetEnv is an env of zone alpha whose service writes snippets
// through agents.
func snippetEnv(t *testing.T) (*env, *vmtest.Zone, *compute.Service) {
	t.Helper()
	e := newEnv(t, bigQuota, "alpha")
	z := e.zones[0]
	cfg := e.cfg
	cfg.Snippets = agenttest.Snippets(t, z)
	return e, z, e.newService(cfg)
}

// stagedSnippetEnv is an env of zone alpha with its image staged, and a
// config whose snippets agents write.
func stagedSnippetEnv(t *testing.T) (*env, *vmtest.Zone, compute.Config) {
	t.Helper()
	e := newEnv(t, bigQuota, "alpha")
	z := e.zones[0]
	e.stage(z)
	cfg := e.cfg
	cfg.Snippets = agenttest.Snippets(t, z)
	return e, z, cfg
}

// create creates a VM of blue with svc and waits for it.
func (e *env) create(svc *compute.Service, in compute.CreateInput) *compute.VM {
	e.t.Helper()
	ctx := vmtest.Ctx(e.t)
	_, op, err := svc.CreateVM(ctx, in)
	if err != nil {
		e.t.Fatal(err)
	}
	final := e.wait(svc, "blue", op.ID)
	if final.State != compute.OpSucceeded {
		e.t.Fatalf("create: %+v", final)
	}
	vm, err := svc.VM(ctx, "blue", final.VMID)
	if err != nil {
		e.t.Fatal(err)
	}
	return vm
}

// TestUserDataSnippet: a VM created with user-data gets it as its real
// cloud-init user-data, merged with flexplane's own part (its user and
// SSH keys, which a cicustom user= snippet would otherwise drop): the
// agent writes a snippet on the VM's node and the VM's cicustom names it
// before its first start; its description holds no user-data; a move to
// another node keeps it; deleting the VM deletes the snippet on every node.
func TestUserDataSnippet(t *testing.T) {
	t.Parallel()
	e, z, svc := snippetEnv(t)
	ctx := vmtest.Ctx(t)
	in := e.input(z.Name, "worker-1")
	in.UserData = []byte("#cloud-config\nruncmd:\n  - [kubeadm, join, --config, /run/kubeadm/kubeadm-join-config.yaml]\n")
	vm := e.create(svc, in)
	if vm.Status != compute.StatusRunning {
		t.Fatalf("VM %+v, want running", vm)
	}
	got := agenttest.UserData(t, z, vm.Node, vm.Ref.VMID)
	for _, want := range []string{"multipart/mixed", "user: ops", testKey, "hostname: worker-1", "- default",
		"Merge-Type: list(append)+dict(no_replace,recurse_list)+str()", string(in.UserData)} {
		if !strings.Contains(got, want) {
			t.Errorf("cloud-init user-data lacks %q:\n%s", want, got)
		}
	}
	gcfg, err := pveapi.GuestConfig(ctx, z.Client, vm.Node, vm.Ref.VMID)
	if err != nil {
		t.Fatal(err)
	}
	if desc := gcfg.Str("description"); strings.Contains(desc, "userData\"") || len(desc) > 2048 {
		t.Errorf("the description carries the user-data (%d bytes): %s", len(desc), desc)
	}
	if vols := agenttest.SnippetVolumes(t, z, vm.Node); len(vols) != 1 {
		t.Fatalf("snippets on %s: %v, want the VM's one", vm.Node, vols)
	}

	// A move to the other node takes the snippet along.
	other := z.Sim.NodeNames()[0]
	if other == vm.Node {
		other = z.Sim.NodeNames()[1]
	}
	mop, err := svc.MigrateVM(ctx, compute.MigrateInput{VDC: "blue", ID: vm.ID, Host: other})
	if err != nil {
		t.Fatal(err)
	}
	if fin := e.wait(svc, "blue", mop.ID); fin.State != compute.OpSucceeded {
		t.Fatalf("migrate: %+v", fin)
	}
	if moved := agenttest.UserData(t, z, other, vm.Ref.VMID); moved != got {
		t.Fatalf("user-data after the move:\n%s\nwant:\n%s", moved, got)
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

// TestUserDataBadInput: user-data that is not a cloud-config or a script,
// does not parse (the error names the line), is too large, or would
// replace the VM's own user is refused on userData, and nothing is left.
func TestUserDataBadInput(t *testing.T) {
	t.Parallel()
	e, z, svc := snippetEnv(t)
	ctx := vmtest.Ctx(t)
	before := e.snapshot()
	for _, c := range []struct{ data, want string }{
		{"runcmd: [ls]\n", "#cloud-config"},
		{"#cloud-config\nruncmd:\n  - ls\nhostname: a: b\n", "line 4"},
		{"#cloud-config\n" + strings.Repeat("#", compute.MaxUserData), "more than 65536"},
		{"#cloud-config\nusers:\n  - default\n  - name: ops\n", "users[1]"},
		{"#cloud-config\n- a list\n", "mapping"},
	} {
		in := e.input(z.Name, "bad")
		in.UserData = []byte(c.data)
		_, _, err := svc.CreateVM(ctx, in)
		ce, ok := err.(*compute.Error)
		if !ok || ce.Kind != compute.KindBadInput || ce.Field != "userData" || !strings.Contains(ce.Message, c.want) {
			t.Errorf("user-data %.40q: %v, want BAD_INPUT on userData naming %q", c.data, err, c.want)
		}
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Fatalf("refused creates changed state:\n%+v\n%+v", before, after)
	}
}

// crashBefore creates a VM with user-data with a service that dies right
// after the create's step (as when the orchestrator dies) and returns the
// VM's guest.
func crashBefore(t *testing.T, e *env, cfg compute.Config, step string) pveapi.Resource {
	t.Helper()
	ctx := vmtest.Ctx(t)
	crashed := make(chan struct{})
	var once sync.Once
	var dying *compute.Service
	cfg.AfterStep = func(ctx context.Context, _ string, s string) {
		if s != step {
			return
		}
		once.Do(func() {
			go func() {
				_ = dying.Shutdown(context.Background())
				close(crashed)
			}()
		})
		<-ctx.Done()
	}
	dying = e.newService(cfg)
	in := e.input("alpha", "phoenix")
	in.UserData = []byte("#!/bin/sh\necho hello\n")
	vm, _, err := dying.CreateVM(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	<-crashed
	g, ok, err := pveapi.FindGuest(ctx, e.zones[0].Client, vm.Ref.VMID)
	if err != nil || !ok || !isCreatingGuest(g) {
		t.Fatalf("guest after the crash: %+v %v %v", g, ok, err)
	}
	return g
}

// TestUserDataRecovered: the snippet is what recovery reads. A create
// that died after writing the snippet (before naming it in cicustom) is
// finished by another replica with that snippet; one that died before
// writing it cannot be finished (the user-data is nowhere else) and is
// cleaned up.
func TestUserDataRecovered(t *testing.T) {
	t.Parallel()
	e, z, cfg := stagedSnippetEnv(t)
	ctx := vmtest.Ctx(t)

	g := crashBefore(t, e, cfg, "resize")
	written := "#cloud-config\n# written before the crash\n"
	ref := compute.SnippetRef{ZoneID: z.Name, Node: g.Node, Storage: "local", Name: "fp-" + strconv.Itoa(g.VMID) + "-user.yaml"}
	if err := cfg.Snippets.WriteSnippet(ctx, ref, []byte(written)); err != nil {
		t.Fatal(err)
	}
	fresh := e.newService(cfg)
	if err := fresh.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got := agenttest.UserData(t, z, g.Node, g.VMID); got != written {
		t.Fatalf("user-data after recovery %q, want the snippet's %q", got, written)
	}
	if vm, err := fresh.VM(ctx, "blue", tenancy.VMRef{ZoneID: z.Name, VMID: g.VMID}.ID()); err != nil || vm.Status != compute.StatusRunning {
		t.Fatalf("VM after recovery: %+v %v", vm, err)
	}

	lost := crashBefore(t, e, cfg, "resize")
	if err := e.newService(cfg).Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := pveapi.FindGuest(ctx, z.Client, lost.VMID); err != nil || ok {
		t.Fatalf("the create without its snippet was not cleaned up: %v %v", ok, err)
	}
}

// TestUserDataVerbatim: a Cluster API bootstrap's user-data (a jinja
// template of cloud-init's, which the strict check would refuse) reaches
// the guest byte for byte, not merged.
func TestUserDataVerbatim(t *testing.T) {
	t.Parallel()
	e, z, svc := snippetEnv(t)
	in := e.input(z.Name, "worker-2")
	in.UserData = []byte("## template: jinja\n#cloud-config\nruncmd:\n  - kubeadm join --node-name '{{ ds.meta_data.local_hostname }}'\n")
	in.UserDataVerbatim = true
	vm := e.create(svc, in)
	if got := agenttest.UserData(t, z, vm.Node, vm.Ref.VMID); got != string(in.UserData) {
		t.Fatalf("user-data %q, want the bootstrap's as it is", got)
	}
}

// TestUserDataNeedsSnippets: in a zone whose hosts keep no snippets, a
// create with user-data is refused up front and changes nothing.
func TestUserDataNeedsSnippets(t *testing.T) {
	t.Parallel()
	e, z, cfg := stagedSnippetEnv(t)
	svc := e.newService(cfg)
	ctx := vmtest.Ctx(t)
	if err := z.Client.Put(ctx, "/storage/local", map[string]string{"content": "iso,vztmpl,backup,import"}, nil); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	in := e.input(z.Name, "web")
	in.UserData = []byte("#cloud-config\nruncmd: [ls]\n")
	_, _, err := svc.CreateVM(ctx, in)
	if ce, ok := err.(*compute.Error); !ok || ce.Kind != compute.KindBadInput || ce.Field != "userData" || !strings.Contains(ce.Message, "snippets") {
		t.Fatalf("create without snippet storage: %v", err)
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Fatalf("the refused create changed state:\n%+v\n%+v", before, after)
	}
}

// TestRestoreCarriesUserData: a VM restored from a backup gets a snippet of
// its own holding the backed-up VM's user-data, with flexplane's part
// written for the new VM (its name), never naming the original's snippet,
// name or address; the original keeps its own.
func TestRestoreCarriesUserData(t *testing.T) {
	t.Parallel()
	e, z, cfg := stagedSnippetEnv(t)
	svc := e.newService(cfg)
	ctx := vmtest.Ctx(t)
	e.backupProfile(z.Name, "local")
	in := e.input(z.Name, "origin")
	in.UserData = []byte("#cloud-config\nwrite_files:\n  - path: /etc/motd\n    content: restored-marker\n")
	src := e.create(svc, in)
	orig := agenttest.UserData(t, z, src.Node, src.Ref.VMID)
	op, err := svc.Disks().Backups().Create(ctx, "blue", src.ID, compute.BackupInput{})
	if err != nil {
		t.Fatal(err)
	}
	if fin := e.wait(svc, "blue", op.ID); fin.State != compute.OpSucceeded {
		t.Fatalf("backup: %+v", fin)
	}
	list, err := svc.Disks().Backups().List(ctx, "blue", src.ID)
	if err != nil || len(list) != 1 {
		t.Fatalf("backups: %+v, %v", list, err)
	}
	_, rop, err := svc.Disks().Backups().Restore(ctx, "blue", compute.RestoreInput{Backup: list[0].ID, Name: "copy"})
	if err != nil {
		t.Fatal(err)
	}
	fin := e.wait(svc, "blue", rop.ID)
	if fin.State != compute.OpSucceeded {
		t.Fatalf("restore: %+v", fin)
	}
	cp, err := svc.VM(ctx, "blue", fin.VMID)
	if err != nil {
		t.Fatal(err)
	}
	gcfg, err := pveapi.GuestConfig(ctx, z.Client, cp.Node, cp.Ref.VMID)
	if err != nil {
		t.Fatal(err)
	}
	if want := "snippets/fp-" + strconv.Itoa(cp.Ref.VMID) + "-user.yaml"; !strings.HasSuffix(gcfg.Str("cicustom"), want) {
		t.Errorf("the restored VM's cicustom is %q, want its own snippet %s", gcfg.Str("cicustom"), want)
	}
	got := agenttest.UserData(t, z, cp.Node, cp.Ref.VMID)
	for _, want := range []string{"hostname: copy", "fqdn: copy", "user: ops", testKey, "content: restored-marker"} {
		if !strings.Contains(got, want) {
			t.Errorf("the restored VM's user-data lacks %q:\n%s", want, got)
		}
	}
	for _, never := range []string{"origin", src.Addresses[0]} {
		if strings.Contains(got, never) {
			t.Errorf("the restored VM's user-data names the original's %q:\n%s", never, got)
		}
	}
	if len(cp.Addresses) != 1 || cp.Addresses[0] == src.Addresses[0] {
		t.Errorf("the restored VM's addresses %v, the original's %v", cp.Addresses, src.Addresses)
	}
	if again := agenttest.UserData(t, z, src.Node, src.Ref.VMID); again != orig {
		t.Errorf("the original's user-data changed:\n%s\nwas:\n%s", again, orig)
	}
}
