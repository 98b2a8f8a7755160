//go:build linux

package simnet_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/luthermonson/go-proxmox"
	"github.com/vishvananda/netlink"

	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/support/nsnet"
)

// firewalledGuest creates and starts guest vmid on node with net0 on vnet (firewall=1
// unless fw is false) and address ip/24.
func firewalledGuest(t *testing.T, c *proxmox.Client, node string, vmid int, vnet, ip string, fw bool) {
	t.Helper()
	net0 := fmt.Sprintf("virtio=BC:24:11:00:%02X:%02X,bridge=%s", vmid/256%256, vmid%256, vnet)
	if fw {
		net0 += ",firewall=1"
	}
	for _, step := range []struct {
		path string
		body map[string]any
	}{
		{"/nodes/" + node + "/qemu", map[string]any{"vmid": vmid, "net0": net0, "ipconfig0": "ip=" + ip + "/24,gw=10.1.0.1"}},
		{fmt.Sprintf("/nodes/%s/qemu/%d/status/start", node, vmid), nil},
	} {
		var upid proxmox.UPID
		if err := c.Post(ctx(t), step.path, step.body, &upid); err != nil {
			t.Fatalf("%s: %v", step.path, err)
		}
		task := proxmox.NewTask(upid, c)
		if err := task.Wait(ctx(t), 20*time.Millisecond, 30*time.Second); err != nil || task.IsFailed {
			t.Fatalf("%s: %v %s", step.path, err, task.ExitStatus)
		}
	}
}

// api sends a firewall request and fails the test on an error.
func api(t *testing.T, c *proxmox.Client, method, path string, body map[string]any) {
	t.Helper()
	var err error
	switch method {
	case "POST":
		err = c.Post(ctx(t), path, body, nil)
	case "PUT":
		err = c.Put(ctx(t), path, body, nil)
	case "DELETE":
		err = c.Delete(ctx(t), path, nil)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
}

// waitBlocked polls until ns no longer reaches addr (each probe waiting 1 s for an
// answer), failing the test after timeout.
func waitBlocked(t *testing.T, ns, addr string, timeout time.Duration) {
	t.Helper()
	poll.True(t, timeout, fmt.Sprintf("%s blocked from %s", ns, addr), func() bool { return nettest.Reach(ns, addr, time.Second) == "" })
}

// reachFrom dials addr from ns with the source address src and returns the answer
// ("" without one within timeout).
func reachFrom(ns, src, addr string, timeout time.Duration) string {
	var got string
	_ = nsnet.Do(ns, func() error {
		d := net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		conn, err := d.Dial("tcp4", addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(timeout))
		b, _ := io.ReadAll(conn)
		got = string(b)
		return nil
	})
	return got
}

// marker adds (add) or looks for a chain "test-marker" in the node's firewall table: a
// table made again has none.
func marker(t *testing.T, ns string, add bool) bool {
	t.Helper()
	fd, err := nsnet.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(fd)))
	if err != nil {
		t.Fatal(err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyBridge, Name: "pvesim-fw"}
	if add {
		c.AddChain(&nftables.Chain{Table: table, Name: "test-marker"})
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		return true
	}
	_, err = c.ListChain(table, "test-marker")
	return err == nil
}

// eth0 is a netlink handle into the guest namespace ns (closed by t.Cleanup) and its
// eth0.
func eth0(t *testing.T, ns string) (*netlink.Handle, netlink.Link) {
	t.Helper()
	h, err := nsnet.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	l, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	return h, l
}

// neighbour is the MAC ns has resolved for ip on eth0 ("" when none).
func neighbour(t *testing.T, ns, ip string) string {
	t.Helper()
	h, l := eth0(t, ns)
	neighs, err := h.NeighList(l.Attrs().Index, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range neighs {
		if n.IP.Equal(net.ParseIP(ip)) && n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE) != 0 {
			return n.HardwareAddr.String()
		}
	}
	return ""
}

