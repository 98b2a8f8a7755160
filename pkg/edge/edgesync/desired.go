package edgesync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/tenancy"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// FromCatalog returns a Config.Desired that derives every gateway from the
// catalog: each EdgeGateway object (rules, port forwards, 1:1 addresses,
// limits, public address) with its zone's ExternalNetwork (the uplink) and,
// read from the zone's Proxmox, the VDC's networks there (a leg each on its
// VNet holding its gateway address) and its VMs' addresses from the IPAM
// (the targets). A gateway that cannot be derived this pass (its zone
// unreachable, its public address not held by its VDC in the pool) is
// given without its state (Desired.Gateway nil) and logged: the agent keeps
// running what it had. One whose zone is not in the mesh is left out: no
// host of that zone is seen to remove it from.
// The VDC's load balancers in the zone are derived too (Balancers), reaching
// the flexgateway replicas of lbZones (by zone name), and its Kubernetes
// clusters' endpoints (Endpoints), reaching their API servers where
// kubeTargets (nil: none) says the management cluster serves them.
func FromCatalog(store catalog.Store, reg *fleet.Registry, log *slog.Logger, lbZones map[string]loadbalancer.Zone, kubeTargets KubeTargets) func(context.Context) ([]Desired, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lastTargets := &targetsCache{}
	return func(ctx context.Context) ([]Desired, error) {
		gws, err := catalog.List[*catalog.EdgeGateway](ctx, store)
		if err != nil {
			return nil, err
		}
		nets, err := catalog.List[*catalog.ExternalNetwork](ctx, store)
		if err != nil {
			return nil, err
		}
		lbs, err := catalog.List[*catalog.LoadBalancer](ctx, store)
		if err != nil {
			return nil, err
		}
		var targets map[string]netip.AddrPort
		if slices.ContainsFunc(gws, func(g *catalog.EdgeGateway) bool { return len(g.KubeEndpoints) > 0 }) {
			targets = lastTargets.get(ctx, kubeTargets, log)
		}
		byZoneName := map[string]fleet.Zone{}
		for _, z := range reg.Zones() {
			byZoneName[z.Name] = z
		}
		mappings := map[string][]ipam.Mapping{} // by zone id, read once per pass
		var out []Desired
		for _, g := range gws {
			z, ok := byZoneName[g.Zone]
			if !ok {
				continue // the zone is not (or no longer) in the mesh
			}
			// Kept as it runs, not removed, when its state cannot be derived.
			keep := Desired{ZoneID: z.ID, VDC: g.VDC}
			i := slices.IndexFunc(nets, func(n *catalog.ExternalNetwork) bool { return n.Name == g.Zone })
			if i < 0 {
				log.Warn("edgesync: a gateway's zone has no external network", "gateway", g.Name)
				out = append(out, keep)
				continue
			}
			c := reg.Client(z.ID)
			ms, ok := mappings[z.ID]
			if !ok {
				if ms, err = ipam.Mappings(ctx, c); err != nil {
					log.Warn("edgesync: read the IPAM", "zone", z.Name, "err", err)
					out = append(out, keep)
					continue
				}
				mappings[z.ID] = ms
			}
			gw, err := Derive(ctx, c, g, nets[i], ms)
			if err != nil {
				log.Warn("edgesync: derive a gateway", "gateway", g.Name, "err", err)
				out = append(out, keep)
				continue
			}
			gw.Balancers = Balancers(g, nets[i], ms, lbs, lbZones[g.Zone], log)
			gw.Endpoints = Endpoints(g, gw.Legs, targets)
			out = append(out, Desired{ZoneID: z.ID, Gateway: gw})
		}
		return out, nil
	}
}

