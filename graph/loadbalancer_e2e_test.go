//go:build linux

package graph_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/lbtest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbsync"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/support/nsnet"
)

// nsForwarder is a TCP listener on this namespace's loopback relaying each
// connection to an address of another namespace, once Target names it: the
// orchestrator reaches the gateway's admin API in the internet namespace
// through it.
type nsForwarder struct {
	URL string
	mu  sync.Mutex
	ns  string // protected by mu
	to  string // protected by mu
}

func newNSForwarder(t *testing.T) *nsForwarder {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f := &nsForwarder{URL: "https://" + ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.relay(c)
		}
	}()
	return f
}

// Target makes the forwarder relay to addr in namespace ns.
func (f *nsForwarder) Target(ns, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ns, f.to = ns, addr
}

func (f *nsForwarder) relay(c net.Conn) {
	defer c.Close()
	f.mu.Lock()
	ns, to := f.ns, f.to
	f.mu.Unlock()
	if to == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	up, err := nsnet.Dial(ctx, ns, "tcp4", to)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
	_, _ = io.Copy(c, up)
}

// startGatewayIn runs the test binary as a flexgateway in namespace ns
// (lbtest.StartGateway, started from a thread in ns) with pki's server
// certificate and returns its admin address there; t.Cleanup stops it.
func startGatewayIn(t *testing.T, ns, token string, pki *lbtest.PKI) string {
	t.Helper()
	return lbtest.StartGateway(t, lbtest.GatewayOptions{Token: token, PKI: pki, Start: func(cmd *exec.Cmd) error {
		if err := nsnet.Do(ns, cmd.Start); err != nil {
			return fmt.Errorf("in %s: %w", ns, err)
		}
		return nil
	}}).AdminAddr
}

// serveHTTP answers "NAME PATH" to every request on port 80 of ns.
func serveHTTP(t *testing.T, ns, name string) {
	t.Helper()
	nettest.WaitNS(t, ns, true, 20*time.Second)
	ln, err := nsnet.Listen(context.Background(), ns, "tcp4", "0.0.0.0:80")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "%s %s", name, r.URL.Path) })}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// getFrom GETs url from namespace ns, from the source address src (""
// is the kernel's choice), and returns the body of a 200 answer, ""
// otherwise.
func getFrom(ns, src, url string) string {
	d := &net.Dialer{}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = nsnet.Do(ns, func() error { c, err = d.DialContext(ctx, "tcp4", addr); return err })
			return c, err
		}}}
	resp, err := client.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

