package graph_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/securitygroup/sgsync"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// fwView is what a zone's Proxmox firewall holds, read from the simulator
// directly (not through flexplane).
type fwView struct {
	groups map[string]pveapi.FirewallGroup
	rules  map[string][]pveapi.FirewallRule
	sets   map[string][]string
}

func readFirewall(t *testing.T, c *proxmox.Client) fwView {
	t.Helper()
	ctx := t.Context()
	v := fwView{groups: map[string]pveapi.FirewallGroup{}, rules: map[string][]pveapi.FirewallRule{}, sets: map[string][]string{}}
	gs, err := pveapi.FirewallGroups(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	// The writer may remove a group or set between the list and its read:
	// such a one is left out.
	gone := func(err error) bool { return err != nil && strings.Contains(err.Error(), "no such") }
	for _, g := range gs {
		rs, err := pveapi.FirewallGroupRules(ctx, c, g.Name)
		if gone(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		v.groups[g.Name], v.rules[g.Name] = g, rs
	}
	sets, err := pveapi.IPSets(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sets {
		es, err := pveapi.IPSetEntries(ctx, c, s.Name)
		if gone(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			v.sets[s.Name] = append(v.sets[s.Name], e.CIDR)
		}
		slices.Sort(v.sets[s.Name])
	}
	return v
}

// groupOf is the Proxmox group of vdc's group name (by its comment).
func (v fwView) groupOf(vdc, name string) (string, bool) {
	for n, g := range v.groups {
		if g.Comment == "flexplane fp-vdc-"+vdc+" group="+name {
			return n, true
		}
	}
	return "", false
}

type guestFW struct {
	opts  pveapi.FirewallOptions
	rules []string // the groups attached, in order
	net0  string
}

func readGuest(t *testing.T, c *proxmox.Client, vmID string) guestFW {
	t.Helper()
	ref, err := tenancy.ParseVMID(vmID)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	gs, err := pveapi.Guests(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(gs, func(g pveapi.Resource) bool { return g.VMID == ref.VMID })
	if i < 0 {
		t.Fatalf("no guest %d", ref.VMID)
	}
	node := gs[i].Node
	var g guestFW
	if g.opts, err = pveapi.GuestFirewallOptions(ctx, c, node, ref.VMID); err != nil {
		t.Fatal(err)
	}
	rs, err := pveapi.GuestFirewallRules(ctx, c, node, ref.VMID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Type == "group" {
			g.rules = append(g.rules, r.Action)
		}
	}
	cfg, err := pveapi.GuestConfig(ctx, c, node, ref.VMID)
	if err != nil {
		t.Fatal(err)
	}
	g.net0 = cfg.Str("net0")
	return g
}

type gqlZoneState struct{ Zone, Status, Message string }

func groupZones(t *testing.T, h *meshtest.Harness, user, vdc, name string) []gqlZoneState {
	t.Helper()
	var gs []struct {
		Name  string
		Zones []gqlZoneState
	}
	h.GraphQL(t, user, vdc, `{ securityGroups { name zones { zone status message } } }`, nil).OK(t).Into(t, "securityGroups", &gs)
	for _, g := range gs {
		if g.Name == name {
			return g.Zones
		}
	}
	t.Fatalf("no group %s in %+v", name, gs)
	return nil
}

var pveGroupName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9\-_]+$`)

// TestSecurityGroupsWrittenToProxmox: the groups of a VDC and its VMs'
// groups are written into the zone's Proxmox firewall as the sgsync
// package says: reported failed while the datacenter firewall is off,
// then applied; a Proxmox group per group (a valid name of at most 18
// characters, the VDC and the group in its comment) with the translated
// rules, the members' addresses in IP sets, each member VM's firewall on
// with ipfilter, policy_in DROP, policy_out DROP only with outbound rules,
// the platform group and its groups attached, its NIC's firewall on;
// setVMSecurityGroups answers once the VM's firewall holds its new group,
// and a rule change reaches the VMs, the old group is
// removed; a VM taken out of every group has its firewall off again, and
// another VDC's groups are apart.
func TestSecurityGroupsWrittenToProxmox(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "sgwriter")
	c := h.Clusters[0].Proxmox(t)
	h.GraphQL(t, tn.bob, tn.blue, createGroup, groupInput("app",
		map[string]any{"direction": "INBOUND", "protocol": "TCP", "ports": "8080", "peerCidr": "10.0.0.0/8"})).OK(t)
	h.GraphQL(t, tn.bob, tn.blue, createGroup, groupInput("db",
		map[string]any{"direction": "INBOUND", "protocol": "TCP", "ports": "5432", "peerGroup": "app"},
		map[string]any{"direction": "OUTBOUND", "protocol": "TCP", "ports": "443"})).OK(t)
	newVM := func(name string, groups []string) string {
		var created struct{ Operation gqlOp }
		h.GraphQL(t, tn.bob, tn.blue, createVM, map[string]any{"in": map[string]any{"name": name, "zone": "alpha", "image": "tiny",
			"computeProfile": "small", "storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": tn.net}},
			"sshKeys": []string{sshKey}, "user": "bob", "securityGroups": groups}}).OK(t).Into(t, "createVM", &created)
		return awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)
	}
	a, d, open := newVM("a", []string{"app"}), newVM("d", []string{"db"}), newVM("open", []string{})
	addr := func(id string) string {
		var v struct{ IPAddresses []string }
		h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { vm(id: $id) { ipAddresses } }`, map[string]any{"id": id}).OK(t).Into(t, "vm", &v)
		if len(v.IPAddresses) != 1 {
			t.Fatalf("addresses of %s: %v", id, v.IPAddresses)
		}
		return v.IPAddresses[0]
	}

	// The datacenter's firewall is the operator's to turn on.
	poll.True(t, 30*time.Second, "db reported failed while the datacenter firewall is off", func() bool {
		zs := groupZones(t, h, tn.bob, tn.blue, "db")
		return len(zs) == 1 && zs[0].Zone == "alpha" && zs[0].Status == "ERROR" && strings.Contains(zs[0].Message, "datacenter firewall is off")
	})
	if err := c.Put(t.Context(), "/cluster/firewall/options", map[string]any{"enable": 1}, nil); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 30*time.Second, "db applied in alpha", func() bool {
		zs := groupZones(t, h, tn.bob, tn.blue, "db")
		return len(zs) == 1 && zs[0].Status == "APPLIED"
	})

	v := readFirewall(t, c)
	dbGroup, ok := v.groupOf(tn.blue, "db")
	if !ok || len(dbGroup) > 18 || !pveGroupName.MatchString(dbGroup) {
		t.Fatalf("db's Proxmox group %q (%v) in %v", dbGroup, ok, v.groups)
	}
	appSet, dbSet := sgsync.MemberSet(tn.blue, "app"), sgsync.MemberSet(tn.blue, "db")
	want := []pveapi.FirewallRule{
		{Type: "in", Action: "ACCEPT", Enable: 1, Source: "+dc/" + dbSet, Comment: "members of the same group"},
		{Pos: 1, Type: "in", Action: "ACCEPT", Enable: 1, Proto: "tcp", DPort: "5432", Source: "+dc/" + appSet, Comment: "rule 0"},
		{Pos: 2, Type: "out", Action: "ACCEPT", Enable: 1, Proto: "tcp", DPort: "443", Comment: "rule 1"},
	}
	if !slices.Equal(v.rules[dbGroup], want) {
		t.Errorf("db's rules in Proxmox:\n%+v\nwant\n%+v", v.rules[dbGroup], want)
	}
	if got := v.sets[appSet]; !slices.Equal(got, []string{addr(a)}) {
		t.Errorf("app's members' set %v, want [%s]", got, addr(a))
	}
	if got := v.sets[dbSet]; !slices.Equal(got, []string{addr(d)}) {
		t.Errorf("db's members' set %v, want [%s]", got, addr(d))
	}
	appGroup, _ := v.groupOf(tn.blue, "app")
	gd, ga, gopen := readGuest(t, c, d), readGuest(t, c, a), readGuest(t, c, open)
	wantOpts := pveapi.FirewallOptions{Enable: 1, IPFilter: 1, DHCP: 1, PolicyIn: "DROP", PolicyOut: "DROP"}
	if gd.opts != wantOpts || len(gd.rules) != 2 || gd.rules[1] != dbGroup || !strings.Contains(gd.net0, "firewall=1") {
		t.Errorf("d's firewall: %+v", gd)
	}
	platform := gd.rules[0]
	if g := v.groups[platform]; g.Comment != "flexplane fp-vdc-"+tn.blue+" platform" || len(v.rules[platform]) != 3 {
		t.Errorf("the platform group %s: %+v %+v", platform, g, v.rules[platform])
	}
	wantOpts.PolicyOut = "ACCEPT" // app has no outbound rule
	if ga.opts != wantOpts || !slices.Equal(ga.rules, []string{platform, appGroup}) {
		t.Errorf("a's firewall: %+v", ga)
	}
	if gopen.opts.Enable != 0 || len(gopen.rules) != 0 {
		t.Errorf("a VM in no group has a firewall: %+v", gopen)
	}

	// a joins db too; db's rules change: a new Proxmox group, the old one gone.
	h.GraphQL(t, tn.bob, tn.blue, setGroups, map[string]any{"vm": a, "g": []string{"app", "db"}}).OK(t)
	// It answered once the zone's firewall holds a's new group.
	v = readFirewall(t, c)
	if ga = readGuest(t, c, a); !slices.Equal(ga.rules, []string{platform, appGroup, dbGroup}) || !slices.Contains(v.sets[dbSet], addr(a)) {
		t.Errorf("setVMSecurityGroups answered before a's firewall held db: %+v, db's members %v", ga, v.sets[dbSet])
	}
	var dbID string
	var all []struct{ ID, Name string }
	h.GraphQL(t, tn.bob, tn.blue, `{ securityGroups { id name } }`, nil).OK(t).Into(t, "securityGroups", &all)
	for _, g := range all {
		if g.Name == "db" {
			dbID = g.ID
		}
	}
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { updateSecurityGroup(input: {id: $id, rules: [{direction: INBOUND, protocol: TCP, ports: "5433", peerGroup: "app"}]}) { id } }`,
		map[string]any{"id": dbID}).OK(t)
	poll.True(t, 30*time.Second, "the changed db on both VMs", func() bool {
		v = readFirewall(t, c)
		g, ok := v.groupOf(tn.blue, "db")
		if !ok || g == dbGroup {
			return false
		}
		ga, gd = readGuest(t, c, a), readGuest(t, c, d)
		_, oldLeft := v.groups[dbGroup]
		return !oldLeft && slices.Equal(ga.rules, []string{platform, appGroup, g}) && slices.Equal(gd.rules, []string{platform, g}) &&
			ga.opts.PolicyOut == "ACCEPT" && gd.opts.PolicyOut == "ACCEPT" && slices.Equal(v.sets[dbSet], sortedOf(addr(a), addr(d)))
	})

	// Another VDC's groups are its own.
	h.GraphQL(t, tn.alice, tn.red, createGroup, groupInput("app")).OK(t)
	poll.True(t, 30*time.Second, "red's group apart from blue's", func() bool {
		v = readFirewall(t, c)
		for _, g := range v.groups {
			if strings.Contains(g.Comment, "fp-vdc-"+tn.red+" ") {
				return false // red has no VM in a group: nothing of it is written
			}
		}
		return true
	})

	// Out of every group: the firewall off again, the groups' objects kept
	// while others use them.
	h.GraphQL(t, tn.bob, tn.blue, setGroups, map[string]any{"vm": d, "g": []string{}}).OK(t)
	poll.True(t, 30*time.Second, "d's firewall off", func() bool {
		gd = readGuest(t, c, d)
		return gd.opts.Enable == 0 && len(gd.rules) == 0
	})
	h.GraphQL(t, tn.bob, tn.blue, setGroups, map[string]any{"vm": a, "g": []string{}}).OK(t)
	poll.True(t, 30*time.Second, "blue's objects gone from the firewall", func() bool {
		v = readFirewall(t, c)
		for _, g := range v.groups {
			if strings.Contains(g.Comment, "fp-vdc-"+tn.blue+" ") {
				return false
			}
		}
		_, app := v.sets[appSet]
		_, db := v.sets[dbSet]
		return !app && !db
	})
}

func sortedOf(s ...string) []string { slices.Sort(s); return s }

// TestSecurityGroupsZoneDownAndBack: a VDC with members of a group in two
// zones; with one zone's agent stopped, the group's rules change: the
// other zone gets the new group, the stopped one is reported UNAVAILABLE,
// and gets it once its agent is back.
func TestSecurityGroupsZoneDownAndBack(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}, meshtest.ClusterSpec{Name: "beta", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{SecurityGroupInterval: 500 * time.Millisecond}))
	h.WaitOnline(t, 30*time.Second)
	seedCatalog(t, h, "alpha", "beta")
	nets := createNetworks(t, h, "bob", "blue", "alpha", "beta")
	var db struct{ ID string }
	h.GraphQL(t, "bob", "blue", createGroup, groupInput("db",
		map[string]any{"direction": "INBOUND", "protocol": "TCP", "ports": "5432"})).OK(t).Into(t, "createSecurityGroup", &db)
	vms := map[string]string{}
	for _, z := range []string{"alpha", "beta"} {
		var created struct{ Operation gqlOp }
		h.GraphQL(t, "bob", "blue", createVM, map[string]any{"in": map[string]any{"name": "pg-" + z, "zone": z, "image": "tiny",
			"computeProfile": "small", "storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": nets[z]}},
			"sshKeys": []string{sshKey}, "user": "bob", "securityGroups": []string{"db"}}}).OK(t).Into(t, "createVM", &created)
		vms[z] = awaitCreate(t, h, "bob", "blue", created.Operation.ID)
	}
	alpha, beta := h.Clusters[0], h.Clusters[1]
	for _, c := range []*meshtest.Cluster{alpha, beta} {
		if err := c.Proxmox(t).Put(t.Context(), "/cluster/firewall/options", map[string]any{"enable": 1}, nil); err != nil {
			t.Fatal(err)
		}
	}
	statuses := func() map[string]string {
		out := map[string]string{}
		for _, z := range groupZones(t, h, "bob", "blue", "db") {
			out[z.Zone] = z.Status
		}
		return out
	}
	poll.True(t, 30*time.Second, "db applied in both zones", func() bool {
		st := statuses()
		return st["alpha"] == "APPLIED" && st["beta"] == "APPLIED"
	})
	// dport of the group the zone's VM has attached (its last rule).
	attachedPort := func(c *meshtest.Cluster, vm string) string {
		pc := c.Proxmox(t)
		g := readGuest(t, pc, vm)
		if len(g.rules) != 2 {
			return ""
		}
		rs, err := pveapi.FirewallGroupRules(t.Context(), pc, g.rules[1])
		if err != nil || len(rs) == 0 {
			return ""
		}
		return rs[len(rs)-1].DPort
	}
	if p := attachedPort(beta, vms["beta"]); p != "5432" {
		t.Fatalf("beta's VM's group allows %q, want 5432", p)
	}

	for _, a := range beta.Agents {
		if err := a.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	h.GraphQL(t, "bob", "blue", `mutation($id: ID!) { updateSecurityGroup(input: {id: $id, rules: [{direction: INBOUND, protocol: TCP, ports: "5433"}]}) { id } }`,
		map[string]any{"id": db.ID}).OK(t)
	poll.True(t, 60*time.Second, "the change applied in alpha, beta unavailable", func() bool {
		st := statuses()
		return st["alpha"] == "APPLIED" && st["beta"] == "UNAVAILABLE" && attachedPort(alpha, vms["alpha"]) == "5433"
	})
	if p := attachedPort(beta, vms["beta"]); p != "5432" {
		t.Fatalf("beta, cut off, changed meanwhile: %q", p)
	}

	for _, a := range beta.Agents {
		if err := a.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	h.WaitOnline(t, 60*time.Second)
	poll.True(t, 60*time.Second, "the change applied in beta once it is back", func() bool {
		return statuses()["beta"] == "APPLIED" && attachedPort(beta, vms["beta"]) == "5433"
	})
}
