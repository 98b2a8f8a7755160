package graph_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/lbtest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbsync"
	"github.com/flexplane/flexplane/pkg/orchestrator"
)

// lbStack is a harness with the API, zone alpha with an external network,
// profiles and an image, and a flexgateway admin API for alpha.
type lbStack struct {
	h       *meshtest.Harness
	replica *lbtest.Replica
}

func newLBStack(t *testing.T, opts ...meshtest.Option) *lbStack {
	t.Helper()
	pki := lbtest.NewPKI(t)
	replica := lbtest.NewReplica(t, pki, "lb-token")
	s := setupLBStack(t, orchestrator.LoadBalancersConfig{Tokens: map[string]string{"alpha": "lb-token"}, TLS: pki.Client,
		Zones: map[string]lbsync.Zone{"alpha": {Replicas: []string{replica.URL}}}}, opts...)
	s.replica = replica
	return s
}

// setupLBStack is newLBStack with the replicas of lbs (and no lbtest
// Replica).
func setupLBStack(t *testing.T, lbs orchestrator.LoadBalancersConfig, opts ...meshtest.Option) *lbStack {
	t.Helper()
	h := meshtest.New(t, append([]meshtest.Option{meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{LoadBalancers: lbs})}, opts...)...)
	h.WaitOnline(t, 30*time.Second)
	url, sum := vmtest.ImageServer(t, 3<<20)
	h.GraphQL(t, "admin", "", `mutation($u: String!, $c: String!) {
	  createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name }
	  createStorageProfile(input: {name: "ssd", tier: "ssd", readMBps: 200, writeMBps: 100, pools: [{zone: "alpha", pool: "local-lvm"}]}) { name }
	  createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name }
	  createExternalNetwork(input: {zone: "alpha", bridge: "vmbr0", cidr: "203.0.113.0/24", gateway: "203.0.113.254",
	    poolStart: "203.0.113.10", poolEnd: "203.0.113.20"}) { zone } }`,
		map[string]any{"u": url, "c": sum}).OK(t)
	return &lbStack{h: h}
}

// vms creates a network (10.<n>.0.0/24) and running VMs of names in vdc
// and returns their ids.
func (s *lbStack) vms(t *testing.T, user, vdc string, n int, names ...string) []string {
	t.Helper()
	var net struct{ ID string }
	s.h.GraphQL(t, user, vdc, `mutation($cidr: String!, $gw: String!) { createNetwork(input: {name: "lan", zone: "alpha", cidr: $cidr, gateway: $gw}) { id } }`,
		map[string]any{"cidr": "10." + string(rune('0'+n)) + ".0.0/24", "gw": "10." + string(rune('0'+n)) + ".0.1"}).OK(t).Into(t, "createNetwork", &net)
	var ids []string
	for _, name := range names {
		var created struct{ Operation gqlOp }
		s.h.GraphQL(t, user, vdc, createVM, map[string]any{"in": map[string]any{
			"name": name, "zone": "alpha", "image": "tiny", "computeProfile": "small", "storageProfile": "ssd",
			"diskGiB": 4, "nics": []any{map[string]any{"network": net.ID}}, "sshKeys": []string{sshKey}, "user": "ops"}}).
			OK(t).Into(t, "createVM", &created)
		ids = append(ids, awaitCreate(t, s.h, user, vdc, created.Operation.ID))
	}
	return ids
}

const lbFields = `id name publicAddress description zone { name }
  listeners { name protocol port pool routes { pathPrefix pool } sniRoutes { serverName pool } certificates serverNames }
  pools { name backends { vmId port health lastError } healthCheck { protocol path intervalSeconds } }
  certificates { name dnsNames notAfter fingerprint }`

type gqlLB struct {
	ID, Name, PublicAddress string
	Listeners               []struct {
		Name, Protocol string
		Port           int
	}
	Pools []struct {
		Name     string
		Backends []struct {
			VMID              string `json:"vmId"`
			Port              int
			Health, LastError string
		}
	}
	Certificates []struct {
		Name        string
		DNSNames    []string `json:"dnsNames"`
		Fingerprint string
	}
}

