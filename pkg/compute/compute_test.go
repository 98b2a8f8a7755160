package compute_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/compute/images"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

var bigQuota = catalog.VDCQuotas{VCPUs: 1000, MemoryMiB: 1 << 22, StorageGiB: 100000, VMs: 1000}

func imagesTarget(z *vmtest.Zone) images.Target {
	return images.Target{Zone: z.Name, Client: z.Client, Storages: []string{z.Storage}}
}

// TestLifecycleTwoZones creates a VM in each of two zones (the first
// create stages the image in zone alpha; zone beta is staged ahead), sees
// it RUNNING with its address and config, then stops, starts, reboots,
// shuts down and deletes it; the addresses and quota come back.
func TestLifecycleTwoZones(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha", "beta")
	e.stage(e.zones[1])
	ctx := vmtest.Ctx(t)
	for _, z := range e.zones {
		in := e.input(z.Name, "web-"+z.Name)
		in.NICs = append(in.NICs, compute.NICInput{Network: e.small[z.Name], Address: "10.2.0.5"})
		vm, op, err := e.svc.CreateVM(ctx, in)
		if err != nil {
			t.Fatalf("%s: create: %v", z.Name, err)
		}
		if op.State != compute.OpRunning || op.Kind != compute.OpCreate {
			t.Fatalf("%s: operation %+v, want a running create", z.Name, op)
		}
		if z.Name == "beta" && (vm == nil || vm.Status != compute.StatusCreating) {
			t.Fatalf("beta (staged): vm %+v, want CREATING at once", vm)
		}
		final := e.wait(e.svc, "blue", op.ID)
		if final.State != compute.OpSucceeded || final.VMID == "" {
			t.Fatalf("%s: final %+v", z.Name, final)
		}
		got, err := e.svc.VM(ctx, "blue", final.VMID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != compute.StatusRunning || got.Name != in.Name || got.VCPUs != 1 || got.MemoryMiB != 512 || got.DiskGiB != 4 {
			t.Errorf("%s: vm %+v", z.Name, got)
		}
		if len(got.Addresses) != 2 || got.Addresses[0] != "10.1.0.2" || got.Addresses[1] != "10.2.0.5" {
			t.Errorf("%s: addresses %v, want [10.1.0.2 10.2.0.5]", z.Name, got.Addresses)
		}
		cfg, err := pveapi.GuestConfig(ctx, z.Client, got.Node, got.Ref.VMID)
		if err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]string{
			"ipconfig0": "ip=10.1.0.2/24,gw=10.1.0.1", "ipconfig1": "ip=10.2.0.5/28,gw=10.2.0.1",
			"ciuser": "ops", "tags": tenancy.GuestTags("blue"),
		} {
			if cfg.Str(k) != want {
				t.Errorf("%s: %s = %q, want %q", z.Name, k, cfg.Str(k), want)
			}
		}
		if d := cfg.Str("scsi0"); !strings.HasPrefix(d, "local-lvm:") || !strings.Contains(d, "mbps_rd=200") || !strings.Contains(d, "mbps_wr=100") || !strings.Contains(d, "size=4G") {
			t.Errorf("%s: scsi0 = %q", z.Name, d)
		}
		if !strings.Contains(cfg.Str("sshkeys"), "ssh-ed25519%20") {
			t.Errorf("%s: sshkeys = %q", z.Name, cfg.Str("sshkeys"))
		}
		ms := e.flexMappings(z)
		if len(ms) != 2 {
			t.Fatalf("%s: %d flexplane mappings, want 2", z.Name, len(ms))
		}
		for _, m := range ms {
			if int(m.VMID) != got.Ref.VMID {
				t.Errorf("%s: mapping %+v does not name guest %d", z.Name, m, got.Ref.VMID)
			}
			if !strings.Contains(strings.ToUpper(cfg.Str("net0")+cfg.Str("net1")), strings.ToUpper(m.MAC)) {
				t.Errorf("%s: mapping %+v has a MAC no NIC has", z.Name, m)
			}
		}

		for _, step := range []struct {
			do   func() (*compute.Operation, error)
			want compute.Status
		}{
			{func() (*compute.Operation, error) { return e.svc.StopVM(ctx, "blue", got.ID) }, compute.StatusStopped},
			{func() (*compute.Operation, error) { return e.svc.StartVM(ctx, "blue", got.ID) }, compute.StatusRunning},
			{func() (*compute.Operation, error) { return e.svc.RebootVM(ctx, "blue", got.ID) }, compute.StatusRunning},
			{func() (*compute.Operation, error) { return e.svc.ShutdownVM(ctx, "blue", got.ID) }, compute.StatusStopped},
		} {
			op, err := step.do()
			if err != nil {
				t.Fatalf("%s: power: %v", z.Name, err)
			}
			if fin := e.wait(e.svc, "blue", op.ID); fin.State != compute.OpSucceeded {
				t.Fatalf("%s: %s ended %+v", z.Name, op.Kind, fin)
			}
			if vm, err := e.svc.VM(ctx, "blue", got.ID); err != nil || vm.Status != step.want {
				t.Fatalf("%s: after %s: %+v, %v; want %s", z.Name, op.Kind, vm, err, step.want)
			}
		}
		if _, err := e.svc.StopVM(ctx, "blue", got.ID); err != nil {
			// stopping a stopped VM is allowed by Proxmox (a no-op task)
			t.Logf("stop of a stopped VM: %v", err)
		}
		if _, err := e.svc.StartVM(ctx, "blue", got.ID); err != nil {
			t.Fatal(err)
		}
		del, err := e.svc.DeleteVM(ctx, "blue", got.ID)
		if err != nil || del.State != compute.OpSucceeded {
			t.Fatalf("%s: delete: %+v, %v", z.Name, del, err)
		}
		if _, err := e.svc.VM(ctx, "blue", got.ID); !isCode(err, apierr.NotFound) {
			t.Errorf("%s: VM after delete: %v, want NOT_FOUND", z.Name, err)
		}
		if ms := e.flexMappings(z); len(ms) != 0 {
			t.Errorf("%s: mappings left after delete: %+v", z.Name, ms)
		}
	}
	if s := e.snapshot(); s.reserved != 0 {
		t.Errorf("%d quota reservations left", s.reserved)
	}
}

