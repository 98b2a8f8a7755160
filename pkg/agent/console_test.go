package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
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
// Proxmox (on this node, of the VDC asked for), its ttl, and a ticket
// opens once, never after it expired; at most maxConsoleTickets wait at a
// time.
func TestConsoleTickets(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := simPVE(t)
	if resp, err := p.do(ctx, http.MethodPost, "/nodes/pve1/qemu", "", []byte("vmid=100&name=web-1"), "application/x-www-form-urlencoded"); err != nil || resp.status != http.StatusOK {
		t.Fatalf("create a guest: %v %+v", err, resp)
	}
	if resp, err := p.do(ctx, http.MethodPost, "/nodes/pve1/qemu", "", []byte("vmid=102&name=web-2&tags=flexplane%3Bfp-vdc-blue"), "application/x-www-form-urlencoded"); err != nil || resp.status != http.StatusOK {
		t.Fatalf("create a guest: %v %+v", err, resp)
	}
	s := &service{a: &Agent{cfg: Config{NodeName: "pve1"}, pve: p}}
	for _, c := range []struct {
		req  *agentv1.IssueConsoleTicketRequest
		code codes.Code
	}{
		{&agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 101, Vdc: "blue", TtlSeconds: 30}, codes.NotFound},
		{&agentv1.IssueConsoleTicketRequest{Node: "pve2", Vmid: 102, Vdc: "blue", TtlSeconds: 30}, codes.NotFound},
		{&agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 99, Vdc: "blue", TtlSeconds: 30}, codes.InvalidArgument},
		{&agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 102, Vdc: "blue"}, codes.InvalidArgument},
		{&agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 102, Vdc: "blue", TtlSeconds: 301}, codes.InvalidArgument},
		// No VDC, another VDC, a guest of none.
		{&agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 102, TtlSeconds: 30}, codes.InvalidArgument},
		{&agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 102, Vdc: "red", TtlSeconds: 30}, codes.NotFound},
		{&agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 100, Vdc: "blue", TtlSeconds: 30}, codes.NotFound},
	} {
		if _, err := s.IssueConsoleTicket(ctx, c.req); status.Code(err) != c.code {
			t.Errorf("%v: %v, want %s", c.req, err, c.code)
		}
	}
	if n := len(s.a.consoles.m); n != 0 {
		t.Fatalf("refused requests left %d tickets", n)
	}
	resp, err := s.IssueConsoleTicket(ctx, &agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 102, Vdc: "blue", TtlSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	if exp := time.Unix(resp.GetExpiresUnix(), 0); time.Until(exp) < 28*time.Second || time.Until(exp) > 31*time.Second {
		t.Errorf("expires %v, want in 30s", exp)
	}
	if ct, ok := s.a.consoles.take(resp.GetTicket(), nil); !ok || ct.vmid != 102 || ct.vdc != "blue" || ct.uuid == "" {
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
	if _, err := s.IssueConsoleTicket(ctx, &agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 102, Vdc: "blue", TtlSeconds: 30}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("beyond the limit: %v", err)
	}
}

