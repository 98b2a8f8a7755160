package partitiontest_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Crash points of a move across zones that need a real network cut or a
// real process: the link to the target zone cut mid-copy, and the
// orchestrator process killed mid-copy. Each moves a running VM with a
// 1 GiB disk (random data every 32 MiB) from alpha to beta with alpha's
// agent reading at moveBandwidth, so that the copy lasts seconds; breaks
// one part once the bytes moved say the copy is under way; and checks,
// reading both simulated clusters directly, that the move undoes itself
// (the source is the VM, running, with its address; beta holds no guest,
// volume or address of it; two copies never run) and that a second move
// then brings the disk to beta byte-identical, under the VM's id.

// moveBandwidth is alpha's agent.Config.MigrationBandwidth here: 1 GiB
// takes 16 s.
const moveBandwidth = 64 << 20

// recoverAfter is the orchestrator's VMRecoverAfter (compute's StaleAfter:
// the age of a move's heartbeat past which Recover takes it over).
const recoverAfter = 3 * time.Second

// moveSpec is the harness a move test needs: alpha (one node, its agent
// reading volumes at moveBandwidth) and beta (one node), with the API and
// a quick Recover.
func moveSpec(opts ...meshtest.Option) []meshtest.Option {
	return append([]meshtest.Option{
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1, MigrationBandwidth: moveBandwidth}, meshtest.ClusterSpec{Name: "beta", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{ZoneTimeout: zoneTimeout, VMRecoverAfter: recoverAfter, VMRecoverInterval: 500 * time.Millisecond}),
	}, opts...)
}

// move is a VM of bob's VDC blue in alpha, ready to move to beta.
type move struct {
	h           *meshtest.Harness
	alpha, beta *proxmox.Client // the simulated clusters, straight
	id          string          // the VM's id
	vmid        int             // its VMID in alpha
	addr        string          // its address
	disk        string          // SHA-256 of its disk
}

// newMove seeds the catalog and blue's network "lan" in both zones, and
// creates the VM in alpha (through the harness's orchestrator, which must
// be running in process), with data written into its disk.
func newMove(t *testing.T, h *meshtest.Harness) *move {
	t.Helper()
	ctx := t.Context()
	m := &move{h: h, alpha: h.Clusters[0].Proxmox(t), beta: h.Clusters[1].Proxmox(t)}
	url, sum := vmtest.ImageServer(t, 3<<20)
	h.GraphQL(t, "admin", "", `mutation($u: String!, $c: String!) {
	  createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name }
	  createStorageProfile(input: {name: "ssd", tier: "ssd", readMBps: 200, writeMBps: 100,
	    pools: [{zone: "alpha", pool: "local-lvm"}, {zone: "beta", pool: "local-lvm"}]}) { name }
	  createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name } }`,
		map[string]any{"u": url, "c": sum}).OK(t)
	nets := map[string]string{}
	for _, z := range []string{"alpha", "beta"} {
		var n struct{ ID string }
		h.GraphQL(t, "bob", "blue", `mutation($z: String!) { createNetwork(input: {name: "lan", zone: $z, cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`,
			map[string]any{"z": z}).OK(t).Into(t, "createNetwork", &n)
		nets[z] = n.ID
	}
	var created struct{ Operation struct{ ID string } }
	h.GraphQL(t, "bob", "blue", `mutation($in: CreateVMInput!) { createVM(input: $in) { operation { id } } }`,
		map[string]any{"in": map[string]any{"name": "fragile", "zone": "alpha", "image": "tiny", "computeProfile": "small",
			"storageProfile": "ssd", "diskGiB": 1, "nics": []any{map[string]any{"network": nets["alpha"]}}, "user": "bob"}}).
		OK(t).Into(t, "createVM", &created)
	poll.True(t, 90*time.Second, "the VM created", func() bool {
		op := m.operation(t, created.Operation.ID)
		if op.State == "FAILED" {
			t.Fatalf("createVM: %+v", op)
		}
		if op.VMID != nil {
			m.id = *op.VMID
		}
		return op.State == "SUCCEEDED"
	})
	ref, err := tenancy.ParseVMID(m.id)
	if err != nil {
		t.Fatal(err)
	}
	m.vmid = ref.VMID
	vm := m.vm(t)
	if vm.Status != "RUNNING" || len(vm.IPAddresses) != 1 {
		t.Fatalf("the VM: %+v", vm)
	}
	m.addr = vm.IPAddresses[0]

	path := m.diskPath(t, ctx, m.alpha)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1<<20)
	for off := int64(0); off < 1<<30; off += 32 << 20 {
		_, _ = rand.Read(data)
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	m.disk = fileSHA256(t, path)
	return m
}