// Derive builds the whole state of g's gateway: its uplink on en, a leg per
// network of the VDC in the zone of c, and the port forwards' and 1:1
// addresses' targets from the IPAM mappings ms (a VM without an address
// in the VDC's networks is left out until it has one).
func Derive(ctx context.Context, c *proxmox.Client, g *catalog.EdgeGateway, en *catalog.ExternalNetwork, ms []ipam.Mapping) (*edgev1.Gateway, error) {
	public, err := netip.ParseAddr(g.PublicAddress)
	if err != nil {
		return nil, fmt.Errorf("derive %s: %w", g.Name, err)
	}
	if err := held(en, g.VDC, public, catalog.UseGateway); err != nil {
		return nil, fmt.Errorf("derive %s: %w", g.Name, err)
	}
	cidr, _, _ := en.Pool()
	nets, err := network.List(ctx, c, g.VDC)
	if err != nil {
		return nil, fmt.Errorf("derive %s: %w", g.Name, err)
	}
	out := &edgev1.Gateway{
		Vdc:         g.VDC,
		Uplink:      &edgev1.Uplink{Bridge: en.Bridge, Address: netip.PrefixFrom(public, cidr.Bits()).String(), Gateway: en.Gateway},
		EgressMbps:  uint32(g.EgressMbps),
		IngressMbps: uint32(g.IngressMbps),
	}
	for _, n := range nets {
		out.Legs = append(out.Legs, &edgev1.Leg{Bridge: n.VNet, Address: netip.PrefixFrom(n.Gateway, n.CIDR.Bits()).String()})
	}
	addrs := vmAddresses(g.VDC, ms)
	for _, pf := range g.PortForwards {
		if a, ok := addrs[pf.VMID]; ok {
			out.PortForwards = append(out.PortForwards, &edgev1.PortForward{Id: pf.ID, Protocol: pf.Protocol, PublicAddress: pf.PublicAddress,
				PublicPort: uint32(pf.PublicPort), Target: a.String(), TargetPort: uint32(pf.TargetPort)})
		}
	}
	for _, o := range g.OneToOne {
		a, ok := addrs[o.VMID]
		pub, perr := netip.ParseAddr(o.PublicAddress)
		if ok && perr == nil && held(en, g.VDC, pub, catalog.UseOneToOne) == nil {
			out.OneToOne = append(out.OneToOne, &edgev1.OneToOne{Id: o.ID, PublicAddress: o.PublicAddress, PrivateAddress: a.String()})
		}
	}
	for _, r := range g.FirewallRules {
		out.Rules = append(out.Rules, Rule(r))
	}
	return out, nil
}

// Balancers are the addresses of g's VDC's load balancers in its zone: each
// listener forwarded to the zone's flexgateway replicas (z) at its frontend
// port, each backend's relay port to the VM's address (from the IPAM
// mappings ms) and port, for the replicas' addresses only. A balancer
// whose address the pool does not record as the VDC's, or a zone without
// replicas, gives none; a VM without an address is left out until it has
// one.
func Balancers(g *catalog.EdgeGateway, en *catalog.ExternalNetwork, ms []ipam.Mapping, lbs []*catalog.LoadBalancer, z loadbalancer.Zone, log *slog.Logger) []*edgev1.Balancer {
	if !z.Frontend.IsValid() {
		return nil
	}
	addrs := vmAddresses(g.VDC, ms)
	var out []*edgev1.Balancer
	for _, lb := range lbs {
		if lb.VDC != g.VDC || lb.Zone != g.Zone {
			continue
		}
		if err := held(en, lb.VDC, lb.PublicAddr(), catalog.UseLoadBalancer); err != nil {
			log.Warn("edgesync: a load balancer's address", "balancer", lb.Name, "err", err)
			continue
		}
		b := &edgev1.Balancer{Id: lb.Name, PublicAddress: lb.PublicAddress}
		for i, l := range lb.Listeners {
			port, err := loadbalancer.FrontendPort(en, lb, i)
			if err != nil {
				log.Warn("edgesync: a load balancer's listener", "balancer", lb.Name, "err", err)
				continue
			}
			b.Frontends = append(b.Frontends, &edgev1.Forward{Port: uint32(l.Port), Target: z.Frontend.String(), TargetPort: uint32(port)})
		}
		relays := loadbalancer.RelayPorts(lb)
		backends := make([]catalog.LBBackend, 0, len(relays))
		for be := range relays {
			backends = append(backends, be)
		}
		slices.SortFunc(backends, func(x, y catalog.LBBackend) int { return relays[y] - relays[x] })
		for _, be := range backends {
			if a, ok := addrs[be.VMID]; ok {
				b.Relays = append(b.Relays, &edgev1.Forward{Port: uint32(relays[be]), Target: a.String(), TargetPort: uint32(be.Port)})
			}
		}
		for _, s := range z.Sources {
			b.Sources = append(b.Sources, s.String())
		}
		out = append(out, b)
	}
	return out
}

