package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/support/rfb"
	"github.com/flexplane/flexplane/pkg/tenancy"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// maxConsoleMessage bounds one websocket message from Proxmox's VNC proxy
// (a full raw frame of a large screen).
const maxConsoleMessage = 32 << 20

// Console implements the Console RPC: the first message must carry a
// ticket of IssueConsoleTicket, whose guest must still be the one it was
// issued for (the same uuid and VDC at its VMID): anything else is
// PERMISSION_DENIED, whatever the message names. The agent then says it
// accepted the ticket, opens the VM's VNC console on its Proxmox
// (vncproxy, then vncwebsocket with the ticket, logging in with the ticket
// as the VNC password), serves the caller an RFB handshake without
// authentication and relays the rest both ways. The Proxmox ticket stays
// here.
func (s *service) Console(stream agentv1.AgentService_ConsoleServer) error {
	first, err := stream.Recv()
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "agent: console: %v", err)
	}
	ct, ok := s.a.consoles.take(first.GetTicket(), nil)
	if !ok {
		return status.Error(codes.PermissionDenied, "agent: console: the ticket is unknown, used or expired")
	}
	node, vmid := s.a.cfg.NodeName, ct.vmid
	ctx := stream.Context()
	if err := s.a.pve.sameGuest(ctx, node, ct); err != nil {
		s.a.log.Warn("agent: console: ticket refused", "vmid", vmid, "vdc", ct.vdc, "err", err)
		if errors.Is(err, errOtherGuest) {
			return status.Error(codes.PermissionDenied, "agent: console: the ticket is unknown, used or expired")
		}
		return status.Errorf(codes.Unavailable, "agent: console of VM %d: %v", vmid, err)
	}
	if err := stream.Send(&agentv1.ConsoleResponse{Accepted: true}); err != nil {
		return err
	}
	up, err := s.a.pve.openConsole(ctx, node, vmid)
	if err != nil {
		s.a.log.Warn("agent: console", "vmid", vmid, "err", err)
		switch {
		case errors.Is(err, errNotRunning):
			return status.Errorf(codes.FailedPrecondition, "agent: console of VM %d: %v", vmid, err)
		case errors.Is(err, errNoGuest):
			return status.Errorf(codes.NotFound, "agent: console of VM %d: %v", vmid, err)
		case ctx.Err() != nil:
			return status.FromContextError(ctx.Err()).Err()
		default:
			return status.Errorf(codes.Unavailable, "agent: console of VM %d: %v", vmid, err)
		}
	}
	defer up.Close()
	down := &rfb.Messages{
		Recv: func() ([]byte, error) {
			msg, err := stream.Recv()
			return msg.GetData(), err
		},
		Send:    func(p []byte) error { return stream.Send(&agentv1.ConsoleResponse{Data: p}) },
		Pending: first.GetData(),
	}
	if err := rfb.ServeNone(down); err != nil {
		return status.Errorf(codes.InvalidArgument, "agent: console of VM %d: %v", vmid, err)
	}
	s.a.log.Info("agent: console open", "vmid", vmid)
	fromVM := make(chan error, 1)
	go func() { _, err := io.Copy(down, up); fromVM <- err }()
	toVM := make(chan error, 1)
	go func() { _, err := io.Copy(up, down); toVM <- err }()
	select {
	case err = <-fromVM:
		// The VM's side ended (Proxmox closed the proxy, the VM stopped).
	case <-toVM:
		// The caller ended: stop the sender before the handler returns.
		up.Close()
		<-fromVM
		err = nil
	}
	s.a.log.Info("agent: console closed", "vmid", vmid)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && websocket.CloseStatus(err) == -1 && ctx.Err() == nil {
		return status.Errorf(codes.Unavailable, "agent: console of VM %d: %v", vmid, err)
	}
	return nil
}

// Console tickets: how long one may wait at most, and how many may wait.
const (
	maxConsoleTicketTTL = 5 * time.Minute
	maxConsoleTickets   = 1024
)

// consoleTicket is the guest a console ticket opens: its VMID, and what
// tells it from a later guest with the same VMID (its VDC and the uuid
// Proxmox gave it when it was created or cloned).
type consoleTicket struct {
	vmid      uint32
	vdc, uuid string
}

// IssueConsoleTicket implements the IssueConsoleTicket RPC. The VM must be
// a guest of this node of req.vdc now, with a uuid; the ticket is bound to
// that guest: if the guest leaves the node, or its VMID names another
// guest by the time the ticket is used, its Console stream is refused.
func (s *service) IssueConsoleTicket(ctx context.Context, req *agentv1.IssueConsoleTicketRequest) (*agentv1.IssueConsoleTicketResponse, error) {
	vmid, ttl := req.GetVmid(), time.Duration(req.GetTtlSeconds())*time.Second
	switch {
	case vmid < 100 || vmid > 999999999:
		return nil, status.Errorf(codes.InvalidArgument, "agent: console ticket: VMID %d is not 100-999999999", vmid)
	case ttl < time.Second || ttl > maxConsoleTicketTTL:
		return nil, status.Errorf(codes.InvalidArgument, "agent: console ticket: ttl_seconds %d is not 1-%d", req.GetTtlSeconds(), int(maxConsoleTicketTTL/time.Second))
	case req.GetVdc() == "":
		return nil, status.Error(codes.InvalidArgument, "agent: console ticket: vdc is required")
	case req.GetNode() != s.a.cfg.NodeName:
		return nil, status.Errorf(codes.NotFound, "agent: console ticket: node %q is not this agent's (%s)", req.GetNode(), s.a.cfg.NodeName)
	}
	g, err := s.a.pve.consoleGuest(ctx, s.a.cfg.NodeName, vmid)
	switch {
	case errors.Is(err, errNoGuest):
		return nil, status.Errorf(codes.NotFound, "agent: console ticket: VM %d: %v", vmid, err)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "agent: console ticket: VM %d: %v", vmid, err)
	case g.vdc != req.GetVdc() || g.uuid == "":
		// Another VDC's guest is as missing as none.
		return nil, status.Errorf(codes.NotFound, "agent: console ticket: VM %d: %v", vmid, errNoGuest)
	}
	exp := time.Now().Add(ttl)
	t, ok := s.a.consoles.add(g, exp, maxConsoleTickets)
	if !ok {
		return nil, status.Errorf(codes.ResourceExhausted, "agent: console ticket: %d tickets are waiting already", maxConsoleTickets)
	}
	return &agentv1.IssueConsoleTicketResponse{Ticket: t, ExpiresUnix: exp.Unix()}, nil
}