// TestLoadBalancerTraffic sends real packets through a load balancer made
// through GraphQL: a flexgateway process in the zone's internet namespace
// (the replica the orchestrator's lbsync configures over mutual TLS with
// the zone's token, the edge gateways'
// frontend and the relays' only source), two VMs of blue serving TCP and
// HTTP in their namespaces. From the internet, the balancer's TCP listener
// reaches both VMs and its HTTP listener routes by path to two pools; red's
// VM is no backend of blue's (NOT_FOUND); a relay port refuses a source
// that is no replica; deleting the balancer closes its address.
func TestLoadBalancerTraffic(t *testing.T) {
	t.Parallel()
	nettest.NeedRoot(t)
	const token = "lb-e2e-token"
	const replicaAddr, stranger = "203.0.113.254", "203.0.113.253"
	fwd := newNSForwarder(t)
	pki := lbtest.NewPKI(t)
	lbs := orchestrator.LoadBalancersConfig{Tokens: map[string]string{"alpha": token}, TLS: pki.Client, Zones: map[string]lbsync.Zone{"alpha": {Replicas: []string{fwd.URL},
		Zone: loadbalancer.Zone{Frontend: netip.MustParseAddr(replicaAddr), Sources: []netip.Prefix{netip.MustParsePrefix(replicaAddr + "/32")}}}}}
	s := setupLBStack(t, lbs, meshtest.WithDataPlane(netip.MustParsePrefix(replicaAddr+"/24"), netip.MustParsePrefix(stranger+"/24")))
	h := s.h
	p := h.Clusters[0].Plane
	inet := p.InternetNS()
	fwd.Target(inet, startGatewayIn(t, inet, token, pki))

	blue := s.vms(t, "bob", "blue", 2, "a", "b")
	red := s.vms(t, "alice", "red", 1, "r")
	for i, name := range []string{"a", "b"} {
		poll.True(t, 60*time.Second, name+" running with its address", func() bool {
			var vm gqlVM
			h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { id status ipAddresses } }`, map[string]any{"id": blue[i]}).OK(t).Into(t, "vm", &vm)
			return vm.Status == "RUNNING" && len(vm.IPAddresses) > 0
		})
		ns := p.GuestNS(vmidOf(t, h.Clusters[0].Proxmox(t), name))
		nettest.Serve(t, ns, 7000, name)
		serveHTTP(t, ns, name)
	}

	be := func(vm string, port int) map[string]any { return map[string]any{"vmId": vm, "port": port} }
	input := map[string]any{"name": "shop", "zone": "alpha",
		"pools": []any{
			map[string]any{"name": "raw", "backends": []any{be(blue[0], 7000), be(blue[1], 7000)}},
			map[string]any{"name": "pa", "backends": []any{be(blue[0], 80)}},
			map[string]any{"name": "pb", "backends": []any{be(blue[1], 80)}}},
		"listeners": []any{
			map[string]any{"name": "tcp", "protocol": "TCP", "port": 5000, "pool": "raw"},
			map[string]any{"name": "web", "protocol": "HTTP", "port": 80, "pool": "pa", "routes": []any{map[string]any{"pathPrefix": "/b/", "pool": "pb"}}}}}

	// Red's VM is no backend of blue's balancer.
	foreign := map[string]any{"name": "theirs", "zone": "alpha", "pools": []any{map[string]any{"name": "raw", "backends": []any{be(red[0], 7000)}}},
		"listeners": []any{map[string]any{"name": "tcp", "protocol": "TCP", "port": 5000, "pool": "raw"}}}
	if r := h.GraphQL(t, "bob", "blue", createLB, map[string]any{"in": foreign}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("blue's balancer on red's VM: %s", r.Raw)
	}

	start := time.Now()
	var lb gqlLB
	h.GraphQL(t, "bob", "blue", createLB, map[string]any{"in": input}).OK(t).Into(t, "createLoadBalancer", &lb)
	if lb.PublicAddress == "" {
		t.Fatalf("created %+v", lb)
	}
	pub := lb.PublicAddress

	// TCP: connections reach both VMs.
	seen := map[string]int{}
	poll.True(t, 60*time.Second, "the TCP listener reaching both VMs", func() bool {
		if got := nettest.Reach(inet, pub+":5000", 2*time.Second); got != "" {
			seen[strings.Fields(got)[0]]++
		}
		return seen["a"] > 0 && seen["b"] > 0
	})
	t.Logf("the TCP listener reached both VMs %s after the create (%v)", time.Since(start).Round(time.Millisecond), seen)

	// HTTP: routed by path.
	for path, want := range map[string]string{"/b/x": "b /b/x", "/a/y": "a /a/y", "/": "a /"} {
		var got string
		poll.True(t, 45*time.Second, "GET "+path, func() bool { got = getFrom(inet, "", "http://"+pub+path); return got == want })
	}

	// A relay port (the first is blue's first VM's port 80) answers the
	// replica only; the listeners answer anyone.
	var got string
	poll.True(t, 15*time.Second, "relay 65535 from the replica", func() bool { got = getFrom(inet, "", "http://"+pub+":65535/r"); return got != "" })
	if got != "a /r" {
		t.Errorf("relay 65535 from the replica answered %q", got)
	}
	if got := getFrom(inet, stranger, "http://"+pub+":65535/r"); got != "" {
		t.Errorf("relay 65535 answered %s, no replica: %q", stranger, got)
	}
	if got := getFrom(inet, stranger, "http://"+pub+"/b/"); got != "b /b/" {
		t.Errorf("the HTTP listener answered %s with %q", stranger, got)
	}

	// The delete closes the address.
	h.GraphQL(t, "bob", "blue", `mutation($id: ID!) { deleteLoadBalancer(id: $id) { id } }`, map[string]any{"id": lb.ID}).OK(t)
	poll.True(t, 60*time.Second, "the balancer's address closed", func() bool {
		return nettest.Reach(inet, pub+":5000", 2*time.Second) == "" && getFrom(inet, "", "http://"+pub+"/") == ""
	})
}
