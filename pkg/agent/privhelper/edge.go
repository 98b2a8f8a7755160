package privhelper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/edge"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// NewEdgeServer serves flexplane.edge.v1 with m: the node's edge
// gateways, run in the calling process (the helper's, or the agent's own
// when it runs without a helper). Every gateway is validated first; an
// invalid one is INVALID_ARGUMENT and changes nothing.
func NewEdgeServer(m *edge.Manager, log *slog.Logger) edgev1.EdgeServiceServer {
	return &edgeService{m: m, log: log}
}

// edgeService serves flexplane.edge.v1: the node's edge gateways.
type edgeService struct {
	edgev1.UnimplementedEdgeServiceServer
	m   *edge.Manager
	log *slog.Logger
}

func (s *edgeService) ApplyGateway(ctx context.Context, req *edgev1.ApplyGatewayRequest) (*edgev1.ApplyGatewayResponse, error) {
	g, err := gatewayFromProto(req.GetGateway())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	g.Revision = req.GetRevision()
	st, err := s.m.Apply(ctx, g)
	if err != nil {
		var ie *edge.InputError
		if errors.As(err, &ie) {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		s.log.Error("agent: apply edge gateway", "vdc", g.VDC, "err", err)
		return nil, status.Errorf(codes.Internal, "agent: apply edge gateway of %s: %v", g.VDC, err)
	}
	s.log.Info("agent: edge gateway applied", "vdc", g.VDC, "rules", len(g.Rules), "ruleset_apply", st.RulesetApply)
	return &edgev1.ApplyGatewayResponse{State: stateToProto(st)}, nil
}

func (s *edgeService) RemoveGateway(ctx context.Context, req *edgev1.RemoveGatewayRequest) (*edgev1.RemoveGatewayResponse, error) {
	if req.GetVdc() == "" {
		return nil, status.Error(codes.InvalidArgument, "agent: remove edge gateway: vdc is required")
	}
	if err := s.m.Remove(ctx, req.GetVdc()); err != nil {
		return nil, status.Errorf(codes.Internal, "agent: remove edge gateway of %s: %v", req.GetVdc(), err)
	}
	return &edgev1.RemoveGatewayResponse{}, nil
}

func (s *edgeService) GatewayStatus(ctx context.Context, req *edgev1.GatewayStatusRequest) (*edgev1.GatewayStatusResponse, error) {
	st, err := s.m.Status(ctx, req.GetVdc())
	switch {
	case errors.Is(err, edge.ErrNotRunning):
		return nil, status.Errorf(codes.NotFound, "agent: the edge gateway of %s does not run on this node", req.GetVdc())
	case err != nil:
		return nil, status.Errorf(codes.Internal, "agent: edge gateway status of %s: %v", req.GetVdc(), err)
	}
	return &edgev1.GatewayStatusResponse{State: stateToProto(st)}, nil
}

func (s *edgeService) ListGateways(ctx context.Context, _ *edgev1.ListGatewaysRequest) (*edgev1.ListGatewaysResponse, error) {
	rs, err := s.m.List(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "agent: list edge gateways: %v", err)
	}
	out := &edgev1.ListGatewaysResponse{}
	for _, r := range rs {
		out.Gateways = append(out.Gateways, &edgev1.RunningGateway{Vdc: r.VDC, Namespace: r.Namespace, Revision: r.Revision})
	}
	return out, nil
}

func stateToProto(st edge.Status) *edgev1.GatewayState {
	out := &edgev1.GatewayState{Namespace: st.Namespace, RulesetApplyMicros: st.RulesetApply.Microseconds()}
	ids := make([]string, 0, len(st.Counters))
	for id := range st.Counters {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		c := st.Counters[id]
		out.Counters = append(out.Counters, &edgev1.Counter{Id: id, Packets: c.Packets, Bytes: c.Bytes})
	}
	return out
}