func isCode(err error, c apierr.Code) bool {
	got, _ := code(err)
	return got == c
}

// TestIsolation: another VDC's VM is NOT_FOUND for every call, and another
// VDC's network is no network.
func TestIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	e.stage(e.zones[0])
	ctx := vmtest.Ctx(t)
	vm, op, err := e.svc.CreateVM(ctx, e.input("alpha", "mine"))
	if err != nil {
		t.Fatal(err)
	}
	if fin := e.wait(e.svc, "blue", op.ID); fin.State != compute.OpSucceeded {
		t.Fatalf("create: %+v", fin)
	}
	before := e.snapshot()
	calls := map[string]func() error{
		"vm":        func() error { _, err := e.svc.VM(ctx, "red", vm.ID); return err },
		"operation": func() error { _, err := e.svc.Operation(ctx, "red", op.ID); return err },
		"start":     func() error { _, err := e.svc.StartVM(ctx, "red", vm.ID); return err },
		"stop":      func() error { _, err := e.svc.StopVM(ctx, "red", vm.ID); return err },
		"shutdown":  func() error { _, err := e.svc.ShutdownVM(ctx, "red", vm.ID); return err },
		"reboot":    func() error { _, err := e.svc.RebootVM(ctx, "red", vm.ID); return err },
		"delete":    func() error { _, err := e.svc.DeleteVM(ctx, "red", vm.ID); return err },
		"watch":     func() error { _, err := e.svc.Watch(ctx, "red", op.ID); return err },
		"bad id":    func() error { _, err := e.svc.VM(ctx, "blue", "bm90LWFuLWlk"); return err },
	}
	for name, call := range calls {
		if err := call(); !isCode(err, apierr.NotFound) {
			t.Errorf("%s from red: %v, want NOT_FOUND", name, err)
		}
	}
	in := e.input("alpha", "theirs")
	in.VDC = "red"
	in.NICs = []compute.NICInput{{Network: e.blue["alpha"]}}
	if _, _, err := e.svc.CreateVM(ctx, in); !isField(err, apierr.BadUserInput, "input.nics[0].network") {
		t.Errorf("create in red on blue's network: %v", err)
	}
	if after := e.snapshot(); !before.equal(after) {
		t.Errorf("state changed:\n%+v\n%+v", before, after)
	}
}

