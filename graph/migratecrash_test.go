package graph_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// Crash points of a move across zones. Each test moves a running VM with a
// 1 GiB disk from alpha to beta with the source agents reading at
// crashBandwidth (so the copy takes seconds), waits for the copy to be
// under way (bytes moved, polled), breaks one part, and then checks that
// the move undoes itself: the source is the VM, running, with its
// address, and beta holds no guest, volume or address of it.

// crashBandwidth is the source agents' migration bandwidth in these tests.
const crashBandwidth = 64 << 20

// moveRig is a harness with a VM in alpha ready to move to beta.
type moveRig struct {
	h      *meshtest.Harness
	id     string // the VM's id
	vmid   int    // its VMID in alpha
	source string // its address
}

func newMoveRig(t *testing.T, opts ...meshtest.Option) *moveRig {
	t.Helper()
	h := meshtest.New(t, append([]meshtest.Option{meshtest.WithClusters(
		meshtest.ClusterSpec{Name: "alpha", Nodes: 1, MigrationBandwidth: crashBandwidth},
		meshtest.ClusterSpec{Name: "beta", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{VMRecoverAfter: 3 * time.Second, VMRecoverInterval: 500 * time.Millisecond})}, opts...)...)
	h.WaitOnline(t, 30*time.Second)
	nets := seedVMs(t, h, "alpha", "beta")
	var created struct{ Operation gqlOp }
	h.GraphQL(t, "bob", "blue", createVM, map[string]any{"in": map[string]any{"name": "fragile", "zone": "alpha", "image": "tiny",
		"computeProfile": "small", "storageProfile": "ssd", "diskGiB": 1,
		"nics": []any{map[string]any{"network": nets["alpha"]}}, "sshKeys": []string{sshKey}, "user": "bob"}}).OK(t).Into(t, "createVM", &created)
	r := &moveRig{h: h, id: awaitCreate(t, h, "bob", "blue", created.Operation.ID)}
	r.vmid = mustRef(t, r.id)
	_, _, addrs := vmHost(t, h, "bob", "blue", r.id)
	if len(addrs) != 1 {
		t.Fatalf("the VM's addresses: %v", addrs)
	}
	r.source = addrs[0]
	// Data every 32 MiB, so that the target reports progress all along.
	ctx := t.Context()
	ac := h.Orchestrator.Zones().Client(h.Zone(t, h.Clusters[0]).ID)
	g, ok, err := pveapi.FindGuest(ctx, ac, r.vmid)
	if err != nil || !ok {
		t.Fatalf("the VM's guest: %v %v", ok, err)
	}
	cfg, err := pveapi.GuestConfig(ctx, ac, g.Node, g.VMID)
	if err != nil {
		t.Fatal(err)
	}
	vol, _, _ := strings.Cut(cfg.Str("scsi0"), ",")
	f, err := os.OpenFile(diskPath(t, ctx, ac, g.Node, vol), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := make([]byte, 1<<20)
	for off := int64(0); off < 1<<30; off += 32 << 20 {
		_, _ = rand.Read(data)
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// start starts the move and waits until the copy is under way.
func (r *moveRig) start(t *testing.T) string {
	t.Helper()
	var op gqlMigrateOp
	r.h.GraphQL(t, "bob", "blue", migrateVM, map[string]any{"in": map[string]any{"id": r.id, "zone": "beta"}}).OK(t).Into(t, "migrateVM", &op)
	poll.True(t, 60*time.Second, "the copy to be under way", func() bool {
		p := r.progress(t, op.ID)
		if p.State != "RUNNING" {
			t.Fatalf("the move ended before the crash: %+v", p)
		}
		return p.Step == "copy" && p.Progress != nil && p.Progress.BytesMoved > 0
	})
	if p := r.progress(t, op.ID).Progress; p.BytesMoved >= p.BytesTotal/2 {
		t.Fatalf("the copy is too far on to crash mid-way: %+v", p)
	}
	return op.ID
}

func (r *moveRig) progress(t *testing.T, op string) gqlMigrateOp {
	t.Helper()
	var o gqlMigrateOp
	r.h.GraphQL(t, "bob", "blue", `query($id: ID!) { operation(id: $id) { state step error progress { bytesMoved bytesTotal bytesPerSecond } } }`,
		map[string]any{"id": op}).OK(t).Into(t, "operation", &o)
	return o
}

// opState is the state of operation op, or "" if the orchestrator does
// not know it.
func (r *moveRig) opState(t *testing.T, op string) string {
	t.Helper()
	res := r.h.GraphQL(t, "bob", "blue", `query($id: ID!) { operation(id: $id) { state } }`, map[string]any{"id": op})
	if len(res.Errors) > 0 {
		return ""
	}
	var o gqlOp
	res.Into(t, "operation", &o)
	return o.State
}

// undone waits until the move has undone itself: the source runs in
// alpha with its address, no longer marked leaving, and is the VDC's only
// VM, and beta holds no guest, disk volume or address of the VM. Never do
// two copies run.
func (r *moveRig) undone(t *testing.T, timeout time.Duration) {
	t.Helper()
	h := r.h
	alpha, beta := h.Zone(t, h.Clusters[0]), h.Zone(t, h.Clusters[1])
	poll.Until(t, timeout, "the move to undo itself", func() error {
		if why := r.leftover(t, alpha.ID, beta.ID); why != "" {
			return errors.New(why)
		}
		return nil
	})
	var vms []gqlVM
	h.GraphQL(t, "bob", "blue", `{ vms { id status ipAddresses zone { name } } }`, nil).OK(t).Into(t, "vms", &vms)
	if len(vms) != 1 || vms[0].ID != r.id || vms[0].Status != "RUNNING" || vms[0].Zone.Name != "alpha" ||
		len(vms[0].IPAddresses) != 1 || vms[0].IPAddresses[0] != r.source {
		t.Fatalf("vms after the undo: %+v (want %s running in alpha at %s)", vms, r.id, r.source)
	}
}

// leftover says what is not yet as an undone move leaves it ("" when all
// is), failing the test if two copies of the VM run.
func (r *moveRig) leftover(t *testing.T, alphaID, betaID string) string {
	t.Helper()
	ctx := t.Context()
	zs := r.h.Orchestrator.Zones()
	ac, bc := zs.Client(alphaID), zs.Client(betaID)
	if ac == nil || bc == nil {
		return "a zone is out of reach"
	}
	src, ok, err := pveapi.FindGuest(ctx, ac, r.vmid)
	if err != nil {
		return "alpha: " + err.Error()
	}
	if !ok {
		return "the source is gone"
	}
	gs, err := pveapi.Guests(ctx, bc)
	if err != nil {
		return "beta: " + err.Error()
	}
	var targets []pveapi.Resource
	for _, g := range gs {
		if g.Template != 1 {
			targets = append(targets, g)
			if g.Status == "running" && src.Status == "running" {
				t.Fatalf("two copies run: %d in alpha and %d in beta", src.VMID, g.VMID)
			}
		}
	}
	if src.Status != "running" {
		return "the source is " + src.Status
	}
	if src.HasTag("fp-moved") {
		t.Fatalf("the source was cut over: %s", src.RawTags)
	}
	if src.HasTag("fp-leaving") {
		return "the source is still marked leaving (its agent would offer its disks): " + src.RawTags
	}
	if len(targets) > 0 {
		return fmt.Sprintf("beta holds guests %+v", targets)
	}
	if maps, err := pveapi.IPAMStatus(ctx, bc); err != nil || countMACs(maps) != 0 {
		return fmt.Sprintf("beta holds addresses %+v (%v)", maps, err)
	}
	if maps, err := pveapi.IPAMStatus(ctx, ac); err != nil || countMACs(maps) != 1 {
		return fmt.Sprintf("alpha holds addresses %+v (%v), want the VM's one", maps, err)
	}
	var vols []struct{ Volid string }
	if err := bc.Get(ctx, "/nodes/pve1/storage/local-lvm/content", &vols); err != nil {
		return "beta's volumes: " + err.Error()
	}
	for _, v := range vols {
		if !strings.Contains(v.Volid, "base-") {
			return "beta holds volume " + v.Volid
		}
	}
	return ""
}

// TestMigrateCrashOrchestrator: the orchestrator goes away mid-copy (its
// runner stops as the process does) and a new one starts on the same
// state; its Recover undoes the move once the move's heartbeat is older
// than VMRecoverAfter.
func TestMigrateCrashOrchestrator(t *testing.T) {
	t.Parallel()
	r := newMoveRig(t)
	r.start(t)
	r.h.RestartOrchestrator(t)
	r.h.WaitOnline(t, 60*time.Second)
	r.undone(t, 90*time.Second)
}

// killMidCopy kills agent a mid-copy, waits for the move to fail, calls
// meanwhile (if set) while the agent is down, starts the agent again and
// waits for the move to undo itself.
func (r *moveRig) killMidCopy(t *testing.T, a *meshtest.Agent, meanwhile func()) {
	t.Helper()
	op := r.start(t)
	if err := a.Kill(); err != nil {
		t.Logf("kill %s: %v", a.MeshName, err) // its mesh node took long to go: it is gone all the same
	}
	poll.True(t, 90*time.Second, "the move to fail", func() bool { return r.opState(t, op) == "FAILED" })
	if meanwhile != nil {
		meanwhile()
	}
	if err := a.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.h.WaitOnline(t, 60*time.Second)
	r.undone(t, 90*time.Second)
}

// TestMigrateCrashSourceAgent: the source agent dies mid-copy (its node
// loses power). The copy fails; the source cannot be restarted while its
// zone is out of reach, so the target stays, marked incoming, until the
// agent is back, when Recover restarts the source and removes the target.
func TestMigrateCrashSourceAgent(t *testing.T) {
	t.Parallel()
	r := newMoveRig(t)
	r.killMidCopy(t, r.h.Clusters[0].Agents[0], nil)
}

// TestMigrateCrashTargetAgent: the target agent dies mid-copy. The copy
// fails and the source runs again at once; the target's guest and
// addresses go when its agent is back.
func TestMigrateCrashTargetAgent(t *testing.T) {
	t.Parallel()
	r := newMoveRig(t)
	r.killMidCopy(t, r.h.Clusters[1].Agents[0], func() {
		if st, _, _ := vmHost(t, r.h, "bob", "blue", r.id); st != "RUNNING" {
			t.Errorf("the source is %s while the target's zone is out of reach, want RUNNING", st)
		}
	})
}

// TestMigrateHeartbeat: a copy that lasts several times StaleAfter is not
// undone by another replica's Recover (it sees the move's heartbeat), and
// the move succeeds.
func TestMigrateHeartbeat(t *testing.T) {
	t.Parallel()
	r := newMoveRig(t)
	const stale = 2 * time.Second
	other, err := compute.New(compute.Config{Catalog: r.h.Orchestrator.Catalog(), Zones: orchestrator.NewComputeZones(r.h.Orchestrator.Zones()),
		Volumes: orchestrator.NewVolumeMover(r.h.Orchestrator.Zones()), StaleAfter: stale})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Shutdown(t.Context()) })
	began := time.Now()
	op := r.start(t)
	recovered := 0
	poll.True(t, 120*time.Second, "the move", func() bool {
		p := r.progress(t, op)
		if p.State == "FAILED" {
			t.Fatalf("the move failed: %+v", p)
		}
		if p.State == "SUCCEEDED" {
			return true
		}
		if time.Since(began) > 2*stale {
			if err := other.Recover(t.Context()); err != nil {
				t.Logf("the other replica's recover: %v", err)
			}
			recovered++
		}
		return false
	})
	if took := time.Since(began); took < 3*stale || recovered == 0 {
		t.Fatalf("the copy took %s with %d recovers of the other replica: not longer than StaleAfter (%s)", took, recovered, stale)
	}
	var vms []gqlVM
	r.h.GraphQL(t, "bob", "blue", `{ vms { id status zone { name } } }`, nil).OK(t).Into(t, "vms", &vms)
	if len(vms) != 1 || vms[0].Status != "RUNNING" || vms[0].Zone.Name != "beta" {
		t.Fatalf("vms after the move: %+v", vms)
	}
}