// gatewayFromProto parses a desired state; a malformed address or port is an error
// naming the field.
func gatewayFromProto(p *edgev1.Gateway) (edge.Gateway, error) {
	if p == nil {
		return edge.Gateway{}, errors.New("gateway is required")
	}
	g := edge.Gateway{VDC: p.GetVdc(), EgressMbps: int(p.GetEgressMbps()), IngressMbps: int(p.GetIngressMbps())}
	var err error
	prefix := func(field, s string) netip.Prefix {
		if s == "" || err != nil {
			return netip.Prefix{}
		}
		v, perr := netip.ParsePrefix(s)
		if perr != nil {
			err = fmt.Errorf("%s: %q is not an address with its prefix length", field, s)
		}
		return v
	}
	addr := func(field, s string) netip.Addr {
		if err != nil {
			return netip.Addr{}
		}
		v, perr := netip.ParseAddr(s)
		if perr != nil {
			err = fmt.Errorf("%s: %q is not an address", field, s)
		}
		return v
	}
	port := func(field string, v uint32) uint16 {
		if v > 65535 && err == nil {
			err = fmt.Errorf("%s: %d is not a port", field, v)
		}
		return uint16(v)
	}
	for i, l := range p.GetLegs() {
		g.Legs = append(g.Legs, edge.Leg{Bridge: l.GetBridge(), Address: prefix(fmt.Sprintf("legs[%d].address", i), l.GetAddress())})
	}
	if u := p.GetUplink(); u != nil {
		g.Uplink = edge.Uplink{Bridge: u.GetBridge(), Address: prefix("uplink.address", u.GetAddress())}
		if u.GetGateway() != "" {
			g.Uplink.Gateway = addr("uplink.gateway", u.GetGateway())
		}
	}
	for i, pf := range p.GetPortForwards() {
		f := fmt.Sprintf("port_forwards[%d]", i)
		g.PortForwards = append(g.PortForwards, edge.PortForward{
			ID: pf.GetId(), Protocol: pf.GetProtocol(),
			PublicAddr: addr(f+".public_address", pf.GetPublicAddress()), PublicPort: port(f+".public_port", pf.GetPublicPort()),
			Target: addr(f+".target", pf.GetTarget()), TargetPort: port(f+".target_port", pf.GetTargetPort()),
		})
	}
	for i, o := range p.GetOneToOne() {
		f := fmt.Sprintf("one_to_one[%d]", i)
		g.OneToOne = append(g.OneToOne, edge.OneToOne{ID: o.GetId(), Public: addr(f+".public_address", o.GetPublicAddress()), Private: addr(f+".private_address", o.GetPrivateAddress())})
	}
	for i, b := range p.GetBalancers() {
		f := fmt.Sprintf("balancers[%d]", i)
		eb := edge.Balancer{ID: b.GetId(), Public: addr(f+".public_address", b.GetPublicAddress())}
		forwards := func(name string, fs []*edgev1.Forward) []edge.Forward {
			var out []edge.Forward
			for j, fw := range fs {
				ff := fmt.Sprintf("%s.%s[%d]", f, name, j)
				out = append(out, edge.Forward{Port: port(ff+".port", fw.GetPort()), Target: addr(ff+".target", fw.GetTarget()), TargetPort: port(ff+".target_port", fw.GetTargetPort())})
			}
			return out
		}
		eb.Frontends, eb.Relays = forwards("frontends", b.GetFrontends()), forwards("relays", b.GetRelays())
		for j, s := range b.GetSources() {
			eb.Sources = append(eb.Sources, prefix(fmt.Sprintf("%s.sources[%d]", f, j), s))
		}
		g.Balancers = append(g.Balancers, eb)
	}
	for i, e := range p.GetEndpoints() {
		f := fmt.Sprintf("endpoints[%d]", i)
		g.Endpoints = append(g.Endpoints, edge.Endpoint{ID: e.GetId(), Address: addr(f+".address", e.GetAddress()), Port: port(f+".port", e.GetPort()),
			Target: addr(f+".target", e.GetTarget()), TargetPort: port(f+".target_port", e.GetTargetPort())})
	}
	for i, r := range p.GetRules() {
		f := fmt.Sprintf("rules[%d]", i)
		dir := map[edgev1.Direction]string{edgev1.Direction_DIRECTION_INBOUND: edge.Inbound, edgev1.Direction_DIRECTION_OUTBOUND: edge.Outbound}[r.GetDirection()]
		g.Rules = append(g.Rules, edge.Rule{
			ID: r.GetId(), Direction: dir, Protocol: r.GetProtocol(),
			FromPort: port(f+".from_port", r.GetFromPort()), ToPort: port(f+".to_port", r.GetToPort()),
			Source: prefix(f+".source", r.GetSource()), Destination: prefix(f+".destination", r.GetDestination()), Allow: r.GetAllow(),
		})
	}
	if err != nil {
		return edge.Gateway{}, err
	}
	return g, g.Validate()
}
