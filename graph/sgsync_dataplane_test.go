//go:build linux

package graph_test

import (
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// TestSecurityGroupsDataPlane sends real packets through the simulator's data plane
// (its nftables on the guests' taps, as proxmox-firewall does, and the VDC's edge
// gateway routing between its two networks): a VM in group db, whose rule allows 5432
// from group app, answers 5432 to a member of app on its network and on the other
// network (routed by the gateway, which keeps the source address), and not to a VM
// in no group on either network, nor on another port, while the VM in no group on
// the other network does reach a VM in no group through the gateway; a VM in group
// egress, whose only outbound rule allows 443, reaches another VM's 443 and nothing
// else; a VM in no group is reached as before groups; from outside, a port
// forward of the gateway reaches a port db does not open (the gateway's rules
// decide what comes through it). Then a new VM in db is probed
// from before it boots until it is running in its group: no port its group does not
// open answers at any moment (its firewall is written before the guest starts; the
// writer's interval is long here, so without that the guest would run open for
// seconds).
func TestSecurityGroupsDataPlane(t *testing.T) {
	t.Parallel()
	nettest.NeedRoot(t)
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{SecurityGroupInterval: 30 * time.Second}),
		meshtest.WithDataPlane(netip.MustParsePrefix("203.0.113.254/24")))
	h.WaitOnline(t, 30*time.Second)
	seedSharedStorage(t, h)
	h.GraphQL(t, "admin", "", `mutation { createExternalNetwork(input: {zone: "alpha", bridge: "vmbr0", cidr: "203.0.113.0/24",
	  gateway: "203.0.113.254", poolStart: "203.0.113.10", poolEnd: "203.0.113.20"}) { zone } }`, nil).OK(t)
	netA := createNetworks(t, h, "bob", "blue", "alpha")["alpha"]
	var nb struct{ ID string }
	h.GraphQL(t, "bob", "blue", `mutation { createNetwork(input: {name: "lan2", zone: "alpha", cidr: "10.2.0.0/24", gateway: "10.2.0.1"}) { id } }`, nil).
		OK(t).Into(t, "createNetwork", &nb)
	// The VDC's edge gateway: its legs route between the two networks.
	h.GraphQL(t, "bob", "blue", `mutation { updateEdgeGateway(input: {zone: "alpha", egressMbps: 1000}) { id } }`, nil).OK(t)
	h.GraphQL(t, "bob", "blue", createGroup, groupInput("app")).OK(t)
	h.GraphQL(t, "bob", "blue", createGroup, groupInput("db",
		map[string]any{"direction": "INBOUND", "protocol": "TCP", "ports": "5432", "peerGroup": "app"})).OK(t)
	h.GraphQL(t, "bob", "blue", createGroup, groupInput("egress",
		map[string]any{"direction": "OUTBOUND", "protocol": "TCP", "ports": "443"})).OK(t)
	c := h.Clusters[0].Proxmox(t)
	if err := c.Put(t.Context(), "/cluster/firewall/options", map[string]any{"enable": 1}, nil); err != nil {
		t.Fatal(err)
	}
	type vm struct {
		vmid   int
		id, ip string
	}
	vms := map[string]vm{}
	specs := map[string]struct {
		net    string
		groups []string
	}{
		"app-1": {netA, []string{"app"}}, "db-1": {netA, []string{"db"}}, "other": {netA, []string{}}, "out-1": {netA, []string{"egress"}},
		"app-2": {nb.ID, []string{"app"}}, "other-b": {nb.ID, []string{}},
	}
	ops := map[string]string{}
	for name, s := range specs {
		ops[name] = startGroupedVM(t, h, s.net, name, s.groups, "")
	}
	for name, op := range ops {
		id, ip := awaitGroupedVM(t, h, name, op)
		vms[name] = vm{vmid: vmidOf(t, c, name), id: id, ip: ip}
	}
	poll.True(t, 60*time.Second, "every group applied", func() bool {
		for _, g := range []string{"app", "db", "egress"} {
			zs := groupZones(t, h, "bob", "blue", g)
			if len(zs) != 1 || zs[0].Status != "APPLIED" {
				return false
			}
		}
		return true
	})
	p := h.Clusters[0].Plane
	ns := func(name string) string { return p.GuestNS(vms[name].vmid) }
	nettest.Serve(t, ns("db-1"), 5432, "db-1")
	nettest.Serve(t, ns("db-1"), 8080, "db-1")
	nettest.Serve(t, ns("other"), 443, "other")
	nettest.Serve(t, ns("other"), 8080, "other")
	nettest.Serve(t, ns("other-b"), 8080, "other-b")

	// The firewall is in place once other (in no group) no longer reaches db's 5432.
	poll.True(t, 30*time.Second, "db-1 closed to a VM in no group", func() bool {
		return nettest.Reach(ns("other"), vms["db-1"].ip+":5432", time.Second) == ""
	})
	for _, from := range []string{"app-1", "app-2"} {
		if got := nettest.WaitReach(t, ns(from), vms["db-1"].ip+":5432", 30*time.Second); !strings.HasPrefix(got, "db-1 from "+vms[from].ip+":") {
			t.Errorf("%s → db-1:5432 answered %q", from, got)
		}
	}
	// The gateway forwards between the networks (a VM in no group reaches
	// one in no group), keeping the source address.
	if got := nettest.WaitReach(t, ns("other-b"), vms["other"].ip+":8080", 30*time.Second); !strings.HasPrefix(got, "other from "+vms["other-b"].ip+":") {
		t.Errorf("other-b → other:8080 answered %q", got)
	}
	unreached(t, ns, vms["db-1"].ip, map[string]string{
		"app-1": "8080", // no rule allows it
		"app-2": "8080", // nor from the other network
	})
	unreachedEach(t, []probe{
		{ns("out-1"), vms["db-1"].ip + ":5432", "out-1 → db-1:5432 (not a member of app)"},
		{ns("other-b"), vms["db-1"].ip + ":5432", "other-b → db-1:5432 (the other network, not a member of app)"},
		{ns("other-b"), vms["db-1"].ip + ":8080", "other-b → db-1:8080"},
		{ns("out-1"), vms["other"].ip + ":8080", "out-1 → other:8080 (egress lets only 443 leave)"},
		{ns("out-1"), vms["other-b"].ip + ":8080", "out-1 → other-b:8080 (nor to the other network)"},
	})
	// From outside, the gateway's rules decide first: a port forward to
	// db-1's 8080 reaches it although db opens only 5432 to app (the
	// platform group lets in what the gateway forwarded).
	h.GraphQL(t, "bob", "blue", `mutation($in: CreatePortForwardInput!) { createPortForward(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"vmId": vms["db-1"].id, "protocol": "TCP", "publicPort": 8080, "targetPort": 8080}}).OK(t)
	if got := nettest.WaitReach(t, p.InternetNS(), "203.0.113.10:8080", 30*time.Second); !strings.HasPrefix(got, "db-1 from 203.0.113.254:") {
		t.Errorf("the internet → db-1:8080 through the port forward answered %q", got)
	}
	// egress lets only 443 leave; other, in no group, is open to the rest.
	if got := nettest.WaitReach(t, ns("out-1"), vms["other"].ip+":443", 30*time.Second); !strings.HasPrefix(got, "other from ") {
		t.Errorf("out-1 → other:443 answered %q", got)
	}
	for _, to := range []string{"other", "other-b"} {
		if got := nettest.WaitReach(t, ns("app-1"), vms[to].ip+":8080", 30*time.Second); !strings.HasPrefix(got, to+" from ") {
			t.Errorf("app-1 → %s:8080 answered %q", to, got)
		}
	}

	// Fail-closed from the first boot: db-2 (in db) is probed from other
	// (in no group) on 8080 and 5432, which its group does not open to
	// it, from before its guest exists until it runs in its group.
	const db2 = "10.1.0.50"
	stop := make(chan struct{})
	var mu sync.Mutex
	var answered []string      // the first answers; protected by mu
	rounds := map[string]int{} // probes ended per port; protected by mu
	var wg sync.WaitGroup
	for _, port := range []string{"8080", "5432"} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				got := nettest.Reach(ns("other"), db2+":"+port, 200*time.Millisecond)
				mu.Lock()
				if got != "" && len(answered) < 3 {
					answered = append(answered, port+": "+got)
				}
				rounds[port]++
				mu.Unlock()
			}
		})
	}
	op := startGroupedVM(t, h, netA, "db-2", []string{"db"}, db2)
	var vmid2 int
	poll.True(t, 60*time.Second, "db-2's guest", func() bool {
		vmid2 = guestID(t, c, "db-2")
		return vmid2 != 0
	})
	// Its services listen as soon as its namespace is there, before the
	// guest boots.
	nettest.Serve(t, p.GuestNS(vmid2), 8080, "db-2")
	nettest.Serve(t, p.GuestNS(vmid2), 5432, "db-2")
	if _, ip := awaitGroupedVM(t, h, "db-2", op); ip != db2 {
		t.Fatalf("db-2 has %s, want %s", ip, db2)
	}
	if got := nettest.WaitReach(t, ns("app-1"), db2+":5432", 30*time.Second); !strings.HasPrefix(got, "db-2 from ") {
		t.Errorf("app-1 → db-2:5432 answered %q", got)
	}
	// It is up and serving: a few more probes of each port from now on.
	mu.Lock()
	clear(rounds)
	mu.Unlock()
	poll.True(t, 10*time.Second, "5 probes of each port of the running db-2", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return rounds["8080"] >= 5 && rounds["5432"] >= 5
	})
	close(stop)
	wg.Wait()
	if len(answered) > 0 {
		t.Errorf("db-2 answered a VM in no group before its group closed it: %q", answered)
	}
}

// probe is a connection that must not be answered.
type probe struct{ ns, addr, what string }

// unreachedEach checks, all at once, that none of ps is answered within 2s.
func unreachedEach(t *testing.T, ps []probe) {
	t.Helper()
	var wg sync.WaitGroup
	got := make([]string, len(ps))
	for i, p := range ps {
		wg.Go(func() { got[i] = nettest.Reach(p.ns, p.addr, 2*time.Second) })
	}
	wg.Wait()
	for i, p := range ps {
		if got[i] != "" {
			t.Errorf("%s answered %q", p.what, got[i])
		}
	}
}

// unreached checks that none of the VMs (by name, with ns) reaches ip on its port.
func unreached(t *testing.T, ns func(string) string, ip string, ports map[string]string) {
	t.Helper()
	var ps []probe
	for from, port := range ports {
		ps = append(ps, probe{ns(from), ip + ":" + port, from + " → " + ip + ":" + port})
	}
	unreachedEach(t, ps)
}

// createGroupedVM creates VM name of bob in blue on network net of zone
// alpha in groups through GraphQL, waits until it runs with an address
// and returns that address.
func createGroupedVM(t testing.TB, h *meshtest.Harness, net, name string, groups []string) string {
	t.Helper()
	_, ip := awaitGroupedVM(t, h, name, startGroupedVM(t, h, net, name, groups, ""))
	return ip
}

// startGroupedVM asks for VM name of bob in blue on network net of zone
// alpha in groups (at address, unless ""), and returns its create's
// operation.
func startGroupedVM(t testing.TB, h *meshtest.Harness, net, name string, groups []string, address string) string {
	t.Helper()
	nic := map[string]any{"network": net}
	if address != "" {
		nic["address"] = address
	}
	var created struct{ Operation gqlOp }
	h.GraphQL(t, "bob", "blue", createVM, map[string]any{"in": map[string]any{"name": name, "zone": "alpha", "image": "tiny",
		"computeProfile": "small", "storageProfile": "shared", "diskGiB": 4, "nics": []any{nic},
		"sshKeys": []string{sshKey}, "user": "ops", "securityGroups": groups}}).OK(t).Into(t, "createVM", &created)
	return created.Operation.ID
}

// awaitGroupedVM waits until the create op of VM name succeeded and the
// VM runs with an address, and returns its id and that address.
func awaitGroupedVM(t testing.TB, h *meshtest.Harness, name, op string) (id, ip string) {
	t.Helper()
	id = awaitCreate(t, h, "bob", "blue", op)
	var v gqlVM
	poll.True(t, 60*time.Second, name+" running with its address", func() bool {
		h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { id name status ipAddresses } }`, map[string]any{"id": id}).
			OK(t).Into(t, "vm", &v)
		return v.Status == "RUNNING" && len(v.IPAddresses) > 0
	})
	return id, v.IPAddresses[0]
}
