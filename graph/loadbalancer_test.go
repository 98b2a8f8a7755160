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
	replica := lbtest.NewReplica(t, "lb-token")
	s := setupLBStack(t, orchestrator.LoadBalancersConfig{Token: "lb-token", Zones: map[string]lbsync.Zone{"alpha": {Replicas: []string{replica.URL}}}}, opts...)
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

	// Health is read from the replica.
	app := b.Pools[0]
	s.replica.SetBackends([]lbconfig.BackendStatus{
		{Balancer: b.ID, Pool: app.Name, Backend: app.Backends[0].ID, Healthy: true, Checked: time.Now()},
		{Balancer: b.ID, Pool: app.Name, Backend: app.Backends[1].ID, Healthy: false, LastError: "connection refused", Checked: time.Now()}})
	var got gqlLB
	h.GraphQL(t, "alice", "red", `query($id: ID!) { loadBalancer(id: $id) { `+lbFields+` } }`, map[string]any{"id": lb.ID}).OK(t).Into(t, "loadBalancer", &got)
	health := map[string]string{}
	for _, p := range got.Pools {
		for _, be := range p.Backends {
			health[p.Name+"/"+be.VMID] = be.Health + be.LastError
		}
	}
	if health["app/"+red[0]] != "HEALTHY" || health["app/"+red[1]] != "UNHEALTHYconnection refused" || health["static/"+red[1]] != "UNKNOWN" {
		t.Errorf("backend health %v", health)
	}

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