// diskPath is the file of the VM's scsi0 in cluster c.
func (m *move) diskPath(t *testing.T, ctx context.Context, c *proxmox.Client) string {
	t.Helper()
	var g pveapi.Resource
	var ok bool
	var err error
	if c == m.beta { // the VM's VMID there is another
		g, ok, err = guestIn(ctx, c)
	} else {
		g, ok, err = pveapi.FindGuest(ctx, c, m.vmid)
	}
	if err != nil || !ok {
		t.Fatalf("the VM's guest: %v %v", ok, err)
	}
	cfg, err := pveapi.GuestConfig(ctx, c, g.Node, g.VMID)
	if err != nil {
		t.Fatal(err)
	}
	volid, _, _ := strings.Cut(cfg.Str("scsi0"), ",")
	storage, _, _ := strings.Cut(volid, ":")
	var v struct{ Path string }
	if err := c.Get(ctx, "/nodes/"+g.Node+"/storage/"+storage+"/content/"+volid, &v); err != nil {
		t.Fatalf("volume %s: %v", volid, err)
	}
	return v.Path
}

// guestIn is the one guest (not a template) of c.
func guestIn(ctx context.Context, c *proxmox.Client) (pveapi.Resource, bool, error) {
	gs, err := pveapi.Guests(ctx, c)
	if err != nil {
		return pveapi.Resource{}, false, err
	}
	var out []pveapi.Resource
	for _, g := range gs {
		if g.Template != 1 {
			out = append(out, g)
		}
	}
	if len(out) != 1 {
		return pveapi.Resource{}, false, fmt.Errorf("%d guests: %+v", len(out), out)
	}
	return out[0], true, nil
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// gqlOp is an operation as the tests read it.
type gqlOp struct {
	State, Step string
	Error       *string
	VMID        *string `json:"vmId"`
	Progress    *struct{ BytesMoved, BytesTotal float64 }
}

// try runs a GraphQL request as user in vdc, nil if no answer came (the
// orchestrator restarting).
func (m *move) try(t *testing.T, user, vdc, query string, vars map[string]any) *meshtest.GraphQLResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	authz := ""
	if user != "" {
		authz = "Bearer " + m.h.Token(t, user)
	}
	r, err := gqltest.Post(ctx, nil, m.h.GraphQLURL(), gqltest.Request{Query: query, Variables: vars, Authorization: authz, VDC: vdc})
	if err != nil {
		t.Logf("graphql: %v", err)
		return nil
	}
	return r
}

// operation reads operation id ("" state if the orchestrator does not
// answer it, e.g. while it restarts).
func (m *move) operation(t *testing.T, id string) gqlOp {
	t.Helper()
	var o gqlOp
	r := m.try(t, "bob", "blue", `query($id: ID!) { operation(id: $id) { state step error vmId progress { bytesMoved bytesTotal } } }`,
		map[string]any{"id": id})
	if r == nil {
		return gqlOp{}
	}
	if len(r.Errors) > 0 {
		t.Logf("operation %s: %s", id, r.Raw)
	}
	if err := r.Decode(&struct{ Operation *gqlOp }{&o}); err != nil {
		t.Logf("operation %s: %v", id, err)
	}
	return o
}

type gqlVM struct {
	ID, Status  string
	IPAddresses []string
	Zone        struct{ Name string }
}

