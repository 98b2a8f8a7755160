//go:build linux

package graph_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/edge"
	"github.com/flexplane/flexplane/pkg/support/nsnet"
)

// gqlEdgeGateway is an edge gateway as edgeGateways answers it.
type gqlEdgeGateway struct {
	ID, Node, Status, Message, PublicAddress string
	EgressMbps, IngressMbps                  int
	FirewallRules                            []struct{ ID string }
	PortForwards                             []struct{ ID string }
	Counters                                 []struct {
		Name    string
		Packets float64
	}
}

func (g gqlEdgeGateway) counter(name string) float64 {
	for _, c := range g.Counters {
		if c.Name == name {
			return c.Packets
		}
	}
	return -1
}

const edgeGatewaysQuery = `{ edgeGateways(zone: "alpha") { totalCount nodes { id node status message publicAddress egressMbps ingressMbps
	firewallRules { id } portForwards { id } counters { name packets } } } }`

// edgeGateways reads the VDC's gateways in zone alpha.
func edgeGateways(t *testing.T, h *meshtest.Harness, user, vdc string) []gqlEdgeGateway {
	t.Helper()
	var c struct{ Nodes []gqlEdgeGateway }
	h.GraphQL(t, user, vdc, edgeGatewaysQuery, nil).OK(t).Into(t, "edgeGateways", &c)
	return c.Nodes
}

