package pvesim_test

import (
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

// fwCall calls the API and fails the test unless the answer has the wanted status.
func fwCall(t *testing.T, c *pvesim.Cluster, method, path string, form url.Values, want int) response {
	t.Helper()
	r := call(t, c, testToken, method, path, form)
	if r.status != want {
		t.Fatalf("%s %s %v: got %s %s, want %d", method, path, form, r.reason, r.body, want)
	}
	return r
}

func listOf(t *testing.T, r response) []map[string]any {
	t.Helper()
	raw, ok := r.data.([]any)
	if !ok {
		t.Fatalf("answer %s is not a list", r.body)
	}
	out := make([]map[string]any, len(raw))
	for i, e := range raw {
		out[i] = e.(map[string]any)
	}
	return out
}

func TestFirewallGroupsAndRules(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	ok := http.StatusOK
	fwCall(t, c, "POST", "/cluster/firewall/groups", url.Values{"group": {"db"}, "comment": {"databases"}}, ok)
	// Group names: Proxmox's pattern, at most 18 characters.
	for _, bad := range []string{"1db", "d", "db.x", "a-name-far-too-long-x"} {
		r := fwCall(t, c, "POST", "/cluster/firewall/groups", url.Values{"group": {bad}}, http.StatusBadRequest)
		if r.errors["group"] == "" {
			t.Errorf("group %q: errors %v, want one for group", bad, r.errors)
		}
	}
	r := fwCall(t, c, "POST", "/cluster/firewall/groups", url.Values{"group": {"db"}}, http.StatusBadRequest)
	if r.errors["group"] != "Security group 'db' already exists" {
		t.Errorf("duplicate group: %v", r.errors)
	}
	groups := listOf(t, fwCall(t, c, "GET", "/cluster/firewall/groups", nil, ok))
	if len(groups) != 1 || groups[0]["group"] != "db" || groups[0]["comment"] != "databases" || len(groups[0]["digest"].(string)) != 40 {
		t.Fatalf("groups: %v", groups)
	}

	// A rule naming an ipset that does not exist is refused as verify_rule does.
	rule := url.Values{"type": {"in"}, "action": {"ACCEPT"}, "proto": {"tcp"}, "dport": {"5432"}, "source": {"+dc/app-members"}, "enable": {"1"}}
	r = fwCall(t, c, "POST", "/cluster/firewall/groups/db", rule, http.StatusBadRequest)
	if r.errors["source"] != "no such ipset 'app-members'" {
		t.Fatalf("unknown ipset: %v", r.errors)
	}
	fwCall(t, c, "POST", "/cluster/firewall/ipset", url.Values{"name": {"app-members"}}, ok)
	fwCall(t, c, "POST", "/cluster/firewall/groups/db", rule, ok)
	// A new rule goes on top, as pve-firewall's create_rule does.
	fwCall(t, c, "POST", "/cluster/firewall/groups/db", url.Values{"type": {"in"}, "action": {"DROP"}, "proto": {"udp"}}, ok)
	rules := listOf(t, fwCall(t, c, "GET", "/cluster/firewall/groups/db", nil, ok))
	if len(rules) != 2 || rules[0]["action"] != "DROP" || rules[0]["enable"] != 0.0 || rules[1]["dport"] != "5432" || rules[1]["pos"] != 1.0 || rules[1]["enable"] != 1.0 {
		t.Fatalf("rules: %v", rules)
	}
	digest := rules[0]["digest"].(string)
	// Bad rules: ports without a protocol, ports of ICMP, a bad port, an unknown action.
	for _, tc := range []struct {
		form url.Values
		key  string
		msg  string
	}{
		{url.Values{"type": {"in"}, "action": {"ACCEPT"}, "dport": {"22"}}, "proto", "missing property - 'dport' requires this property"},
		{url.Values{"type": {"in"}, "action": {"ACCEPT"}, "proto": {"icmp"}, "dport": {"22"}}, "dport", "protocol 'icmp' does not support ports"},
		{url.Values{"type": {"in"}, "action": {"ACCEPT"}, "proto": {"tcp"}, "dport": {"99999"}}, "dport", "invalid format - invalid port '99999'\n"},
		{url.Values{"type": {"in"}, "action": {"ALLOW"}}, "action", "unknown action 'ALLOW'"},
		{url.Values{"type": {"group"}, "action": {"db"}}, "type", "security groups not allowed"},
		{url.Values{"type": {"in"}, "action": {"ACCEPT"}, "source": {"+dc/-x"}}, "source", "invalid format - malformed ipset name\n"},
	} {
		r := fwCall(t, c, "POST", "/cluster/firewall/groups/db", tc.form, http.StatusBadRequest)
		if r.errors[tc.key] != tc.msg {
			t.Errorf("%v: errors %q, want %s: %q", tc.form, r.errors, tc.key, tc.msg)
		}
	}
	// Move the DROP rule below the other: the digest changes, and the old one is stale.
	fwCall(t, c, "PUT", "/cluster/firewall/groups/db/0", url.Values{"moveto": {"2"}, "digest": {digest}}, ok)
	r = fwCall(t, c, "PUT", "/cluster/firewall/groups/db/0", url.Values{"comment": {"x"}, "digest": {digest}}, http.StatusInternalServerError)
	if !strings.Contains(r.reason, "detected modified configuration - file changed by other user? Try again.") {
		t.Fatalf("stale digest: %s", r.reason)
	}
	rule0 := fwCall(t, c, "GET", "/cluster/firewall/groups/db/0", nil, ok).data.(map[string]any)
	if rule0["dport"] != "5432" || rule0["pos"] != 0.0 {
		t.Fatalf("rule 0 after move: %v", rule0)
	}
	fwCall(t, c, "PUT", "/cluster/firewall/groups/db/0", url.Values{"delete": {"comment"}, "dport": {"5432,6432"}}, ok)
	r = fwCall(t, c, "GET", "/cluster/firewall/groups/db/7", nil, http.StatusInternalServerError)
	if !strings.Contains(r.reason, "no rule at position 7") {
		t.Fatalf("missing rule: %s", r.reason)
	}
	// A non-empty group cannot be deleted; neither can one a guest's rules use.
	r = fwCall(t, c, "DELETE", "/cluster/firewall/groups/db", nil, http.StatusInternalServerError)
	if !strings.Contains(r.reason, "Security group 'db' is not empty") {
		t.Fatalf("delete non-empty: %s", r.reason)
	}
	fwCall(t, c, "DELETE", "/cluster/firewall/groups/db/1", nil, ok)
	fwCall(t, c, "DELETE", "/cluster/firewall/groups/db/0", nil, ok)
	fwCall(t, c, "DELETE", "/cluster/firewall/groups/db", nil, ok)
	r = fwCall(t, c, "GET", "/cluster/firewall/groups/db", nil, http.StatusInternalServerError)
	if !strings.Contains(r.reason, "no such security group 'db'") {
		t.Fatalf("deleted group: %s", r.reason)
	}
}

func TestFirewallIPSets(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	ok := http.StatusOK
	fwCall(t, c, "POST", "/cluster/firewall/ipset", url.Values{"name": {"app-members"}, "comment": {"apps"}}, ok)
	fwCall(t, c, "POST", "/cluster/firewall/ipset/app-members", url.Values{"cidr": {"10.1.0.5"}}, ok)
	fwCall(t, c, "POST", "/cluster/firewall/ipset/app-members", url.Values{"cidr": {"10.2.0.0/16"}, "nomatch": {"1"}, "comment": {"not these"}}, ok)
	r := fwCall(t, c, "POST", "/cluster/firewall/ipset/app-members", url.Values{"cidr": {"10.1.0.5"}}, http.StatusBadRequest)
	if r.errors["cidr"] != "address '10.1.0.5' already exists" {
		t.Fatalf("duplicate entry: %v", r.errors)
	}
	r = fwCall(t, c, "POST", "/cluster/firewall/ipset/app-members", url.Values{"cidr": {"10.1.0.500"}}, http.StatusBadRequest)
	if r.errors["cidr"] == "" {
		t.Fatal("bad address accepted")
	}
	entries := listOf(t, fwCall(t, c, "GET", "/cluster/firewall/ipset/app-members", nil, ok))
	if len(entries) != 2 || entries[1]["nomatch"] != 1.0 || entries[1]["comment"] != "not these" {
		t.Fatalf("entries: %v", entries)
	}
	fwCall(t, c, "PUT", "/cluster/firewall/ipset/app-members/10.2.0.0%2F16", url.Values{"nomatch": {"0"}}, ok)
	e := fwCall(t, c, "GET", "/cluster/firewall/ipset/app-members/10.2.0.0%2F16", nil, ok).data.(map[string]any)
	if _, has := e["nomatch"]; has {
		t.Fatalf("entry after update: %v", e)
	}
	r = fwCall(t, c, "DELETE", "/cluster/firewall/ipset/app-members/10.2.0.0%2F16", url.Values{"digest": {"0123456789abcdef0123456789abcdef01234567"}}, http.StatusInternalServerError)
	if !strings.Contains(r.reason, "detected modified configuration") {
		t.Fatalf("stale digest: %s", r.reason)
	}
	r = fwCall(t, c, "DELETE", "/cluster/firewall/ipset/app-members", nil, http.StatusInternalServerError)
	if !strings.Contains(r.reason, "IPSet 'app-members' is not empty") {
		t.Fatalf("delete non-empty: %s", r.reason)
	}
	fwCall(t, c, "DELETE", "/cluster/firewall/ipset/app-members", url.Values{"force": {"1"}}, ok)
	r = fwCall(t, c, "GET", "/cluster/firewall/ipset/app-members", nil, http.StatusInternalServerError)
	if !strings.Contains(r.reason, "no such IPSet 'app-members'") {
		t.Fatalf("deleted set: %s", r.reason)
	}
	r = fwCall(t, c, "POST", "/cluster/firewall/ipset", url.Values{"name": {"9x"}}, http.StatusBadRequest)
	if r.errors["name"] == "" {
		t.Fatalf("bad set name: %v", r.errors)
	}
}

func TestFirewallGuestConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := pvesim.Config{Cluster: "lab", Nodes: 2, StateFile: filepath.Join(dir, "state.json")}
	c := startCluster(t, cfg)
	ok := http.StatusOK
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "net0", Value: "virtio,bridge=vmbr0,firewall=1"})
	conf := fwCall(t, c, "GET", "/nodes/pve1/qemu/100/config", nil, ok).data.(map[string]any)
	if !strings.Contains(conf["net0"].(string), "firewall=1") {
		t.Fatalf("net0 lost firewall=1: %v", conf["net0"])
	}
	fwCall(t, c, "POST", "/cluster/firewall/groups", url.Values{"group": {"web"}}, ok)
	fwCall(t, c, "PUT", "/cluster/firewall/options", url.Values{"enable": {"1"}, "policy_in": {"DROP"}}, ok)
	fwCall(t, c, "PUT", "/nodes/pve1/qemu/100/firewall/options", url.Values{"enable": {"1"}, "ipfilter": {"1"}, "policy_out": {"DROP"}}, ok)
	fwCall(t, c, "POST", "/nodes/pve1/qemu/100/firewall/ipset", url.Values{"name": {"ipfilter-net0"}}, ok)
	fwCall(t, c, "POST", "/nodes/pve1/qemu/100/firewall/ipset/ipfilter-net0", url.Values{"cidr": {"10.9.0.5"}}, ok)
	fwCall(t, c, "POST", "/nodes/pve1/qemu/100/firewall/rules", url.Values{"type": {"group"}, "action": {"web"}, "iface": {"net0"}, "enable": {"1"}}, ok)
	fwCall(t, c, "POST", "/nodes/pve1/qemu/100/firewall/rules", url.Values{"type": {"out"}, "action": {"ACCEPT"}, "proto": {"tcp"}, "dport": {"443"}, "dest": {"+guest/ipfilter-net0"}, "enable": {"1"}}, ok)
	r := fwCall(t, c, "POST", "/nodes/pve1/qemu/100/firewall/rules", url.Values{"type": {"group"}, "action": {"nosuch"}}, http.StatusBadRequest)
	if r.errors["action"] != "no such security group 'nosuch'" {
		t.Fatalf("unknown group: %v", r.errors)
	}
	r = fwCall(t, c, "POST", "/nodes/pve1/qemu/100/firewall/rules", url.Values{"type": {"in"}, "action": {"ACCEPT"}, "source": {"+guest/app-members"}}, http.StatusBadRequest)
	if r.errors["source"] != "no such ipset 'app-members'" {
		t.Fatalf("unknown guest ipset: %v", r.errors)
	}
	r = fwCall(t, c, "DELETE", "/cluster/firewall/groups/web", nil, http.StatusInternalServerError)
	if !strings.Contains(r.reason, "security group 'web' is still used by VM 100") {
		t.Fatalf("delete used group: %s", r.reason)
	}
	opts := fwCall(t, c, "GET", "/nodes/pve1/qemu/100/firewall/options", nil, ok).data.(map[string]any)
	if opts["enable"] != 1.0 || opts["ipfilter"] != 1.0 || opts["policy_out"] != "DROP" {
		t.Fatalf("guest options: %v", opts)
	}
	paths := []string{
		"/cluster/firewall/options", "/cluster/firewall/groups", "/cluster/firewall/groups/web",
		"/cluster/firewall/ipset", "/nodes/pve1/qemu/100/firewall/options", "/nodes/pve1/qemu/100/firewall/rules",
		"/nodes/pve1/qemu/100/firewall/ipset", "/nodes/pve1/qemu/100/firewall/ipset/ipfilter-net0",
	}
	before := map[string]any{}
	for _, p := range paths {
		before[p] = fwCall(t, c, "GET", p, nil, ok).data
	}
	// The state file keeps it all.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := startCluster(t, cfg)
	for _, p := range paths {
		if got := fwCall(t, c2, "GET", p, nil, ok).data; !reflect.DeepEqual(got, before[p]) {
			t.Errorf("%s after restart:\n got %v\nwant %v", p, got, before[p])
		}
	}
	// The firewall migrates with the guest, and goes with its delete.
	cl2 := pveClient(t, c2, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	n1, err := cl2.Node(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	vm, err := n1.VirtualMachine(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	task, err := vm.Migrate(ctx, &proxmox.VirtualMachineMigrateOptions{Target: "pve2"})
	waitOK(t, ctx, task, err)
	if got := fwCall(t, c2, "GET", "/nodes/pve2/qemu/100/firewall/rules", nil, ok).data; !reflect.DeepEqual(got, before["/nodes/pve1/qemu/100/firewall/rules"]) {
		t.Errorf("rules after migration: %v", got)
	}
	fwCall(t, c2, "GET", "/nodes/pve1/qemu/100/firewall/rules", nil, http.StatusInternalServerError)
	n2, err := cl2.Node(ctx, "pve2")
	if err != nil {
		t.Fatal(err)
	}
	if vm, err = n2.VirtualMachine(ctx, 100); err != nil {
		t.Fatal(err)
	}
	task, err = vm.Delete(ctx, nil)
	waitOK(t, ctx, task, err)
	newVM(t, cl2, "pve2", 100)
	if got := listOf(t, fwCall(t, c2, "GET", "/nodes/pve2/qemu/100/firewall/rules", nil, ok)); len(got) != 0 {
		t.Fatalf("a new VM 100 inherited rules: %v", got)
	}
}

// recorder is a data plane that keeps the last topology.
type recorder struct {
	mu   sync.Mutex
	last pvesim.Topology
}

func (r *recorder) Apply(t pvesim.Topology) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = t
	return nil
}

func (r *recorder) topology() pvesim.Topology {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// The data plane gets each firewalled NIC's rules in order, the security group expanded
// in place, disabled rules and other NICs' rules left out, and the sets with their
// nomatch entries cut out.
func TestFirewallTopology(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	c := startCluster(t, pvesim.Config{DataPlane: rec})
	ok := http.StatusOK
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	newVM(t, cl, "pve1", 100,
		proxmox.VirtualMachineOption{Name: "net0", Value: "virtio=BC:24:11:00:00:64,bridge=vmbr0,firewall=1"},
		proxmox.VirtualMachineOption{Name: "net1", Value: "virtio=BC:24:11:00:01:64,bridge=vmbr0"},
		proxmox.VirtualMachineOption{Name: "ipconfig0", Value: "ip=10.1.0.11/24"})
	fwCall(t, c, "POST", "/cluster/firewall/ipset", url.Values{"name": {"apps"}}, ok)
	for _, e := range []url.Values{{"cidr": {"10.2.0.0/16"}}, {"cidr": {"10.2.3.0/24"}, "nomatch": {"1"}}, {"cidr": {"10.2.3.7"}}, {"cidr": {"fd00::/64"}}} {
		fwCall(t, c, "POST", "/cluster/firewall/ipset/apps", e, ok)
	}
	fwCall(t, c, "POST", "/cluster/firewall/groups", url.Values{"group": {"db"}}, ok)
	// Posted on top each: the group's rules end up 5432 (disabled), 5433, in that order.
	fwCall(t, c, "POST", "/cluster/firewall/groups/db", url.Values{"type": {"in"}, "action": {"ACCEPT"}, "proto": {"tcp"}, "dport": {"5433,6000:6010"}, "source": {"+dc/apps"}, "enable": {"1"}}, ok)
	fwCall(t, c, "POST", "/cluster/firewall/groups/db", url.Values{"type": {"in"}, "action": {"ACCEPT"}, "proto": {"tcp"}, "dport": {"5432"}}, ok)
	fwCall(t, c, "POST", "/nodes/pve1/qemu/100/firewall/rules", url.Values{"type": {"out"}, "action": {"DROP"}, "proto": {"udp"}, "iface": {"net1"}, "enable": {"1"}}, ok)
	fwCall(t, c, "POST", "/nodes/pve1/qemu/100/firewall/rules", url.Values{"type": {"group"}, "action": {"db"}, "enable": {"1"}}, ok)
	fwCall(t, c, "POST", "/nodes/pve1/qemu/100/firewall/rules", url.Values{"type": {"in"}, "action": {"REJECT"}, "source": {"192.0.2.0/24"}, "enable": {"1"}}, ok)
	fwCall(t, c, "PUT", "/nodes/pve1/qemu/100/firewall/options", url.Values{"enable": {"1"}, "ipfilter": {"1"}}, ok)
	fwCall(t, c, "PUT", "/cluster/firewall/options", url.Values{"enable": {"1"}}, ok)
	fwCall(t, c, "POST", "/nodes/pve1/qemu/100/status/start", nil, ok)

	var nics []pvesim.TopologyNIC
	var top pvesim.Topology
	poll.True(t, 10*time.Second, "the guest in the topology", func() bool {
		top = rec.topology()
		if len(top.Guests) != 1 {
			return false
		}
		nics = top.Guests[0].NICs
		return len(nics) == 2
	})
	if nics[1].Firewall != nil {
		t.Errorf("net1 without firewall=1 is filtered: %+v", nics[1].Firewall)
	}
	f := nics[0].Firewall
	if f == nil {
		t.Fatal("net0 is not filtered")
	}
	v4 := func(a, b string) pvesim.AddrRange {
		return pvesim.AddrRange{From: netip.MustParseAddr(a), To: netip.MustParseAddr(b)}
	}
	want := &pvesim.NICFirewall{
		PolicyIn: "DROP", PolicyOut: "ACCEPT", MACFilter: true, IPFilter: "guest/100/ipfilter-net0",
		Rules: []pvesim.FirewallRule{
			{In: true, Action: "REJECT", Proto: -1, ICMPType: -1, Source: pvesim.FirewallAddrs{V4: []pvesim.AddrRange{v4("192.0.2.0", "192.0.2.255")}}},
			{In: true, Action: "ACCEPT", Proto: 6, ICMPType: -1, DPorts: []pvesim.PortRange{{From: 5433, To: 5433}, {From: 6000, To: 6010}}, Source: pvesim.FirewallAddrs{Set: "dc/apps"}},
		},
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("net0's firewall:\n got %+v\nwant %+v", f, want)
	}
	wantApps := pvesim.FirewallSet{
		V4: []pvesim.AddrRange{v4("10.2.0.0", "10.2.2.255"), v4("10.2.3.7", "10.2.3.7"), v4("10.2.4.0", "10.2.255.255")},
		V6: []pvesim.AddrRange{{From: netip.MustParseAddr("fd00::"), To: netip.MustParseAddr("fd00::ffff:ffff:ffff:ffff")}},
	}
	if got := top.FirewallSets["dc/apps"]; !reflect.DeepEqual(got, wantApps) {
		t.Errorf("set apps:\n got %+v\nwant %+v", got, wantApps)
	}
	// Without an ipfilter-net0 set, ipfilter allows the NIC's address (and the
	// unspecified and link-local ones).
	wantFilter := pvesim.FirewallSet{
		V4: []pvesim.AddrRange{v4("0.0.0.0", "0.0.0.0"), v4("10.1.0.11", "10.1.0.11")},
		V6: []pvesim.AddrRange{{From: netip.MustParseAddr("::"), To: netip.MustParseAddr("::")}, {From: netip.MustParseAddr("fe80::be24:11ff:fe00:64"), To: netip.MustParseAddr("fe80::be24:11ff:fe00:64")}},
	}
	if got := top.FirewallSets["guest/100/ipfilter-net0"]; !reflect.DeepEqual(got, wantFilter) {
		t.Errorf("ipfilter set:\n got %+v\nwant %+v", got, wantFilter)
	}
	// The cluster's firewall off turns every NIC's off.
	fwCall(t, c, "PUT", "/cluster/firewall/options", url.Values{"enable": {"0"}}, ok)
	poll.True(t, 10*time.Second, "the firewall off in the topology", func() bool {
		top := rec.topology()
		return len(top.Guests) == 1 && top.Guests[0].NICs[0].Firewall == nil
	})
}
