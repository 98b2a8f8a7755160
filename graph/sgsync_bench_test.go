//go:build linux

package graph_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// benchRules is a group of n INBOUND rules of which only the last allows
// port from cidr: traffic to it passes every other rule first.
func benchRules(n, port int, cidr string) []map[string]any {
	rules := make([]map[string]any, 0, n)
	for i := range n - 1 {
		rules = append(rules, map[string]any{"direction": "INBOUND", "protocol": "TCP", "ports": fmt.Sprint(20000 + i),
			"peerCidr": fmt.Sprintf("192.0.2.%d/32", i+1), "description": fmt.Sprintf("rule %d", i)})
	}
	return append(rules, map[string]any{"direction": "INBOUND", "protocol": "TCP", "ports": fmt.Sprint(port), "peerCidr": cidr})
}

// BenchmarkSecurityGroupThroughput sends a TCP stream between two guests
// of one VNet through the simulator's data plane (nettest.Throughput:
// the payload the receiver's kernel counted) to a guest in a group of 50
// rules (the stream's port allowed by the last) and, in the same run, to
// a guest in no group (its firewall off), alternating which goes first.
// Reported: the means over the run of group-Mbit/s and open-Mbit/s, and
// their ratio (the target: at least 0.9).
func BenchmarkSecurityGroupThroughput(b *testing.B) {
	nettest.NeedRoot(b)
	h := meshtest.New(b, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{SecurityGroupInterval: 500 * time.Millisecond}), meshtest.WithDataPlane())
	h.WaitOnline(b, 30*time.Second)
	seedSharedStorage(b, h)
	net := createNetworks(b, h, "bob", "blue", "alpha")["alpha"]
	const port = 5201
	h.GraphQL(b, "bob", "blue", createGroup, map[string]any{"in": map[string]any{"name": "bench", "rules": benchRules(50, port, "10.1.0.0/24")}}).OK(b)
	c := h.Clusters[0].Proxmox(b)
	if err := c.Put(b.Context(), "/cluster/firewall/options", map[string]any{"enable": 1}, nil); err != nil {
		b.Fatal(err)
	}
	ips := map[string]string{}
	for name, groups := range map[string][]string{"client": {}, "open": {}, "guarded": {"bench"}} {
		ips[name] = createGroupedVM(b, h, net, name, groups)
	}
	p := h.Clusters[0].Plane
	ns := func(name string) string { return p.GuestNS(vmidOf(b, c, name)) }
	open, guarded := nettest.Sink(b, ns("open"), port), nettest.Sink(b, ns("guarded"), port)
	nettest.Serve(b, ns("guarded"), 20000, "guarded")
	// The group is in place once guarded no longer answers on a port only
	// another peer may reach.
	poll.True(b, 60*time.Second, "guarded's firewall in place", func() bool {
		return nettest.Reach(ns("client"), ips["guarded"]+":20000", time.Second) == ""
	})
	// Alternating which goes first; the means over the run are reported.
	var gs, os []float64
	for b.Loop() {
		toOpen := func() {
			os = append(os, nettest.Throughput(b, ns("client"), fmt.Sprintf("%s:%d", ips["open"], port), open, 3*time.Second))
		}
		toGroup := func() {
			gs = append(gs, nettest.Throughput(b, ns("client"), fmt.Sprintf("%s:%d", ips["guarded"], port), guarded, 3*time.Second))
		}
		if len(gs)%2 == 0 {
			toOpen()
			toGroup()
		} else {
			toGroup()
			toOpen()
		}
	}
	mean := func(xs []float64) float64 {
		sum := 0.0
		for _, x := range xs {
			sum += x
		}
		return sum / float64(len(xs))
	}
	b.ReportMetric(mean(gs), "group-Mbit/s")
	b.ReportMetric(mean(os), "open-Mbit/s")
	b.ReportMetric(mean(gs)/mean(os), "group/open")
	b.Logf("group Mbit/s %.0f, open Mbit/s %.0f", gs, os)
}

// ruleChangeVMs and ruleChangeZones: BenchmarkSecurityGroupRuleChange's
// group of 100 VMs spread over 3 zones.
const (
	ruleChangeVMs   = 100
	ruleChangeZones = 3
)