// TestEdgeGatewayThroughGraphQL drives a VDC's edge gateway through GraphQL
// over the simulator's data plane (real namespaces, bridges, VXLAN and
// packets): the platform admin gives the zone an external network; a VM of
// the VDC reaches the "internet" with its source rewritten to the VDC's
// public address; a port forward reaches a TCP service in the VM; inbound
// traffic to a 1:1 address without a rule is dropped and the default deny's
// counter says so, until a rule opens it (its counter counts). Bad input is
// refused with BAD_USER_INPUT and changes nothing; another VDC's VM and
// objects are NOT_FOUND.
func TestEdgeGatewayThroughGraphQL(t *testing.T) {
	t.Parallel()
	nettest.NeedRoot(t)
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 2}),
		meshtest.WithAPI(meshtest.APISpec{}), meshtest.WithDataPlane(netip.MustParsePrefix("203.0.113.254/24")))
	h.WaitOnline(t, 30*time.Second)
	url, sum := vmtest.ImageServer(t, 3<<20)
	h.GraphQL(t, "admin", "", `mutation($u: String!, $c: String!) {
	  createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name }
	  createStorageProfile(input: {name: "shared", tier: "ssd", readMBps: 200, writeMBps: 100, pools: [{zone: "alpha", pool: "shared"}]}) { name }
	  createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name } }`,
		map[string]any{"u": url, "c": sum}).OK(t)

	// The external network: bad input refused, then created.
	const createExt = `mutation($in: CreateExternalNetworkInput!) { createExternalNetwork(input: $in) { zone poolSize allocated } }`
	ext := func(cidr, gw, start, end string) map[string]any {
		return map[string]any{"in": map[string]any{"zone": "alpha", "bridge": "vmbr0", "cidr": cidr, "gateway": gw, "poolStart": start, "poolEnd": end}}
	}
	for field, vars := range map[string]map[string]any{
		"input.cidr":      ext("203.0.113.0/33", "203.0.113.254", "203.0.113.10", "203.0.113.20"),
		"input.poolEnd":   ext("203.0.113.0/24", "203.0.113.254", "203.0.113.10", "198.51.100.20"),
		"input.gateway":   ext("203.0.113.0/24", "203.0.113.15", "203.0.113.10", "203.0.113.20"),
		"input.poolStart": ext("203.0.113.0/24", "203.0.113.254", "203.0.113.0", "203.0.113.20"),
	} {
		if r := h.GraphQL(t, "admin", "", createExt, vars); r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != field {
			t.Errorf("external network with a bad %s: %s", field, r.Raw)
		}
	}
	if r := h.GraphQL(t, "alice", "red", createExt, ext("203.0.113.0/24", "203.0.113.254", "203.0.113.10", "203.0.113.20")); r.Code(t) != "NOT_FOUND" {
		t.Errorf("a VDC member's createExternalNetwork: %s", r.Raw)
	}
	var en struct{ PoolSize, Allocated int }
	h.GraphQL(t, "admin", "", createExt, ext("203.0.113.0/24", "203.0.113.254", "203.0.113.10", "203.0.113.20")).OK(t).Into(t, "createExternalNetwork", &en)
	if en.PoolSize != 11 || en.Allocated != 0 {
		t.Errorf("external network %+v", en)
	}

	// A VM of red.
	var n struct{ ID string }
	h.GraphQL(t, "alice", "red", `mutation { createNetwork(input: {name: "lan", zone: "alpha", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`, nil).
		OK(t).Into(t, "createNetwork", &n)
	var created struct{ Operation gqlOp }
	h.GraphQL(t, "alice", "red", createVM, map[string]any{"in": map[string]any{
		"name": "web", "zone": "alpha", "image": "tiny", "computeProfile": "small", "storageProfile": "shared",
		"diskGiB": 4, "nics": []any{map[string]any{"network": n.ID}}, "sshKeys": []string{sshKey}, "user": "ops"}}).
		OK(t).Into(t, "createVM", &created)
	vmID := awaitCreate(t, h, "alice", "red", created.Operation.ID)
	var vm gqlVM
	poll.True(t, 60*time.Second, "web running with its address", func() bool {
		h.GraphQL(t, "alice", "red", `query($id: ID!) { vm(id: $id) { id status ipAddresses } }`, map[string]any{"id": vmID}).OK(t).Into(t, "vm", &vm)
		return vm.Status == "RUNNING" && len(vm.IPAddresses) > 0
	})
	p := h.Clusters[0].Plane
	vmNS, inet := p.GuestNS(vmidOf(t, h.Clusters[0].Proxmox(t), "web")), p.InternetNS()
	nettest.Serve(t, inet, 9000, "internet")
	nettest.Serve(t, vmNS, 80, "web")

	// Bad input: refused, and no gateway comes of it.
	const createRule = `mutation($in: CreateFirewallRuleInput!) { createFirewallRule(input: $in) { id position } }`
	rule := func(kv ...any) map[string]any {
		in := map[string]any{"zone": "alpha", "direction": "INBOUND", "protocol": "TCP", "action": "ALLOW"}
		for i := 0; i < len(kv); i += 2 {
			in[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"in": in}
	}
	const createPF = `mutation($in: CreatePortForwardInput!) { createPortForward(input: $in) { id publicAddress publicPort targetPort vmId } }`
	pf := func(kv ...any) map[string]any {
		in := map[string]any{"vmId": vmID, "protocol": "TCP", "publicPort": 8080, "targetPort": 80}
		for i := 0; i < len(kv); i += 2 {
			in[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"in": in}
	}
	bad := []struct {
		query, field string
		vars         map[string]any
	}{
		{createRule, "input.source", rule("source", "10.0.0.0/33")},
		{createRule, "input.source", rule("source", "10.1.2.3/8")},
		{createRule, "input.destination", rule("destination", "not-a-cidr")},
		{createRule, "input.fromPort", rule("fromPort", 70000)},
		{createRule, "input.toPort", rule("fromPort", 100, "toPort", 90)},
		{createRule, "input.fromPort", rule("protocol", "ICMP", "fromPort", 1)},
		{createRule, "input.zone", rule("zone", "nosuch")},
		{createPF, "input.publicPort", pf("publicPort", 0)},
		{createPF, "input.targetPort", pf("targetPort", 65536)},
		{createPF, "input.publicAddress", pf("publicAddress", "198.51.100.7")},
		{createPF, "input.publicAddress", pf("publicAddress", "203.0.113.500")},
		{`mutation { updateEdgeGateway(input: {zone: "alpha", egressMbps: 200000}) { id } }`, "input.egressMbps", nil},
	}
	for _, b := range bad {
		if r := h.GraphQL(t, "alice", "red", b.query, b.vars); r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != b.field {
			t.Errorf("%v: want BAD_USER_INPUT on %s, got %s", b.vars, b.field, r.Raw)
		} else if !strings.Contains(r.Errors[0].Message, b.field) {
			t.Errorf("%v: the message does not name the field: %s", b.vars, r.Errors[0].Message)
		}
	}
	// Another VDC's VM is no target.
	if r := h.GraphQL(t, "bob", "blue", createPF, pf()); r.Code(t) != "NOT_FOUND" {
		t.Errorf("blue forwarding to red's VM: %s", r.Raw)
	}
	if gws := edgeGateways(t, h, "alice", "red"); len(gws) != 0 {
		t.Fatalf("refused input left gateways: %+v", gws)
	}

	// The port forward, two overlapping rules and limits.
	var fwd struct{ ID, PublicAddress, VMID string }
	h.GraphQL(t, "alice", "red", createPF, pf()).OK(t).Into(t, "createPortForward", &fwd)
	if fwd.PublicAddress != "203.0.113.10" || fwd.VMID != vmID {
		t.Errorf("port forward %+v: want the pool's first address and the VM", fwd)
	}
	if r := h.GraphQL(t, "alice", "red", createPF, pf()); r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != "input.publicPort" {
		t.Errorf("a second forward of the same port: %s", r.Raw)
	}
	var r1, r2 struct {
		ID       string
		Position int
	}
	h.GraphQL(t, "alice", "red", createRule, rule("protocol", "UDP", "fromPort", 5000, "toPort", 6000, "source", "198.51.100.0/24", "action", "DENY")).
		OK(t).Into(t, "createFirewallRule", &r1)
	h.GraphQL(t, "alice", "red", createRule, rule("protocol", "UDP", "fromPort", 5500, "toPort", 5600, "position", 0)).OK(t).Into(t, "createFirewallRule", &r2)
	if r1.Position != 0 || r2.Position != 0 {
		t.Errorf("rule positions %d, %d", r1.Position, r2.Position)
	}
	var upd gqlEdgeGateway
	h.GraphQL(t, "alice", "red", `mutation { updateEdgeGateway(input: {zone: "alpha", egressMbps: 500, ingressMbps: 400}) { egressMbps ingressMbps publicAddress } }`, nil).
		OK(t).Into(t, "updateEdgeGateway", &upd)
	if upd.EgressMbps != 500 || upd.IngressMbps != 400 || upd.PublicAddress != "203.0.113.10" {
		t.Errorf("updateEdgeGateway: %+v", upd)
	}

	// The orchestrator derives the state and its agent runs it.
	got := nettest.WaitReach(t, vmNS, "203.0.113.254:9000", 30*time.Second)
	if ip := nettest.PeerIP(got); ip != "203.0.113.10" {
		t.Errorf("egress seen from %s (%q), want the VDC's public address", ip, got)
	}
	if got := nettest.WaitReach(t, inet, "203.0.113.10:8080", 15*time.Second); !strings.HasPrefix(got, "web from 203.0.113.254:") {
		t.Errorf("the port forward answered %q", got)
	}
	var gw gqlEdgeGateway
	// Active, and running the rules (the port forward above may have been
	// applied by a pass before the rules were).
	poll.True(t, 60*time.Second, "the gateway active with its rules' counters", func() bool {
		gws := edgeGateways(t, h, "alice", "red")
		gw = gws[0]
		return len(gws) == 1 && gw.Status == "ACTIVE" && gw.counter(r1.ID) >= 0 && gw.counter(r2.ID) >= 0
	})
	if gw.Node == "" || gw.PublicAddress != "203.0.113.10" || len(gw.FirewallRules) != 2 || gw.FirewallRules[0].ID != r2.ID ||
		len(gw.PortForwards) != 1 || gw.EgressMbps != 500 || gw.counter("default-deny-inbound") < 0 || gw.counter(r1.ID) < 0 {
		t.Errorf("edgeGateways: %+v", gw)
	}

	// A 1:1 address: inbound without a rule is dropped and counted; a rule
	// opens it and counts it.
	var one struct{ ID, PublicAddress string }
	h.GraphQL(t, "alice", "red", `mutation($vm: ID!) { createOneToOneAddress(input: {vmId: $vm, publicAddress: "203.0.113.12"}) { id publicAddress } }`,
		map[string]any{"vm": vmID}).OK(t).Into(t, "createOneToOneAddress", &one)
	if r := h.GraphQL(t, "alice", "red", `mutation($vm: ID!) { createOneToOneAddress(input: {vmId: $vm, publicAddress: "203.0.113.12"}) { id } }`,
		map[string]any{"vm": vmID}); r.Code(t) != "BAD_USER_INPUT" {
		t.Errorf("an address in use given twice: %s", r.Raw)
	}
	// Once the 1:1 address is applied the VM leaves by it.
	poll.True(t, 45*time.Second, "the VM leaving by its 1:1 address", func() bool {
		return nettest.PeerIP(nettest.Reach(vmNS, "203.0.113.254:9000", 2*time.Second)) == one.PublicAddress
	})
	before := edgeGateways(t, h, "alice", "red")[0].counter("default-deny-inbound")
	if got := nettest.Reach(inet, one.PublicAddress+":80", 2*time.Second); got != "" {
		t.Errorf("inbound to the 1:1 address without a rule answered %q", got)
	}
	if after := edgeGateways(t, h, "alice", "red")[0].counter("default-deny-inbound"); after <= before {
		t.Errorf("the default deny counter went %v → %v over a dropped connection", before, after)
	}
	var open struct{ ID string }
	h.GraphQL(t, "alice", "red", createRule, rule("fromPort", 80, "toPort", 80, "destination", vm.IPAddresses[0]+"/32")).
		OK(t).Into(t, "createFirewallRule", &open)
	if got := nettest.WaitReach(t, inet, one.PublicAddress+":80", 15*time.Second); !strings.HasPrefix(got, "web from ") {
		t.Errorf("the 1:1 address with a rule answered %q", got)
	}
	if c := edgeGateways(t, h, "alice", "red")[0].counter(open.ID); c <= 0 {
		t.Errorf("the opening rule's counter is %v", c)
	}

	// Another VDC sees none of it.
	if gws := edgeGateways(t, h, "bob", "blue"); len(gws) != 0 {
		t.Errorf("blue sees red's gateways: %+v", gws)
	}
	for del, id := range map[string]string{"deleteFirewallRule": r1.ID, "deletePortForward": fwd.ID, "deleteOneToOneAddress": one.ID} {
		if r := h.GraphQL(t, "bob", "blue", `mutation($id: ID!) { `+del+`(id: $id) { id } }`, map[string]any{"id": id}); r.Code(t) != "NOT_FOUND" {
			t.Errorf("blue's %s of red's %s: %s", del, id, r.Raw)
		}
	}

	// Deleting the port forward closes it; the 1:1 address goes back to the pool.
	h.GraphQL(t, "alice", "red", `mutation($id: ID!) { deletePortForward(id: $id) { id } }`, map[string]any{"id": fwd.ID}).OK(t)
	h.GraphQL(t, "alice", "red", `mutation($id: ID!) { deleteOneToOneAddress(id: $id) { id } }`, map[string]any{"id": one.ID}).OK(t)
	poll.True(t, 45*time.Second, "the port forward closed", func() bool { return nettest.Reach(inet, "203.0.113.10:8080", time.Second) == "" })
	var exts struct{ Nodes []struct{ Allocated int } }
	h.GraphQL(t, "admin", "", `{ externalNetworks { nodes { allocated } } }`, nil).OK(t).Into(t, "externalNetworks", &exts)
	if len(exts.Nodes) != 1 || exts.Nodes[0].Allocated != 1 {
		t.Errorf("external networks after the 1:1 address went: %+v", exts)
	}

	// Deleting the gateway: another VDC's is NOT_FOUND (and so is its own
	// gone); its address goes back to the pool and its agent's namespace
	// goes.
	gw = edgeGateways(t, h, "alice", "red")[0]
	gwNS := edge.Namespace(p.NodeNS(gw.Node)+"-", "red")
	if !nsnet.Exists(gwNS) {
		t.Fatalf("the gateway's namespace %s on %s does not exist", gwNS, gw.Node)
	}
	const deleteGW = `mutation($id: ID!) { deleteEdgeGateway(id: $id) { id zone releasedAddresses } }`
	h.GraphQL(t, "bob", "blue", `mutation { createFirewallRule(input: {zone: "alpha", direction: OUTBOUND, protocol: ANY, action: DENY}) { id } }`, nil).OK(t)
	blueGW := edgeGateways(t, h, "bob", "blue")[0]
	for _, id := range []string{gw.ID, "nosuch", ""} {
		if r := h.GraphQL(t, "bob", "blue", deleteGW, map[string]any{"id": id}); r.Code(t) != "NOT_FOUND" {
			t.Errorf("blue deleting gateway %q: %s", id, r.Raw)
		}
	}
	if r := h.GraphQL(t, "alice", "red", deleteGW, map[string]any{"id": blueGW.ID}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("red deleting blue's gateway: %s", r.Raw)
	}
	var deleted struct {
		ID, Zone          string
		ReleasedAddresses []string
	}
	h.GraphQL(t, "alice", "red", deleteGW, map[string]any{"id": gw.ID}).OK(t).Into(t, "deleteEdgeGateway", &deleted)
	if deleted.ID != gw.ID || deleted.Zone != "alpha" || len(deleted.ReleasedAddresses) != 1 || deleted.ReleasedAddresses[0] != "203.0.113.10" {
		t.Errorf("deleteEdgeGateway: %+v", deleted)
	}
	if r := h.GraphQL(t, "alice", "red", deleteGW, map[string]any{"id": gw.ID}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("deleting the deleted gateway again: %s", r.Raw)
	}
	if gws := edgeGateways(t, h, "alice", "red"); len(gws) != 0 {
		t.Errorf("red's gateways after the delete: %+v", gws)
	}
	if gws := edgeGateways(t, h, "bob", "blue"); len(gws) != 1 || gws[0].ID != blueGW.ID {
		t.Errorf("blue's gateways after red's delete: %+v", gws)
	}
	h.GraphQL(t, "admin", "", `{ externalNetworks { nodes { allocated } } }`, nil).OK(t).Into(t, "externalNetworks", &exts)
	if len(exts.Nodes) != 1 || exts.Nodes[0].Allocated != 1 { // blue's address only
		t.Errorf("external networks after red's gateway went: %+v", exts)
	}
	// A sync pass that read the catalog before the delete may apply once
	// more after it; the next pass takes the gateway down for good.
	poll.True(t, 45*time.Second, "the gateway's namespace gone and the VM cut off", func() bool {
		return !nsnet.Exists(gwNS) && nettest.Reach(vmNS, "203.0.113.254:9000", 2*time.Second) == ""
	})
}