const createLB = `mutation($in: CreateLoadBalancerInput!) { createLoadBalancer(input: $in) { ` + lbFields + ` } }`

// TestLoadBalancerThroughGraphQL drives the whole load balancer surface
// through GraphQL: bad input refused naming the field with nothing
// allocated; another VDC's VM as a backend NOT_FOUND; a balancer with TCP,
// HTTP routes and HTTPS with a certificate given as PEM (never returned)
// gets the pool's next address (after the VDC's edge gateway's) and reaches the zone's flexgateway admin
// API within a second, with its backends dialled through the balancer's
// address; the backends' health is what the replica reports; another VDC
// sees, changes and deletes none of it; an update keeps the certificate
// named without PEM; a delete gives the address back.
func TestLoadBalancerThroughGraphQL(t *testing.T) {
	t.Parallel()
	s := newLBStack(t)
	h := s.h
	red := s.vms(t, "alice", "red", 1, "web1", "web2")
	blue := s.vms(t, "bob", "blue", 2, "db")
	cert, key := lbtest.Certificate(t, "shop.example", "*.shop.example")
	_, otherKey := lbtest.Certificate(t, "shop.example")
	narrow, narrowKey := lbtest.Certificate(t, "shop.example")

	backends := []any{map[string]any{"vmId": red[0], "port": 80}, map[string]any{"vmId": red[1], "port": 80}}
	input := func(edit func(in map[string]any)) map[string]any {
		in := map[string]any{"name": "shop", "zone": "alpha", "description": "the shop",
			"pools": []any{
				map[string]any{"name": "app", "backends": backends, "healthCheck": map[string]any{"protocol": "HTTP", "path": "/healthz"}},
				map[string]any{"name": "static", "backends": []any{map[string]any{"vmId": red[1], "port": 8080}}}},
			"listeners": []any{
				map[string]any{"name": "raw", "protocol": "TCP", "port": 5432, "pool": "app"},
				map[string]any{"name": "web", "protocol": "HTTP", "port": 80, "pool": "app", "routes": []any{map[string]any{"pathPrefix": "/static/", "pool": "static"}}},
				map[string]any{"name": "secure", "protocol": "HTTPS", "port": 443, "pool": "app", "certificates": []any{"shop"}, "serverNames": []any{"shop.example", "www.shop.example"}}},
			"certificates": []any{map[string]any{"name": "shop", "certificatePem": cert, "privateKeyPem": key}}}
		if edit != nil {
			edit(in)
		}
		return map[string]any{"in": in}
	}
	listener := func(i int, kv ...any) func(map[string]any) {
		return func(in map[string]any) {
			l := in["listeners"].([]any)[i].(map[string]any)
			for j := 0; j < len(kv); j += 2 {
				l[kv[j].(string)] = kv[j+1]
			}
		}
	}
	certs := func(c, k string) func(map[string]any) {
		return func(in map[string]any) {
			in["certificates"] = []any{map[string]any{"name": "shop", "certificatePem": c, "privateKeyPem": k}}
		}
	}
	bad := map[string]func(map[string]any){
		"input.certificates[0].privateKeyPem":  certs(cert, otherKey),
		"input.certificates[0].certificatePem": certs("not a certificate", key),
		"input.listeners[2].serverNames[1]":    certs(narrow, narrowKey),
		"input.listeners[1].port":              listener(1, "port", 5432),
		"input.listeners[0].port":              listener(0, "port", 65536),
		"input.listeners[0].pool":              listener(0, "pool", "nosuch"),
		"input.listeners[1].routes[0].pool":    listener(1, "routes", []any{map[string]any{"pathPrefix": "/x", "pool": "nosuch"}}),
		"input.listeners[2].certificates":      listener(2, "certificates", []any{}),
		"input.pools[0].backends[0].port": func(in map[string]any) {
			in["pools"].([]any)[0].(map[string]any)["backends"] = []any{map[string]any{"vmId": red[0], "port": 0}}
		},
		"input.zone": func(in map[string]any) { in["zone"] = "nosuch" },
		"input.name": func(in map[string]any) { in["name"] = "Not A Label" },
	}
	for field, edit := range bad {
		r := h.GraphQL(t, "alice", "red", createLB, input(edit))
		if r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != field || !strings.Contains(r.Errors[0].Message, field) {
			t.Errorf("bad %s: %s", field, r.Raw)
		}
	}
	// Another VDC's VM is no backend, for red or as blue's.
	foreign := input(func(in map[string]any) {
		in["pools"].([]any)[0].(map[string]any)["backends"] = []any{map[string]any{"vmId": blue[0], "port": 80}}
	})
	if r := h.GraphQL(t, "alice", "red", createLB, foreign); r.Code(t) != "NOT_FOUND" {
		t.Errorf("red's balancer on blue's VM: %s", r.Raw)
	}
	var exts struct{ Nodes []struct{ Allocated int } }
	h.GraphQL(t, "admin", "", `{ externalNetworks { nodes { allocated } } }`, nil).OK(t).Into(t, "externalNetworks", &exts)
	var list struct{ TotalCount int }
	h.GraphQL(t, "alice", "red", `{ loadBalancers { totalCount } }`, nil).OK(t).Into(t, "loadBalancers", &list)
	if exts.Nodes[0].Allocated != 0 || list.TotalCount != 0 {
		t.Fatalf("refused creates left %d addresses and %d balancers", exts.Nodes[0].Allocated, list.TotalCount)
	}

	// The balancer.
	start := time.Now()
	r := h.GraphQL(t, "alice", "red", createLB, input(nil)).OK(t)
	if strings.Contains(string(r.Raw), "PRIVATE KEY") || strings.Contains(string(r.Raw), "BEGIN CERTIFICATE") {
		t.Errorf("the answer holds the certificate's PEM: %s", r.Raw)
	}
	var lb gqlLB
	r.Into(t, "createLoadBalancer", &lb)
	if lb.Name != "shop" || lb.PublicAddress != "203.0.113.11" || len(lb.Listeners) != 3 || len(lb.Pools) != 2 ||
		len(lb.Certificates) != 1 || lb.Certificates[0].DNSNames[1] != "*.shop.example" || len(lb.Certificates[0].Fingerprint) != 64 {
		t.Fatalf("created %+v", lb)
	}
	if r := h.GraphQL(t, "alice", "red", createLB, input(nil)); r.Code(t) != "CONFLICT" {
		t.Errorf("a second balancer of the name: %s", r.Raw)
	}
	cfg := s.replica.Await(t, 10*time.Second, func(c lbconfig.Config) bool { return len(c.Balancers) == 1 })
	t.Logf("the replica had the balancer %s after the create was sent", time.Since(start).Round(time.Millisecond))
	b := cfg.Balancers[0]
	if b.VDC != "red" || len(b.Listeners) != 3 || b.Listeners[0].Address != ":28008" || len(b.Certificates) != 1 || b.Certificates[0].KeyPEM != key {
		t.Errorf("the replica's balancer: %+v", b)
	}
	for _, p := range b.Pools {
		for _, be := range p.Backends {
			if !strings.HasPrefix(be.Address, "203.0.113.11:") {
				t.Errorf("backend %s is dialled at %s, not through the balancer's address", be.ID, be.Address)
			}
		}
	}

	// Health comes from the replica's status watch: a change shows
	// within a couple of seconds, with no read at request time.
	app := b.Pools[0]
	healthAt := time.Now()
	s.replica.SetBackends([]lbconfig.BackendStatus{
		{Balancer: b.ID, Pool: app.Name, Backend: app.Backends[0].ID, Healthy: true, Checked: time.Now()},
		{Balancer: b.ID, Pool: app.Name, Backend: app.Backends[1].ID, Healthy: false, LastError: "connection refused", Checked: time.Now()}})
	// poll:own-loop: it measures how soon the change shows, at a fixed
	// 50 ms resolution.
	for {
		var got gqlLB
		h.GraphQL(t, "alice", "red", `query($id: ID!) { loadBalancer(id: $id) { `+lbFields+` } }`, map[string]any{"id": lb.ID}).OK(t).Into(t, "loadBalancer", &got)
		health := map[string]string{}
		for _, p := range got.Pools {
			for _, be := range p.Backends {
				health[p.Name+"/"+be.VMID] = be.Health + be.LastError
			}
		}
		if health["app/"+red[0]] == "HEALTHY" && health["app/"+red[1]] == "UNHEALTHYconnection refused" && health["static/"+red[1]] == "UNKNOWN" {
			break
		}
		// Two seconds are asked; allow for 2 busy cores.
		if time.Since(healthAt) > 5*time.Second {
			t.Fatalf("backend health %v, %s after the replica's change", health, time.Since(healthAt))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the health change was in GraphQL %s after the replica's", time.Since(healthAt).Round(time.Millisecond))

	// Another VDC sees, changes and deletes none of it.
	h.GraphQL(t, "bob", "blue", `{ loadBalancers { totalCount } }`, nil).OK(t).Into(t, "loadBalancers", &list)
	if list.TotalCount != 0 {
		t.Errorf("blue sees %d balancers", list.TotalCount)
	}
	for _, q := range []string{`query($id: ID!) { loadBalancer(id: $id) { id } }`,
		`mutation($id: ID!) { updateLoadBalancer(input: {id: $id, description: "mine"}) { id } }`,
		`mutation($id: ID!) { deleteLoadBalancer(id: $id) { id } }`} {
		if r := h.GraphQL(t, "bob", "blue", q, map[string]any{"id": lb.ID}); r.Code(t) != "NOT_FOUND" {
			t.Errorf("blue: %s: %s", q, r.Raw)
		}
	}

	// An update: refused input changes nothing; the certificate named
	// alone is kept.
	const updateLB = `mutation($in: UpdateLoadBalancerInput!) { updateLoadBalancer(input: $in) { ` + lbFields + ` } }`
	overlap := map[string]any{"in": map[string]any{"id": lb.ID, "listeners": []any{
		map[string]any{"name": "a", "protocol": "TCP", "port": 22, "pool": "app"}, map[string]any{"name": "b", "protocol": "TLS_PASSTHROUGH", "port": 22,
			"sniRoutes": []any{map[string]any{"serverName": "db.shop.example", "pool": "app"}}}}}}
	if r := h.GraphQL(t, "alice", "red", updateLB, overlap); r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != "input.listeners[1].port" {
		t.Errorf("overlapping listeners in an update: %s", r.Raw)
	}
	if r := h.GraphQL(t, "alice", "red", updateLB, map[string]any{"in": map[string]any{"id": lb.ID,
		"pools": []any{map[string]any{"name": "app", "backends": []any{map[string]any{"vmId": blue[0], "port": 80}}}}}}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("an update onto blue's VM: %s", r.Raw)
	}
	var up gqlLB
	h.GraphQL(t, "alice", "red", updateLB, map[string]any{"in": map[string]any{"id": lb.ID, "certificates": []any{map[string]any{"name": "shop"}},
		"listeners": []any{map[string]any{"name": "secure", "protocol": "HTTPS", "port": 443, "pool": "app", "certificates": []any{"shop"}},
			map[string]any{"name": "pass", "protocol": "TLS_PASSTHROUGH", "port": 8443, "sniRoutes": []any{map[string]any{"serverName": "db.shop.example", "pool": "static"}}}}}}).
		OK(t).Into(t, "updateLoadBalancer", &up)
	if len(up.Listeners) != 2 || up.Listeners[1].Protocol != "TLS_PASSTHROUGH" || len(up.Certificates) != 1 || up.Certificates[0].Fingerprint != lb.Certificates[0].Fingerprint {
		t.Errorf("updated %+v", up)
	}
	cfg = s.replica.Await(t, 10*time.Second, func(c lbconfig.Config) bool { return len(c.Balancers) == 1 && len(c.Balancers[0].Listeners) == 2 })
	if c := cfg.Balancers[0].Certificates; len(c) != 1 || c[0].KeyPEM != key {
		t.Errorf("the replica's certificates after the update: %d", len(c))
	}

	// The delete gives the address back and takes the balancer off the replica.
	h.GraphQL(t, "alice", "red", `mutation($id: ID!) { deleteLoadBalancer(id: $id) { id } }`, map[string]any{"id": lb.ID}).OK(t)
	h.GraphQL(t, "admin", "", `{ externalNetworks { nodes { allocated } } }`, nil).OK(t).Into(t, "externalNetworks", &exts)
	if exts.Nodes[0].Allocated != 1 { // the VDC's edge gateway's
		t.Errorf("the deleted balancer's address is still allocated")
	}
	if r := h.GraphQL(t, "alice", "red", `query($id: ID!) { loadBalancer(id: $id) { id } }`, map[string]any{"id": lb.ID}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("the deleted balancer: %s", r.Raw)
	}
	s.replica.Await(t, 10*time.Second, func(c lbconfig.Config) bool { return len(c.Balancers) == 0 })
}

// TestLoadBalancerAddressQuota: the VDC's public addresses quota counts
// every address it holds (its edge gateway's and its balancers'): with a
// quota of 2, the first balancer (and the gateway it brings) fits, the
// second is refused with QUOTA_EXCEEDED on quotas.publicAddresses and
// changes nothing (no balancer, no address taken, the replica not sent
// it); the VDC shows the quota; raised to 3, the same create passes;
// another VDC without the quota is not bounded.
func TestLoadBalancerAddressQuota(t *testing.T) {
	t.Parallel()
	s := newLBStack(t)
	h := s.h
	red := s.vms(t, "alice", "red", 1, "web")
	blue := s.vms(t, "bob", "blue", 2, "db")
	setQuota := func(n int) { setAddressQuota(t, h, "red", n) }
	setQuota(2)
	const create = createTCPLB
	in := tcpLBInput
	var first struct{ PublicAddress string }
	h.GraphQL(t, "alice", "red", create, in("one", red[0])).OK(t).Into(t, "createLoadBalancer", &first)
	s.replica.Await(t, 10*time.Second, func(c lbconfig.Config) bool { return len(c.Balancers) == 1 })
	addresses := func() int { return poolAllocated(t, h) }
	before, configs := addresses(), len(s.replica.Configs())

	r := h.GraphQL(t, "alice", "red", create, in("two", red[0]))
	if r.Code(t) != "QUOTA_EXCEEDED" || r.Errors[0].Extensions["field"] != "quotas.publicAddresses" ||
		!strings.Contains(r.Errors[0].Message, "publicAddresses would be 3 of 2") {
		t.Fatalf("a create over the quota: %s", r.Raw)
	}
	var list struct{ TotalCount int }
	h.GraphQL(t, "alice", "red", `{ loadBalancers { totalCount } }`, nil).OK(t).Into(t, "loadBalancers", &list)
	if list.TotalCount != 1 || addresses() != before {
		t.Errorf("a refused create left %d balancers and %d addresses (had 1 and %d)", list.TotalCount, addresses(), before)
	}

	// Blue has no address quota.
	for _, name := range []string{"b1", "b2", "b3"} {
		h.GraphQL(t, "bob", "blue", create, in(name, blue[0])).OK(t)
	}

	setQuota(3)
	var second struct{ PublicAddress string }
	h.GraphQL(t, "alice", "red", create, in("two", red[0])).OK(t).Into(t, "createLoadBalancer", &second)
	if second.PublicAddress == "" || second.PublicAddress == first.PublicAddress {
		t.Errorf("the second balancer's address %q (the first's %q)", second.PublicAddress, first.PublicAddress)
	}
	if n := len(s.replica.Configs()); n <= configs {
		t.Errorf("the replica was sent nothing after the create")
	}
}

// TestOneToOneAddressQuota: 1:1 addresses and load balancers share the
// VDC's public addresses quota both ways. With a quota of 2, red's
// balancer (and the gateway it brings) fills it and a 1:1 address is then
// refused; blue's 1:1 address (and its gateway) fills blue's and a
// balancer is then refused. Each refusal is QUOTA_EXCEEDED on
// quotas.publicAddresses, as the balancer's own is, and changes nothing
// (no 1:1 address or balancer, no address taken); the VDCs' usage counts
// 2; raised to 3, the refused create passes.
func TestOneToOneAddressQuota(t *testing.T) {
	t.Parallel()
	s := newLBStack(t)
	h := s.h
	red := s.vms(t, "alice", "red", 1, "web")
	blue := s.vms(t, "bob", "blue", 2, "db")
	setAddressQuota(t, h, "red", 2)
	setAddressQuota(t, h, "blue", 2)
	const createLB = createTCPLB
	lb := func(vm string) map[string]any { return tcpLBInput("one", vm) }
	const createOne = `mutation($vm: ID!) { createOneToOneAddress(input: {vmId: $vm}) { id publicAddress } }`
	allocated := func() int { return poolAllocated(t, h) }
	// held is what the VDC's usage counts, its balancers and its 1:1
	// addresses.
	held := func(user, vdc string) (addrs, lbs, ones int) {
		var v struct {
			CurrentVDC    struct{ Usage struct{ PublicAddresses int } }
			LoadBalancers struct{ TotalCount int }
			EdgeGateways  struct {
				Nodes []struct{ OneToOneAddresses []struct{ ID string } }
			}
		}
		r := h.GraphQL(t, user, vdc, `{ currentVDC { usage { publicAddresses } } loadBalancers { totalCount } edgeGateways { nodes { oneToOneAddresses { id } } } }`, nil).OK(t)
		if err := r.Decode(&v); err != nil {
			t.Fatal(err)
		}
		for _, g := range v.EdgeGateways.Nodes {
			ones += len(g.OneToOneAddresses)
		}
		return v.CurrentVDC.Usage.PublicAddresses, v.LoadBalancers.TotalCount, ones
	}
	refused := func(what string, r *meshtest.GraphQLResponse) {
		t.Helper()
		if r.Code(t) != "QUOTA_EXCEEDED" || r.Errors[0].Extensions["field"] != "quotas.publicAddresses" ||
			!strings.Contains(r.Errors[0].Message, "publicAddresses would be 3 of 2") {
			t.Fatalf("%s over the quota: %s", what, r.Raw)
		}
	}

	// Red, with a quota of none: a port forward would make its first
	// gateway in the zone, which takes an address.
	setAddressQuota(t, h, "red", 0)
	before := allocated()
	const createPF = `mutation($vm: ID!) { createPortForward(input: {vmId: $vm, protocol: TCP, publicPort: 8080, targetPort: 80}) { id } }`
	if r := h.GraphQL(t, "alice", "red", createPF, map[string]any{"vm": red[0]}); r.Code(t) != "QUOTA_EXCEEDED" ||
		r.Errors[0].Extensions["field"] != "quotas.publicAddresses" || !strings.Contains(r.Errors[0].Message, "publicAddresses would be 1 of 0") {
		t.Fatalf("red's port forward with no address to spare: %s", r.Raw)
	}
	if gws := edgeGateways(t, h, "alice", "red"); len(gws) != 0 || allocated() != before {
		t.Fatalf("the refused port forward left gateways %+v, %d of the pool allocated (want none, %d)", gws, allocated(), before)
	}
	setAddressQuota(t, h, "red", 2)

	// Red: a balancer, then a 1:1 address.
	h.GraphQL(t, "alice", "red", createLB, lb(red[0])).OK(t)
	before = allocated()
	refused("red's 1:1 address", h.GraphQL(t, "alice", "red", createOne, map[string]any{"vm": red[0]}))
	if a, lbs, ones := held("alice", "red"); a != 2 || lbs != 1 || ones != 0 || allocated() != before {
		t.Errorf("red after the refused 1:1 address: usage %d, %d balancers, %d 1:1 addresses, %d of the pool allocated (want 2, 1, 0, %d)",
			a, lbs, ones, allocated(), before)
	}

	// Blue: a 1:1 address, then a balancer.
	h.GraphQL(t, "bob", "blue", createOne, map[string]any{"vm": blue[0]}).OK(t)
	before = allocated()
	refused("blue's balancer", h.GraphQL(t, "bob", "blue", createLB, lb(blue[0])))
	if a, lbs, ones := held("bob", "blue"); a != 2 || lbs != 0 || ones != 1 || allocated() != before {
		t.Errorf("blue after the refused balancer: usage %d, %d balancers, %d 1:1 addresses, %d of the pool allocated (want 2, 0, 1, %d)",
			a, lbs, ones, allocated(), before)
	}

	// A quota of 3 lets each through.
	setAddressQuota(t, h, "red", 3)
	setAddressQuota(t, h, "blue", 3)
	h.GraphQL(t, "alice", "red", createOne, map[string]any{"vm": red[0]}).OK(t)
	h.GraphQL(t, "bob", "blue", createLB, lb(blue[0])).OK(t)
	for _, c := range []struct{ user, vdc string }{{"alice", "red"}, {"bob", "blue"}} {
		if a, lbs, ones := held(c.user, c.vdc); a != 3 || lbs != 1 || ones != 1 {
			t.Errorf("%s with a quota of 3: usage %d, %d balancers, %d 1:1 addresses (want 3, 1, 1)", c.vdc, a, lbs, ones)
		}
	}
}

// setAddressQuota sets vdc's public addresses quota to n (its other quotas
// to ample ones) and checks the VDC shows it.
func setAddressQuota(t *testing.T, h *meshtest.Harness, vdc string, n int) {
	t.Helper()
	var v struct {
		Quotas struct{ PublicAddresses *int }
	}
	h.GraphQL(t, "admin", "", `mutation($v: String!, $n: Int) { updateVDC(input: {name: $v, quotas: {vcpus: 64, memoryMiB: 131072, storageGiB: 2000, vms: 20, publicAddresses: $n}}) { quotas { publicAddresses } } }`,
		map[string]any{"v": vdc, "n": n}).OK(t).Into(t, "updateVDC", &v)
	if v.Quotas.PublicAddresses == nil || *v.Quotas.PublicAddresses != n {
		t.Fatalf("%s's quota after setting %d: %v", vdc, n, v.Quotas.PublicAddresses)
	}
}

// createTCPLB creates a balancer from tcpLBInput's variables.
const createTCPLB = `mutation($in: CreateLoadBalancerInput!) { createLoadBalancer(input: $in) { id publicAddress } }`

// tcpLBInput is the variables of createTCPLB: a balancer in alpha with one
// TCP listener on port 80 over port 80 of vm.
func tcpLBInput(name, vm string) map[string]any {
	return map[string]any{"in": map[string]any{"name": name, "zone": "alpha",
		"pools":     []any{map[string]any{"name": "app", "backends": []any{map[string]any{"vmId": vm, "port": 80}}}},
		"listeners": []any{map[string]any{"name": "tcp", "protocol": "TCP", "port": 80, "pool": "app"}}}}
}

// poolAllocated is how many addresses of alpha's pool are allocated.
func poolAllocated(t *testing.T, h *meshtest.Harness) int {
	t.Helper()
	var out struct{ Nodes []struct{ Allocated int } }
	h.GraphQL(t, "admin", "", `{ externalNetworks { nodes { allocated } } }`, nil).OK(t).Into(t, "externalNetworks", &out)
	return out.Nodes[0].Allocated
}