func isField(err error, c apierr.Code, field string) bool {
	got, f := code(err)
	return got == c && f == field
}

// TestBadInputChangesNothing: each invalid input is refused with its field
// and Proxmox and the catalog are as before.
func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha", "beta")
	e.stage(e.zones[0])
	ctx := vmtest.Ctx(t)
	before := e.snapshot()
	mod := func(f func(*compute.CreateInput)) compute.CreateInput {
		in := e.input("alpha", "ok")
		f(&in)
		return in
	}
	cases := map[string]struct {
		in    compute.CreateInput
		field string
	}{
		"name":           {mod(func(in *compute.CreateInput) { in.Name = "Not_A_DNS" }), "input.name"},
		"zone":           {mod(func(in *compute.CreateInput) { in.Zone = "nowhere" }), "input.zone"},
		"compute":        {mod(func(in *compute.CreateInput) { in.ComputeProfile = "huge" }), "input.computeProfile"},
		"storage":        {mod(func(in *compute.CreateInput) { in.StorageProfile = "nvme" }), "input.storageProfile"},
		"disk too small": {mod(func(in *compute.CreateInput) { in.DiskGiB = 0 }), "input.diskGiB"},
		"no nics":        {mod(func(in *compute.CreateInput) { in.NICs = nil }), "input.nics"},
		"five nics": {mod(func(in *compute.CreateInput) {
			for range 4 {
				in.NICs = append(in.NICs, in.NICs[0])
			}
		}), "input.nics"},
		"other zone's network": {mod(func(in *compute.CreateInput) { in.NICs[0].Network = e.blue["beta"] }), "input.nics[0].network"},
		"garbage network":      {mod(func(in *compute.CreateInput) { in.NICs[0].Network = "xyz" }), "input.nics[0].network"},
		"outside":              {mod(func(in *compute.CreateInput) { in.NICs[0].Address = "10.9.0.5" }), "input.nics[0].address"},
		"gateway":              {mod(func(in *compute.CreateInput) { in.NICs[0].Address = "10.1.0.1" }), "input.nics[0].address"},
		"network address":      {mod(func(in *compute.CreateInput) { in.NICs[0].Address = "10.1.0.0" }), "input.nics[0].address"},
		"broadcast":            {mod(func(in *compute.CreateInput) { in.NICs[0].Address = "10.1.0.255" }), "input.nics[0].address"},
		"not an address":       {mod(func(in *compute.CreateInput) { in.NICs[0].Address = "ten" }), "input.nics[0].address"},
		"ssh key":              {mod(func(in *compute.CreateInput) { in.SSHKeys = []string{"ssh-rsa garbage"} }), "input.sshKeys[0]"},
		"ssh key name":         {mod(func(in *compute.CreateInput) { in.Owner, in.SSHKeyNames = "alice", []string{"nope"} }), "input.sshKeyNames[0]"},
		"ssh key of no owner":  {mod(func(in *compute.CreateInput) { in.SSHKeyNames = []string{"laptop"} }), "input.sshKeyNames[0]"},
		"user":                 {mod(func(in *compute.CreateInput) { in.User = "Root User" }), "input.user"},
		"user root":            {mod(func(in *compute.CreateInput) { in.User = "root" }), "input.user"},
		"user nobody":          {mod(func(in *compute.CreateInput) { in.User = "nobody" }), "input.user"},
		"user daemon":          {mod(func(in *compute.CreateInput) { in.User = "daemon" }), "input.user"},
		"too many ssh keys": {mod(func(in *compute.CreateInput) {
			for range compute.MaxSSHKeys {
				in.SSHKeys = append(in.SSHKeys, testKey)
			}
		}), "input.sshKeys"},
	}
	for name, c := range cases {
		_, _, err := e.svc.CreateVM(ctx, c.in)
		if !isField(err, apierr.BadUserInput, c.field) {
			t.Errorf("%s: %v, want BAD_USER_INPUT on %s", name, err, c.field)
		}
	}
	// An image that is not there answers as another VDC's image does.
	if _, _, err := e.svc.CreateVM(ctx, mod(func(in *compute.CreateInput) { in.Image = "nope" })); !isField(err, apierr.NotFound, "input.image") {
		t.Errorf("image: %v, want NOT_FOUND on input.image", err)
	}
	if after := e.snapshot(); !before.equal(after) {
		t.Errorf("bad input changed state:\n%+v\n%+v", before, after)
	}
}

