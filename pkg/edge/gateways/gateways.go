// Package gateways is the orchestrator's side of the VDCs' edge gateways as
// the API changes them: the catalog's EdgeGateway objects (one per VDC and
// zone, made with a public address of the zone's pool at the first change
// that needs it) changed by read-modify-write conditional on their
// resourceVersion, retried while concurrent writes win; the firewall
// rules, port forwards and 1:1 addresses checked before they are written;
// the zones' external networks; and the state of a running gateway, as
// the syncer (package edgesync) reads it from its agent. The zones are
// reached through small interfaces the orchestrator satisfies; the
// package imports no transport.
package gateways

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// Fleet is what the service needs of the zones to check the VMs that port
// forwards and 1:1 addresses name (the orchestrator implements it over the
// fleet registry).
type Fleet interface {
	// ZoneName returns the name of the zone of id; false when there is
	// none.
	ZoneName(id string) (string, bool)
	// PoolVMs lists the VM ids of the guests (templates left out) of the
	// Proxmox pool in the zone of id zoneID.
	PoolVMs(ctx context.Context, zoneID, pool string) ([]int, error)
}

// Status is the state of a running gateway.
type Status int

// The states of a gateway.
const (
	// Pending: not placed, or its agent does not report it yet.
	Pending Status = iota
	// Active: its agent runs it.
	Active
	// Failed: the last pass could not apply it.
	Failed
)

// Counter is a packet counter of a running gateway.
type Counter struct {
	// Name is the counter's id; a firewall rule's counter is named by the
	// rule's id.
	Name string
	// Rule is the id of the firewall rule it counts; empty for others.
	Rule           string
	Packets, Bytes uint64
}

// State is what is known of a running gateway.
type State struct {
	Status Status
	// Message says why it is pending or failed; empty otherwise.
	Message string
	// Node is the Proxmox node running it; empty when not placed.
	Node     string
	Counters []Counter
}

// Running reads the state of the gateways as they run (edgesync.Syncer
// implements it).
type Running interface {
	State(ctx context.Context, zoneID, vdc string) State
}

// Config configures a Service.
type Config struct {
	// Store holds the gateways, external networks and zone policies
	// (required).
	Store catalog.Store
	// Fleet checks the VMs port forwards and 1:1 addresses name
	// (required).
	Fleet Fleet
	// Running reads the gateways' state; nil: every gateway is pending.
	Running Running
	// Logger receives addresses that could not be given back; nil
	// discards them.
	Logger *slog.Logger
}

