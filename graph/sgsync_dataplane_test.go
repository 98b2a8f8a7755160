//go:build linux

package graph_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// TestSecurityGroupsDataPlane sends real packets through the simulator's data plane
// (its nftables on the guests' taps, as proxmox-firewall does): a VM in group db, whose
// rule allows 5432 from group app, answers 5432 to a member of app and not to a VM of
// the same network in no group, nor on another port; a VM in group egress, whose only
// outbound rule allows 443, reaches another VM's 443 and nothing else; a VM in no group
// is reached as before groups.
func TestSecurityGroupsDataPlane(t *testing.T) {
	t.Parallel()
	nettest.NeedRoot(t)
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{SecurityGroupInterval: 500 * time.Millisecond}), meshtest.WithDataPlane())
	h.WaitOnline(t, 30*time.Second)
	seedSharedStorage(t, h)
	net := createNetworks(t, h, "bob", "blue", "alpha")["alpha"]
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
		vmid int
		ip   string
	}
	vms := map[string]vm{}
	for name, groups := range map[string][]string{"app-1": {"app"}, "db-1": {"db"}, "other": {}, "out-1": {"egress"}} {
		ip := createGroupedVM(t, h, net, name, groups)
		vms[name] = vm{vmid: vmidOf(t, c, name), ip: ip}
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

	// The firewall is in place once other (in no group) no longer reaches db's 5432.
	poll.True(t, 30*time.Second, "db-1 closed to a VM in no group", func() bool {
		return nettest.Reach(ns("other"), vms["db-1"].ip+":5432", time.Second) == ""
	})
	if got := nettest.WaitReach(t, ns("app-1"), vms["db-1"].ip+":5432", 30*time.Second); !strings.HasPrefix(got, "db-1 from "+vms["app-1"].ip+":") {
		t.Errorf("app-1 → db-1:5432 answered %q", got)
	}
	for _, c := range []struct{ from, to string }{
		{"app-1", "db-1:8080"}, // no rule allows it
		{"out-1", "db-1:5432"}, // not a member of app
		{"out-1", "other:8080"},
	} {
		name, port, _ := strings.Cut(c.to, ":")
		if got := nettest.Reach(ns(c.from), vms[name].ip+":"+port, 2*time.Second); got != "" {
			t.Errorf("%s reached %s: %q", c.from, c.to, got)
		}
	}
	// egress lets only 443 leave; other, in no group, is open to the rest.
	if got := nettest.WaitReach(t, ns("out-1"), vms["other"].ip+":443", 30*time.Second); !strings.HasPrefix(got, "other from ") {
		t.Errorf("out-1 → other:443 answered %q", got)
	}
	if got := nettest.WaitReach(t, ns("app-1"), vms["other"].ip+":8080", 30*time.Second); !strings.HasPrefix(got, "other from ") {
		t.Errorf("app-1 → other:8080 answered %q", got)
	}
}

// createGroupedVM creates VM name of bob in blue on network net of zone
// alpha in groups through GraphQL, waits until it runs with an address
// and returns that address.
func createGroupedVM(t testing.TB, h *meshtest.Harness, net, name string, groups []string) string {
	t.Helper()
	var created struct{ Operation gqlOp }
	h.GraphQL(t, "bob", "blue", createVM, map[string]any{"in": map[string]any{"name": name, "zone": "alpha", "image": "tiny",
		"computeProfile": "small", "storageProfile": "shared", "diskGiB": 4, "nics": []any{map[string]any{"network": net}},
		"sshKeys": []string{sshKey}, "user": "ops", "securityGroups": groups}}).OK(t).Into(t, "createVM", &created)
	id := awaitCreate(t, h, "bob", "blue", created.Operation.ID)
	var v gqlVM
	poll.True(t, 60*time.Second, name+" running with its address", func() bool {
		h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { id name status ipAddresses } }`, map[string]any{"id": id}).
			OK(t).Into(t, "vm", &v)
		return v.Status == "RUNNING" && len(v.IPAddresses) > 0
	})
	return v.IPAddresses[0]
}
