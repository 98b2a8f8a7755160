package partitiontest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"
	"github.com/vishvananda/netlink"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/gobin"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/support/nsnet"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestMain runs the tests in a network namespace of their own (whose only
// interface is loopback until the test adds its veth), with a directory for
// the programs they build (builds) removed at the end.
func TestMain(m *testing.M) { netns.Main(withBuilds{m}) }

// withBuilds runs the tests with builds' directory.
type withBuilds struct{ m *testing.M }

func (r withBuilds) Run() int {
	dir, err := os.MkdirTemp("", "partitiontest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "partitiontest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	builds.dir = dir
	return r.m.Run()
}

// builds are the programs the tests run, each built once per test binary
// (a build of cmd/orchestrator takes minutes on a busy machine; -count=N
// runs its test N times).
var builds struct {
	dir          string // set by TestMain before any test runs
	orchestrator func() (string, error)
}

func init() {
	builds.orchestrator = sync.OnceValues(func() (string, error) {
		out := filepath.Join(builds.dir, "orchestrator")
		return out, gobin.Run(filepath.Join("..", "..", ".."), out, "./cmd/orchestrator")
	})
}

// orchestratorBin is cmd/orchestrator, built once (builds).
func orchestratorBin(t *testing.T) string {
	t.Helper()
	bin, err := builds.orchestrator()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// The addresses of the veth between the test's namespace (the
// orchestrator, the simulated clusters, the other zone's agents) and the
// cut zone's namespace (its agents): of 198.18.0.0/15, routed nowhere.
const (
	hubAddr  = "198.18.7.1"
	zoneAddr = "198.18.7.2"
)

// zoneTimeout is the orchestrator's -zone-timeout here; margin what a busy
// machine may add to it.
const zoneTimeout, margin = 3 * time.Second, 3 * time.Second

// link is the veth from the test's namespace to the zone's: Cut and Heal
// take its link down and up (in the test's namespace), so that every packet
// between the zone's agents and everything else (the control server, the
// DERP relay and STUN server, WireGuard to the orchestrator's mesh node) is
// lost.
type link struct {
	t    *testing.T
	pair *nsnet.Pair
	veth netlink.Link
}

// zoneNamespace makes the zone's namespace and the veth to it, with the
// addresses up.
func zoneNamespace(t *testing.T) (string, *link) {
	if os.Geteuid() != 0 {
		t.Fatal("the partition test builds network namespaces and veths: run it as root")
	}
	b := make([]byte, 3)
	rand.Read(b)
	name := "fpz" + hex.EncodeToString(b)
	if err := nsnet.Ensure(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nsnet.Delete(name); err != nil {
			t.Errorf("delete namespace %s: %v", name, err)
		}
	})
	pair, err := nsnet.OpenPair("", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pair.Close)
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name + "h", MTU: 1500}, PeerName: "wan0", PeerNamespace: netlink.NsFd(int(pair.InnerNS))}
	if err := pair.Outer.LinkAdd(v); err != nil {
		t.Fatalf("veth %s: %v", v.Name, err)
	}
	t.Cleanup(func() { _ = pair.Outer.LinkDel(v) })
	up := func(h *netlink.Handle, ifname, addr string) netlink.Link {
		l, err := h.LinkByName(ifname)
		if err != nil {
			t.Fatal(err)
		}
		a, err := netlink.ParseAddr(addr + "/30")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.AddrAdd(l, a); err != nil {
			t.Fatalf("address %s on %s: %v", addr, ifname, err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	hub := up(pair.Outer, v.Name, hubAddr)
	up(pair.Inner, "wan0", zoneAddr)
	// The address is usable once its duplicate detection is over (IPv4:
	// at once) and the link's carrier is up.
	poll.True(t, 10*time.Second, "the veth up", func() bool {
		l, err := pair.Outer.LinkByName(v.Name)
		return err == nil && l.Attrs().OperState == netlink.OperUp
	})
	return name, &link{t: t, pair: pair, veth: hub}
}

func (l *link) Cut() {
	if err := l.pair.Outer.LinkSetDown(l.veth); err != nil {
		l.t.Fatalf("cut: %v", err)
	}
}

func (l *link) Heal() {
	if err := l.pair.Outer.LinkSetUp(l.veth); err != nil {
		l.t.Fatalf("heal: %v", err)
	}
}

// guests is what a zone's Proxmox holds: its guests (vmid, name, status)
// and its IPAM's addresses, read straight from the simulator.
func guests(t *testing.T, ctx context.Context, c *proxmox.Client) string {
	t.Helper()
	var gs []struct {
		VMID         int
		Name, Status string
	}
	if err := c.Get(ctx, "/cluster/resources?type=vm", &gs); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range gs {
		out = append(out, fmt.Sprintf("%d %s %s", g.VMID, g.Name, g.Status))
	}
	var ips []struct{ IP, VMID, Hostname string }
	if err := c.Get(ctx, "/cluster/sdn/ipams/pve/status", &ips); err != nil {
		t.Fatal(err)
	}
	for _, ip := range ips {
		out = append(out, fmt.Sprintf("ip %s %s %s", ip.IP, ip.VMID, ip.Hostname))
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// TestZonePartitioned: a zone (its two agents in a network namespace of
// their own) cut off the orchestrator by taking the link between the
// namespaces down. Queries spanning zones answer the other zone and a
// ZONE_UNAVAILABLE error for it within the zone timeout; createVM and
// startVM there fail with ZONE_UNAVAILABLE, at once once the zone's hosts
// are OFFLINE, and change nothing in its Proxmox; healed, the answers are
// complete again.
func TestZonePartitioned(t *testing.T) {
	ctx := t.Context()
	ns, veth := zoneNamespace(t)
	bin := meshtest.BuildAgent(t, t.TempDir(), "partition")
	h := meshtest.New(t, meshtest.WithListenHost(hubAddr), meshtest.WithoutAgents(),
		meshtest.WithAPI(meshtest.APISpec{ZoneTimeout: zoneTimeout}),
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "east", Nodes: 1}, meshtest.ClusterSpec{Name: "west", Nodes: 2}))
	east, west := h.Clusters[0], h.Clusters[1]
	h.StartAgents(t, east.Agents...)
	westAgents := h.StartProcessAgentsIn(t, ns, west, bin)
	westHosts := func(status fleet.HostStatus) func() bool {
		return func() bool {
			for _, p := range westAgents {
				if host, _, ok := h.ProcessHost(p); !ok || host.Status != status {
					return false
				}
			}
			return true
		}
	}
	poll.True(t, 90*time.Second, "west's agents (in their namespace) online", westHosts(fleet.StatusOnline))
	h.WaitOnline(t, 30*time.Second)

	// The catalog a create needs, a network in west, and a stopped VM of
	// red in each zone (seeded straight in Proxmox).
	url, sum := vmtest.ImageServer(t, 1<<20)
	store, err := catalog.OpenDir(h.DataDir() + "/catalog")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []catalog.Object{
		&catalog.ComputeProfile{ObjectMeta: catalog.ObjectMeta{Name: "small"}, ComputeProfileSpec: catalog.ComputeProfileSpec{VCPUs: 1, MemoryMiB: 512}},
		&catalog.Image{ObjectMeta: catalog.ObjectMeta{Name: "tiny"}, ImageSpec: catalog.ImageSpec{Version: "1", URL: url, Checksum: sum, CloudInit: true}},
		&catalog.StorageProfile{ObjectMeta: catalog.ObjectMeta{Name: "ssd"}, StorageProfileSpec: catalog.StorageProfileSpec{Tier: "ssd", ReadMBps: 200, WriteMBps: 100,
			Pools: []catalog.ZonePool{{Zone: "east", Pool: "local-lvm"}, {Zone: "west", Pool: "local-lvm"}}}},
	} {
		*o.GetTypeMeta() = catalog.TypeMeta{APIVersion: catalog.APIVersion, Kind: o.ObjectKind()}
		if _, err := store.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	var network struct{ CreateNetwork struct{ ID string } }
	h.GraphQL(t, "alice", "red", `mutation($in: CreateNetworkInput!) { createNetwork(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"name": "main", "zone": "west", "cidr": "10.7.0.0/24", "gateway": "10.7.0.1"}}).OK(t).Decode(&network)
	for i, c := range []*meshtest.Cluster{east, west} {
		pve := c.Proxmox(t)
		if err := pve.Post(ctx, "/pools", map[string]any{"poolid": tenancy.PoolID("red")}, nil); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
		var upid proxmox.UPID
		if err := pve.Post(ctx, "/nodes/pve1/qemu", map[string]any{"vmid": 300 + i, "name": "vm-" + c.Spec.Name,
			"tags": tenancy.GuestTags("red"), "pool": tenancy.PoolID("red"), "memory": 512}, &upid); err != nil {
			t.Fatal(err)
		}
		if err := proxmox.NewTask(upid, pve).Wait(ctx, 20*time.Millisecond, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	const query = `{ vms { id name status zone { name } } }`
	type vm struct {
		ID, Name, Status string
		Zone             struct{ Name string }
	}
	list := func() (vms []vm, r *meshtest.GraphQLResponse, took time.Duration) {
		began := time.Now()
		r = h.GraphQL(t, "alice", "red", query, nil)
		took = time.Since(began)
		var d struct{ VMs []vm }
		if err := r.Decode(&d); err != nil {
			t.Fatalf("%v: %s", err, r.Raw)
		}
		return d.VMs, r, took
	}
	complete := func(vms []vm, r *meshtest.GraphQLResponse) bool {
		return len(r.Errors) == 0 && len(vms) == 2
	}
	var westVM string
	poll.True(t, 30*time.Second, "both VMs listed", func() bool {
		vms, r, _ := list()
		for _, v := range vms {
			if v.Zone.Name == "west" {
				westVM = v.ID
			}
		}
		return complete(vms, r)
	})
	westPVE := west.Proxmox(t)
	before := guests(t, ctx, westPVE)
	create := map[string]any{"input": map[string]any{"name": "new-west", "zone": "west", "image": "tiny", "computeProfile": "small",
		"storageProfile": "ssd", "diskGiB": 10, "nics": []map[string]any{{"network": network.CreateNetwork.ID}}, "user": "flexplane"}}
	const createVM = `mutation($input: CreateVMInput!) { createVM(input: $input) { operation { id } } }`
	const startVM = `mutation($id: ID!) { startVM(id: $id) { id } }`
	mutate := func(q string, vars map[string]any) (*meshtest.GraphQLResponse, time.Duration) {
		began := time.Now()
		r := h.GraphQL(t, "alice", "red", q, vars)
		return r, time.Since(began)
	}
	unavailable := func(what string, r *meshtest.GraphQLResponse) {
		t.Helper()
		for _, e := range r.Errors {
			if e.Code() == "ZONE_UNAVAILABLE" && e.Extensions["zone"] == "west" {
				return
			}
		}
		t.Errorf("%s: want ZONE_UNAVAILABLE for west, got %s", what, r.Raw)
	}

	veth.Cut()
	cut := time.Now()
	// A create sent at once, before the orchestrator knows: it fails too.
	type result struct {
		r    *meshtest.GraphQLResponse
		took time.Duration
	}
	early := make(chan result, 1)
	go func() { r, d := mutate(createVM, create); early <- result{r, d} }()

	// Partial answers: east's VM and ZONE_UNAVAILABLE for west, each
	// within the zone timeout, until west's hosts are OFFLINE and after.
	var firstPartial, slowest time.Duration
	partials, completes := 0, 0
	for partials < 3 || !westHosts(fleet.StatusOffline)() {
		if time.Since(cut) > 90*time.Second {
			t.Fatalf("west's hosts not OFFLINE 90s after the cut (%d partial answers)", partials)
		}
		vms, r, took := list()
		slowest = max(slowest, took)
		if took > zoneTimeout+margin {
			t.Errorf("a list took %v during the partition (zone timeout %v)", took, zoneTimeout)
		}
		switch {
		case complete(vms, r):
			completes++
		case len(vms) == 1 && vms[0].Zone.Name == "east" && r.HasCode("ZONE_UNAVAILABLE"):
			unavailable("the list", r)
			if partials == 0 {
				firstPartial = time.Since(cut)
			}
			partials++
		default:
			t.Fatalf("during the partition: %s", r.Raw)
		}
	}
	offline := time.Since(cut)
	if firstPartial > zoneTimeout+margin {
		t.Errorf("the first partial answer came %v after the cut (%d complete answers before)", firstPartial, completes)
	}

	// West known unreachable: mutations there fail at once.
	r, tookCreate := mutate(createVM, create)
	unavailable("createVM once OFFLINE", r)
	r, tookStart := mutate(startVM, map[string]any{"id": westVM})
	unavailable("startVM once OFFLINE", r)
	if tookCreate > time.Second || tookStart > time.Second {
		t.Errorf("once west's hosts are OFFLINE, createVM took %v and startVM %v: want well under the zone timeout", tookCreate, tookStart)
	}
	var e result
	select {
	case e = <-early:
	case <-time.After(zoneTimeout + margin):
		t.Fatalf("the createVM sent at the cut has not answered %v after it", time.Since(cut))
	}
	unavailable("createVM sent at the cut", e.r)

	veth.Heal()
	healed := time.Now()
	poll.True(t, 90*time.Second, "complete answers and west's hosts ONLINE after the heal", func() bool {
		vms, r, _ := list()
		return complete(vms, r) && westHosts(fleet.StatusOnline)()
	})
	recovered := time.Since(healed)
	if after := guests(t, ctx, westPVE); after != before {
		t.Errorf("west's Proxmox changed during the partition:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	vms, _, _ := list()
	for _, v := range vms {
		if v.ID == westVM && v.Status != "STOPPED" {
			t.Errorf("west's VM %s after the heal, want STOPPED", v.Status)
		}
	}
	t.Logf("partition: first partial answer %v after the cut (%d partial, %d complete answers, the slowest %v); hosts OFFLINE after %v; "+
		"createVM answered ZONE_UNAVAILABLE in %v at the cut, %v (createVM) and %v (startVM) once OFFLINE; heal: complete answers and hosts ONLINE after %v",
		firstPartial.Round(time.Millisecond), partials, completes, slowest.Round(time.Millisecond), offline.Round(time.Millisecond),
		e.took.Round(time.Millisecond), tookCreate.Round(time.Millisecond), tookStart.Round(time.Millisecond), recovered.Round(time.Millisecond))

}
