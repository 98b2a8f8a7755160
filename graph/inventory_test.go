package graph_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// The inventory, networks and enrollment keys over the whole stack: an
// orchestrator with the API, clusters alpha (3 nodes) and beta (2 nodes)
// with one real agent per node over the real mesh, and real tokens of the
// development identity provider (users of meshtest.DefaultUsers: alice is
// a member of red, bob of blue, vera a viewer of red, admin a platform
// admin). Guests are seeded through the Proxmox API of each cluster.

const zoneTimeout = 1500 * time.Millisecond

type vm struct {
	ID          string
	Name        string
	Status      string
	Zone        struct{ Name string }
	Host        *struct{ Name, Status string }
	Vcpus       int
	MemoryMiB   int
	IPAddresses []string
}

type guest struct {
	node  string
	vmid  int
	name  string
	tags  string
	start bool
}

// seed creates guests through the cluster's Proxmox API (as an operator
// or flexplane would) and waits for their tasks.
func seed(t *testing.T, c *proxmox.Client, guests ...guest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, g := range guests {
		params := map[string]any{"vmid": g.vmid, "name": g.name, "cores": 2, "memory": 2048}
		if g.tags != "" {
			params["tags"] = g.tags
		}
		// A guest of one VDC is in its pool, as flexplane's creates leave it.
		if vdc, ok := tenancy.VDCOf(tenancy.SplitTags(g.tags)); ok && vdc != "" {
			if err := c.Post(ctx, "/pools", map[string]any{"poolid": tenancy.PoolID(vdc)}, nil); err != nil && !strings.Contains(err.Error(), "already exists") {
				t.Fatalf("seed %s: pool: %v", g.name, err)
			}
			params["pool"] = tenancy.PoolID(vdc)
		}
		if g.start {
			params["start"] = 1
		}
		var upid proxmox.UPID
		if err := c.Post(ctx, "/nodes/"+g.node+"/qemu", params, &upid); err != nil {
			t.Fatalf("seed %s: %v", g.name, err)
		}
		task := proxmox.NewTask(upid, c)
		if err := task.Wait(ctx, 20*time.Millisecond, 20*time.Second); err != nil || task.IsFailed {
			t.Fatalf("seed %s: %v %s", g.name, err, task.ExitStatus)
		}
	}
}

// sdnState renders a cluster's SDN configuration (pending and running) and
// IPAM, to show that a refused request changed nothing.
func sdnState(t *testing.T, c *proxmox.Client) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for _, p := range []string{"/cluster/sdn/zones?pending=1", "/cluster/sdn/vnets?pending=1", "/cluster/sdn/vnets?running=1", "/cluster/sdn/ipams/pve/status"} {
		var v []map[string]any
		if err := c.Get(ctx, p, &v); err != nil {
			t.Fatalf("GET %s: %v", p, err)
		}
		js, _ := json.Marshal(v)
		fmt.Fprintf(&b, "%s %s\n", p, js)
		if p == "/cluster/sdn/vnets?pending=1" {
			for _, vn := range v {
				var subs []map[string]any
				if err := c.Get(ctx, fmt.Sprintf("/cluster/sdn/vnets/%s/subnets?pending=1", vn["vnet"]), &subs); err != nil {
					t.Fatal(err)
				}
				js, _ := json.Marshal(subs)
				fmt.Fprintf(&b, "subnets of %s %s\n", vn["vnet"], js)
			}
		}
	}
	return b.String()
}

func names(vms []vm) []string {
	var out []string
	for _, v := range vms {
		out = append(out, v.Zone.Name+"/"+v.Name)
	}
	slices.Sort(out)
	return out
}

// zoneErrors returns the zones of the ZONE_UNAVAILABLE errors, failing
// on any other error.
func zoneErrors(t *testing.T, r *meshtest.GraphQLResponse) []string {
	t.Helper()
	var out []string
	for _, e := range r.Errors {
		if e.Code() != "ZONE_UNAVAILABLE" {
			t.Fatalf("unexpected error in %s", r.Raw)
		}
		z, _ := e.Extensions["zone"].(string)
		out = append(out, z)
	}
	return out
}

const vmFields = `id name status zone { name } host { name status } vcpus memoryMiB ipAddresses`

// apiPage is the manual's page on the GraphQL API, whose first curl
// example runAPIExample runs.
const apiPage = "../docs/api/graphql.md"

// runAPIExample runs the first curl command of the manual's GraphQL API
// page (docs/api/graphql.md) with env and returns its output.
func runAPIExample(t *testing.T, env map[string]string) []byte {
	t.Helper()
	page, err := os.ReadFile(apiPage)
	if err != nil {
		t.Fatal(err)
	}
	_, api, ok := strings.Cut(string(page), "# The GraphQL API")
	_, block, ok2 := strings.Cut(api, "```sh\ncurl")
	script, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal(apiPage + ": no curl example on the API page")
	}
	cmd := exec.Command("bash", "-c", "curl"+script)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s example: %v: %s", apiPage, err, out)
	}
	return out
}