// vm is the VM as bob sees it.
func (m *move) vm(t *testing.T) gqlVM {
	t.Helper()
	var vm gqlVM
	m.h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { id status ipAddresses zone { name } } }`,
		map[string]any{"id": m.id}).OK(t).Into(t, "vm", &vm)
	return vm
}

// start starts a move of the VM to beta and returns its operation.
func (m *move) start(t *testing.T) string {
	t.Helper()
	var op struct{ ID string }
	m.h.GraphQL(t, "bob", "blue", `mutation($in: MigrateVMInput!) { migrateVM(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"id": m.id, "zone": "beta"}}).OK(t).Into(t, "migrateVM", &op)
	return op.ID
}

// midCopy waits until move op is copying, with some but under half of the
// bytes moved.
func (m *move) midCopy(t *testing.T, op string) {
	t.Helper()
	var p gqlOp
	// poll:own-loop: the crash must land in a short window of the copy,
	// sampled every 50 ms, not at poll's growing interval.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		p = m.operation(t, op)
		if p.State != "" && p.State != "RUNNING" {
			t.Fatalf("the move ended before the crash: %+v (%s)", p, errorOf(p))
		}
		if p.Step == "copy" && p.Progress != nil && p.Progress.BytesMoved > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the copy not under way after 2m: %+v", p)
		}
	}
	if p.Progress.BytesMoved >= p.Progress.BytesTotal/2 {
		t.Fatalf("the copy is too far on to crash mid-way: %+v", *p.Progress)
	}
	t.Logf("mid-copy: %.0f of %.0f bytes moved", p.Progress.BytesMoved, p.Progress.BytesTotal)
}

func errorOf(o gqlOp) string {
	if o.Error == nil {
		return ""
	}
	return *o.Error
}

// leftover says what is not yet as an undone move leaves the two
// clusters ("" when all is), failing the test at once if two copies of
// the VM run or the source was cut over.
func (m *move) leftover(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	src, ok, err := pveapi.FindGuest(ctx, m.alpha, m.vmid)
	switch {
	case err != nil:
		return "alpha: " + err.Error()
	case !ok:
		t.Fatal("the source is gone")
	case src.HasTag("fp-moved"):
		t.Fatalf("the source was cut over: %s", src.RawTags)
	}
	gs, err := pveapi.Guests(ctx, m.beta)
	if err != nil {
		return "beta: " + err.Error()
	}
	var targets []string
	for _, g := range gs {
		if g.Template == 1 {
			continue
		}
		if g.Status == "running" && src.Status == "running" {
			t.Fatalf("two copies run: %d in alpha and %d in beta", src.VMID, g.VMID)
		}
		targets = append(targets, fmt.Sprintf("%d %s %s", g.VMID, g.Status, g.RawTags))
	}
	if src.Status != "running" {
		return "the source is " + src.Status
	}
	if len(targets) > 0 {
		return fmt.Sprintf("beta holds guests %v", targets)
	}
	if n, err := addresses(ctx, m.beta); err != nil || n != 0 {
		return fmt.Sprintf("beta holds %d addresses (%v)", n, err)
	}
	if n, err := addresses(ctx, m.alpha); err != nil || n != 1 {
		return fmt.Sprintf("alpha holds %d addresses (%v), want the VM's one", n, err)
	}
	var vols []struct{ Volid string }
	if err := m.beta.Get(ctx, "/nodes/pve1/storage/local-lvm/content", &vols); err != nil {
		return "beta's volumes: " + err.Error()
	}
	for _, v := range vols {
		if !strings.Contains(v.Volid, "base-") {
			return "beta holds volume " + v.Volid
		}
	}
	return ""
}

// addresses counts the guest addresses (not gateways) of c's IPAM.
func addresses(ctx context.Context, c *proxmox.Client) (int, error) {
	ms, err := pveapi.IPAMStatus(ctx, c)
	n := 0
	for _, m := range ms {
		if m.Gateway == 0 && m.MAC != "" {
			n++
		}
	}
	return n, err
}

