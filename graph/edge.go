package graph

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// Edge gateways (graph/edge.graphqls): the catalog's EdgeGateway objects
// of the request's VDC, changed by read-modify-write conditional on their
// resourceVersion, and the state of the running gateway read from the
// agent the syncer placed it on.

// edgeStatusTimeout bounds the status call to a gateway's agent.
const edgeStatusTimeout = 3 * time.Second

// newEdgeID is a random id of a rule, port forward or 1:1 address: unique
// across gateways, so a bare id finds its object among the VDC's gateways.
func newEdgeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

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

// maxEdgeTries bounds the retries of a gateway change that keeps losing
// its conditional write.
const maxEdgeTries = 20

// changeGateway applies change to vdc's gateway in zone (created with a
// public address when it has none), retrying on a concurrent write. A
// change returning an error changes nothing.
func (r *Resolver) changeGateway(ctx context.Context, vdc, zone, fieldPrefix string, change func(*catalog.EdgeGateway) error) (*catalog.EdgeGateway, error) {
	// A change that makes the VDC's first gateway in the zone takes an
	// address of its pool, within the VDC's publicAddresses quota.
	for range maxEdgeTries {
		g, err := quota.EnsureEdgeGateway(ctx, r.Catalog, vdc, zone)
		if err != nil {
			return nil, edgeError(err, "input")
		}
		if err := change(g); err != nil {
			return nil, err
		}
		out, err := catalog.Update(ctx, r.Catalog, g)
		if errors.Is(err, catalog.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, edgeError(err, fieldPrefix)
		}
		return out, nil
	}
	return nil, apierr.New(apierr.Conflict, "the edge gateway keeps changing; try again")
}

// edgeError maps a catalog error; a missing external network is the zone's
// fault.
func edgeError(err error, prefix string) error {
	var ve *catalog.ValidationError
	if errors.As(err, &ve) && ve.Field == "zone" {
		return apierr.BadInput(prefix+".zone", "%s.zone: %s", prefix, ve.Message)
	}
	return apierr.From(err, prefix)
}

// vdcGateways lists the VDC's gateway objects, sorted by zone.
func (r *Resolver) vdcGateways(ctx context.Context, vdc string) ([]*catalog.EdgeGateway, error) {
	all, err := catalog.List[*catalog.EdgeGateway](ctx, r.Catalog)
	if err != nil {
		return nil, apierr.From(err, "")
	}
	return slices.DeleteFunc(all, func(g *catalog.EdgeGateway) bool { return g.VDC != vdc }), nil
}

// findInGateways returns the zone of the VDC's gateway holding an item
// with id (per has); NOT_FOUND when none does.
func (r *Resolver) findInGateways(ctx context.Context, vdc, id, what string, has func(*catalog.EdgeGateway, string) bool) (string, error) {
	gws, err := r.vdcGateways(ctx, vdc)
	if err != nil {
		return "", err
	}
	for _, g := range gws {
		if has(g, id) {
			return g.Zone, nil
		}
	}
	return "", apierr.New(apierr.NotFound, "%s not found", what)
}

// deleteFromGateway removes the item with id (per remove, which reports
// whether it held it) from the VDC's gateway holding it.
func (r *Resolver) deleteFromGateway(ctx context.Context, id, what string, remove func(*catalog.EdgeGateway, string) bool) error {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	has := func(g *catalog.EdgeGateway, id string) bool {
		return remove(g.DeepCopyObject().(*catalog.EdgeGateway), id)
	}
	zone, err := r.findInGateways(ctx, scope.VDC.Name, id, what, has)
	if err != nil {
		return err
	}
	_, err = r.changeGateway(ctx, scope.VDC.Name, zone, "id", func(g *catalog.EdgeGateway) error {
		if !remove(g, id) {
			return apierr.New(apierr.NotFound, "%s not found", what)
		}
		return nil
	})
	return err
}

// removeByID deletes the element of *items whose id(e) is id.
func removeByID[T any](items *[]T, id string, idOf func(T) string) bool {
	i := slices.IndexFunc(*items, func(e T) bool { return idOf(e) == id })
	if i < 0 {
		return false
	}
	*items = slices.Delete(*items, i, i+1)
	return true
}

