package pvesim_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

const claimers = 16

// race runs f(i) in n goroutines released together and returns the results.
func race[T any](n int, f func(i int) T) []T {
	out := make([]T, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = f(i)
		}()
	}
	close(start)
	wg.Wait()
	return out
}

func TestConcurrentVMIDClaims(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 2})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	makeTemplate(t, cl, 9000)
	node, err := cl.Node(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}

	// Creates of one VMID from many callers: exactly one gets a task.
	type created struct {
		task *proxmox.Task
		err  error
	}
	creates := race(claimers, func(i int) created {
		task, err := node.NewVirtualMachine(ctx, 200, proxmox.VirtualMachineOption{Name: "name", Value: "claim" + strconv.Itoa(i)})
		return created{task, err}
	})
	var winner *proxmox.Task
	for _, r := range creates {
		switch {
		case r.err == nil && winner == nil:
			winner = r.task
		case r.err == nil:
			t.Fatalf("a second create of VM 200 won: %s", r.task.UPID)
		case !strings.Contains(r.err.Error(), "500 VM 200 already exists on node 'pve1'"):
			t.Errorf("losing create: %v", r.err)
		}
	}
	if winner == nil {
		t.Fatal("no create of VM 200 won")
	}
	waitOK(t, ctx, winner, nil)

	// Clones to one new VMID: exactly one wins, the others fail like Proxmox.
	tmpl, err := node.VirtualMachine(ctx, 9000)
	if err != nil {
		t.Fatal(err)
	}
	results := race(claimers, func(i int) error {
		_, _, err := tmpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 300, Name: "c" + strconv.Itoa(i)})
		return err
	})
	wins := 0
	for _, err := range results {
		if err == nil {
			wins++
		} else if !strings.Contains(err.Error(), "unable to create VM 300: config file already exists") {
			t.Errorf("losing clone: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d clones to VM 300 won, want exactly 1", wins)
	}
	r := call(t, c, testToken, http.MethodGet, "/cluster/nextid", url.Values{"vmid": {"300"}})
	if r.status != http.StatusBadRequest || r.errors["vmid"] != "VM 300 already exists" {
		t.Fatalf("nextid check of a claimed VMID: %d %s", r.status, r.body)
	}
	ok, err := cl.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if free, err := ok.CheckID(ctx, 300); err != nil || free {
		t.Fatalf("CheckID(300) = %v, %v; want taken", free, err)
	}
}

// sdnVnet creates zone z (simple), vnet v and subnet 10.50.0.0/24 with a gateway and a
// DHCP range, then applies the configuration.
func sdnVnet(t *testing.T, c *pvesim.Cluster, zone, vnet string) {
	t.Helper()
	for _, step := range []struct {
		method, path string
		form         url.Values
	}{
		{http.MethodPost, "/cluster/sdn/zones", url.Values{"zone": {zone}, "type": {"simple"}, "ipam": {"pve"}, "dhcp": {"dnsmasq"}}},
		{http.MethodPost, "/cluster/sdn/vnets", url.Values{"vnet": {vnet}, "zone": {zone}}},
		{http.MethodPost, "/cluster/sdn/vnets/" + vnet + "/subnets", url.Values{
			"subnet": {"10.50.0.0/24"}, "type": {"subnet"}, "gateway": {"10.50.0.1"},
			"dhcp-range": {"start-address=10.50.0.100,end-address=10.50.0.200"},
		}},
		{http.MethodPut, "/cluster/sdn", nil},
	} {
		if r := call(t, c, testToken, step.method, step.path, step.form); r.status != http.StatusOK {
			t.Fatalf("%s %s: %s %s", step.method, step.path, r.reason, r.body)
		}
	}
}

func TestConcurrentIPClaims(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 2})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	sdnVnet(t, c, "tenants", "vdc1")
	cluster, err := cl.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vnet, err := cluster.SDNVNet(ctx, "vdc1")
	if err != nil {
		t.Fatal(err)
	}
	errs := race(claimers, func(i int) error {
		return vnet.CreateIP(ctx, &proxmox.SDNVNetIPOptions{Zone: "tenants", IP: "10.50.0.10", MAC: "bc:24:11:00:00:" + strconv.FormatInt(int64(16+i), 16)})
	})
	wins := 0
	for _, err := range errs {
		if err == nil {
			wins++
		} else if !strings.Contains(err.Error(), "500 IP '10.50.0.10' already exist") {
			t.Errorf("losing claim: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d claims of 10.50.0.10 won, want exactly 1", wins)
	}
	// The gateway is mapped from the start; an address outside every subnet is refused.
	if err := vnet.CreateIP(ctx, &proxmox.SDNVNetIPOptions{Zone: "tenants", IP: "10.50.0.1"}); err == nil || !strings.Contains(err.Error(), "already exist") {
		t.Fatalf("claiming the gateway: %v", err)
	}
	if err := vnet.CreateIP(ctx, &proxmox.SDNVNetIPOptions{Zone: "tenants", IP: "10.99.0.5"}); err == nil || !strings.Contains(err.Error(), "can't find any subnet for ip 10.99.0.5") {
		t.Fatalf("claiming outside the subnet: %v", err)
	}
	r := call(t, c, testToken, http.MethodGet, "/cluster/sdn/ipams/pve/status", nil)
	list, _ := r.data.([]any)
	if r.status != http.StatusOK || len(list) != 2 {
		t.Fatalf("IPAM status: %s", r.body)
	}
	// Released addresses can be claimed again.
	if err := vnet.DeleteIP(ctx, &proxmox.SDNVNetIPOptions{Zone: "tenants", IP: "10.50.0.10"}); err != nil {
		t.Fatal(err)
	}
	if err := vnet.CreateIP(ctx, &proxmox.SDNVNetIPOptions{Zone: "tenants", IP: "10.50.0.10"}); err != nil {
		t.Fatalf("claim after release: %v", err)
	}
}