func TestInventory(t *testing.T) {
	t.Parallel()
	start := time.Now()
	h := meshtest.New(t, meshtest.WithAPI(meshtest.APISpec{ZoneTimeout: zoneTimeout, AgentVersion: "v2"}))
	alpha, beta := h.Clusters[0], h.Clusters[1]
	h.WaitOnline(t, 60*time.Second)
	t.Logf("harness up after %v", time.Since(start).Round(time.Millisecond))
	pa, pb := alpha.Proxmox(t), beta.Proxmox(t)

	seed(t, pa,
		guest{"pve1", 100, "red-web-1", tenancy.GuestTags("red"), true},
		guest{"pve2", 101, "red-db", tenancy.GuestTags("red"), false},
		guest{"pve1", 102, "blue-app", tenancy.GuestTags("blue"), true},
		guest{"pve3", 103, "ops-box", "", true},                                             // not flexplane's
		guest{"pve3", 104, "sneaky", tenancy.VDCTag("red"), true},                           // a VDC tag without the managed tag
		guest{"pve3", 105, "twice", tenancy.GuestTags("red", tenancy.VDCTag("blue")), true}, // two VDCs: none
	)
	seed(t, pb,
		guest{"pve1", 100, "red-web-2", tenancy.GuestTags("red"), true},
		guest{"pve2", 101, "blue-db", tenancy.GuestTags("blue"), true},
	)
	zoneID := func(c *meshtest.Cluster) string { return h.Zone(t, c).ID }
	redWeb1 := tenancy.VMRef{ZoneID: zoneID(alpha), VMID: 100}.ID()
	blueApp := tenancy.VMRef{ZoneID: zoneID(alpha), VMID: 102}.ID()
	opsBox := tenancy.VMRef{ZoneID: zoneID(alpha), VMID: 103}.ID()
	redWeb2 := tenancy.VMRef{ZoneID: zoneID(beta), VMID: 100}.ID()

	// A network of red in alpha, and an address of red-web-1 in it.
	var front struct{ ID, Vnet, Cidr, Gateway string }
	h.GraphQL(t, "alice", "red", `mutation($in: CreateNetworkInput!) { createNetwork(input: $in) { id vnet cidr gateway } }`,
		map[string]any{"in": map[string]any{"name": "front", "zone": "alpha", "cidr": "10.20.0.0/24", "gateway": "10.20.0.1"}}).OK(t).Into(t, "createNetwork", &front)
	ctx := context.Background()
	if err := pa.Post(ctx, "/cluster/sdn/vnets/"+front.Vnet+"/ips", map[string]any{"zone": tenancy.SDNZoneID("red"), "ip": "10.20.0.10", "mac": "BC:24:11:00:00:10"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := pa.Put(ctx, "/cluster/sdn/vnets/"+front.Vnet+"/ips", map[string]any{"zone": tenancy.SDNZoneID("red"), "ip": "10.20.0.10", "vmid": 100}, nil); err != nil {
		t.Fatal(err)
	}

	t.Run("reads", func(t *testing.T) {
		t.Run("zones", func(t *testing.T) {
			t.Parallel()
			var zs []struct {
				Name, Status string
				Hosts        []struct{ Name, Status string }
				Capacity     struct {
					Cpus, MemoryTotal, StorageTotal int
					CPUUsage, MemoryUsage           float64
				}
			}
			h.GraphQL(t, "admin", "", `{ zones { name status hosts { name status } capacity { cpus cpuUsage memoryTotal memoryUsage storageTotal } } }`, nil).OK(t).Into(t, "zones", &zs)
			if len(zs) != 2 || zs[0].Name != "alpha" || zs[1].Name != "beta" {
				t.Fatalf("zones = %+v", zs)
			}
			for i, n := range []int{3, 2} {
				z := zs[i]
				if z.Status != "ONLINE" || len(z.Hosts) != n || z.Hosts[0].Name != "pve1" || z.Hosts[0].Status != "ONLINE" {
					t.Errorf("zone %+v", z)
				}
				// pvesim nodes: 16 CPUs and 64 GiB each.
				if z.Capacity.Cpus != 16*n || z.Capacity.MemoryTotal != 65536*n || z.Capacity.StorageTotal <= 0 ||
					z.Capacity.CPUUsage < 0 || z.Capacity.CPUUsage > 1 || z.Capacity.MemoryUsage <= 0 || z.Capacity.MemoryUsage > 1 {
					t.Errorf("capacity of %s = %+v", z.Name, z.Capacity)
				}
			}
			// VDC members see names and status only.
			r := h.GraphQL(t, "alice", "red", `{ zones { name status } }`, nil).OK(t)
			var plain []struct{ Name, Status string }
			r.Into(t, "zones", &plain)
			if len(plain) != 2 || plain[1].Status != "ONLINE" {
				t.Errorf("alice's zones = %+v", plain)
			}
			for _, q := range []string{`{ zones { name hosts { name } } }`, `{ zones { capacity { cpus } } }`, `{ zone(name: "alpha") { hosts { name } } }`} {
				if r := h.GraphQL(t, "alice", "red", q, nil); !r.HasCode("NOT_FOUND") {
					t.Errorf("alice %s: %s", q, r.Raw)
				}
			}
			if r := h.GraphQL(t, "alice", "", `{ zone(name: "gamma") { name } }`, nil); r.Code(t) != "NOT_FOUND" {
				t.Errorf("unknown zone: %s", r.Raw)
			}
		})
		t.Run("hosts", func(t *testing.T) {
			t.Parallel()
			var hs []struct {
				ID, Name, Status, AgentVersion string
				UpdateAvailable                bool
				Zone                           struct{ Name string }
				Uptime, Cpus                   int
				CPUUsage                       float64
				MemoryUsed, MemoryTotal        int
			}
			h.GraphQL(t, "admin", "", `{ hosts { id name status zone { name } agentVersion updateAvailable uptime cpus cpuUsage memoryUsed memoryTotal } }`, nil).OK(t).Into(t, "hosts", &hs)
			if len(hs) != 5 {
				t.Fatalf("hosts = %+v", hs)
			}
			ids := map[string]bool{}
			for _, x := range hs {
				ids[x.ID] = true
				if x.Status != "ONLINE" || x.AgentVersion != "meshtest" || !x.UpdateAvailable || x.Uptime <= 0 || x.Cpus != 16 ||
					x.CPUUsage < 0 || x.CPUUsage > 1 || x.MemoryTotal != 65536 || x.MemoryUsed <= 0 || x.MemoryUsed > x.MemoryTotal {
					t.Errorf("host %+v", x)
				}
			}
			if len(ids) != 5 || hs[0].Zone.Name != "alpha" || hs[4].Zone.Name != "beta" || hs[4].Name != "pve2" {
				t.Errorf("host ids or order: %+v", hs)
			}
			var beta []struct{ Name string }
			h.GraphQL(t, "admin", "", `{ hosts(zone: "beta", first: 1) { name } }`, nil).OK(t).Into(t, "hosts", &beta)
			if len(beta) != 1 || beta[0].Name != "pve1" {
				t.Errorf("hosts(zone: beta, first: 1) = %+v", beta)
			}
			for _, user := range []string{"alice", "nobody"} {
				if r := h.GraphQL(t, user, "", `{ hosts { name } }`, nil); r.Code(t) != "NOT_FOUND" {
					t.Errorf("%s lists hosts: %s", user, r.Raw)
				}
			}
			if r := h.GraphQL(t, "admin", "", `{ hosts(zone: "gamma") { name } }`, nil); r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != "zone" {
				t.Errorf("unknown zone: %s", r.Raw)
			}
		})
		t.Run("vms", func(t *testing.T) {
			t.Parallel()
			var all []vm
			h.GraphQL(t, "alice", "red", `{ vms { `+vmFields+` } }`, nil).OK(t).Into(t, "vms", &all)
			if got, want := names(all), []string{"alpha/red-db", "alpha/red-web-1", "beta/red-web-2"}; !slices.Equal(got, want) {
				t.Fatalf("red's vms = %v, want %v", got, want)
			}
			for _, v := range all {
				switch v.Name {
				case "red-web-1":
					if v.ID != redWeb1 || v.Status != "RUNNING" || v.Host == nil || v.Host.Name != "pve1" || v.Host.Status != "ONLINE" ||
						v.Vcpus != 2 || v.MemoryMiB != 2048 || !slices.Equal(v.IPAddresses, []string{"10.20.0.10"}) {
						t.Errorf("red-web-1 = %+v", v)
					}
				case "red-db":
					if v.Status != "STOPPED" || v.Host.Name != "pve2" || len(v.IPAddresses) != 0 {
						t.Errorf("red-db = %+v", v)
					}
				}
			}
			var blue []vm
			h.GraphQL(t, "bob", "blue", `{ vms { name zone { name } } }`, nil).OK(t).Into(t, "vms", &blue)
			if got := names(blue); !slices.Equal(got, []string{"alpha/blue-app", "beta/blue-db"}) {
				t.Errorf("blue's vms = %v", got)
			}
			for filter, want := range map[string][]string{
				`{zone: "beta"}`:                  {"beta/red-web-2"},
				`{status: STOPPED}`:               {"alpha/red-db"},
				`{name: "WEB"}`:                   {"alpha/red-web-1", "beta/red-web-2"},
				`{name: "web", zone: "alpha"}`:    {"alpha/red-web-1"},
				`{status: RUNNING, name: "nope"}`: nil,
			} {
				var got []vm
				h.GraphQL(t, "vera", "red", `{ vms(filter: `+filter+`) { name zone { name } } }`, nil).OK(t).Into(t, "vms", &got)
				if !slices.Equal(names(got), want) {
					t.Errorf("filter %s = %v, want %v", filter, names(got), want)
				}
			}
			// Pages of one: every VM once, in order, then an empty page.
			var paged []vm
			after := any(nil)
			for range 5 {
				var page []vm
				h.GraphQL(t, "alice", "red", `query($after: ID) { vms(first: 1, after: $after) { id name zone { name } } }`, map[string]any{"after": after}).OK(t).Into(t, "vms", &page)
				if len(page) == 0 {
					break
				}
				paged = append(paged, page...)
				after = page[0].ID
			}
			if !slices.Equal(names(paged), names(all)) {
				t.Errorf("pages = %v, want %v", names(paged), names(all))
			}
			for _, q := range []string{`{ vms(after: "x") { id } }`, `{ vms(first: -1) { id } }`, `{ vms(filter: {zone: "gamma"}) { id } }`} {
				if r := h.GraphQL(t, "alice", "red", q, nil); r.Code(t) != "BAD_USER_INPUT" {
					t.Errorf("%s: %s", q, r.Raw)
				}
			}
			if r := h.GraphQL(t, "alice", "", `{ vms { id } }`, nil); r.Code(t) != "BAD_USER_INPUT" {
				t.Errorf("vms without a VDC header: %s", r.Raw)
			}
			// A VDC member sees the host's name and status, not its details.
			if r := h.GraphQL(t, "alice", "red", `{ vms { host { agentVersion } } }`, nil); !r.HasCode("NOT_FOUND") {
				t.Errorf("alice reads host details: %s", r.Raw)
			}
		})
		t.Run("connections", func(t *testing.T) {
			t.Parallel()
			type pageInfo struct {
				HasNextPage, HasPreviousPage bool
				EndCursor                    *string
			}
			// walk pages a connection by first, following endCursor, and
			// returns every node's name (zone/name) and the totalCounts seen.
			walk := func(user, vdc, field, args, node string, first int) (got []string, totals []int) {
				t.Helper()
				var after *string
				for range 20 {
					var c struct {
						Edges []struct {
							Cursor string
							Node   struct {
								Name string
								Zone struct{ Name string }
							}
						}
						Nodes      []struct{ Name string }
						PageInfo   pageInfo
						TotalCount int
					}
					q := fmt.Sprintf(`query($first: Int, $after: String) { %s(first: $first, after: $after%s) { edges { cursor node { %s } } nodes { name } pageInfo { hasNextPage hasPreviousPage endCursor } totalCount } }`, field, args, node)
					h.GraphQL(t, user, vdc, q, map[string]any{"first": first, "after": after}).OK(t).Into(t, field, &c)
					if len(c.Edges) > first || len(c.Nodes) != len(c.Edges) || c.PageInfo.HasPreviousPage != (after != nil) {
						t.Fatalf("%s page after %v: %+v", field, after, c)
					}
					for i, e := range c.Edges {
						got = append(got, strings.TrimPrefix(e.Node.Zone.Name+"/", "/")+e.Node.Name)
						if c.Nodes[i].Name != e.Node.Name {
							t.Errorf("%s: nodes[%d] = %s, edges[%d] = %s", field, i, c.Nodes[i].Name, i, e.Node.Name)
						}
						if i == len(c.Edges)-1 && (c.PageInfo.EndCursor == nil || *c.PageInfo.EndCursor != e.Cursor) {
							t.Errorf("%s: endCursor %v is not the last edge's cursor %s", field, c.PageInfo.EndCursor, e.Cursor)
						}
					}
					totals = append(totals, c.TotalCount)
					if !c.PageInfo.HasNextPage {
						return got, totals
					}
					after = c.PageInfo.EndCursor
				}
				t.Fatalf("%s: no last page", field)
				return nil, nil
			}
			vms, totals := walk("alice", "red", "vmsConnection", "", "name zone { name }", 2)
			if want := []string{"alpha/red-db", "alpha/red-web-1", "beta/red-web-2"}; !slices.Equal(slices.Sorted(slices.Values(vms)), want) || !slices.Equal(totals, []int{3, 3}) {
				t.Errorf("red's vms by pages of 2 = %v (totalCount %v), want %v", vms, totals, want)
			}
			if one, _ := walk("alice", "red", "vmsConnection", "", "name zone { name }", 1); !slices.Equal(one, vms) {
				t.Errorf("pages of 1 = %v, pages of 2 = %v", one, vms)
			}
			if got, totals := walk("vera", "red", "vmsConnection", `, filter: {name: "web"}`, "name zone { name }", 1); len(got) != 2 || !slices.Equal(totals, []int{2, 2}) {
				t.Errorf("filtered = %v (totalCount %v)", got, totals)
			}
			hosts, totals := walk("admin", "", "hostsConnection", "", "name zone { name }", 2)
			if want := []string{"alpha/pve1", "alpha/pve2", "alpha/pve3", "beta/pve1", "beta/pve2"}; !slices.Equal(hosts, want) || totals[0] != 5 {
				t.Errorf("hosts by pages of 2 = %v (totalCount %v), want %v", hosts, totals, want)
			}
			if zs, _ := walk("alice", "", "zonesConnection", "", "name", 1); !slices.Equal(zs, []string{"alpha", "beta"}) {
				t.Errorf("zones by pages of 1 = %v", zs)
			}
			if nets, totals := walk("alice", "red", "networksConnection", "", "name zone { name }", 5); !slices.Equal(nets, []string{"alpha/front"}) || totals[0] != 1 {
				t.Errorf("red's networks = %v (totalCount %v)", nets, totals)
			}
			for _, q := range []string{`{ vmsConnection(after: "x") { totalCount } }`, `{ networksConnection(after: "eA") { totalCount } }`, `{ vmsConnection(first: 1001) { totalCount } }`} {
				if r := h.GraphQL(t, "alice", "red", q, nil); r.Code(t) != "BAD_USER_INPUT" {
					t.Errorf("%s: %s", q, r.Raw)
				}
			}
			if r := h.GraphQL(t, "alice", "red", `{ hostsConnection { totalCount } }`, nil); r.Code(t) != "NOT_FOUND" {
				t.Errorf("alice lists hosts: %s", r.Raw)
			}
		})
		t.Run("metrics", func(t *testing.T) {
			t.Parallel()
			type point struct {
				Time                                    time.Time
				CPUUsage, MemoryUsedMiB, MemoryTotalMiB *float64
				NetInBytesPerSecond                     *float64
			}
			const fields = `time cpuUsage memoryUsedMiB memoryTotalMiB netInBytesPerSecond`
			withData := func(pts []point) int {
				n := 0
				for _, p := range pts {
					if p.CPUUsage != nil && p.MemoryUsedMiB != nil && p.MemoryTotalMiB != nil && p.NetInBytesPerSecond != nil {
						n++
					}
				}
				return n
			}
			var vms []struct {
				Name    string
				Metrics []point
			}
			h.GraphQL(t, "vera", "red", `{ vms { name metrics(timeframe: HOUR) { `+fields+` } } }`, nil).OK(t).Into(t, "vms", &vms)
			for _, v := range vms {
				last := v.Metrics[len(v.Metrics)-1]
				switch {
				case len(v.Metrics) != 70 || !last.Time.After(time.Now().Add(-2*time.Minute)):
					t.Errorf("%s: %d points, the last at %v", v.Name, len(v.Metrics), last.Time)
				case v.Name == "red-db" && withData(v.Metrics) != 0: // stopped
					t.Errorf("red-db has data: %+v", last)
				case v.Name != "red-db" && (withData(v.Metrics) == 0 || *last.MemoryTotalMiB != 2048):
					t.Errorf("%s has no data: %+v", v.Name, last)
				}
			}
			var hs []struct{ Metrics []point }
			h.GraphQL(t, "admin", "", `{ hosts(zone: "alpha", first: 1) { metrics(timeframe: DAY) { `+fields+` } } }`, nil).OK(t).Into(t, "hosts", &hs)
			var z struct{ Metrics []point }
			h.GraphQL(t, "admin", "", `{ zone(name: "alpha") { metrics { `+fields+` } } }`, nil).OK(t).Into(t, "zone", &z)
			if len(hs[0].Metrics) != 70 || withData(hs[0].Metrics) == 0 || len(z.Metrics) != 70 || withData(z.Metrics) == 0 {
				t.Fatalf("host metrics %+v, zone metrics %+v", hs[0].Metrics, z.Metrics)
			}
			// The zone's memory is its 3 hosts' (64 GiB each).
			if last := z.Metrics[69]; *last.MemoryTotalMiB != 3*65536 || *last.CPUUsage <= 0 || *last.CPUUsage > 1 {
				t.Errorf("zone's last point %+v", last)
			}
			for _, q := range []string{`{ vms { host { metrics { time } } } }`, `{ zone(name: "alpha") { metrics { time } } }`} {
				if r := h.GraphQL(t, "alice", "red", q, nil); !r.HasCode("NOT_FOUND") {
					t.Errorf("alice: %s: %s", q, r.Raw)
				}
			}
		})
		t.Run("node", func(t *testing.T) {
			t.Parallel()
			var hostID string
			var hs []struct{ ID string }
			h.GraphQL(t, "admin", "", `{ hosts(zone: "alpha", first: 1) { id } }`, nil).OK(t).Into(t, "hosts", &hs)
			hostID = hs[0].ID
			type node struct {
				Typename string `json:"__typename"`
				ID       string
				Name     string
			}
			const q = `query($id: ID!) { node(id: $id) { __typename id ... on VM { name } ... on Network { name } ... on Host { name } ... on Zone { name } } }`
			for _, tc := range []struct {
				user, vdc, id, typename, name string
			}{
				{"alice", "red", redWeb1, "VM", "red-web-1"},
				{"vera", "red", front.ID, "Network", "front"},
				{"bob", "blue", blueApp, "VM", "blue-app"},
				{"admin", "", hostID, "Host", "pve1"},
				{"alice", "", zoneID(beta), "Zone", "beta"},
			} {
				var n node
				h.GraphQL(t, tc.user, tc.vdc, q, map[string]any{"id": tc.id}).OK(t).Into(t, "node", &n)
				if n.Typename != tc.typename || n.ID != tc.id || n.Name != tc.name {
					t.Errorf("%s in %q: node(%s) = %+v, want %s %s", tc.user, tc.vdc, tc.id, n, tc.typename, tc.name)
				}
			}
			// Another VDC's object, one outside the VDC header, a host for a
			// member, a guest flexplane did not create and garbage: NOT_FOUND.
			for _, tc := range []struct{ user, vdc, id string }{
				{"alice", "red", blueApp}, {"bob", "blue", front.ID}, {"alice", "", redWeb1}, {"alice", "red", hostID},
				{"alice", "red", opsBox}, {"alice", "red", "garbage"}, {"bob", "blue", redWeb2},
			} {
				r := h.GraphQL(t, tc.user, tc.vdc, q, map[string]any{"id": tc.id})
				if r.Code(t) != "NOT_FOUND" || strings.Contains(r.Raw, `"name"`) {
					t.Errorf("%s in %q: node(%s) = %s, want NOT_FOUND", tc.user, tc.vdc, tc.id, r.Raw)
				}
			}
		})
		t.Run("vm", func(t *testing.T) {
			t.Parallel()
			var v vm
			h.GraphQL(t, "vera", "red", `query($id: ID!) { vm(id: $id) { `+vmFields+` } }`, map[string]any{"id": redWeb1}).OK(t).Into(t, "vm", &v)
			if v.Name != "red-web-1" || v.Zone.Name != "alpha" || v.Status != "RUNNING" {
				t.Errorf("vm = %+v", v)
			}
		})
		t.Run("isolation", func(t *testing.T) {
			t.Parallel()
			unknownZone := tenancy.VMRef{ZoneID: "nowhere", VMID: 100}.ID()
			otherVNet := tenancy.NetworkRef{ZoneID: zoneID(alpha), VNet: tenancy.VNetID("blue", "front")}.ID()
			notFound := func(user, vdc, q string, vars map[string]any) {
				t.Helper()
				if r := h.GraphQL(t, user, vdc, q, vars); r.Code(t) != "NOT_FOUND" {
					t.Errorf("%s in %s: %s %v: %s", user, vdc, q, vars, r.Raw)
				}
			}
			vmQ := `query($id: ID!) { vm(id: $id) { id } }`
			// Another VDC's VM, a guest flexplane did not create, and forged ids.
			for _, id := range []string{blueApp, opsBox, tenancy.VMRef{ZoneID: zoneID(alpha), VMID: 104}.ID(),
				tenancy.VMRef{ZoneID: zoneID(alpha), VMID: 105}.ID(), unknownZone, "garbage", front.ID, ""} {
				notFound("alice", "red", vmQ, map[string]any{"id": id})
			}
			notFound("bob", "blue", vmQ, map[string]any{"id": redWeb1})
			// Another VDC's network, and forged network ids.
			delQ := `mutation($id: ID!) { deleteNetwork(id: $id) { id } }`
			for _, id := range []string{front.ID, redWeb1, otherVNet, "garbage"} {
				notFound("bob", "blue", delQ, map[string]any{"id": id})
			}
			// Every VDC-level field in a VDC the caller may not use.
			for _, q := range []string{`{ vms { id } }`, `{ networks { id } }`, `{ currentVDC { name } }`} {
				notFound("bob", "red", q, nil)
			}
			notFound("bob", "red", vmQ, map[string]any{"id": redWeb1})
			notFound("bob", "red", delQ, map[string]any{"id": front.ID})
			notFound("bob", "red", `mutation { createNetwork(input: {name: "x", zone: "alpha", cidr: "10.9.0.0/24", gateway: "10.9.0.1"}) { id } }`, nil)
			// A viewer may read but not change: FORBIDDEN, as it knows the
			// VDC; another VDC's network stays NOT_FOUND for everyone.
			for _, q := range []string{delQ, `mutation { createNetwork(input: {name: "x", zone: "alpha", cidr: "10.9.0.0/24", gateway: "10.9.0.1"}) { id } }`} {
				if r := h.GraphQL(t, "vera", "red", q, map[string]any{"id": front.ID}); r.Code(t) != "FORBIDDEN" {
					t.Errorf("vera in red: %s: %s, want FORBIDDEN", q, r.Raw)
				}
			}
			// bob's view of networks is his own.
			var nets []struct{ ID string }
			h.GraphQL(t, "bob", "blue", `{ networks { id } }`, nil).OK(t).Into(t, "networks", &nets)
			if len(nets) != 0 {
				t.Errorf("bob sees networks %+v", nets)
			}
		})
		t.Run("networks", func(t *testing.T) {
			t.Parallel()
			create := `mutation($in: CreateNetworkInput!) { createNetwork(input: $in) { id name zone { name } cidr gateway vnet } }`
			in := func(name, zone, cidr, gw string) map[string]any {
				return map[string]any{"in": map[string]any{"name": name, "zone": zone, "cidr": cidr, "gateway": gw}}
			}
			type network struct {
				ID, Name, Cidr, Gateway, Vnet string
				Zone                          struct{ Name string }
			}
			var back network
			h.GraphQL(t, "alice", "red", create, in("back", "beta", "10.30.0.0/24", "10.30.0.1")).OK(t).Into(t, "createNetwork", &back)
			if back.Name != "back" || back.Zone.Name != "beta" || back.Cidr != "10.30.0.0/24" || back.Gateway != "10.30.0.1" || back.Vnet != tenancy.VNetID("red", "back") {
				t.Errorf("created %+v", back)
			}
			var nets []network
			h.GraphQL(t, "vera", "red", `{ networks { id name zone { name } cidr gateway vnet } }`, nil).OK(t).Into(t, "networks", &nets)
			if len(nets) != 2 || nets[0].Name != "front" || nets[0].ID != front.ID || nets[1] != back {
				t.Errorf("networks = %+v", nets)
			}
			// Bad input: BAD_USER_INPUT on the field, SDN unchanged.
			before := sdnState(t, pb)
			for _, c := range []struct {
				vars  map[string]any
				code  string
				field string
			}{
				{in("Bad Name", "beta", "10.31.0.0/24", "10.31.0.1"), "BAD_USER_INPUT", "input.name"},
				{in("n2", "gamma", "10.31.0.0/24", "10.31.0.1"), "BAD_USER_INPUT", "input.zone"},
				{in("n2", "beta", "10.31.0.1/24", "10.31.0.1"), "BAD_USER_INPUT", "input.cidr"},
				{in("n2", "beta", "10.30.0.0/16", "10.30.0.1"), "BAD_USER_INPUT", "input.cidr"},
				{in("n2", "beta", "10.31.0.0/24", "10.32.0.1"), "BAD_USER_INPUT", "input.gateway"},
				{in("n2", "beta", "10.31.0.0/24", "10.31.0.255"), "BAD_USER_INPUT", "input.gateway"},
				{in("n2", "beta", "10.31.0.0/24", "10.31.0.0"), "BAD_USER_INPUT", "input.gateway"},
				{in("back", "beta", "10.31.0.0/24", "10.31.0.1"), "CONFLICT", ""},
			} {
				r := h.GraphQL(t, "alice", "red", create, c.vars)
				if r.Code(t) != c.code || (c.field != "" && r.Errors[0].Extensions["field"] != c.field) {
					t.Errorf("create %v: %s", c.vars, r.Raw)
				}
			}
			if after := sdnState(t, pb); after != before {
				t.Errorf("refused creates changed SDN:\nbefore %s\nafter  %s", before, after)
			}
			// In use while the IPAM holds an address; then deleted.
			del := `mutation($id: ID!) { deleteNetwork(id: $id) { id } }`
			if r := h.GraphQL(t, "alice", "red", del, map[string]any{"id": front.ID}); r.Code(t) != "CONFLICT" || !strings.Contains(r.Errors[0].Message, "10.20.0.10") {
				t.Errorf("delete in use: %s", r.Raw)
			}
			h.GraphQL(t, "alice", "red", del, map[string]any{"id": back.ID}).OK(t)
			if r := h.GraphQL(t, "alice", "red", del, map[string]any{"id": back.ID}); r.Code(t) != "NOT_FOUND" {
				t.Errorf("second delete: %s", r.Raw)
			}
		})
		t.Run("enrollment keys", func(t *testing.T) {
			t.Parallel()
			var created struct {
				Key struct {
					ID                      string
					Reusable, Used, Expired bool
					ExpiresAt               time.Time
				}
				Secret string
			}
			h.GraphQL(t, "admin", "", `mutation { createEnrollmentKey(input: {reusable: true, ttlSeconds: 600}) { key { id reusable used expired expiresAt } secret } }`, nil).
				OK(t).Into(t, "createEnrollmentKey", &created)
			k := created.Key
			if created.Secret == "" || !k.Reusable || k.Used || k.Expired || time.Until(k.ExpiresAt) < 9*time.Minute || time.Until(k.ExpiresAt) > 11*time.Minute {
				t.Errorf("created %+v", created)
			}
			var keys []struct {
				ID      string
				Expired bool
			}
			h.GraphQL(t, "admin", "", `{ enrollmentKeys { id expired } }`, nil).OK(t).Into(t, "enrollmentKeys", &keys)
			if !slices.ContainsFunc(keys, func(x struct {
				ID      string
				Expired bool
			}) bool {
				return x.ID == k.ID && !x.Expired
			}) {
				t.Errorf("keys %+v lack %s", keys, k.ID)
			}
			if strings.Contains(h.GraphQL(t, "admin", "", `{ enrollmentKeys { id } }`, nil).Raw, created.Secret) {
				t.Error("the listing shows a secret")
			}
			var revoked struct{ Expired bool }
			h.GraphQL(t, "admin", "", `mutation($id: ID!) { revokeEnrollmentKey(id: $id) { expired } }`, map[string]any{"id": k.ID}).OK(t).Into(t, "revokeEnrollmentKey", &revoked)
			if !revoked.Expired {
				t.Error("revoked key not expired")
			}
			for _, c := range []struct{ user, q, code string }{
				{"admin", `mutation { revokeEnrollmentKey(id: "999999") { id } }`, "NOT_FOUND"},
				{"admin", `mutation { revokeEnrollmentKey(id: "x") { id } }`, "NOT_FOUND"},
				{"admin", `mutation { createEnrollmentKey(input: {ttlSeconds: 10}) { secret } }`, "BAD_USER_INPUT"},
				{"alice", `{ enrollmentKeys { id } }`, "NOT_FOUND"},
				{"alice", `mutation { createEnrollmentKey(input: {}) { secret } }`, "NOT_FOUND"},
				{"alice", `mutation { revokeEnrollmentKey(id: "1") { id } }`, "NOT_FOUND"},
			} {
				if r := h.GraphQL(t, c.user, "", c.q, nil); r.Code(t) != c.code {
					t.Errorf("%s %s: %s", c.user, c.q, r.Raw)
				}
			}
		})
		t.Run("api page example", func(t *testing.T) {
			t.Parallel()
			out := runAPIExample(t, map[string]string{"FLEXPLANE_URL": h.Orchestrator.URL(), "TOKEN": h.Token(t, "alice"), "VDC": "red"})
			var resp struct {
				Data struct {
					Zones []struct{ Name string }
					Vms   []struct {
						Name        string
						IPAddresses []string
					}
					Networks []struct{ Name string }
				}
				Errors []any
			}
			if err := json.Unmarshal(out, &resp); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			d := resp.Data
			if len(resp.Errors) != 0 || len(d.Zones) != 2 || len(d.Vms) != 2 || len(d.Networks) == 0 {
				t.Errorf("the API page's example answered %s", out)
			}
		})
		t.Run("complexity", func(t *testing.T) {
			t.Parallel()
			h.GraphQL(t, "alice", "red", `{ vms(first: 50) { id name status zone { name } host { name } ipAddresses } }`, nil).OK(t)
			r := h.GraphQL(t, "alice", "red", `{ vms(first: 1000) { id name status zone { name } host { name } ipAddresses } }`, nil)
			if r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["reason"] != "COMPLEXITY_LIMIT_EXCEEDED" {
				t.Errorf("vms(first: 1000): %s", r.Raw)
			}
			if r := h.GraphQL(t, "admin", "", `{ zones(first: 200) { name hosts { name status agentVersion uptime cpuUsage memoryUsed } } }`, nil); r.Code(t) != "BAD_USER_INPUT" {
				t.Errorf("zones(first: 200) with hosts: %s", r.Raw)
			}
		})
	})
	if t.Failed() {
		return
	}

	// Faults of zone beta; alpha keeps answering.
	partial := func(t *testing.T) {
		t.Helper()
		s := time.Now()
		r := h.GraphQL(t, "alice", "red", `{ vms { name zone { name } } }`, nil)
		took := time.Since(s)
		var vms []vm
		r.Into(t, "vms", &vms)
		if got := names(vms); !slices.Equal(got, []string{"alpha/red-db", "alpha/red-web-1"}) {
			t.Errorf("vms = %v", got)
		}
		if zs := zoneErrors(t, r); !slices.Equal(zs, []string{"beta"}) {
			t.Errorf("zone errors = %v in %s", zs, r.Raw)
		}
		if took > zoneTimeout+time.Second {
			t.Errorf("partial answer took %v with a zone timeout of %v", took, zoneTimeout)
		}
		// One error for the zone however many fields need it.
		r = h.GraphQL(t, "admin", "", `{ zones { name capacity { cpus } hosts { name uptime cpuUsage memoryUsed } } }`, nil)
		var zs []struct {
			Name     string
			Capacity *struct{ Cpus int }
		}
		r.Into(t, "zones", &zs)
		if len(zs) != 2 || zs[0].Capacity == nil || zs[0].Capacity.Cpus != 48 || zs[1].Capacity != nil {
			t.Errorf("zones = %s", r.Raw)
		}
		if z := zoneErrors(t, r); !slices.Equal(z, []string{"beta"}) {
			t.Errorf("zone errors = %v in %s", z, r.Raw)
		}
		var nets []struct{ Name string }
		r = h.GraphQL(t, "alice", "red", `{ networks { name } }`, nil)
		r.Into(t, "networks", &nets)
		if len(nets) != 1 || nets[0].Name != "front" || !slices.Equal(zoneErrors(t, r), []string{"beta"}) {
			t.Errorf("networks: %s", r.Raw)
		}
	}
	t.Run("slow zone", func(t *testing.T) {
		beta.Sim.SetLatency(zoneTimeout + time.Second)
		defer beta.Sim.SetLatency(0)
		partial(t)
	})
	t.Run("failing zone", func(t *testing.T) {
		for _, p := range []string{"/cluster/resources", "/pools", "/cluster/sdn/vnets"} {
			beta.Sim.FailRequests("GET", p, 500, 1000)
			defer beta.Sim.FailRequests("GET", p, 500, 0)
		}
		partial(t)
	})
	// Every request of a resolver reads through one inventory, so that at
	// most GOMAXPROCS answers are decoded at once in the process, however
	// many requests run.
	t.Run("one inventory for all requests", func(t *testing.T) {
		logger := slog.New(slog.DiscardHandler)
		est := estate.New(estate.Config{Zones: h.Orchestrator.Zones(), Catalog: h.Catalog(t), Logger: logger})
		r := &graph.Resolver{Zones: h.Orchestrator.Zones(), Catalog: h.Catalog(t), Estate: est, Logger: logger}
		red, err := catalog.Get[*catalog.VDC](ctx, h.Catalog(t), "red")
		if err != nil {
			t.Fatal(err)
		}
		scoped := graph.WithVDCScope(ctx, graph.VDCScope{VDC: red})
		var wg sync.WaitGroup
		for range 24 {
			wg.Go(func() {
				vms, err := r.Query().Vms(estate.WithRead(scoped), nil, nil, nil)
				if err != nil || len(vms) != 3 {
					t.Errorf("vms: %d, %v", len(vms), err)
				}
			})
		}
		wg.Wait()
		peak, limit := graph.InventoryForTest(r).DecodedAtOnceForTest()
		if peak == 0 || peak > limit || limit != runtime.GOMAXPROCS(0) {
			t.Errorf("%d answers decoded at once by the resolver's inventory, limit %d (GOMAXPROCS %d)", peak, limit, runtime.GOMAXPROCS(0))
		}
	})
	// A VDC's VMs are read from its pool, whose members are the VDC's
	// guests only: not from /cluster/resources, which lists every guest of
	// the zone.
	t.Run("vms read the VDC's pool only", func(t *testing.T) {
		for _, c := range h.Clusters {
			c.Sim.FailRequests("GET", "/cluster/resources", 500, 1000)
			defer c.Sim.FailRequests("GET", "/cluster/resources", 500, 0)
		}
		var all []vm
		h.GraphQL(t, "alice", "red", `{ vms { `+vmFields+` } }`, nil).OK(t).Into(t, "vms", &all)
		if got, want := names(all), []string{"alpha/red-db", "alpha/red-web-1", "beta/red-web-2"}; !slices.Equal(got, want) {
			t.Fatalf("red's vms = %v, want %v", got, want)
		}
		for _, v := range all {
			ok := v.Host != nil && v.Vcpus == 2 && v.MemoryMiB == 2048
			switch v.Name {
			case "red-web-1":
				ok = ok && v.ID == redWeb1 && v.Status == "RUNNING" && v.Host.Name == "pve1" && slices.Equal(v.IPAddresses, []string{"10.20.0.10"})
			case "red-db":
				ok = ok && v.Status == "STOPPED" && v.Host.Name == "pve2" && len(v.IPAddresses) == 0
			case "red-web-2":
				ok = ok && v.ID == redWeb2 && v.Status == "RUNNING" && v.Zone.Name == "beta"
			}
			if !ok {
				t.Errorf("%s = %+v", v.Name, v)
			}
		}
		var one vm
		h.GraphQL(t, "alice", "red", `query($id: ID!) { vm(id: $id) { `+vmFields+` } }`, map[string]any{"id": redWeb2}).OK(t).Into(t, "vm", &one)
		if one.Name != "red-web-2" || one.Status != "RUNNING" || one.Zone.Name != "beta" {
			t.Errorf("vm(id: red-web-2) = %+v", one)
		}
		if r := h.GraphQL(t, "alice", "red", `query($id: ID!) { vm(id: $id) { name } }`, map[string]any{"id": blueApp}); r.Code(t) != "NOT_FOUND" {
			t.Errorf("blue's VM for red: %s", r.Raw)
		}
	})
	t.Run("zone without agents", func(t *testing.T) {
		for _, a := range beta.Agents {
			if err := a.Stop(); err != nil {
				t.Fatal(err)
			}
		}
		partial(t) // before and after the registry notices
		poll.True(t, 30*time.Second, "beta offline", func() bool {
			var zs []struct{ Name, Status string }
			h.GraphQL(t, "alice", "", `{ zones { name status } }`, nil).OK(t).Into(t, "zones", &zs)
			return len(zs) == 2 && zs[1].Status == "OFFLINE"
		})
		partial(t)
		r := h.GraphQL(t, "alice", "red", `query($id: ID!) { vm(id: $id) { name } }`, map[string]any{"id": redWeb2})
		if r.Code(t) != "ZONE_UNAVAILABLE" || r.Errors[0].Extensions["zone"] != "beta" {
			t.Errorf("vm in a zone without agents: %s", r.Raw)
		}
	})
	t.Logf("TestInventory took %v", time.Since(start).Round(time.Millisecond))
}
