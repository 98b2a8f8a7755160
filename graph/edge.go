package graph

import (
	"cmp"
	"context"
	"encoding/base64"
	"net/netip"
	"slices"
	"strings"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/edge/gateways"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Edge gateways (graph/edge.graphqls): the request's VDC's gateways as
// the gateways service changes them, with the state of each running
// gateway as the syncer reads it from its agent.

// gateways is the edge gateways service, INTERNAL when there is none.
func (r *Resolver) gateways() (*gateways.Service, error) {
	if r.Gateways == nil {
		return nil, apierr.New(apierr.Internal, "edge gateways are not offered: the orchestrator has no gateways service")
	}
	return r.Gateways, nil
}

// edgeError maps an error of the gateways service, whose fields are
// relative to the input (prefix "input") or the id ("id").
func edgeError(err error, prefix string) error { return apierr.From(err, prefix) }

func edgeGatewayID(g *catalog.EdgeGateway) string {
	return base64.RawURLEncoding.EncodeToString([]byte("egw:" + g.Name))
}

// edgeZone resolves the zone named zone for the request's VDC:
// BAD_USER_INPUT on field for one that is unknown or closed to the VDC.
func (r *Resolver) edgeZone(ctx context.Context, vdc, zone, field string) (zones.Zone, error) {
	zs, err := r.zonesOf(ctx, &zone, field)
	if err != nil {
		return zones.Zone{}, err
	}
	if err := r.placeable(ctx, zs[0], vdc, field); err != nil {
		return zones.Zone{}, err
	}
	return zs[0], nil
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optPort(p int) *int {
	if p == 0 {
		return nil
	}
	return &p
}

// firewallRuleModel is rule i of a gateway.
func firewallRuleModel(r catalog.FirewallRule, i int) *model.FirewallRule {
	return &model.FirewallRule{
		ID: r.ID, Position: i, Direction: map[string]model.FirewallDirection{catalog.DirectionInbound: model.FirewallDirectionInbound,
			catalog.DirectionOutbound: model.FirewallDirectionOutbound}[r.Direction],
		Protocol: model.FirewallProtocol(strings.ToUpper(r.Protocol)), FromPort: optPort(r.FromPort), ToPort: optPort(r.ToPort),
		Source: optString(r.Source), Destination: optString(r.Destination), Action: model.FirewallAction(strings.ToUpper(r.Action)),
		Description: optString(r.Description),
	}
}

func portForwardModel(zoneID string, pf catalog.PortForward) *model.PortForward {
	return &model.PortForward{ID: pf.ID, Protocol: model.PortForwardProtocol(strings.ToUpper(pf.Protocol)), PublicAddress: pf.PublicAddress,
		PublicPort: pf.PublicPort, VMID: tenancy.VMRef{ZoneID: zoneID, VMID: pf.VMID}.ID(), TargetPort: pf.TargetPort}
}

func oneToOneModel(zoneID string, o catalog.OneToOneAddress) *model.OneToOneAddress {
	return &model.OneToOneAddress{ID: o.ID, PublicAddress: o.PublicAddress, VMID: tenancy.VMRef{ZoneID: zoneID, VMID: o.VMID}.ID()}
}

var edgeStatuses = map[gateways.Status]model.EdgeGatewayStatus{
	gateways.Pending: model.EdgeGatewayStatusPending,
	gateways.Active:  model.EdgeGatewayStatusActive,
	gateways.Failed:  model.EdgeGatewayStatusFailed,
}

// edgeGatewayModel is g in z with the state of its running gateway.
func (r *Resolver) edgeGatewayModel(ctx context.Context, svc *gateways.Service, z zones.Zone, g *catalog.EdgeGateway) *model.EdgeGateway {
	m := &model.EdgeGateway{ID: edgeGatewayID(g), Zone: zoneModel(z, r.agentTarget()), Status: model.EdgeGatewayStatusPending,
		PublicAddress: g.PublicAddress, EgressMbps: g.EgressMbps, IngressMbps: g.IngressMbps,
		FirewallRules: []*model.FirewallRule{}, PortForwards: []*model.PortForward{}, OneToOneAddresses: []*model.OneToOneAddress{},
		Counters: []*model.EdgeCounter{}}
	for i, rule := range g.FirewallRules {
		m.FirewallRules = append(m.FirewallRules, firewallRuleModel(rule, i))
	}
	pfs := slices.Clone(g.PortForwards)
	slices.SortFunc(pfs, func(a, b catalog.PortForward) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.PublicPort, b.PublicPort))
	})
	for _, pf := range pfs {
		m.PortForwards = append(m.PortForwards, portForwardModel(z.ID, pf))
	}
	for _, o := range g.OneToOne {
		m.OneToOneAddresses = append(m.OneToOneAddresses, oneToOneModel(z.ID, o))
	}
	slices.SortFunc(m.OneToOneAddresses, func(a, b *model.OneToOneAddress) int {
		return netip.MustParseAddr(a.PublicAddress).Compare(netip.MustParseAddr(b.PublicAddress))
	})
	st := svc.State(ctx, z.ID, g)
	m.Status, m.Message = edgeStatuses[st.Status], optString(st.Message)
	if st.Node != "" {
		m.Node = &st.Node
	}
	for _, c := range st.Counters {
		m.Counters = append(m.Counters, &model.EdgeCounter{Name: c.Name, Rule: optString(c.Rule), Packets: float64(c.Packets), Bytes: float64(c.Bytes)})
	}
	return m
}

