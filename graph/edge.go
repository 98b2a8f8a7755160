package graph

import (
	"context"
	"strings"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/edge/gateways"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Edge gateways (graph/edge.graphqls): the request's VDC's gateways as
// the gateways service changes them and shows them (gateways.View).

// gateways is the edge gateways service, INTERNAL when there is none.
func (r *Resolver) gateways() (*gateways.Service, error) {
	if r.Gateways == nil {
		return nil, apierr.New(apierr.Internal, "edge gateways are not offered: the orchestrator has no gateways service")
	}
	return r.Gateways, nil
}

// edgeZone is the check of the zone named zone for the request's VDC:
// BAD_USER_INPUT on field for one that is unknown or closed to the VDC.
func (r *Resolver) edgeZone(ctx context.Context, vdc, zone, field string) gateways.ZoneCheck {
	return func() (string, error) {
		z, err := r.placeableZone(ctx, vdc, zone, field)
		return z.Name, err
	}
}

// placeableZone is the zone named zone, which the caller sees and vdc may
// use (BAD_USER_INPUT on field otherwise).
func (r *Resolver) placeableZone(ctx context.Context, vdc, zone, field string) (fleet.Zone, error) {
	zs, err := r.zonesOf(ctx, &zone, field)
	if err != nil {
		return fleet.Zone{}, err
	}
	return zs[0], r.placeable(ctx, zs[0], vdc, field)
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

// ruleSpec is the service's spec of a rule's input.
func ruleSpec(in model.CreateFirewallRuleInput) gateways.RuleSpec {
	spec := gateways.RuleSpec{Direction: catalog.DirectionInbound, Protocol: strings.ToLower(string(in.Protocol)), Action: strings.ToLower(string(in.Action)),
		FromPort: in.FromPort, ToPort: in.ToPort, Source: deref(in.Source), Destination: deref(in.Destination), Description: deref(in.Description),
		Position: in.Position}
	if in.Direction == model.FirewallDirectionOutbound {
		spec.Direction = catalog.DirectionOutbound
	}
	return spec
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
		return apierr.From(err, "id")
	}
	return nil
}