// errOtherGuest: the VMID of a ticket names another guest now (or none).
var errOtherGuest = errors.New("the VMID names another guest than the ticket's")

// consoleGuest reads what tells guest vmid of node apart from another
// guest with its VMID: its VDC (tenancy's tags) and the uuid of its
// smbios1 setting. A guest that is not there is errNoGuest.
func (p *pve) consoleGuest(ctx context.Context, node string, vmid uint32) (consoleTicket, error) {
	resp, err := p.do(ctx, http.MethodGet, "/nodes/"+url.PathEscape(node)+"/qemu/"+strconv.FormatUint(uint64(vmid), 10)+"/config", "", nil, "")
	switch {
	case err != nil:
		return consoleTicket{}, fmt.Errorf("proxmox: %w", err)
	case resp.status != http.StatusOK && strings.Contains(resp.reason, "does not exist"):
		return consoleTicket{}, errNoGuest
	case resp.status != http.StatusOK:
		return consoleTicket{}, fmt.Errorf("proxmox answered %d %s", resp.status, resp.reason)
	}
	var cfg struct {
		Tags    string `json:"tags"`
		SMBIOS1 string `json:"smbios1"`
	}
	if err := decodeData(resp.body, &cfg); err != nil {
		return consoleTicket{}, fmt.Errorf("guest config: %w", err)
	}
	g := consoleTicket{vmid: vmid}
	g.vdc, _ = tenancy.VDCOf(tenancy.SplitTags(cfg.Tags))
	for kv := range strings.SplitSeq(cfg.SMBIOS1, ",") {
		if v, ok := strings.CutPrefix(kv, "uuid="); ok {
			g.uuid = strings.ToLower(v)
		}
	}
	return g, nil
}

// sameGuest checks that the guest of t's VMID on node is still t's guest:
// errOtherGuest when it is another (or none).
func (p *pve) sameGuest(ctx context.Context, node string, t consoleTicket) error {
	g, err := p.consoleGuest(ctx, node, t.vmid)
	if errors.Is(err, errNoGuest) || err == nil && g != t {
		return errOtherGuest
	}
	return err
}

var (
	errNotRunning = errors.New("the VM is not running")
	errNoGuest    = errors.New("no such VM on this node")
)

// openConsole starts a VNC proxy for VM vmid of node, connects to it and
// logs in: what it returns is past the RFB security handshake.
func (p *pve) openConsole(ctx context.Context, node string, vmid uint32) (net.Conn, error) {
	vmPath := "/nodes/" + url.PathEscape(node) + "/qemu/" + strconv.FormatUint(uint64(vmid), 10)
	resp, err := p.do(ctx, http.MethodPost, vmPath+"/vncproxy", "", []byte("websocket=1"), "application/x-www-form-urlencoded")
	if err != nil {
		return nil, fmt.Errorf("vncproxy: %w", err)
	}
	switch {
	case resp.status == http.StatusOK:
	case strings.Contains(resp.reason, "not running"):
		return nil, errNotRunning
	case strings.Contains(resp.reason, "does not exist"):
		return nil, errNoGuest
	default:
		return nil, fmt.Errorf("vncproxy: proxmox answered %d %s", resp.status, resp.reason)
	}
	var env struct {
		Data struct {
			Port   int    `json:"port"`
			Ticket string `json:"ticket"`
		} `json:"data"`
	}
	if err := json.Unmarshal(resp.body, &env); err != nil || env.Data.Ticket == "" || env.Data.Port == 0 {
		return nil, fmt.Errorf("vncproxy: answer without port and ticket (%v)", err)
	}
	ticket := env.Data.Ticket
	u := *p.base
	u.Scheme = "wss"
	u.Path += vmPath + "/vncwebsocket"
	u.RawQuery = url.Values{"port": {strconv.Itoa(env.Data.Port)}, "vncticket": {ticket}}.Encode()
	conn, wresp, err := rfb.DialWebsocket(ctx, u.String(), p.http, http.Header{"Authorization": {"PVEAPIToken=" + p.token}}, maxConsoleMessage)
	if err != nil {
		if wresp != nil {
			return nil, fmt.Errorf("vncwebsocket: proxmox answered %s", wresp.Status)
		}
		// The error may quote the URL, which holds the ticket.
		return nil, fmt.Errorf("vncwebsocket: %w", scrub(scrub(err, ticket), url.QueryEscape(ticket)))
	}
	if err := rfb.ClientLogin(conn, ticket); err != nil {
		conn.Close()
		return nil, fmt.Errorf("vnc login: %w", err)
	}
	return conn, nil
}