// TestStaticAddressTaken: a second claim of a static address is CONFLICT
// and leaves nothing behind.
func TestStaticAddressTaken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	e.stage(e.zones[0])
	ctx := vmtest.Ctx(t)
	in := e.input("alpha", "first")
	in.NICs[0].Address = "10.1.0.77"
	_, op, err := e.svc.CreateVM(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	e.wait(e.svc, "blue", op.ID)
	before := e.snapshot()
	in.Name = "second"
	if _, _, err := e.svc.CreateVM(ctx, in); !isField(err, apierr.Conflict, "input.nics[0].address") {
		t.Fatalf("second claim: %v, want CONFLICT", err)
	}
	if after := e.snapshot(); !before.equal(after) {
		t.Errorf("refused create changed state:\n%+v\n%+v", before, after)
	}
}

// TestConcurrentCreatesOneSmallSubnet: 50 creates compete for the 13
// addresses of a /28; 13 succeed with distinct addresses, 37 are CONFLICT,
// and no address or reservation leaks.
func TestConcurrentCreatesOneSmallSubnet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	e.stage(e.zones[0])
	ctx := vmtest.Ctx(t)
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ops []string
	conflicts := 0
	for i := range 50 {
		wg.Go(func() {
			in := e.input("alpha", fmt.Sprintf("vm%02d", i))
			in.NICs = []compute.NICInput{{Network: e.small["alpha"]}}
			_, op, err := e.svc.CreateVM(ctx, in)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ops = append(ops, op.ID)
			case isField(err, apierr.Conflict, "input.nics[0].network"):
				conflicts++
			default:
				t.Errorf("create %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if len(ops) != 13 || conflicts != 37 {
		t.Fatalf("%d accepted, %d conflicts; want 13 and 37", len(ops), conflicts)
	}
	answered := time.Since(start)
	seen := map[string]string{}
	for _, id := range ops {
		fin := e.wait(e.svc, "blue", id)
		if fin.State != compute.OpSucceeded {
			t.Fatalf("create %s: %+v", id, fin)
		}
		vm, err := e.svc.VM(ctx, "blue", fin.VMID)
		if err != nil || vm.Status != compute.StatusRunning || len(vm.Addresses) != 1 {
			t.Fatalf("vm %+v, %v", vm, err)
		}
		a := netip.MustParseAddr(vm.Addresses[0])
		if !netip.MustParsePrefix("10.2.0.0/28").Contains(a) || a == netip.MustParseAddr("10.2.0.1") {
			t.Errorf("%s got %s", vm.Name, a)
		}
		if other, dup := seen[a.String()]; dup {
			t.Errorf("%s handed to %s and %s", a, other, vm.Name)
		}
		seen[a.String()] = vm.Name
	}
	t.Logf("50 concurrent creates answered in %v; 13 VMs running after %v", answered, time.Since(start))
	if ms := e.flexMappings(e.zones[0]); len(ms) != 13 {
		t.Errorf("%d flexplane mappings, want 13", len(ms))
	}
	if s := e.snapshot(); s.reserved != 0 {
		t.Errorf("%d reservations left", s.reserved)
	}
}

// TestQuotaUnderConcurrency: with room for 3 VMs, 10 concurrent creates
// give 3 VMs and 7 QUOTA_EXCEEDED, with nothing leaked.
func TestQuotaUnderConcurrency(t *testing.T) {
	t.Parallel()
	q := bigQuota
	q.VMs = 3
	e := newEnv(t, q, "alpha")
	e.stage(e.zones[0])
	ctx := vmtest.Ctx(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ops []string
	refused := 0
	for i := range 10 {
		wg.Go(func() {
			_, op, err := e.svc.CreateVM(ctx, e.input("alpha", fmt.Sprintf("q%d", i)))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ops = append(ops, op.ID)
			case isField(err, apierr.QuotaExceeded, "quotas.vms"):
				refused++
			default:
				t.Errorf("create: %v", err)
			}
		})
	}
	wg.Wait()
	if len(ops) != 3 || refused != 7 {
		t.Fatalf("%d accepted, %d refused; want 3 and 7", len(ops), refused)
	}
	for _, id := range ops {
		if fin := e.wait(e.svc, "blue", id); fin.State != compute.OpSucceeded {
			t.Fatalf("%+v", fin)
		}
	}
	// Finished VMs count from Proxmox now: a fourth is still refused.
	if _, _, err := e.svc.CreateVM(ctx, e.input("alpha", "fourth")); !isCode(err, apierr.QuotaExceeded) {
		t.Fatalf("fourth create: %v, want QUOTA_EXCEEDED", err)
	}
	if ms := e.flexMappings(e.zones[0]); len(ms) != 3 {
		t.Errorf("%d mappings, want 3", len(ms))
	}
	if s := e.snapshot(); s.reserved != 0 {
		t.Errorf("%d reservations left", s.reserved)
	}
}

// An operation id names a VM and a Proxmox task: a member of one VDC who
// wraps another VDC's task (or a task of another kind) in the id of one of
// their own VMs reads nothing of it, by query or subscription.
func TestForgedOperationIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	e.stage(e.zones[0])
	ctx := vmtest.Ctx(t)
	create := func(vdc, name, network string) *compute.VM {
		in := e.input("alpha", name)
		in.VDC, in.NICs = vdc, []compute.NICInput{{Network: network}}
		vm, op, err := e.svc.CreateVM(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if fin := e.wait(e.svc, vdc, op.ID); fin.State != compute.OpSucceeded {
			t.Fatalf("create %s: %+v", name, fin)
		}
		return vm
	}
	mine := create("blue", "mine", e.blue["alpha"])
	theirs := create("red", "theirs", e.red["alpha"])
	stop, err := e.svc.StopVM(ctx, "red", theirs.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.wait(e.svc, "red", stop.ID)
	own, err := e.svc.StopVM(ctx, "blue", mine.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.wait(e.svc, "blue", own.ID)
	upidOf := func(opID string) string {
		raw, err := base64.RawURLEncoding.DecodeString(opID)
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.SplitN(string(raw), "/", 5)
		return parts[4]
	}
	forge := func(vmid int, kind compute.OpKind, upid string) string {
		return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "t/alpha/%d/%s/%s", vmid, kind, upid))
	}
	// A fresh service (another replica) derives every operation from
	// Proxmox: it has no record of its own to answer from.
	replica := e.newService(e.cfg)
	for name, id := range map[string]string{
		"red's task in blue's VM id":      forge(mine.Ref.VMID, compute.OpStop, upidOf(stop.ID)),
		"blue's stop task as a start":     forge(mine.Ref.VMID, compute.OpStart, upidOf(own.ID)),
		"red's task with red's VM number": forge(theirs.Ref.VMID, compute.OpStop, upidOf(stop.ID)),
	} {
		for _, svc := range []*compute.Service{e.svc, replica} {
			if op, err := svc.Operation(ctx, "blue", id); !isCode(err, apierr.NotFound) {
				t.Errorf("operation %s: %+v, %v; want NOT_FOUND", name, op, err)
			}
			if _, err := svc.Watch(ctx, "blue", id); !isCode(err, apierr.NotFound) {
				t.Errorf("watch %s: %v; want NOT_FOUND", name, err)
			}
		}
	}
	// The real id answers on any replica.
	if op, err := replica.Operation(ctx, "blue", own.ID); err != nil || op.State != compute.OpSucceeded || op.Kind != compute.OpStop {
		t.Fatalf("own stop on a replica: %+v, %v", op, err)
	}

	// Another VDC's VM is refused on what the guest list says, before its
	// configuration is read: nothing slower than for a missing VM gives it
	// away. (While configurations cannot be read, a read would show.)
	e.zones[0].Sim.FailRequests("GET", "/nodes/*/qemu/*/config", 500, 1000)
	defer e.zones[0].Sim.FailRequests("GET", "/nodes/*/qemu/*/config", 500, 0)
	for name, call := range map[string]func() error{
		"vm":     func() error { _, err := replica.VM(ctx, "blue", theirs.ID); return err },
		"start":  func() error { _, err := replica.StartVM(ctx, "blue", theirs.ID); return err },
		"delete": func() error { _, err := replica.DeleteVM(ctx, "blue", theirs.ID); return err },
		"operation": func() error {
			_, err := replica.Operation(ctx, "blue", forge(theirs.Ref.VMID, compute.OpStop, upidOf(stop.ID)))
			return err
		},
	} {
		if err := call(); !isCode(err, apierr.NotFound) {
			t.Errorf("%s of red's VM from blue: %v, want NOT_FOUND without reading its configuration", name, err)
		}
	}
}

// A create whose network is deleted between its validation and its
// address claim is CONFLICT on that network, not a zone failure, and
// leaves nothing behind.
func TestCreateRacingNetworkDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	e.stage(e.zones[0])
	z := e.zones[0]
	ctx := vmtest.Ctx(t)
	before := e.snapshot()
	net := vmtest.AddNetwork(t, z, "blue", "doomed", "10.9.0.0/24", "10.9.0.1")
	ref, err := tenancy.ParseNetworkID(net)
	if err != nil {
		t.Fatal(err)
	}
	racing := pvetest.ClientBefore(t, z.Sim, vmtest.Token, http.MethodPost, "/ips", func() {
		if err := network.Delete(ctx, z.Client, "blue", ref.VNet); err != nil {
			t.Errorf("delete the network: %v", err)
		}
	})
	cfg := e.cfg
	cfg.Zones = compute.StaticZones{{ID: z.Name, Name: z.Name, Client: racing}}
	svc := e.newService(cfg)
	in := e.input("alpha", "late")
	in.NICs = []compute.NICInput{{Network: net}}
	if _, _, err := svc.CreateVM(ctx, in); !isField(err, apierr.Conflict, "input.nics[0].network") {
		t.Fatalf("create racing the network's delete: %v, want CONFLICT on input.nics[0].network", err)
	}
	if after := e.snapshot(); !before.equal(after) {
		t.Errorf("the refused create changed state:\n%+v\n%+v", before, after)
	}
}