// BenchmarkSecurityGroupRuleChange measures a rule change of a group of
// 100 VMs in 3 zones (simulated Proxmox clusters behind real agents), from
// the updateSecurityGroup call until every zone's firewall holds the new
// group with the changed rule and every member's firewall refers to it,
// read from the simulators directly. The writer runs at its default
// interval (10 s): the change is applied because the API wakes it. The
// VMs are seeded in the simulators as a create leaves them (tagged,
// pooled, their groups in their intent). Reported per change: the time
// until the last member switched (all-s: its p50, p99 and max over the
// run) and each member's own time (vm-p99-s), and all-p99 against the 2 s
// target (all-p99/target).
func BenchmarkSecurityGroupRuleChange(b *testing.B) {
	h := meshtest.New(b, meshtest.WithAPI(meshtest.APISpec{SecurityGroupInterval: 10 * time.Second}), meshtest.WithClusters(
		meshtest.ClusterSpec{Name: "alpha", Nodes: 1},
		meshtest.ClusterSpec{Name: "beta", Nodes: 1},
		meshtest.ClusterSpec{Name: "gamma", Nodes: 1}))
	h.WaitOnline(b, 60*time.Second)
	ctx := b.Context()
	var g struct{ ID string }
	h.GraphQL(b, "bob", "blue", createGroup, map[string]any{"in": map[string]any{"name": "bench", "rules": benchRules(10, 8000, "10.1.0.0/24")}}).
		OK(b).Into(b, "createSecurityGroup", &g)
	zones := make([]*proxmox.Client, ruleChangeZones)
	members := make([][]int, ruleChangeZones)
	for z := range zones {
		zones[z] = h.Clusters[z].Proxmox(b)
		if err := zones[z].Put(ctx, "/cluster/firewall/options", map[string]any{"enable": 1}, nil); err != nil {
			b.Fatal(err)
		}
		if err := zones[z].Post(ctx, "/pools", map[string]any{"poolid": tenancy.PoolID("blue")}, nil); err != nil {
			b.Fatal(err)
		}
	}
	for i := range ruleChangeVMs {
		z := i % ruleChangeZones
		vmid := 1000 + i
		in := compute.Intent{Op: fmt.Sprintf("seed-%d", i), Created: time.Now(), VDC: "blue", Name: fmt.Sprintf("m%03d", i),
			NICs:           []compute.NICIntent{{Address: fmt.Sprintf("10.1.%d.%d", i/200, i%200+10), Bits: 16}},
			SecurityGroups: []string{"bench"}}
		var upid proxmox.UPID
		if err := zones[z].Post(ctx, "/nodes/pve1/qemu", map[string]any{"vmid": vmid, "name": in.Name, "tags": tenancy.GuestTags("blue"),
			"pool": tenancy.PoolID("blue"), "net0": "virtio,bridge=vmbr0", "description": in.Description()}, &upid); err != nil {
			b.Fatal(err)
		}
		if err := proxmox.NewTask(upid, zones[z]).Wait(ctx, 10*time.Millisecond, 30*time.Second); err != nil {
			b.Fatal(err)
		}
		members[z] = append(members[z], vmid)
	}
	port := 8000
	// switched waits until every member refers to the Proxmox group of
	// bench holding port and returns each member's time since start.
	switched := func(start time.Time) []time.Duration {
		var mu sync.Mutex
		var took []time.Duration
		errs := make([]error, len(zones))
		var wg sync.WaitGroup
		for z, c := range zones {
			wg.Go(func() {
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				pending := slices.Clone(members[z])
				errs[z] = poll.Context(wctx, func() error {
					name, err := benchGroup(wctx, c, port)
					if err != nil {
						return err
					}
					var failed error
					pending = slices.DeleteFunc(pending, func(vmid int) bool {
						rs, err := pveapi.GuestFirewallRules(wctx, c, "pve1", vmid)
						if err != nil {
							failed = err
							return false
						}
						if !slices.ContainsFunc(rs, func(r pveapi.FirewallRule) bool { return r.Type == "group" && r.Action == name }) {
							return false
						}
						mu.Lock()
						took = append(took, time.Since(start))
						mu.Unlock()
						return true
					})
					if failed != nil {
						return failed
					}
					if len(pending) > 0 {
						return fmt.Errorf("%d members not on %s yet", len(pending), name)
					}
					return nil
				})
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatalf("the group with port %d on every member: %v", port, err)
		}
		return took
	}
	switched(time.Now()) // the first pass writes the group and every member
	var all, each []time.Duration
	for b.Loop() {
		port++
		start := time.Now()
		h.GraphQL(b, "bob", "blue", `mutation($in: UpdateSecurityGroupInput!) { updateSecurityGroup(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"id": g.ID, "rules": benchRules(10, port, "10.1.0.0/24")}}).OK(b)
		took := switched(start)
		each = append(each, took...)
		all = append(all, slices.Max(took))
	}
	slices.Sort(all)
	slices.Sort(each)
	q := func(ds []time.Duration, f float64) float64 {
		return ds[min(len(ds)-1, int(f*float64(len(ds))))].Seconds()
	}
	b.ReportMetric(q(all, 0.5), "all-p50-s")
	b.ReportMetric(q(all, 0.99), "all-p99-s")
	b.ReportMetric(all[len(all)-1].Seconds(), "all-max-s")
	b.ReportMetric(q(each, 0.99), "vm-p99-s")
	b.ReportMetric(q(all, 0.99)/2, "all-p99/target")
}

// benchGroup is the Proxmox group of blue's group bench whose rules allow
// port, if the zone has it.
func benchGroup(ctx context.Context, c *proxmox.Client, port int) (string, error) {
	gs, err := pveapi.FirewallGroups(ctx, c)
	if err != nil {
		return "", err
	}
	for _, g := range gs {
		if g.Comment != "flexplane fp-vdc-blue group=bench" {
			continue
		}
		rs, err := pveapi.FirewallGroupRules(ctx, c, g.Name)
		if err != nil {
			continue // removed meanwhile
		}
		if slices.ContainsFunc(rs, func(r pveapi.FirewallRule) bool { return r.DPort == fmt.Sprint(port) }) {
			return g.Name, nil
		}
	}
	return "", fmt.Errorf("no group of bench with port %d yet", port)
}
