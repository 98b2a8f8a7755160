//go:build linux

package simnet_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/pvesim/simnet"
	"github.com/flexplane/flexplane/pkg/support/nsnet"
)

const token = "flexplane@pve!test=0123456789abcdef"

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// needRoot fails (never skips) a test that needs root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test builds network namespaces: run it as root")
	}
}

// plane starts a simulated cluster of nodes with a data plane.
func plane(t *testing.T, nodes int) (*pvesim.Cluster, *proxmox.Client, *simnet.Plane) {
	t.Helper()
	needRoot(t)
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

// serve accepts TCP connections on port in ns and answers each with its own name.
func serve(t *testing.T, ns string, port int) {
	t.Helper()
	waitNS(t, ns, true)
	ln, err := nsnet.Listen(ctx(t), ns, "tcp4", fmt.Sprintf("0.0.0.0:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, ns)
			c.Close()
		}
	}()
}

// waitNS polls until the namespace exists (or is gone).
func waitNS(t *testing.T, ns string, exists bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for nsnet.Exists(ns) != exists {
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s exists=%v, want %v after 10s", ns, !exists, exists)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reach dials addr from ns and returns what the server said ("" when it did not answer
// within timeout).
func reach(t *testing.T, ns, addr string, timeout time.Duration) string {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := nsnet.Dial(c, ns, "tcp4", addr)
	if err != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	b, _ := io.ReadAll(conn)
	return string(b)
}

// waitReach polls until ns reaches addr, or fails the test.
func waitReach(t *testing.T, ns, addr, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if got := reach(t, ns, addr, time.Second); got == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s does not reach %s (%s) within 20s", ns, addr, want)
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
		serve(t, p.GuestNS(id), 7000)
	}
	waitReach(t, p.GuestNS(101), "10.1.0.12:7000", p.GuestNS(102))
	waitReach(t, p.GuestNS(102), "10.1.0.11:7000", p.GuestNS(101))
	// Blue's guests reach each other across the nodes too, and red's not at all.
	waitReach(t, p.GuestNS(201), "10.1.0.22:7000", p.GuestNS(202))
	for _, addr := range []string{"10.1.0.11:7000", "10.1.0.12:7000"} {
		if got := reach(t, p.GuestNS(201), addr, 2*time.Second); got != "" {
			t.Errorf("blue's guest reached %s: %q", addr, got)
		}
	}

	do(t, c, "POST", "/nodes/pve2/qemu/102/status/stop", nil)
	waitNS(t, p.GuestNS(102), false)
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
	serve(t, p.GuestNS(102), 7000)
	waitReach(t, p.GuestNS(101), "10.1.0.12:7000", p.GuestNS(102))
	sim.SetNodeOnline("pve2", false)
	waitNS(t, p.NodeNS("pve2"), false)
	waitNS(t, p.GuestNS(102), false)
	sim.SetNodeOnline("pve2", true)
	do(t, c, "POST", "/nodes/pve2/qemu/102/status/start", nil)
	serve(t, p.GuestNS(102), 7001)
	waitReach(t, p.GuestNS(101), "10.1.0.12:7001", p.GuestNS(102))
}