// KubeTargets returns, by cluster id, where the management cluster serves
// each Kubernetes cluster's hosted API server to the zones' external
// networks (controlplane.ListTargets).
type KubeTargets func(context.Context) (map[string]netip.AddrPort, error)

// targetsCache keeps the last KubeTargets read: a pass that cannot read
// them (the management cluster not answering) derives the endpoints from
// the last ones, rather than cut the workers off from running API servers.
type targetsCache struct {
	mu   sync.Mutex
	last map[string]netip.AddrPort // protected by mu
}

func (c *targetsCache) get(ctx context.Context, read KubeTargets, log *slog.Logger) map[string]netip.AddrPort {
	if read == nil {
		return nil
	}
	t, err := read(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		log.Warn("edgesync: read the Kubernetes API servers' addresses; the last ones are kept", "err", err)
		return c.last
	}
	c.last = t
	return t
}

// Endpoints are g's Kubernetes clusters' endpoints on legs (the VDC's
// networks in the zone), each forwarded to its API server at targets. An
// endpoint whose network is gone, or whose API server has no address yet,
// is left out until it has.
func Endpoints(g *catalog.EdgeGateway, legs []*edgev1.Leg, targets map[string]netip.AddrPort) []*edgev1.Endpoint {
	onLeg := map[string]bool{}
	for _, l := range legs {
		if p, err := netip.ParsePrefix(l.GetAddress()); err == nil {
			onLeg[p.Addr().String()] = true
		}
	}
	var out []*edgev1.Endpoint
	for _, e := range g.KubeEndpoints {
		t, ok := targets[e.Cluster]
		if !ok || !onLeg[e.Address] {
			continue
		}
		out = append(out, &edgev1.Endpoint{Id: e.Cluster, Address: e.Address, Port: uint32(e.Port),
			Target: t.Addr().String(), TargetPort: uint32(t.Port())})
	}
	return out
}

// Rule is a catalog rule as the agent takes it.
func Rule(r catalog.FirewallRule) *edgev1.Rule {
	d := edgev1.Direction_DIRECTION_INBOUND
	if r.Direction == catalog.DirectionOutbound {
		d = edgev1.Direction_DIRECTION_OUTBOUND
	}
	return &edgev1.Rule{Id: r.ID, Direction: d, Protocol: r.Protocol, FromPort: uint32(r.FromPort), ToPort: uint32(r.ToPort),
		Source: r.Source, Destination: r.Destination, Allow: r.Action == catalog.ActionAllow}
}

// errNotHeld: the pool does not record the address as the VDC's.
var errNotHeld = errors.New("the public address is not the VDC's in the external network's pool")

func held(en *catalog.ExternalNetwork, vdc string, a netip.Addr, use string) error {
	if al, ok := en.Holder(a); !ok || al.VDC != vdc || al.Use != use {
		return fmt.Errorf("%s: %w", a, errNotHeld)
	}
	return nil
}

// vmAddresses maps each VM of vdc to its lowest address in the VDC's
// networks (the IPAM's mappings of the VDC's SDN zone).
func vmAddresses(vdc string, ms []ipam.Mapping) map[int]netip.Addr {
	zone := tenancy.SDNZoneID(vdc)
	out := map[int]netip.Addr{}
	for _, m := range ms {
		a, err := netip.ParseAddr(m.IP)
		if m.Zone != zone || m.VMID == 0 || m.Gateway != 0 || err != nil || !a.Is4() {
			continue
		}
		if cur, ok := out[int(m.VMID)]; !ok || a.Less(cur) {
			out[int(m.VMID)] = a
		}
	}
	return out
}