// undone waits until the move has undone itself (leftover), then checks
// the API shows the VM as before: its id, running in alpha at its address,
// the VDC's only VM.
func (m *move) undone(t *testing.T, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "the move undoing itself", func() error {
		if why := m.leftover(t); why != "" {
			return errors.New(why)
		}
		return nil
	})
	var vms []gqlVM
	poll.True(t, 30*time.Second, "the VM listed in alpha", func() bool {
		r := m.try(t, "bob", "blue", `{ vms { id status ipAddresses zone { name } } }`, nil)
		var d struct{ VMs []gqlVM }
		return r != nil && len(r.Errors) == 0 && r.Decode(&d) == nil && len(d.VMs) == 1 && d.VMs[0].Zone.Name == "alpha" && func() bool { vms = d.VMs; return true }()
	})
	if v := vms[0]; v.ID != m.id || v.Status != "RUNNING" || len(v.IPAddresses) != 1 || v.IPAddresses[0] != m.addr {
		t.Fatalf("vms after the undo: %+v (want %s running in alpha at %s)", vms, m.id, m.addr)
	}
}

// moved runs a second move to its end and checks the VM runs in beta
// under its id with its disk byte-identical, and alpha holds nothing of it.
func (m *move) moved(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	op := m.start(t)
	poll.True(t, 3*time.Minute, "the second move", func() bool {
		p := m.operation(t, op)
		if p.State == "FAILED" {
			t.Fatalf("the second move failed: %+v: %s", p, errorOf(p))
		}
		return p.State == "SUCCEEDED"
	})
	if vm := m.vm(t); vm.ID != m.id || vm.Status != "RUNNING" || vm.Zone.Name != "beta" || len(vm.IPAddresses) != 1 {
		t.Fatalf("the VM after the move: %+v", vm)
	}
	if got := fileSHA256(t, m.diskPath(t, ctx, m.beta)); got != m.disk {
		t.Fatalf("the disk arrived as %s, left as %s", got, m.disk)
	}
	if _, ok, err := pveapi.FindGuest(ctx, m.alpha, m.vmid); err != nil || ok {
		t.Fatalf("alpha still holds the source (%v)", err)
	}
	if n, err := addresses(ctx, m.alpha); err != nil || n != 0 {
		t.Fatalf("alpha holds %d addresses (%v)", n, err)
	}
}

// TestMigrateLinkCut: the link to the target zone is cut mid-copy. Beta's
// agent runs in a network namespace of its own behind a veth (alpha's, the
// orchestrator with its DERP relay and STUN server, and both simulated
// clusters in the test's): with the veth's link down, no packet passes
// between the zones, direct or relayed (checked: a dial from alpha's agent
// to beta's over the mesh fails). The copy fails, the source runs again in
// alpha at once, and the target stays (its zone cannot be told) marked
// incoming while the link stays down past the move's heartbeat age and
// until beta's host is OFFLINE, never running; healed, Recover removes it
// with its addresses and volumes, by itself; a second move then succeeds.
func TestMigrateLinkCut(t *testing.T) {
	t.Parallel()
	ns, veth := zoneNamespace(t)
	bin := meshtest.BuildAgent(t, t.TempDir(), "partition")
	h := meshtest.New(t, moveSpec(meshtest.WithListenHost(hubAddr), meshtest.WithoutAgents())...)
	alpha, beta := h.Clusters[0], h.Clusters[1]
	h.StartAgents(t, alpha.Agents...)
	betaAgent := h.StartProcessAgentsIn(t, ns, beta, bin)[0]
	t.Cleanup(func() {
		if t.Failed() {
			log := betaAgent.Log()
			t.Logf("beta's agent's log (tail):\n%s", log[max(0, len(log)-20000):])
		}
	})
	betaHost := func(status fleet.HostStatus) func() bool {
		return func() bool { host, _, ok := h.ProcessHost(betaAgent); return ok && host.Status == status }
	}
	poll.True(t, 90*time.Second, "beta's agent (in its namespace) online", betaHost(fleet.StatusOnline))
	h.WaitOnline(t, 30*time.Second)
	m := newMove(t, h)

	// probe dials beta's agent's migration port from alpha's agent over
	// the mesh: what the target's pull and the source's pings go through.
	src := alpha.Agents[0].Running()
	_, port, _ := net.SplitHostPort(src.MigrationAddr())
	probe := func(timeout time.Duration) error {
		host, _, ok := h.ProcessHost(betaAgent)
		if !ok {
			return fmt.Errorf("beta's host unknown")
		}
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		c, err := src.Dial(ctx, "tcp", net.JoinHostPort(host.MeshAddr.String(), port))
		if err != nil {
			return err
		}
		return c.Close()
	}
	if err := probe(30 * time.Second); err != nil {
		t.Fatalf("alpha's agent does not reach beta's before the cut: %v", err)
	}

	op := m.start(t)
	m.midCopy(t, op)
	veth.Cut()
	cut := time.Now()
	if err := probe(5 * time.Second); err == nil {
		t.Fatal("alpha's agent still reaches beta's over the mesh after the cut (a path around the veth?)")
	}
	// The copy fails (the source's ping to its reader goes unanswered),
	// and the source runs again while beta is out of reach.
	poll.True(t, 90*time.Second, "the move failed and the source running again", func() bool {
		m.leftover(t) // fails on two running copies
		g, ok, err := pveapi.FindGuest(t.Context(), m.alpha, m.vmid)
		return m.operation(t, op).State == "FAILED" && err == nil && ok && g.Status == "running"
	})
	t.Logf("the move failed: %s", errorOf(m.operation(t, op)))
	failed := time.Since(cut)
	// Down past the heartbeat's age (a Recover then takes the move over)
	// and until beta's host is OFFLINE.
	poll.True(t, 90*time.Second, "beta's host OFFLINE", func() bool {
		m.leftover(t)
		return betaHost(fleet.StatusOffline)() && time.Since(cut) > 3*recoverAfter
	})
	if err := probe(5 * time.Second); err == nil {
		t.Fatal("alpha's agent reaches beta's during the cut")
	}
	down := time.Since(cut)
	veth.Heal()
	healed := time.Now()
	poll.True(t, 90*time.Second, "beta's host ONLINE after the heal", betaHost(fleet.StatusOnline))
	m.undone(t, 2*time.Minute)
	if st := m.operation(t, op).State; st != "FAILED" {
		t.Errorf("the move's operation after the heal: %q, want FAILED", st)
	}
	undone := time.Since(healed)
	m.moved(t)
	t.Logf("link cut mid-copy: the move failed %v after the cut with the source running again; link down %v; undone %v after the heal; the second move arrived byte-identical",
		failed.Round(time.Millisecond), down.Round(time.Millisecond), undone.Round(time.Millisecond))
}