// consoleServer serves the agent's service of Proxmox p (node pve1) over
// loopback gRPC for the test and returns its client.
func consoleServer(t *testing.T, p *pve) (*service, agentv1.AgentServiceClient) {
	t.Helper()
	s := &service{a: &Agent{cfg: Config{NodeName: "pve1"}, pve: p, log: slog.New(slog.DiscardHandler)}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	agentv1.RegisterAgentServiceServer(srv, s)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, agentv1.NewAgentServiceClient(conn)
}

// openStream opens a Console stream with first as its first message and
// returns the first answer (or the refusal).
func openStream(t *testing.T, c agentv1.AgentServiceClient, first *agentv1.ConsoleRequest) (*agentv1.ConsoleResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	st, err := c.Console(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(first); err != nil {
		return nil, err
	}
	return st.Recv()
}

// runningGuest creates guest vmid of VDC vdc on pve1 and starts it.
func runningGuest(t *testing.T, p *pve, vmid int, vdc string) {
	t.Helper()
	ctx := t.Context()
	path := "/nodes/pve1/qemu/" + strconv.Itoa(vmid)
	form := url.Values{"vmid": {strconv.Itoa(vmid)}, "name": {"vm-of-" + vdc}, "tags": {"flexplane;fp-vdc-" + vdc}}.Encode()
	poll.Until(t, 30*time.Second, "guest "+path+" to be created", func() error {
		resp, err := p.do(ctx, http.MethodPost, "/nodes/pve1/qemu", "", []byte(form), "application/x-www-form-urlencoded")
		if err != nil || resp.status != http.StatusOK {
			return fmt.Errorf("create: %v %d %s", err, resp.status, resp.reason)
		}
		return nil
	})
	poll.Until(t, 30*time.Second, "guest "+path+" to run", func() error {
		var st struct {
			Status string `json:"status"`
		}
		if err := p.get(ctx, path+"/status/current", &st); err != nil {
			return err
		}
		if st.Status != "running" {
			_, err := p.do(ctx, http.MethodPost, path+"/status/start", "", nil, "")
			return fmt.Errorf("status %s (start: %v)", st.Status, err)
		}
		return nil
	})
}

// deleteGuest stops and deletes guest vmid of pve1.
func deleteGuest(t *testing.T, p *pve, vmid int) {
	t.Helper()
	ctx := t.Context()
	path := "/nodes/pve1/qemu/" + strconv.Itoa(vmid)
	poll.Until(t, 30*time.Second, "guest "+path+" to be gone", func() error {
		var st struct {
			Status string `json:"status"`
		}
		if err := p.get(ctx, path+"/status/current", &st); err != nil {
			return nil // gone
		}
		if st.Status == "running" {
			_, err := p.do(ctx, http.MethodPost, path+"/status/stop", "", nil, "")
			return fmt.Errorf("still running (stop: %v)", err)
		}
		resp, err := p.do(ctx, http.MethodDelete, path, "", nil, "")
		return fmt.Errorf("still there (delete: %v %d %s)", err, resp.status, resp.reason)
	})
}

// TestConsoleTicketOfAReusedVMID: a ticket issued for one VDC's guest does
// not open the console of another VDC's guest created with the same VMID
// after the first was deleted; a new ticket for the new guest does.
func TestConsoleTicketOfAReusedVMID(t *testing.T) {
	t.Parallel()
	p := simPVE(t)
	_, c := consoleServer(t, p)
	runningGuest(t, p, 100, "blue")
	issue := func(vdc string) string {
		t.Helper()
		resp, err := c.IssueConsoleTicket(t.Context(), &agentv1.IssueConsoleTicketRequest{Node: "pve1", Vmid: 100, Vdc: vdc, TtlSeconds: 60})
		if err != nil {
			t.Fatalf("ticket for %s's guest: %v", vdc, err)
		}
		return resp.GetTicket()
	}
	old := issue("blue")
	deleteGuest(t, p, 100)
	runningGuest(t, p, 100, "red")
	if resp, err := openStream(t, c, &agentv1.ConsoleRequest{Ticket: old}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("blue's old ticket on red's guest of the same VMID: %v %v, want PERMISSION_DENIED", resp, err)
	}
	resp, err := openStream(t, c, &agentv1.ConsoleRequest{Ticket: issue("red")})
	if err != nil || !resp.GetAccepted() {
		t.Fatalf("a ticket for red's guest: %v %v", resp, err)
	}
}

// TestConsoleNeedsATicket: a Console stream that names a running VM but
// carries no ticket (or a made-up one) is refused: only a ticket opens a
// console.
func TestConsoleNeedsATicket(t *testing.T) {
	t.Parallel()
	p := simPVE(t)
	_, c := consoleServer(t, p)
	runningGuest(t, p, 100, "blue")
	for name, first := range map[string]*agentv1.ConsoleRequest{
		"node and VMID": {Node: "pve1", Vmid: 100},
		"nothing":       {},
		"made up":       {Node: "pve1", Vmid: 100, Ticket: "00"},
	} {
		if resp, err := openStream(t, c, first); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: %v %v, want PERMISSION_DENIED", name, resp, err)
		}
	}
}
