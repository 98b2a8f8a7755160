//go:build linux

package simnet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/pvesim/simnet"
)

const token = "flexplane@pve!test=0123456789abcdef"

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// plane starts a simulated cluster of nodes with a data plane.
func plane(t *testing.T, nodes int) (*pvesim.Cluster, *proxmox.Client, *simnet.Plane) {
	t.Helper()
	nettest.NeedRoot(t)
	p, err := simnet.New(simnet.Config{Prefix: fmt.Sprintf("fpt%d", time.Now().UnixNano()%1e9)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	sim, c := pvetest.Start(t, pvesim.Config{Cluster: "lab", Nodes: nodes, DataPlane: p}, token)
	return sim, c, p
}

func do(t *testing.T, c *proxmox.Client, method, path string, body map[string]any) {
	t.Helper()
	var upid proxmox.UPID
	var err error
	switch method {
	case "POST":
		err = c.Post(ctx(t), path, body, &upid)
	case "DELETE":
		err = c.Delete(ctx(t), path, &upid)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if upid != "" {
		task := proxmox.NewTask(upid, c)
		if err := task.Wait(ctx(t), 20*time.Millisecond, 30*time.Second); err != nil || task.IsFailed {
			t.Fatalf("%s %s: task %v %s", method, path, err, task.ExitStatus)
		}
	}
}

// vm creates and starts a guest with one NIC on vnet.
func vm(t *testing.T, c *proxmox.Client, node string, vmid int, vnet, ip, gw string) {
	t.Helper()
	do(t, c, "POST", "/nodes/"+node+"/qemu", map[string]any{
		"vmid": vmid, "name": fmt.Sprintf("vm%d", vmid),
		"net0": fmt.Sprintf("virtio=BC:24:11:00:%02X:%02X,bridge=%s", vmid/256, vmid%256, vnet), "ipconfig0": "ip=" + ip + "/24,gw=" + gw,
	})
	do(t, c, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/status/start", node, vmid), nil)
}

// Two guests of one VDC network on different nodes talk over the VXLAN VNet; a guest
// of another VDC with the same range on the same nodes reaches neither. Stopping a
// guest removes its namespace.
func TestGuestsOnDifferentNodesShareTheirVNet(t *testing.T) {
	t.Parallel()
	_, c, p := plane(t, 2)
	red, err := network.Create(ctx(t), c, network.Spec{VDC: "red", Name: "main", CIDR: "10.1.0.0/24", Gateway: "10.1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	blue, err := network.Create(ctx(t), c, network.Spec{VDC: "blue", Name: "main", CIDR: "10.1.0.0/24", Gateway: "10.1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	vm(t, c, "pve1", 101, red.VNet, "10.1.0.11", "10.1.0.1")
	vm(t, c, "pve2", 102, red.VNet, "10.1.0.12", "10.1.0.1")
	vm(t, c, "pve2", 201, blue.VNet, "10.1.0.21", "10.1.0.1")
	vm(t, c, "pve1", 202, blue.VNet, "10.1.0.22", "10.1.0.1")
	for _, id := range []int{101, 102, 201, 202} {
		nettest.Serve(t, p.GuestNS(id), 7000, p.GuestNS(id))
	}
	wantAnswer(t, nettest.WaitReach(t, p.GuestNS(101), "10.1.0.12:7000", 20*time.Second), p.GuestNS(102))
	wantAnswer(t, nettest.WaitReach(t, p.GuestNS(102), "10.1.0.11:7000", 20*time.Second), p.GuestNS(101))
	// Blue's guests reach each other across the nodes too, and red's not at all.
	wantAnswer(t, nettest.WaitReach(t, p.GuestNS(201), "10.1.0.22:7000", 20*time.Second), p.GuestNS(202))
	for _, addr := range []string{"10.1.0.11:7000", "10.1.0.12:7000"} {
		if got := nettest.Reach(p.GuestNS(201), addr, 2*time.Second); got != "" {
			t.Errorf("blue's guest reached %s: %q", addr, got)
		}
	}

	do(t, c, "POST", "/nodes/pve2/qemu/102/status/stop", nil)
	nettest.WaitNS(t, p.GuestNS(102), false, 10*time.Second)
}

// A node going offline loses its namespace (its guests stop); online again, its
// bridges are back and a started guest is reachable again.
func TestNodeOfflineTakesItsNamespace(t *testing.T) {
	t.Parallel()
	sim, c, p := plane(t, 2)
	red, err := network.Create(ctx(t), c, network.Spec{VDC: "red", Name: "main", CIDR: "10.1.0.0/24", Gateway: "10.1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	vm(t, c, "pve1", 101, red.VNet, "10.1.0.11", "10.1.0.1")
	vm(t, c, "pve2", 102, red.VNet, "10.1.0.12", "10.1.0.1")
	nettest.Serve(t, p.GuestNS(102), 7000, p.GuestNS(102))
	wantAnswer(t, nettest.WaitReach(t, p.GuestNS(101), "10.1.0.12:7000", 20*time.Second), p.GuestNS(102))
	sim.SetNodeOnline("pve2", false)
	nettest.WaitNS(t, p.NodeNS("pve2"), false, 10*time.Second)
	nettest.WaitNS(t, p.GuestNS(102), false, 10*time.Second)
	sim.SetNodeOnline("pve2", true)
	do(t, c, "POST", "/nodes/pve2/qemu/102/status/start", nil)
	nettest.Serve(t, p.GuestNS(102), 7001, p.GuestNS(102))
	wantAnswer(t, nettest.WaitReach(t, p.GuestNS(101), "10.1.0.12:7001", 20*time.Second), p.GuestNS(102))
}

// wantAnswer fails the test unless the answer came from the service want.
func wantAnswer(t *testing.T, got, want string) {
	t.Helper()
	if !strings.HasPrefix(got, want+" from ") {
		t.Fatalf("answer %q, want one from %s", got, want)
	}
}