// edgeGateways lists the VDC's gateways (in zone, when set) in zones it
// sees.
func (r *Resolver) edgeGateways(ctx context.Context, zone *string, first *int, after *string) (*model.EdgeGatewayConnection, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.gateways()
	if err != nil {
		return nil, err
	}
	zs, err := r.zonesOf(ctx, zone, "zone")
	if err != nil {
		return nil, err
	}
	byName := map[string]zones.Zone{}
	for _, z := range zs {
		byName[z.Name] = z
	}
	gws, err := svc.List(ctx, scope.VDC.Name)
	if err != nil {
		return nil, edgeError(err, "")
	}
	gws = slices.DeleteFunc(gws, func(g *catalog.EdgeGateway) bool { _, ok := byName[g.Zone]; return !ok })
	p, err := paginate(gws, func(g *catalog.EdgeGateway) string { return sortKey(g.Zone) }, first, 50, after)
	if err != nil {
		return nil, err
	}
	nodes := make([]*model.EdgeGateway, len(p.items))
	done := make(chan struct{}, len(p.items))
	for i, g := range p.items {
		go func() {
			defer func() { done <- struct{}{} }()
			nodes[i] = r.edgeGatewayModel(ctx, svc, byName[g.Zone], g)
		}()
	}
	for range p.items {
		<-done
	}
	out := &model.EdgeGatewayConnection{Nodes: nodes, PageInfo: p.info, TotalCount: p.total}
	for i, n := range nodes {
		out.Edges = append(out.Edges, &model.EdgeGatewayEdge{Cursor: p.cursors[i], Node: n})
	}
	if out.Edges == nil {
		out.Edges = []*model.EdgeGatewayEdge{}
	}
	return out, nil
}

// createFirewallRule checks the rule, then inserts it in a zone the VDC
// may use.
func (r *Resolver) createFirewallRule(ctx context.Context, in model.CreateFirewallRuleInput) (*model.FirewallRule, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.gateways()
	if err != nil {
		return nil, err
	}
	spec := gateways.RuleSpec{Direction: catalog.DirectionInbound, Protocol: strings.ToLower(string(in.Protocol)), Action: strings.ToLower(string(in.Action)),
		FromPort: in.FromPort, ToPort: in.ToPort, Source: deref(in.Source), Destination: deref(in.Destination), Description: deref(in.Description),
		Position: in.Position}
	if in.Direction == model.FirewallDirectionOutbound {
		spec.Direction = catalog.DirectionOutbound
	}
	// Bad input is told before the zone is looked at.
	if _, err := gateways.CheckRule(spec); err != nil {
		return nil, edgeError(err, "input")
	}
	z, err := r.edgeZone(ctx, scope.VDC.Name, in.Zone, "input.zone")
	if err != nil {
		return nil, err
	}
	rule, pos, err := svc.CreateFirewallRule(ctx, scope.VDC.Name, z.Name, spec)
	if err != nil {
		return nil, edgeError(err, "input")
	}
	return firewallRuleModel(rule, pos), nil
}

// createPortForward adds the forward to the gateway of its VM's zone.
func (r *Resolver) createPortForward(ctx context.Context, in model.CreatePortForwardInput) (*model.PortForward, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.gateways()
	if err != nil {
		return nil, err
	}
	pf, zoneID, err := svc.CreatePortForward(ctx, scope.VDC.Name, gateways.PortForwardSpec{VM: in.VMID, Protocol: strings.ToLower(string(in.Protocol)),
		PublicPort: in.PublicPort, TargetPort: in.TargetPort, PublicAddress: in.PublicAddress})
	if err != nil {
		return nil, edgeError(err, "input")
	}
	return portForwardModel(zoneID, pf), nil
}

// createOneToOneAddress maps a public address to the VM.
func (r *Resolver) createOneToOneAddress(ctx context.Context, in model.CreateOneToOneAddressInput) (*model.OneToOneAddress, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.gateways()
	if err != nil {
		return nil, err
	}
	o, zoneID, err := svc.CreateOneToOne(ctx, scope.VDC.Name, in.VMID, in.PublicAddress)
	if err != nil {
		return nil, edgeError(err, "input")
	}
	return oneToOneModel(zoneID, o), nil
}