// vdcVM resolves a VM id of the request's VDC: NOT_FOUND for any other.
func (r *Resolver) vdcVM(ctx context.Context, vdc, id string) (zones.Zone, tenancy.VMRef, error) {
	ref, err := tenancy.ParseVMID(id)
	if err != nil {
		return zones.Zone{}, ref, vmNotFound()
	}
	z, ok := r.zoneByID(ref.ZoneID)
	if !ok {
		return zones.Zone{}, ref, vmNotFound()
	}
	rs, err := r.session(ctx).PoolGuests(ctx, z, tenancy.PoolID(vdc))
	if err != nil {
		return zones.Zone{}, ref, apierr.ZoneDown(z.Name, err)
	}
	for _, res := range rs {
		if res.VMID == ref.VMID && res.Template != 1 {
			return z, ref, nil
		}
	}
	return zones.Zone{}, ref, vmNotFound()
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

// edgeGatewayModel is g in z with the state of its running gateway.
func (r *Resolver) edgeGatewayModel(ctx context.Context, z zones.Zone, g *catalog.EdgeGateway) *model.EdgeGateway {
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
	if r.Edge == nil {
		return m
	}
	if err := r.Edge.LastError(z.ID, g.VDC); err != nil {
		msg := "the gateway could not be applied; it is retried every second"
		m.Status, m.Message = model.EdgeGatewayStatusFailed, &msg
		r.Logger.Warn("graphql: edge gateway failed", "gateway", g.Name, "err", err)
	}
	mesh, ok := r.Edge.Placement(z.ID, g.VDC)
	if !ok {
		return m
	}
	for _, h := range z.Hosts {
		if h.MeshName == mesh {
			node := h.Node
			m.Node = &node
		}
	}
	c, err := r.Zones.EdgeClient(mesh)
	if err != nil {
		return m
	}
	sctx, cancel := context.WithTimeout(ctx, edgeStatusTimeout)
	defer cancel()
	st, err := c.GatewayStatus(sctx, &edgev1.GatewayStatusRequest{Vdc: g.VDC})
	if err != nil {
		if m.Status != model.EdgeGatewayStatusFailed {
			msg := "its agent does not report it yet"
			m.Message = &msg
		}
		return m
	}
	if m.Status == model.EdgeGatewayStatusPending {
		m.Status = model.EdgeGatewayStatusActive
	}
	for _, c := range st.GetState().GetCounters() {
		ec := &model.EdgeCounter{Name: c.GetId(), Packets: float64(c.GetPackets()), Bytes: float64(c.GetBytes())}
		if id, ok := strings.CutPrefix(c.GetId(), "rule:"); ok {
			ec.Name, ec.Rule = id, &id
		}
		m.Counters = append(m.Counters, ec)
	}
	slices.SortFunc(m.Counters, func(a, b *model.EdgeCounter) int { return cmp.Compare(a.Name, b.Name) })
	return m
}

// edgeGateways lists the VDC's gateways (in zone, when set) in zones it
// sees.
func (r *Resolver) edgeGateways(ctx context.Context, zone *string, first *int, after *string) (*model.EdgeGatewayConnection, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	zs, err := r.zonesOf(ctx, zone, "zone")
	if err != nil {
		return nil, err
	}
	byName := map[string]zones.Zone{}
	for _, z := range zs {
		byName[z.Name] = z
	}
	gws, err := r.vdcGateways(ctx, scope.VDC.Name)
	if err != nil {
		return nil, err
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
			nodes[i] = r.edgeGatewayModel(ctx, byName[g.Zone], g)
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

// createFirewallRule validates the rule, then inserts it.
func (r *Resolver) createFirewallRule(ctx context.Context, in model.CreateFirewallRuleInput) (*model.FirewallRule, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	rule := catalog.FirewallRule{ID: newEdgeID(), Direction: catalog.DirectionInbound, Protocol: strings.ToLower(string(in.Protocol)),
		Action: strings.ToLower(string(in.Action))}
	if in.Direction == model.FirewallDirectionOutbound {
		rule.Direction = catalog.DirectionOutbound
	}
	if in.FromPort != nil || in.ToPort != nil {
		from, to := cmp.Or(deref(in.FromPort), deref(in.ToPort)), cmp.Or(deref(in.ToPort), deref(in.FromPort))
		if from == 0 || to == 0 {
			field := "input.fromPort"
			if from == 0 && in.FromPort != nil {
				return nil, apierr.BadInput(field, "%s: port 0 is out of range: 1 to 65535", field)
			}
			return nil, apierr.BadInput("input.toPort", "input.toPort: port 0 is out of range: 1 to 65535")
		}
		rule.FromPort, rule.ToPort = from, to
	}
	rule.Source, rule.Destination, rule.Description = deref(in.Source), deref(in.Destination), deref(in.Description)
	if err := catalog.ValidateFirewallRule(rule); err != nil {
		return nil, apierr.From(err, "input")
	}
	if in.Position != nil && *in.Position < 0 {
		return nil, apierr.BadInput("input.position", "input.position: %d is below 0", *in.Position)
	}
	z, err := r.edgeZone(ctx, scope.VDC.Name, in.Zone, "input.zone")
	if err != nil {
		return nil, err
	}
	pos := 0
	_, err = r.changeGateway(ctx, scope.VDC.Name, z.Name, "input", func(g *catalog.EdgeGateway) error {
		pos = len(g.FirewallRules)
		if in.Position != nil {
			if *in.Position > pos {
				return apierr.BadInput("input.position", "input.position: %d is beyond the end (the gateway has %d rules)", *in.Position, pos)
			}
			pos = *in.Position
		}
		g.FirewallRules = slices.Insert(g.FirewallRules, pos, rule)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return firewallRuleModel(rule, pos), nil
}

// validPort refuses a port out of range on field.
func validPort(field string, p int) error {
	if p < 1 || p > 65535 {
		return apierr.BadInput(field, "%s: port %d is out of range: 1 to 65535", field, p)
	}
	return nil
}

// publicAddressOf checks a public address input: IPv4 and in the zone's
// pool (BAD_USER_INPUT on field otherwise); nil gives the zero Addr.
func (r *Resolver) publicAddressOf(ctx context.Context, zone string, in *string, field string) (netip.Addr, error) {
	if in == nil {
		return netip.Addr{}, nil
	}
	a, err := catalog.ParseIPv4(field, *in)
	if err != nil {
		return netip.Addr{}, apierr.From(err, "")
	}
	en, err := catalog.Get[*catalog.ExternalNetwork](ctx, r.Catalog, zone)
	if errors.Is(err, catalog.ErrNotFound) {
		return netip.Addr{}, apierr.BadInput(field, "%s: zone %s has no external network", field, zone)
	}
	if err != nil {
		return netip.Addr{}, apierr.From(err, "")
	}
	if !en.InPool(a) {
		return netip.Addr{}, apierr.BadInput(field, "%s: %s is outside the pool %s-%s of zone %s's external network", field, a, en.PoolStart, en.PoolEnd, zone)
	}
	return a, nil
}

// edgeTarget resolves what a port forward or a 1:1 address of vdc names:
// its VM (another VDC's is NOT_FOUND), which must be in a zone the VDC may
// use, and the public address asked for (zero when none), which must be in
// that zone's pool.
func (r *Resolver) edgeTarget(ctx context.Context, vdc, vmID string, publicAddress *string) (zones.Zone, tenancy.VMRef, netip.Addr, error) {
	z, ref, err := r.vdcVM(ctx, vdc, vmID)
	if err != nil {
		return zones.Zone{}, tenancy.VMRef{}, netip.Addr{}, err
	}
	if err := r.placeable(ctx, z, vdc, "input.vmId"); err != nil {
		return zones.Zone{}, tenancy.VMRef{}, netip.Addr{}, err
	}
	want, err := r.publicAddressOf(ctx, z.Name, publicAddress, "input.publicAddress")
	if err != nil {
		return zones.Zone{}, tenancy.VMRef{}, netip.Addr{}, err
	}
	return z, ref, want, nil
}

// createPortForward validates the forward and its VM, then adds it.
func (r *Resolver) createPortForward(ctx context.Context, in model.CreatePortForwardInput) (*model.PortForward, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	if err := cmp.Or(validPort("input.publicPort", in.PublicPort), validPort("input.targetPort", in.TargetPort)); err != nil {
		return nil, err
	}
	z, ref, want, err := r.edgeTarget(ctx, scope.VDC.Name, in.VMID, in.PublicAddress)
	if err != nil {
		return nil, err
	}
	pf := catalog.PortForward{ID: newEdgeID(), Protocol: strings.ToLower(string(in.Protocol)), PublicPort: in.PublicPort, VMID: ref.VMID, TargetPort: in.TargetPort}
	_, err = r.changeGateway(ctx, scope.VDC.Name, z.Name, "input", func(g *catalog.EdgeGateway) error {
		if want.IsValid() && want.String() != g.PublicAddress {
			return apierr.BadInput("input.publicAddress", "input.publicAddress: %s is not the VDC's public address in zone %s (%s)", want, z.Name, g.PublicAddress)
		}
		for _, o := range g.PortForwards {
			if o.Protocol == pf.Protocol && o.PublicPort == pf.PublicPort {
				return apierr.BadInput("input.publicPort", "input.publicPort: %s port %d of %s is forwarded already", pf.Protocol, pf.PublicPort, g.PublicAddress)
			}
		}
		pf.PublicAddress = g.PublicAddress
		g.PortForwards = append(g.PortForwards, pf)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return portForwardModel(z.ID, pf), nil
}

// createOneToOneAddress allocates the address, then records it on the
// gateway (giving it back if that fails).
func (r *Resolver) createOneToOneAddress(ctx context.Context, in model.CreateOneToOneAddressInput) (*model.OneToOneAddress, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	z, ref, want, err := r.edgeTarget(ctx, scope.VDC.Name, in.VMID, in.PublicAddress)
	if err != nil {
		return nil, err
	}
	// Bounded by the VDC's publicAddresses quota, as a load balancer's.
	addr, err := quota.TakePublicAddress(ctx, r.Catalog, scope.VDC.Name, z.Name, catalog.UseOneToOne, want, "publicAddress")
	if err != nil {
		return nil, edgeError(err, "input")
	}
	o := catalog.OneToOneAddress{ID: newEdgeID(), PublicAddress: addr.String(), VMID: ref.VMID}
	_, err = r.changeGateway(ctx, scope.VDC.Name, z.Name, "input", func(g *catalog.EdgeGateway) error {
		g.OneToOne = append(g.OneToOne, o)
		return nil
	})
	if err != nil {
		if rerr := catalog.ReleasePublicAddress(context.WithoutCancel(ctx), r.Catalog, z.Name, scope.VDC.Name, addr); rerr != nil {
			r.Logger.Warn("graphql: give back a 1:1 address", "address", addr, "err", rerr)
		}
		return nil, err
	}
	return oneToOneModel(z.ID, o), nil
}

// deleteOneToOneAddress removes the mapping, then gives its address back.
func (r *Resolver) deleteOneToOneAddress(ctx context.Context, id string) (*model.DeletedOneToOneAddress, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	var gone catalog.OneToOneAddress
	var zone string
	err := r.deleteFromGateway(ctx, id, "1:1 address", func(g *catalog.EdgeGateway, id string) bool {
		i := slices.IndexFunc(g.OneToOne, func(o catalog.OneToOneAddress) bool { return o.ID == id })
		if i >= 0 {
			gone, zone = g.OneToOne[i], g.Zone
		}
		return removeByID(&g.OneToOne, id, func(o catalog.OneToOneAddress) string { return o.ID })
	})
	if err != nil {
		return nil, err
	}
	if a, perr := netip.ParseAddr(gone.PublicAddress); perr == nil {
		if err := catalog.ReleasePublicAddress(ctx, r.Catalog, zone, scope.VDC.Name, a); err != nil {
			return nil, apierr.From(err, "")
		}
	}
	return &model.DeletedOneToOneAddress{ID: id}, nil
}

// updateEdgeGateway sets the limits.
func (r *Resolver) updateEdgeGateway(ctx context.Context, in model.UpdateEdgeGatewayInput) (*model.EdgeGateway, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	for _, l := range []struct {
		field string
		v     *int
	}{{"input.egressMbps", in.EgressMbps}, {"input.ingressMbps", in.IngressMbps}} {
		if l.v != nil && (*l.v < 0 || *l.v > catalog.MaxMbps) {
			return nil, apierr.BadInput(l.field, "%s: %d is out of range: 0 (no limit) to %d Mbit/s", l.field, *l.v, catalog.MaxMbps)
		}
	}
	z, err := r.edgeZone(ctx, scope.VDC.Name, in.Zone, "input.zone")
	if err != nil {
		return nil, err
	}
	g, err := r.changeGateway(ctx, scope.VDC.Name, z.Name, "input", func(g *catalog.EdgeGateway) error {
		if in.EgressMbps != nil {
			g.EgressMbps = *in.EgressMbps
		}
		if in.IngressMbps != nil {
			g.IngressMbps = *in.IngressMbps
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r.edgeGatewayModel(ctx, z, g), nil
}

func externalNetworkModel(n *catalog.ExternalNetwork) *model.ExternalNetwork {
	return &model.ExternalNetwork{Zone: n.Name, Description: optString(n.Description), Bridge: n.Bridge, Cidr: n.CIDR, Gateway: n.Gateway,
		PoolStart: n.PoolStart, PoolEnd: n.PoolEnd, PoolSize: n.PoolSize(), Allocated: len(n.Status.Allocations)}
}

// createExternalNetwork creates a known zone's external network.
func (r *Resolver) createExternalNetwork(ctx context.Context, in model.CreateExternalNetworkInput) (*model.ExternalNetwork, error) {
	zs, err := r.zonesOf(ctx, &in.Zone, "input.zone")
	if err != nil {
		return nil, err
	}
	n := &catalog.ExternalNetwork{ExternalNetworkSpec: catalog.ExternalNetworkSpec{Description: deref(in.Description), Bridge: in.Bridge,
		CIDR: in.Cidr, Gateway: in.Gateway, PoolStart: in.PoolStart, PoolEnd: in.PoolEnd}}
	n.Name = zs[0].Name
	created, err := catalog.Create(ctx, r.Catalog, n)
	if err != nil {
		if errors.Is(err, catalog.ErrAlreadyExists) {
			return nil, apierr.New(apierr.Conflict, "zone %s has an external network already", n.Name)
		}
		return nil, apierr.From(err, "input")
	}
	return externalNetworkModel(created), nil
}

// externalNetworks lists every zone's external network.
func (r *Resolver) externalNetworks(ctx context.Context, first *int, after *string) (*model.ExternalNetworkConnection, error) {
	ns, err := catalog.List[*catalog.ExternalNetwork](ctx, r.Catalog)
	if err != nil {
		return nil, apierr.From(err, "")
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
// any other VDC's or none) and gives its addresses back to the pool; the
// syncers tear its namespace down on their next pass.
func (r *Resolver) deleteEdgeGateway(ctx context.Context, id string) (*model.DeletedEdgeGateway, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	notFound := apierr.New(apierr.NotFound, "edge gateway %q not found", id)
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil {
		return nil, notFound
	}
	zone, ok := strings.CutPrefix(string(raw), "egw:"+scope.VDC.Name+".")
	if !ok || zone == "" {
		return nil, notFound
	}
	released, err := catalog.DeleteEdgeGateway(ctx, r.Catalog, scope.VDC.Name, zone)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, apierr.From(err, "")
	}
	out := &model.DeletedEdgeGateway{ID: id, Zone: zone, ReleasedAddresses: []string{}}
	for _, a := range released {
		out.ReleasedAddresses = append(out.ReleasedAddresses, a.String())
	}
	return out, nil
}