// TestMigrateOrchestratorKilled: the orchestrator, a process of
// cmd/orchestrator, is SIGKILLed mid-copy and started again on its data
// directory. The new process's Recover, once the move's heartbeat is older
// than -vm-recover-after, undoes the move (the source runs in alpha as
// before, beta holds nothing of it); a second move then succeeds.
func TestMigrateOrchestratorKilled(t *testing.T) {
	t.Parallel()
	bin := orchestratorBin(t)
	h := meshtest.New(t, moveSpec()...)
	h.WaitOnline(t, 30*time.Second)
	m := newMove(t, h)
	p := h.ReplaceOrchestratorWithProcess(t, bin)
	var lastLog time.Time
	hostsOnline := func() bool {
		r := m.try(t, "admin", "", `{ hosts { status } }`, nil)
		var d struct{ Hosts []struct{ Status string } }
		if r == nil {
			return false
		}
		if len(r.Errors) > 0 || r.Decode(&d) != nil || len(d.Hosts) != 2 || d.Hosts[0].Status != "ONLINE" || d.Hosts[1].Status != "ONLINE" {
			if time.Since(lastLog) > 10*time.Second {
				lastLog = time.Now()
				t.Logf("hosts: %s", r.Raw)
			}
			return false
		}
		return true
	}
	poll.True(t, 90*time.Second, "the hosts ONLINE in the orchestrator process", hostsOnline)

	op := m.start(t)
	m.midCopy(t, op)
	pid := p.Pid()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	m.leftover(t)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 90*time.Second, "the hosts ONLINE in the new orchestrator process", hostsOnline)
	m.undone(t, 2*time.Minute)
	undone := time.Since(killed)
	m.moved(t)
	t.Logf("orchestrator process %d SIGKILLed mid-copy, %d started: the move undone %v after the kill; the second move arrived byte-identical",
		pid, p.Pid(), undone.Round(time.Millisecond))
}