// Service changes the VDCs' edge gateways.
type Service struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg and returns the service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Fleet == nil {
		return nil, errors.New("gateways: Config.Store and Config.Fleet are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, log: log}, nil
}

// newID is a random id of a rule, port forward or 1:1 address: unique
// across gateways, so a bare id finds its object among the VDC's gateways.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// maxTries bounds the retries of a gateway change that keeps losing its
// conditional write.
const maxTries = 20

// change applies fn to vdc's gateway in zone (created with a public
// address when it has none), retrying on a concurrent write. An fn
// returning an error changes nothing.
func (s *Service) change(ctx context.Context, vdc, zone string, fn func(*catalog.EdgeGateway) error) (*catalog.EdgeGateway, error) {
	// A change that makes the VDC's first gateway in the zone takes an
	// address of its pool, within the VDC's publicAddresses quota.
	for range maxTries {
		g, err := quota.EnsureEdgeGateway(ctx, s.cfg.Store, vdc, zone)
		if err != nil {
			return nil, fmt.Errorf("gateways: %w", err)
		}
		if err := fn(g); err != nil {
			return nil, err
		}
		out, err := catalog.Update(ctx, s.cfg.Store, g)
		if errors.Is(err, catalog.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("gateways: %w", err)
		}
		return out, nil
	}
	return nil, fault.New(fault.Conflict, "the edge gateway keeps changing; try again")
}

// List lists vdc's gateways, sorted by zone.
func (s *Service) List(ctx context.Context, vdc string) ([]*catalog.EdgeGateway, error) {
	all, err := catalog.List[*catalog.EdgeGateway](ctx, s.cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("gateways: %w", err)
	}
	return slices.DeleteFunc(all, func(g *catalog.EdgeGateway) bool { return g.VDC != vdc }), nil
}

// State is the state of g as it runs in the zone of id zoneID.
func (s *Service) State(ctx context.Context, zoneID string, g *catalog.EdgeGateway) State {
	if s.cfg.Running == nil {
		return State{Status: Pending}
	}
	return s.cfg.Running.State(ctx, zoneID, g.VDC)
}

// removeFrom removes the item with id (per remove, which reports whether
// it held it) from vdc's gateway holding it: NOT_FOUND when none does.
func (s *Service) removeFrom(ctx context.Context, vdc, id, what string, remove func(*catalog.EdgeGateway, string) bool) (*catalog.EdgeGateway, error) {
	gws, err := s.List(ctx, vdc)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(gws, func(g *catalog.EdgeGateway) bool {
		return remove(g.DeepCopyObject().(*catalog.EdgeGateway), id)
	})
	if i < 0 {
		return nil, fault.New(fault.NotFound, "%s not found", what)
	}
	var before *catalog.EdgeGateway
	_, err = s.change(ctx, vdc, gws[i].Zone, func(g *catalog.EdgeGateway) error {
		before = g.DeepCopyObject().(*catalog.EdgeGateway)
		if !remove(g, id) {
			return fault.New(fault.NotFound, "%s not found", what)
		}
		return nil
	})
	return before, err
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

// RuleSpec is a firewall rule to add.
type RuleSpec struct {
	// Direction is catalog.DirectionInbound or catalog.DirectionOutbound.
	Direction string
	// Protocol and Action are the catalog's (lower case).
	Protocol, Action string
	// FromPort and ToPort bound the ports; one alone is a single port.
	FromPort, ToPort                 *int
	Source, Destination, Description string
	// Position is where the rule goes (0 first); nil appends it.
	Position *int
}

// CheckRule checks spec without reading anything and returns the rule it
// makes (with a new id).
func CheckRule(spec RuleSpec) (catalog.FirewallRule, error) {
	rule := catalog.FirewallRule{ID: newID(), Direction: spec.Direction, Protocol: spec.Protocol, Action: spec.Action,
		Source: spec.Source, Destination: spec.Destination, Description: spec.Description}
	if spec.FromPort != nil || spec.ToPort != nil {
		from, to := cmp.Or(deref(spec.FromPort), deref(spec.ToPort)), cmp.Or(deref(spec.ToPort), deref(spec.FromPort))
		if from == 0 || to == 0 {
			if from == 0 && spec.FromPort != nil {
				return rule, fault.Invalid("fromPort", "port 0 is out of range: 1 to 65535")
			}
			return rule, fault.Invalid("toPort", "port 0 is out of range: 1 to 65535")
		}
		rule.FromPort, rule.ToPort = from, to
	}
	if err := catalog.ValidateFirewallRule(rule); err != nil {
		return rule, fmt.Errorf("gateways: %w", err)
	}
	if spec.Position != nil && *spec.Position < 0 {
		return rule, fault.Invalid("position", "%d is below 0", *spec.Position)
	}
	return rule, nil
}

// ZoneCheck resolves the zone a change names, once the change's input is
// checked: the API's edge makes sure the caller sees it and the VDC may
// use it, so that bad input is told before the zone is looked at.
type ZoneCheck func() (string, error)

// Zone is the ZoneCheck of a zone already checked.
func Zone(name string) ZoneCheck { return func() (string, error) { return name, nil } }

// CreateFirewallRule checks spec and inserts the rule into vdc's gateway
// in the zone zoneOf resolves, returning it and its position.
func (s *Service) CreateFirewallRule(ctx context.Context, vdc string, zoneOf ZoneCheck, spec RuleSpec) (catalog.FirewallRule, int, error) {
	rule, err := CheckRule(spec)
	if err != nil {
		return catalog.FirewallRule{}, 0, err
	}
	zone, err := zoneOf()
	if err != nil {
		return catalog.FirewallRule{}, 0, err
	}
	pos := 0
	_, err = s.change(ctx, vdc, zone, func(g *catalog.EdgeGateway) error {
		pos = len(g.FirewallRules)
		if spec.Position != nil {
			if *spec.Position > pos {
				return fault.Invalid("position", "%d is beyond the end (the gateway has %d rules)", *spec.Position, pos)
			}
			pos = *spec.Position
		}
		g.FirewallRules = slices.Insert(g.FirewallRules, pos, rule)
		return nil
	})
	if err != nil {
		return catalog.FirewallRule{}, 0, err
	}
	return rule, pos, nil
}

// DeleteFirewallRule removes the rule with id from vdc's gateway holding
// it.
func (s *Service) DeleteFirewallRule(ctx context.Context, vdc, id string) error {
	_, err := s.removeFrom(ctx, vdc, id, "firewall rule", func(g *catalog.EdgeGateway, id string) bool {
		return removeByID(&g.FirewallRules, id, func(r catalog.FirewallRule) string { return r.ID })
	})
	return err
}

// vmOf resolves a VM id of vdc: NOT_FOUND for any other VDC's (or none),
// ZONE_UNAVAILABLE when its zone does not answer.
func (s *Service) vmOf(ctx context.Context, vdc, id string) (string, tenancy.VMRef, error) {
	notFound := fault.New(fault.NotFound, "VM not found")
	ref, err := tenancy.ParseVMID(id)
	if err != nil {
		return "", ref, notFound
	}
	zone, ok := s.cfg.Fleet.ZoneName(ref.ZoneID)
	if !ok {
		return "", ref, notFound
	}
	vms, err := s.cfg.Fleet.PoolVMs(ctx, ref.ZoneID, tenancy.PoolID(vdc))
	if err != nil {
		return "", ref, fault.ZoneDown(zone, err)
	}
	if !slices.Contains(vms, ref.VMID) {
		return "", ref, notFound
	}
	return zone, ref, nil
}

// publicAddress checks a public address asked for: IPv4 and in the zone's
// pool (bad input on field otherwise); nil gives the zero Addr.
func (s *Service) publicAddress(ctx context.Context, zone string, in *string, field string) (netip.Addr, error) {
	if in == nil {
		return netip.Addr{}, nil
	}
	a, err := catalog.ParseIPv4(field, *in)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("gateways: %w", err)
	}
	en, err := catalog.Get[*catalog.ExternalNetwork](ctx, s.cfg.Store, zone)
	if errors.Is(err, catalog.ErrNotFound) {
		return netip.Addr{}, fault.Invalid(field, "zone %s has no external network", zone)
	}
	if err != nil {
		return netip.Addr{}, fmt.Errorf("gateways: %w", err)
	}
	if !en.InPool(a) {
		return netip.Addr{}, fault.Invalid(field, "%s is outside the pool %s-%s of zone %s's external network", a, en.PoolStart, en.PoolEnd, zone)
	}
	return a, nil
}

// target resolves what a port forward or a 1:1 address of vdc names: its
// VM (another VDC's is NOT_FOUND), which must be in a zone the VDC may
// use, and the public address asked for (zero when none), which must be
// in that zone's pool.
func (s *Service) target(ctx context.Context, vdc, vmID string, publicAddress *string) (string, tenancy.VMRef, netip.Addr, error) {
	zone, ref, err := s.vmOf(ctx, vdc, vmID)
	if err != nil {
		return "", ref, netip.Addr{}, err
	}
	open, err := catalog.ZoneAllows(ctx, s.cfg.Store, zone, vdc)
	if err != nil {
		return "", ref, netip.Addr{}, fmt.Errorf("gateways: zone policy: %w", err)
	}
	if !open {
		return "", ref, netip.Addr{}, fault.Invalid("vmId", "there is no zone %q", zone)
	}
	want, err := s.publicAddress(ctx, zone, publicAddress, "publicAddress")
	if err != nil {
		return "", ref, netip.Addr{}, err
	}
	return zone, ref, want, nil
}

// PortForwardSpec is a port forward to add.
type PortForwardSpec struct {
	// VM is the API id of the VM forwarded to.
	VM string
	// Protocol is "tcp" or "udp".
	Protocol               string
	PublicPort, TargetPort int
	// PublicAddress, when set, must be the VDC's gateway's address.
	PublicAddress *string
}

func validPort(field string, p int) error {
	if p < 1 || p > 65535 {
		return fault.Invalid(field, "port %d is out of range: 1 to 65535", p)
	}
	return nil
}

// CreatePortForward checks spec and its VM (of vdc, in a zone vdc may
// use) and adds the forward to vdc's gateway in the VM's zone; it returns
// the forward and the zone's id.
func (s *Service) CreatePortForward(ctx context.Context, vdc string, spec PortForwardSpec) (catalog.PortForward, string, error) {
	if err := cmp.Or(validPort("publicPort", spec.PublicPort), validPort("targetPort", spec.TargetPort)); err != nil {
		return catalog.PortForward{}, "", err
	}
	zone, ref, want, err := s.target(ctx, vdc, spec.VM, spec.PublicAddress)
	if err != nil {
		return catalog.PortForward{}, "", err
	}
	pf := catalog.PortForward{ID: newID(), Protocol: spec.Protocol, PublicPort: spec.PublicPort, VMID: ref.VMID, TargetPort: spec.TargetPort}
	_, err = s.change(ctx, vdc, zone, func(g *catalog.EdgeGateway) error {
		if want.IsValid() && want.String() != g.PublicAddress {
			return fault.Invalid("publicAddress", "%s is not the VDC's public address in zone %s (%s)", want, zone, g.PublicAddress)
		}
		for _, o := range g.PortForwards {
			if o.Protocol == pf.Protocol && o.PublicPort == pf.PublicPort {
				return fault.Invalid("publicPort", "%s port %d of %s is forwarded already", pf.Protocol, pf.PublicPort, g.PublicAddress)
			}
		}
		pf.PublicAddress = g.PublicAddress
		g.PortForwards = append(g.PortForwards, pf)
		return nil
	})
	if err != nil {
		return catalog.PortForward{}, "", err
	}
	return pf, ref.ZoneID, nil
}

// DeletePortForward removes the forward with id from vdc's gateway
// holding it.
func (s *Service) DeletePortForward(ctx context.Context, vdc, id string) error {
	_, err := s.removeFrom(ctx, vdc, id, "port forward", func(g *catalog.EdgeGateway, id string) bool {
		return removeByID(&g.PortForwards, id, func(p catalog.PortForward) string { return p.ID })
	})
	return err
}

// CreateOneToOne allocates a public address (the one asked for, when
// given) of the VM's zone to the VM of vdc, within the VDC's
// publicAddresses quota, and records it on the VDC's gateway there
// (giving the address back if that fails); it returns the mapping and the
// zone's id.
func (s *Service) CreateOneToOne(ctx context.Context, vdc, vm string, publicAddress *string) (catalog.OneToOneAddress, string, error) {
	zone, ref, want, err := s.target(ctx, vdc, vm, publicAddress)
	if err != nil {
		return catalog.OneToOneAddress{}, "", err
	}
	addr, err := quota.TakePublicAddress(ctx, s.cfg.Store, vdc, zone, catalog.UseOneToOne, want, "publicAddress")
	if err != nil {
		return catalog.OneToOneAddress{}, "", fmt.Errorf("gateways: %w", err)
	}
	o := catalog.OneToOneAddress{ID: newID(), PublicAddress: addr.String(), VMID: ref.VMID}
	_, err = s.change(ctx, vdc, zone, func(g *catalog.EdgeGateway) error {
		g.OneToOne = append(g.OneToOne, o)
		return nil
	})
	if err != nil {
		if rerr := catalog.ReleasePublicAddress(context.WithoutCancel(ctx), s.cfg.Store, zone, vdc, addr); rerr != nil {
			s.log.Warn("gateways: give back a 1:1 address", "address", addr, "err", rerr)
		}
		return catalog.OneToOneAddress{}, "", err
	}
	return o, ref.ZoneID, nil
}

// DeleteOneToOne removes the mapping with id from vdc's gateway holding
// it, then gives its address back.
func (s *Service) DeleteOneToOne(ctx context.Context, vdc, id string) error {
	var gone catalog.OneToOneAddress
	before, err := s.removeFrom(ctx, vdc, id, "1:1 address", func(g *catalog.EdgeGateway, id string) bool {
		if i := slices.IndexFunc(g.OneToOne, func(o catalog.OneToOneAddress) bool { return o.ID == id }); i >= 0 {
			gone = g.OneToOne[i]
		}
		return removeByID(&g.OneToOne, id, func(o catalog.OneToOneAddress) string { return o.ID })
	})
	if err != nil {
		return err
	}
	if a, perr := netip.ParseAddr(gone.PublicAddress); perr == nil {
		if err := catalog.ReleasePublicAddress(ctx, s.cfg.Store, before.Zone, vdc, a); err != nil {
			return fmt.Errorf("gateways: give back %s: %w", a, err)
		}
	}
	return nil
}

// CheckLimits checks bandwidth limits (Mbit/s; 0 is none, nil keeps the
// gateway's).
func CheckLimits(egressMbps, ingressMbps *int) error {
	for _, l := range []struct {
		field string
		v     *int
	}{{"egressMbps", egressMbps}, {"ingressMbps", ingressMbps}} {
		if l.v != nil && (*l.v < 0 || *l.v > catalog.MaxMbps) {
			return fault.Invalid(l.field, "%d is out of range: 0 (no limit) to %d Mbit/s", *l.v, catalog.MaxMbps)
		}
	}
	return nil
}

// SetLimits sets the bandwidth limits of vdc's gateway in the zone zoneOf
// resolves.
func (s *Service) SetLimits(ctx context.Context, vdc string, zoneOf ZoneCheck, egressMbps, ingressMbps *int) (*catalog.EdgeGateway, error) {
	if err := CheckLimits(egressMbps, ingressMbps); err != nil {
		return nil, err
	}
	zone, err := zoneOf()
	if err != nil {
		return nil, err
	}
	return s.change(ctx, vdc, zone, func(g *catalog.EdgeGateway) error {
		if egressMbps != nil {
			g.EgressMbps = *egressMbps
		}
		if ingressMbps != nil {
			g.IngressMbps = *ingressMbps
		}
		return nil
	})
}

// Delete deletes vdc's gateway in zone (NOT_FOUND when there is none) and
// gives its addresses back to the pool; the syncers tear its namespace
// down on their next pass.
func (s *Service) Delete(ctx context.Context, vdc, zone string) ([]netip.Addr, error) {
	released, err := catalog.DeleteEdgeGateway(ctx, s.cfg.Store, vdc, zone)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, fault.New(fault.NotFound, "edge gateway not found")
	}
	if err != nil {
		return nil, fmt.Errorf("gateways: delete: %w", err)
	}
	return released, nil
}

// CreateExternalNetwork creates the external network of its zone (named
// by n's name): a conflict when the zone has one.
func (s *Service) CreateExternalNetwork(ctx context.Context, n *catalog.ExternalNetwork) (*catalog.ExternalNetwork, error) {
	created, err := catalog.Create(ctx, s.cfg.Store, n)
	if errors.Is(err, catalog.ErrAlreadyExists) {
		return nil, fault.New(fault.Conflict, "zone %s has an external network already", n.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("gateways: create external network: %w", err)
	}
	return created, nil
}

// ExternalNetworks lists every zone's external network.
func (s *Service) ExternalNetworks(ctx context.Context) ([]*catalog.ExternalNetwork, error) {
	ns, err := catalog.List[*catalog.ExternalNetwork](ctx, s.cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("gateways: external networks: %w", err)
	}
	return ns, nil
}

func deref[V any](v *V) V {
	var zero V
	if v == nil {
		return zero
	}
	return *v
}
