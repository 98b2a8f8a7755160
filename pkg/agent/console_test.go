package agent

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/support/rfb"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// simPVE is the agent's Proxmox client of a simulated one-node cluster
// that lives as long as the test.
func simPVE(t *testing.T) *pve {
	t.Helper()
	_, p := startSim(t, pvesim.Config{})
	return p
}

// startSim starts a simulated cluster with cfg (closed with the test) and
// the agent's Proxmox client of it.
func startSim(t *testing.T, cfg pvesim.Config) (*pvesim.Cluster, *pve) {
	t.Helper()
	const token = "flexplane@pve!agent=0123456789abcdef"
	cfg.Tokens = append(cfg.Tokens, token)
	sim, err := pvesim.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	p, err := newPVE(sim.URL(), token, sim.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	return sim, p
}

// TestOpenConsole: the agent's Proxmox client opens a running VM's VNC
// console on (simulated) Proxmox and logs in with the ticket, so what it
// hands on is at ClientInit; a stopped VM and a missing one are told
// apart.
func TestOpenConsole(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := simPVE(t)
	post := func(path, form string) {
		t.Helper()
		resp, err := p.do(ctx, http.MethodPost, path, "", []byte(form), "application/x-www-form-urlencoded")
		if err != nil || resp.status != http.StatusOK {
			t.Fatalf("POST %s: %d %s %v", path, resp.status, resp.reason, err)
		}
	}
	post("/nodes/pve1/qemu", "vmid=100&name=web-1")
	if _, err := p.openConsole(ctx, "pve1", 101); !errors.Is(err, errNoGuest) {
		t.Fatalf("console of a missing VM: %v", err)
	}
	if _, err := p.openConsole(ctx, "pve1", 100); !errors.Is(err, errNotRunning) {
		t.Fatalf("console of a stopped VM: %v", err)
	}
	post("/nodes/pve1/qemu/100/status/start", "")
	poll.Until(t, 30*time.Second, "the VM to start", func() error {
		var st struct {
			Status string `json:"status"`
		}
		if err := p.get(ctx, "/nodes/pve1/qemu/100/status/current", &st); err != nil {
			return err
		}
		if st.Status != "running" {
			return fmt.Errorf("status %s", st.Status)
		}
		return nil
	})
	conn, err := p.openConsole(ctx, "pve1", 100)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	si, err := rfb.ClientInit(conn)
	if err != nil {
		t.Fatal(err)
	}
	if si.Name != "web-1" {
		t.Fatalf("desktop %q, want web-1", si.Name)
	}
}

// TestConsoleTickets: IssueConsoleTicket checks its VM on the local
// Proxmox and its ttl, and a ticket opens once, never after it expired;
// at most maxConsoleTickets wait at a time.
func TestConsoleTickets(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := simPVE(t)
	if resp, err := p.do(ctx, http.MethodPost, "/nodes/pve1/qemu", "", []byte("vmid=100&name=web-1"), "application/x-www-form-urlencoded"); err != nil || resp.status != http.StatusOK {
		t.Fatalf("create a guest: %v %+v", err, resp)
	}
	s := &service{a: &Agent{cfg: Config{NodeName: "pve1"}, pve: p}}
	for _, c := range []struct {
		req  *agentv1.IssueConsoleTicketRequest
		code codes.Code
	}{
		{&agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 101, TtlSeconds: 30}, codes.NotFound},
		{&agentv1.IssueConsoleTicketRequest{Node: "pve2", Vmid: 100, TtlSeconds: 30}, codes.NotFound},
		{&agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 99, TtlSeconds: 30}, codes.InvalidArgument},
		{&agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 100}, codes.InvalidArgument},
		{&agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 100, TtlSeconds: 301}, codes.InvalidArgument},
	} {
		if _, err := s.IssueConsoleTicket(ctx, c.req); status.Code(err) != c.code {
			t.Errorf("%v: %v, want %s", c.req, err, c.code)
		}
	}
	if n := len(s.a.consoles.m); n != 0 {
		t.Fatalf("refused requests left %d tickets", n)
	}
	resp, err := s.IssueConsoleTicket(ctx, &agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 100, TtlSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	if exp := time.Unix(resp.GetExpiresUnix(), 0); time.Until(exp) < 28*time.Second || time.Until(exp) > 31*time.Second {
		t.Errorf("expires %v, want in 30s", exp)
	}
	if ct, ok := s.a.consoles.take(resp.GetTicket(), nil); !ok || ct.vmid != 100 {
		t.Fatalf("take: %v %v", ct, ok)
	}
	if _, ok := s.a.consoles.take(resp.GetTicket(), nil); ok {
		t.Fatal("a ticket opened twice")
	}
	old, _ := s.a.consoles.add(consoleTicket{vmid: 100}, time.Now().Add(-time.Millisecond), 0)
	if _, ok := s.a.consoles.take(old, nil); ok {
		t.Fatal("an expired ticket opened")
	}
	for range maxConsoleTickets {
		if _, ok := s.a.consoles.add(consoleTicket{vmid: 100}, time.Now().Add(time.Minute), maxConsoleTickets); !ok {
			t.Fatal("refused below the limit")
		}
	}
	if _, err := s.IssueConsoleTicket(ctx, &agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 100, TtlSeconds: 30}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("beyond the limit: %v", err)
	}
}