// A guest in security group db answers 5432 to the members of ipset app-members only:
// a non-member's connection gets no answer, though ARP still resolves; ipset and rule
// changes take effect on the running guests; an outbound DROP policy with one rule lets
// only that port out; ipfilter drops a spoofed source; disabling the guest's firewall
// opens it again. The non-member is on the other node, behind the VNet's VXLAN. (One
// VNet: the simulator's data plane has no router between VNets.)
func TestFirewallFiltersGuestTraffic(t *testing.T) {
	t.Parallel()
	_, c, p := plane(t, 2)
	red, err := network.Create(ctx(t), c, network.Spec{VDC: "red", Name: "main", CIDR: "10.1.0.0/24", Gateway: "10.1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	firewalledGuest(t, c, "pve1", 101, red.VNet, "10.1.0.11", true)  // db
	firewalledGuest(t, c, "pve1", 102, red.VNet, "10.1.0.12", true)  // app, a member
	firewalledGuest(t, c, "pve2", 103, red.VNet, "10.1.0.13", false) // other, no member, across the VXLAN
	db, app, other := p.GuestNS(101), p.GuestNS(102), p.GuestNS(103)
	nettest.Serve(t, db, 5432, "db")
	nettest.Serve(t, db, 7000, "db")
	nettest.Serve(t, other, 443, "other")
	nettest.Serve(t, other, 7000, "other")
	wantAnswer(t, nettest.WaitReach(t, other, "10.1.0.11:5432", 20*time.Second), "db")

	api(t, c, "POST", "/cluster/firewall/ipset", map[string]any{"name": "app-members"})
	api(t, c, "POST", "/cluster/firewall/ipset/app-members", map[string]any{"cidr": "10.1.0.12"})
	api(t, c, "POST", "/cluster/firewall/groups", map[string]any{"group": "db"})
	api(t, c, "POST", "/cluster/firewall/groups/db", map[string]any{"type": "in", "action": "ACCEPT", "proto": "tcp", "dport": "5432", "source": "+dc/app-members", "enable": 1})
	api(t, c, "POST", "/nodes/pve1/qemu/101/firewall/rules", map[string]any{"type": "group", "action": "db", "iface": "net0", "enable": 1})
	api(t, c, "PUT", "/nodes/pve1/qemu/101/firewall/options", map[string]any{"enable": 1, "ipfilter": 1})
	api(t, c, "PUT", "/nodes/pve1/qemu/102/firewall/options", map[string]any{"enable": 1})
	// Nothing is filtered until the cluster's firewall is on.
	wantAnswer(t, nettest.WaitReach(t, other, "10.1.0.11:7000", 20*time.Second), "db")
	api(t, c, "PUT", "/cluster/firewall/options", map[string]any{"enable": 1})

	waitBlocked(t, other, "10.1.0.11:5432", 20*time.Second)
	wantAnswer(t, nettest.WaitReach(t, app, "10.1.0.11:5432", 20*time.Second), "db")
	for _, probe := range []struct{ ns, addr string }{{app, "10.1.0.11:7000"}, {other, "10.1.0.11:7000"}} {
		if got := nettest.Reach(probe.ns, probe.addr, 2*time.Second); got != "" {
			t.Errorf("%s reached %s through policy_in DROP: %q", probe.ns, probe.addr, got)
		}
	}
	// The non-member got no answer, yet resolved db's address: ARP passes.
	dbMAC := "bc:24:11:00:00:65"
	poll.True(t, 10*time.Second, "other to resolve db's MAC", func() bool {
		_ = nettest.Reach(other, "10.1.0.11:5432", 200*time.Millisecond)
		return neighbour(t, other, "10.1.0.11") == dbMAC
	})

	// A member added to the set is let in, without restarting anything, and out again
	// when it is removed; the set's elements change, the chains stay as they were.
	marker(t, p.NodeNS("pve1"), true)
	api(t, c, "POST", "/cluster/firewall/ipset/app-members", map[string]any{"cidr": "10.1.0.13"})
	wantAnswer(t, nettest.WaitReach(t, other, "10.1.0.11:5432", 20*time.Second), "db")
	if !marker(t, p.NodeNS("pve1"), false) {
		t.Error("an ipset entry made the firewall's table again")
	}
	api(t, c, "DELETE", "/cluster/firewall/ipset/app-members/10.1.0.13", nil)
	waitBlocked(t, other, "10.1.0.11:5432", 20*time.Second)
	// A rule changed in the group applies at once: 7000 instead of 5432.
	api(t, c, "PUT", "/cluster/firewall/groups/db/0", map[string]any{"dport": "7000"})
	wantAnswer(t, nettest.WaitReach(t, app, "10.1.0.11:7000", 20*time.Second), "db")
	waitBlocked(t, app, "10.1.0.11:5432", 20*time.Second)

	// Outbound: policy DROP with one rule for 443 lets only 443 out.
	wantAnswer(t, nettest.WaitReach(t, app, "10.1.0.13:7000", 20*time.Second), "other")
	api(t, c, "POST", "/nodes/pve1/qemu/102/firewall/rules", map[string]any{"type": "out", "action": "ACCEPT", "proto": "tcp", "dport": "443", "enable": 1})
	api(t, c, "PUT", "/nodes/pve1/qemu/102/firewall/options", map[string]any{"policy_out": "DROP"})
	waitBlocked(t, app, "10.1.0.13:7000", 20*time.Second)
	wantAnswer(t, nettest.WaitReach(t, app, "10.1.0.13:443", 20*time.Second), "other")

	// ipfilter: db may send from its own address only.
	h, dbEth0 := eth0(t, db)
	spoofed := netip.MustParsePrefix("10.1.0.99/24")
	if err := h.AddrAdd(dbEth0, &netlink.Addr{IPNet: &net.IPNet{IP: spoofed.Addr().AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 20*time.Second, "db to reach other from its own address", func() bool {
		return reachFrom(db, "10.1.0.11", "10.1.0.13:7000", time.Second) != ""
	})
	if got := reachFrom(db, "10.1.0.99", "10.1.0.13:7000", 2*time.Second); got != "" {
		t.Fatalf("a spoofed source got through ipfilter: %q", got)
	}
	// Disabling db's firewall opens it again.
	api(t, c, "PUT", "/nodes/pve1/qemu/101/firewall/options", map[string]any{"enable": 0})
	wantAnswer(t, nettest.WaitReach(t, other, "10.1.0.11:5432", 20*time.Second), "db")
	poll.True(t, 20*time.Second, "db to reach other from a spoofed address without ipfilter", func() bool {
		return reachFrom(db, "10.1.0.99", "10.1.0.13:7000", time.Second) != ""
	})
}