// deleteFromGateway removes the item of id from the VDC's gateway holding
// it, with remove, one of the service's deletes.
func (r *Resolver) deleteFromGateway(ctx context.Context, id string, remove func(*gateways.Service, context.Context, string, string) error) error {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.gateways()
	if err != nil {
		return err
	}
	if err := remove(svc, ctx, scope.VDC.Name, id); err != nil {
		return edgeError(err, "id")
	}
	return nil
}

// updateEdgeGateway sets the limits.
func (r *Resolver) updateEdgeGateway(ctx context.Context, in model.UpdateEdgeGatewayInput) (*model.EdgeGateway, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.gateways()
	if err != nil {
		return nil, err
	}
	if err := gateways.CheckLimits(in.EgressMbps, in.IngressMbps); err != nil {
		return nil, edgeError(err, "input")
	}
	z, err := r.edgeZone(ctx, scope.VDC.Name, in.Zone, "input.zone")
	if err != nil {
		return nil, err
	}
	g, err := svc.SetLimits(ctx, scope.VDC.Name, z.Name, in.EgressMbps, in.IngressMbps)
	if err != nil {
		return nil, edgeError(err, "input")
	}
	return r.edgeGatewayModel(ctx, svc, z, g), nil
}

func externalNetworkModel(n *catalog.ExternalNetwork) *model.ExternalNetwork {
	return &model.ExternalNetwork{Zone: n.Name, Description: optString(n.Description), Bridge: n.Bridge, Cidr: n.CIDR, Gateway: n.Gateway,
		PoolStart: n.PoolStart, PoolEnd: n.PoolEnd, PoolSize: n.PoolSize(), Allocated: len(n.Status.Allocations)}
}

// createExternalNetwork creates a known zone's external network.
func (r *Resolver) createExternalNetwork(ctx context.Context, in model.CreateExternalNetworkInput) (*model.ExternalNetwork, error) {
	svc, err := r.gateways()
	if err != nil {
		return nil, err
	}
	zs, err := r.zonesOf(ctx, &in.Zone, "input.zone")
	if err != nil {
		return nil, err
	}
	n := &catalog.ExternalNetwork{ExternalNetworkSpec: catalog.ExternalNetworkSpec{Description: deref(in.Description), Bridge: in.Bridge,
		CIDR: in.Cidr, Gateway: in.Gateway, PoolStart: in.PoolStart, PoolEnd: in.PoolEnd}}
	n.Name = zs[0].Name
	created, err := svc.CreateExternalNetwork(ctx, n)
	if err != nil {
		return nil, edgeError(err, "input")
	}
	return externalNetworkModel(created), nil
}

// externalNetworks lists every zone's external network.
func (r *Resolver) externalNetworks(ctx context.Context, first *int, after *string) (*model.ExternalNetworkConnection, error) {
	svc, err := r.gateways()
	if err != nil {
		return nil, err
	}
	ns, err := svc.ExternalNetworks(ctx)
	if err != nil {
		return nil, edgeError(err, "")
	}
	p, err := paginate(ns, func(n *catalog.ExternalNetwork) string { return sortKey(n.Name) }, first, 50, after)
	if err != nil {
		return nil, err
	}
	out := &model.ExternalNetworkConnection{Edges: []*model.ExternalNetworkEdge{}, Nodes: []*model.ExternalNetwork{}, PageInfo: p.info, TotalCount: p.total}
	for i, n := range p.items {
		m := externalNetworkModel(n)
		out.Nodes = append(out.Nodes, m)
		out.Edges = append(out.Edges, &model.ExternalNetworkEdge{Cursor: p.cursors[i], Node: m})
	}
	return out, nil
}

// deleteEdgeGateway deletes the VDC's gateway the id names (NOT_FOUND for
// any other VDC's or none) and gives its addresses back to the pool.
func (r *Resolver) deleteEdgeGateway(ctx context.Context, id string) (*model.DeletedEdgeGateway, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.gateways()
	if err != nil {
		return nil, err
	}
	notFound := apierr.New(apierr.NotFound, "edge gateway %q not found", id)
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil {
		return nil, notFound
	}
	zone, ok := strings.CutPrefix(string(raw), "egw:"+scope.VDC.Name+".")
	if !ok || zone == "" {
		return nil, notFound
	}
	released, err := svc.Delete(ctx, scope.VDC.Name, zone)
	if fault.Is(err, fault.NotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, edgeError(err, "")
	}
	out := &model.DeletedEdgeGateway{ID: id, Zone: zone, ReleasedAddresses: []string{}}
	for _, a := range released {
		out.ReleasedAddresses = append(out.ReleasedAddresses, a.String())
	}
	return out, nil
}
