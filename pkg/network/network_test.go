package network_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

const token = "flexplane@pve!test=0123456789abcdef"

// cluster starts a simulated two-node cluster and returns a go-proxmox
// client for it.
func cluster(t *testing.T) *proxmox.Client {
	t.Helper()
	_, c := pvetest.Start(t, pvesim.Config{Cluster: "lab", Nodes: 2}, token)
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// sdnState renders the whole SDN configuration, pending and running, and
// the IPAM, to show that a refused request changed nothing.
func sdnState(t *testing.T, c *proxmox.Client) string {
	t.Helper()
	var b strings.Builder
	for _, p := range []string{"/cluster/sdn/zones?pending=1", "/cluster/sdn/vnets?pending=1", "/cluster/sdn/vnets?running=1", "/cluster/sdn/ipams/pve/status"} {
		var v []map[string]any
		if err := c.Get(ctx(t), p, &v); err != nil {
			t.Fatalf("GET %s: %v", p, err)
		}
		js, _ := json.Marshal(v)
		fmt.Fprintf(&b, "%s %s\n", p, js)
		if strings.HasPrefix(p, "/cluster/sdn/vnets?pending") {
			for _, vn := range v {
				var subs []map[string]any
				if err := c.Get(ctx(t), fmt.Sprintf("/cluster/sdn/vnets/%s/subnets?pending=1", vn["vnet"]), &subs); err != nil {
					t.Fatal(err)
				}
				js, _ := json.Marshal(subs)
				fmt.Fprintf(&b, "subnets of %s %s\n", vn["vnet"], js)
			}
		}
	}
	return b.String()
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := network.Spec{VDC: "red", Name: "web", CIDR: "10.1.0.0/24", Gateway: "10.1.0.1"}
	if _, _, err := ok.Validate(); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	for _, tc := range []struct {
		field string
		spec  func(*network.Spec)
	}{
		{"name", func(s *network.Spec) { s.Name = "" }},
		{"name", func(s *network.Spec) { s.Name = "Web" }},
		{"name", func(s *network.Spec) { s.Name = "1web" }},
		{"name", func(s *network.Spec) { s.Name = "web-" }},
		{"name", func(s *network.Spec) { s.Name = "web_1" }},
		{"name", func(s *network.Spec) { s.Name = strings.Repeat("a", 41) }},
		{"cidr", func(s *network.Spec) { s.CIDR = "10.1.0.0" }},
		{"cidr", func(s *network.Spec) { s.CIDR = "10.1.0.5/24" }},
		{"cidr", func(s *network.Spec) { s.CIDR = "10.1.0.0/30" }},
		{"cidr", func(s *network.Spec) { s.CIDR = "10.0.0.0/7" }},
		{"cidr", func(s *network.Spec) { s.CIDR = "fd00::/64" }},
		{"cidr", func(s *network.Spec) { s.CIDR = "banana" }},
		{"gateway", func(s *network.Spec) { s.Gateway = "10.2.0.1" }},
		{"gateway", func(s *network.Spec) { s.Gateway = "10.1.0.0" }},
		{"gateway", func(s *network.Spec) { s.Gateway = "10.1.0.255" }},
		{"gateway", func(s *network.Spec) { s.Gateway = "" }},
		{"gateway", func(s *network.Spec) { s.Gateway = "fd00::1" }},
		// Surrounding whitespace is refused, as in names and addresses.
		{"cidr", func(s *network.Spec) { s.CIDR = " 10.1.0.0/24" }},
		{"cidr", func(s *network.Spec) { s.CIDR = "10.1.0.0/24\n" }},
		{"gateway", func(s *network.Spec) { s.Gateway = "10.1.0.1 " }},
		{"gateway", func(s *network.Spec) { s.Gateway = "\t10.1.0.1" }},
	} {
		s := ok
		tc.spec(&s)
		_, _, err := s.Validate()
		var ie *network.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%+v: err = %v, want an input error on %s", s, err, tc.field)
		}
	}
	// The broadcast address of a /29.
	s := ok
	s.CIDR, s.Gateway = "192.168.7.8/29", "192.168.7.15"
	if _, _, err := s.Validate(); err == nil || !strings.Contains(err.Error(), "broadcast") {
		t.Errorf("broadcast of /29: %v", err)
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	web := network.Spec{VDC: "red", Name: "web", CIDR: "10.1.0.0/24", Gateway: "10.1.0.1"}
	n, err := network.Create(ctx(t), c, web)
	if err != nil {
		t.Fatal(err)
	}
	if n.VNet != tenancy.VNetID("red", "web") || n.CIDR.String() != "10.1.0.0/24" || n.Gateway.String() != "10.1.0.1" {
		t.Fatalf("created %+v", n)
	}
	// Applied: the running configuration has the VNet in the VDC's zone.
	var running []map[string]any
	if err := c.Get(ctx(t), "/cluster/sdn/vnets?running=1", &running); err != nil {
		t.Fatal(err)
	}
	if len(running) != 1 || running[0]["vnet"] != n.VNet || running[0]["zone"] != tenancy.SDNZoneID("red") || running[0]["alias"] != tenancy.VNetAlias("red", "web") {
		t.Fatalf("running vnets = %v", running)
	}
	// The VDC's zone is a VXLAN zone spanning both nodes; the VNet has a
	// VNI of its own.
	var zone map[string]any
	if err := c.Get(ctx(t), "/cluster/sdn/zones/"+tenancy.SDNZoneID("red"), &zone); err != nil || zone["type"] != "vxlan" {
		t.Fatalf("VDC zone = %v, %v", zone, err)
	}
	var status []map[string]any
	if err := c.Get(ctx(t), "/cluster/status", &status); err != nil {
		t.Fatal(err)
	}
	var nodeIPs []string
	for _, e := range status {
		if e["type"] == "node" {
			nodeIPs = append(nodeIPs, e["ip"].(string))
		}
	}
	if len(nodeIPs) != 2 || zone["peers"] != strings.Join(nodeIPs, ",") {
		t.Errorf("zone peers = %v, want the nodes' addresses %v", zone["peers"], nodeIPs)
	}
	if fmt.Sprint(zone["mtu"]) != fmt.Sprint(network.VXLANMTU) {
		t.Errorf("zone mtu = %v", zone["mtu"])
	}
	if fmt.Sprint(running[0]["tag"]) != fmt.Sprint(network.FirstVNI) {
		t.Errorf("first VNet's VNI = %v, want %d", running[0]["tag"], network.FirstVNI)
	}

	// Refusals change nothing.
	before := sdnState(t, c)
	refuse := func(s network.Spec, check func(error) bool) {
		t.Helper()
		if _, err := network.Create(ctx(t), c, s); !check(err) {
			t.Errorf("create %+v: %v", s, err)
		}
		if after := sdnState(t, c); after != before {
			t.Errorf("create %+v changed SDN:\nbefore %s\nafter  %s", s, before, after)
		}
	}
	isField := func(f string) func(error) bool {
		return func(err error) bool { var ie *network.InputError; return errors.As(err, &ie) && ie.Field == f }
	}
	refuse(web, func(err error) bool { return errors.Is(err, network.ErrExists) })
	refuse(network.Spec{VDC: "red", Name: "db", CIDR: "10.1.0.128/25", Gateway: "10.1.0.129"}, isField("cidr"))
	refuse(network.Spec{VDC: "red", Name: "db", CIDR: "10.0.0.0/8", Gateway: "10.0.0.1"}, isField("cidr"))
	refuse(network.Spec{VDC: "red", Name: "db", CIDR: "10.2.0.0/24", Gateway: "10.2.0.255"}, isField("gateway"))
	refuse(network.Spec{VDC: "red", Name: "DB", CIDR: "10.2.0.0/24", Gateway: "10.2.0.1"}, isField("name"))

	// Another VDC is another routing domain: the same range is fine, and
	// it sees only its own networks.
	blue, err := network.Create(ctx(t), c, network.Spec{VDC: "blue", Name: "web", CIDR: "10.1.0.0/24", Gateway: "10.1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if blue.VNet == n.VNet {
		t.Fatal("two VDCs share a VNet id")
	}
	if vnis := vnis(t, c); vnis[n.VNet] == vnis[blue.VNet] {
		t.Fatalf("two VDCs share a VXLAN VNI: %v", vnis)
	}
	for vdc, want := range map[string]string{"red": n.VNet, "blue": blue.VNet} {
		nets, err := network.List(ctx(t), c, vdc)
		if err != nil || len(nets) != 1 || nets[0].VNet != want || nets[0].Name != "web" {
			t.Errorf("List(%s) = %+v, %v", vdc, nets, err)
		}
	}
	if err := network.Delete(ctx(t), c, "blue", n.VNet); !errors.Is(err, network.ErrNotFound) {
		t.Errorf("blue deletes red's network: %v", err)
	}

	// In use: an address in the IPAM, then a guest's NIC.
	if err := c.Post(ctx(t), "/cluster/sdn/vnets/"+n.VNet+"/ips", map[string]any{"zone": tenancy.SDNZoneID("red"), "ip": "10.1.0.10", "mac": "BC:24:11:00:00:01"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := network.Delete(ctx(t), c, "red", n.VNet); !errors.Is(err, network.ErrInUse) || !strings.Contains(err.Error(), "10.1.0.10") {
		t.Errorf("delete with an address: %v", err)
	}
	if err := c.Delete(ctx(t), "/cluster/sdn/vnets/"+n.VNet+"/ips?zone="+tenancy.SDNZoneID("red")+"&ip=10.1.0.10", nil); err != nil {
		t.Fatal(err)
	}
	var upid proxmox.UPID
	if err := c.Post(ctx(t), "/nodes/pve2/qemu", map[string]any{"vmid": 120, "name": "nic", "net0": "virtio,bridge=" + n.VNet}, &upid); err != nil {
		t.Fatal(err)
	}
	if err := proxmox.NewTask(upid, c).Wait(ctx(t), 20*time.Millisecond, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := network.Delete(ctx(t), c, "red", n.VNet); !errors.Is(err, network.ErrInUse) || !strings.Contains(err.Error(), "120") {
		t.Errorf("delete with a NIC on it: %v", err)
	}
	if err := c.Delete(ctx(t), "/nodes/pve2/qemu/120", &upid); err != nil {
		t.Fatal(err)
	}
	if err := proxmox.NewTask(upid, c).Wait(ctx(t), 20*time.Millisecond, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	if err := network.Delete(ctx(t), c, "red", n.VNet); err != nil {
		t.Fatal(err)
	}
	if nets, err := network.List(ctx(t), c, "red"); err != nil || len(nets) != 0 {
		t.Errorf("after delete: %+v, %v", nets, err)
	}
	if err := c.Get(ctx(t), "/cluster/sdn/vnets?running=1", &running); err != nil || len(running) != 1 || running[0]["vnet"] != blue.VNet {
		t.Errorf("running vnets after delete = %v, %v", running, err)
	}
	if err := network.Delete(ctx(t), c, "red", n.VNet); !errors.Is(err, network.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
}

// TestConcurrentCreates races creates in one VDC: of one name exactly one
// wins (the others are ErrExists), of overlapping ranges exactly one wins
// (the others are refused on cidr), and no VNet of a loser stays behind.
func TestConcurrentCreates(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	race := func(specs []network.Spec) (wins int, errs []error) {
		results := make(chan error, len(specs))
		for _, s := range specs {
			go func() { _, err := network.Create(ctx(t), c, s); results <- err }()
		}
		for range specs {
			if err := <-results; err == nil {
				wins++
			} else {
				errs = append(errs, err)
			}
		}
		return wins, errs
	}
	var same, overlapping []network.Spec
	for i := range 6 {
		same = append(same, network.Spec{VDC: "red", Name: "web", CIDR: fmt.Sprintf("10.%d.0.0/24", i+1), Gateway: fmt.Sprintf("10.%d.0.1", i+1)})
		overlapping = append(overlapping, network.Spec{VDC: "red", Name: fmt.Sprintf("db%d", i), CIDR: "172.16.0.0/16", Gateway: fmt.Sprintf("172.16.0.%d", i+1)})
	}
	wins, errs := race(same)
	for _, err := range errs {
		if !errors.Is(err, network.ErrExists) {
			t.Errorf("same name: %v", err)
		}
	}
	if wins != 1 {
		t.Errorf("same name: %d wins", wins)
	}
	wins, errs = race(overlapping)
	for _, err := range errs {
		var ie *network.InputError
		if !errors.As(err, &ie) || ie.Field != "cidr" {
			t.Errorf("overlapping: %v", err)
		}
	}
	if wins != 1 {
		t.Errorf("overlapping: %d wins", wins)
	}
	nets, err := network.List(ctx(t), c, "red")
	if err != nil || len(nets) != 2 {
		t.Fatalf("networks = %+v, %v", nets, err)
	}
	var running []map[string]any
	if err := c.Get(ctx(t), "/cluster/sdn/vnets?running=1", &running); err != nil || len(running) != 2 {
		t.Errorf("running vnets = %v, %v", running, err)
	}
}

// A create that claims an address on a network while it is being deleted
// (after its use was checked) makes the delete CONFLICT (ErrInUse), and
// the network stays whole.
func TestDeleteRacingAClaim(t *testing.T) {
	t.Parallel()
	sim, c := pvetest.Start(t, pvesim.Config{Cluster: "lab", Nodes: 1}, token)
	n, err := network.Create(ctx(t), c, network.Spec{VDC: "red", Name: "web", CIDR: "10.1.0.0/24", Gateway: "10.1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	deleting := pvetest.ClientBefore(t, sim, token, http.MethodDelete, "/subnets/", func() {
		s := ipam.Subnet{Zone: tenancy.SDNZoneID("red"), VNet: n.VNet, Prefix: n.CIDR, Gateway: n.Gateway}
		if _, err := ipam.Claim(ctx(t), c, s, netip.Addr{}, ipam.NewMAC()); err != nil {
			t.Errorf("claim: %v", err)
		}
	})
	if err := network.Delete(ctx(t), deleting, "red", n.VNet); !errors.Is(err, network.ErrInUse) {
		t.Fatalf("delete racing a claim: %v, want ErrInUse", err)
	}
	if _, err := network.Get(ctx(t), c, "red", n.VNet); err != nil {
		t.Fatalf("the network after the refused delete: %v", err)
	}
}

// vnis maps each VNet of the cluster to its VXLAN VNI.
func vnis(t *testing.T, c *proxmox.Client) map[string]string {
	t.Helper()
	var vnets []map[string]any
	if err := c.Get(ctx(t), "/cluster/sdn/vnets", &vnets); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, v := range vnets {
		out[v["vnet"].(string)] = fmt.Sprint(v["tag"])
	}
	return out
}

// Concurrent creates in different VDCs guess the same lowest free VNI;
// Proxmox refuses a VNI taken, so each network still gets its own.
func TestConcurrentCreatesGetDistinctVNIs(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	const n = 6
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := network.Create(ctx(t), c, network.Spec{VDC: fmt.Sprintf("v%d", i), Name: "main", CIDR: "10.9.0.0/24", Gateway: "10.9.0.1"})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]string{}
	for vnet, vni := range vnis(t, c) {
		if other, dup := seen[vni]; dup {
			t.Errorf("VNets %s and %s share VNI %s", vnet, other, vni)
		}
		seen[vni] = vnet
	}
	if len(seen) != n {
		t.Errorf("%d VNIs for %d networks: %v", len(seen), n, seen)
	}
}
