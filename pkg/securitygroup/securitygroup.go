// Package securitygroup is the orchestrator's side of the VDCs' security
// groups as the API changes them: the catalog's SecurityGroup objects
// (named <vdc>.<name>, checked before they are written, changed
// conditionally on their resourceVersion), the VDC's default group, and
// which groups a VM is in, which is a fact of the VM kept in its intent
// (package compute). Where a group stands in each zone's Proxmox firewall
// is read by the syncer (package sgsync), through the State interface.
// The package imports no transport.
package securitygroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/support/fault"
)

// VMs is what the service needs of the VM lifecycle (compute.Service
// implements it).
type VMs interface {
	// Members lists the VDC's VMs with their groups, by zone that answers;
	// the error of each zone that does not, by zone name.
	Members(ctx context.Context, vdc string) ([]compute.Member, map[string]error)
	// SecurityGroups returns the groups of a VM of vdc.
	SecurityGroups(ctx context.Context, vdc, id string) ([]string, error)
	// SetSecurityGroups puts a VM of vdc in exactly the groups named.
	SetSecurityGroups(ctx context.Context, vdc, id string, names []string) (*compute.VM, error)
}

// Status is where a group stands in a zone.
type Status string

// The states of a group in a zone.
const (
	// StatusApplied: the zone's firewall holds the group as the catalog
	// has it, with its members.
	StatusApplied Status = "APPLIED"
	// StatusPending: not yet written (or written as it was before a
	// change).
	StatusPending Status = "PENDING"
	// StatusError: the last pass could not write it; Message says why.
	StatusError Status = "ERROR"
	// StatusUnavailable: the zone cannot be reached.
	StatusUnavailable Status = "UNAVAILABLE"
)

// ZoneState is where a group stands in one zone.
type ZoneState struct {
	// Zone is the zone's name.
	Zone string
	// Status is one of the Status constants.
	Status Status
	// Message says why it is pending, failed or unavailable.
	Message string
}

// State reads where a group stands in each zone where its VDC has VMs
// (sgsync.Syncer implements it over each zone's Proxmox firewall).
type State interface {
	Zones(ctx context.Context, g *catalog.SecurityGroup) []ZoneState
}

// Config configures a Service.
type Config struct {
	// Store holds the groups and the VDCs (required).
	Store catalog.Store
	// VMs reads and changes the VMs' groups (required).
	VMs VMs
	// State reads the groups' state in the zones; nil: every group is
	// reported in no zone.
	State State
	// Changed, if set, is called after each change of a group, a VM's
	// groups or the default (sgsync.Syncer.Kick: the zones follow at
	// once rather than at the next pass).
	Changed func()
	// Firewall, if set, is waited on after a VM is put in groups
	// (sgsync.Syncer): setVMSecurityGroups returns once the VM's zone's
	// firewall holds them. Nil: it returns at once.
	Firewall compute.Firewall
	// FirewallTimeout bounds that wait; default 30s.
	FirewallTimeout time.Duration
	// Logger receives the service's logs; nil discards them.
	Logger *slog.Logger
}

// Service changes the VDCs' security groups.
type Service struct {
	cfg Config
	log *slog.Logger
}

// changed tells Config.Changed.
func (s *Service) changed() {
	if s.cfg.Changed != nil {
		s.cfg.Changed()
	}
}

// New checks cfg and returns the service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.VMs == nil {
		return nil, errors.New("securitygroup: Config.Store and Config.VMs are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.FirewallTimeout <= 0 {
		cfg.FirewallTimeout = 30 * time.Second
	}
	return &Service{cfg: cfg, log: log}, nil
}

// ID is the API id of a group: its catalog name.
func ID(g *catalog.SecurityGroup) string { return g.Name }

// Input is a group to create.
type Input struct {
	// Name is a DNS label, unique in the VDC.
	Name        string
	Description string
	Rules       []catalog.SecurityRule
}

// Create makes vdc's security group of in. Errors: BAD_INPUT naming the
// field ("name", "rules[3].ports"), NOT_FOUND for a peer group that is
// not the VDC's ("rules[i].peerGroup"), CONFLICT for a name taken or the
// VDC's MaxSecurityGroups reached.
func (s *Service) Create(ctx context.Context, vdc string, in Input) (*catalog.SecurityGroup, error) {
	if err := catalog.ValidateLabel("name", in.Name); err != nil {
		return nil, err
	}
	g := &catalog.SecurityGroup{}
	g.Name, g.VDC, g.Description, g.Rules = catalog.SecurityGroupName(vdc, in.Name), vdc, in.Description, in.Rules
	if err := g.Validate(); err != nil {
		return nil, err
	}
	groups, err := s.list(ctx, vdc)
	if err != nil {
		return nil, err
	}
	if len(groups) >= catalog.MaxSecurityGroups {
		return nil, fault.New(fault.Conflict, "the VDC has %d security groups, the most it may have", catalog.MaxSecurityGroups)
	}
	if err := checkPeers(g, groups); err != nil {
		return nil, err
	}
	out, err := catalog.Create(ctx, s.cfg.Store, g)
	if errors.Is(err, catalog.ErrAlreadyExists) {
		return nil, fault.New(fault.Conflict, "the VDC has a security group %q already", in.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("securitygroup: create: %w", err)
	}
	s.changed()
	return out, nil
}

// Update changes vdc's group id: its rules when rules is not nil (all of
// them, in order), its description when description is not nil. Errors as
// Create's, NOT_FOUND for a group that is not the VDC's.
func (s *Service) Update(ctx context.Context, vdc, id string, rules []catalog.SecurityRule, description *string) (*catalog.SecurityGroup, error) {
	g, err := s.get(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	if rules != nil {
		g.Rules = rules
	}
	if description != nil {
		g.Description = *description
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	groups, err := s.list(ctx, vdc)
	if err != nil {
		return nil, err
	}
	if err := checkPeers(g, groups); err != nil {
		return nil, err
	}
	out, err := catalog.Update(ctx, s.cfg.Store, g)
	if err != nil {
		return nil, writeError("update", err)
	}
	s.changed()
	return out, nil
}

// writeError is the error of a conditional write of a group that failed.
func writeError(op string, err error) error {
	switch {
	case errors.Is(err, catalog.ErrConflict):
		return fault.New(fault.Conflict, "the security group changed meanwhile; try again")
	case errors.Is(err, catalog.ErrNotFound):
		return notFound()
	}
	return fmt.Errorf("securitygroup: %s: %w", op, err)
}

// Delete deletes vdc's group id and returns it. It is CONFLICT while a VM
// is in it, another group's rule names it as its peer, or it is the VDC's
// default; ZONE_UNAVAILABLE while a zone where a VM might be in it cannot
// be read.
func (s *Service) Delete(ctx context.Context, vdc, id string) (*catalog.SecurityGroup, error) {
	g, err := s.get(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	name := g.ShortName()
	v, err := catalog.Get[*catalog.VDC](ctx, s.cfg.Store, vdc)
	if err != nil {
		return nil, fmt.Errorf("securitygroup: delete: %w", err)
	}
	if v.DefaultSecurityGroup == name {
		return nil, fault.New(fault.Conflict, "security group %q is the VDC's default: set another default first", name)
	}
	groups, err := s.list(ctx, vdc)
	if err != nil {
		return nil, err
	}
	for _, o := range groups {
		if o.Name != g.Name && slices.ContainsFunc(o.Rules, func(r catalog.SecurityRule) bool { return r.PeerGroup == name }) {
			return nil, fault.New(fault.Conflict, "security group %q is the peer of a rule of group %q", name, o.ShortName())
		}
	}
	members, errs := s.cfg.VMs.Members(ctx, vdc)
	if len(errs) > 0 {
		zone := slices.Sorted(maps.Keys(errs))[0]
		return nil, fault.ZoneDown(zone, errs[zone])
	}
	for _, m := range members {
		if slices.Contains(m.Groups, name) {
			return nil, fault.New(fault.Conflict, "security group %q is in use by VM %s", name, m.ID)
		}
	}
	if err := catalog.Delete[*catalog.SecurityGroup](ctx, s.cfg.Store, g.Name, g.ResourceVersion); err != nil {
		return nil, writeError("delete", err)
	}
	s.changed()
	return g, nil
}

// List lists vdc's groups, sorted by name.
func (s *Service) List(ctx context.Context, vdc string) ([]*catalog.SecurityGroup, error) {
	return s.list(ctx, vdc)
}

// Member is a VM in a group.
type Member struct {
	// VM is the VM's id; Zone its zone's name.
	VM, Zone string
	// Addresses are its NICs' addresses.
	Addresses []string
}

// Members lists the VMs in g (of vdc) in the zones that answer, sorted by
// VM id; the zones that do not answer are returned as errors.
func (s *Service) Members(ctx context.Context, g *catalog.SecurityGroup) ([]*Member, []error) {
	ms, errs := s.cfg.VMs.Members(ctx, g.VDC)
	out := []*Member{}
	for _, m := range ms {
		if !slices.Contains(m.Groups, g.ShortName()) {
			continue
		}
		mm := &Member{VM: m.ID, Zone: m.ZoneName, Addresses: []string{}}
		for _, n := range m.NICs {
			mm.Addresses = append(mm.Addresses, n.Address)
		}
		out = append(out, mm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VM < out[j].VM })
	var zerrs []error
	for _, z := range slices.Sorted(maps.Keys(errs)) {
		zerrs = append(zerrs, errs[z])
	}
	return out, zerrs
}

// Zones reports where g stands in each zone where its VDC has VMs.
func (s *Service) Zones(ctx context.Context, g *catalog.SecurityGroup) []*ZoneState {
	out := []*ZoneState{}
	if s.cfg.State == nil {
		return out
	}
	for _, z := range s.cfg.State.Zones(ctx, g) {
		out = append(out, &z)
	}
	return out
}

// VMGroups returns the groups VM id of vdc is in.
func (s *Service) VMGroups(ctx context.Context, vdc, id string) ([]string, error) {
	return s.cfg.VMs.SecurityGroups(ctx, vdc, id)
}

// SetVMGroups puts VM id of vdc in exactly the groups named (at most
// catalog.MaxVMSecurityGroups, each a group of vdc: NOT_FOUND of
// "securityGroups[i]" otherwise).
func (s *Service) SetVMGroups(ctx context.Context, vdc, id string, names []string) (*compute.VM, error) {
	vm, err := s.cfg.VMs.SetSecurityGroups(ctx, vdc, id, names)
	if err != nil {
		return nil, err
	}
	s.changed()
	if len(names) == 0 || s.cfg.Firewall == nil {
		return vm, nil
	}
	// The answer says the VM is in its groups once its firewall holds
	// them, not before.
	wctx, cancel := context.WithTimeout(ctx, s.cfg.FirewallTimeout)
	defer cancel()
	if err := s.cfg.Firewall.WaitVM(wctx, vm.Zone, vdc, vm.Ref.VMID); err != nil {
		return nil, &fault.Error{Kind: fault.ZoneUnavailable, Zone: vm.Zone, Cause: err,
			Message: fmt.Sprintf("the VM's groups are recorded, but zone %s's firewall did not take them within %s; they are written when it can", vm.Zone, s.cfg.FirewallTimeout)}
	}
	return vm, nil
}

// SetDefault makes group name of vdc the VDC's default (nil: none), the
// group new VMs are put in when their create names none; NOT_FOUND of
// "name" for a group that is not the VDC's.
func (s *Service) SetDefault(ctx context.Context, vdc string, name *string) (*catalog.VDC, error) {
	def := ""
	if name != nil {
		if _, err := s.get(ctx, vdc, catalog.SecurityGroupName(vdc, *name)); err != nil {
			return nil, &fault.Error{Kind: fault.NotFound, Field: "name", Message: fmt.Sprintf("no security group %q", *name)}
		}
		def = *name
	}
	out, err := catalog.Change(ctx, s.cfg.Store, vdc, nil, func(v *catalog.VDC) { v.DefaultSecurityGroup = def })
	switch {
	case errors.Is(err, catalog.ErrConflict):
		return nil, fault.New(fault.Conflict, "the VDC changed meanwhile; try again")
	case err != nil:
		return nil, fmt.Errorf("securitygroup: default: %w", err)
	}
	return out, nil
}

// Rules are the rules of an input's list.
func Rules(in []*catalog.SecurityRule) []catalog.SecurityRule {
	out := make([]catalog.SecurityRule, 0, len(in))
	for _, r := range in {
		out = append(out, *r)
	}
	return out
}

func notFound() error { return fault.New(fault.NotFound, "security group not found") }

// get reads group id of vdc: anything else (another VDC's group, an id
// of no shape) is NOT_FOUND.
func (s *Service) get(ctx context.Context, vdc, id string) (*catalog.SecurityGroup, error) {
	if owner, _, ok := strings.Cut(id, "."); !ok || owner != vdc {
		return nil, notFound()
	}
	g, err := catalog.Get[*catalog.SecurityGroup](ctx, s.cfg.Store, id)
	if errors.Is(err, catalog.ErrNotFound) || (err == nil && g.VDC != vdc) {
		return nil, notFound()
	}
	if err != nil {
		return nil, fmt.Errorf("securitygroup: %w", err)
	}
	return g, nil
}

func (s *Service) list(ctx context.Context, vdc string) ([]*catalog.SecurityGroup, error) {
	all, err := catalog.List[*catalog.SecurityGroup](ctx, s.cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("securitygroup: %w", err)
	}
	return slices.DeleteFunc(all, func(g *catalog.SecurityGroup) bool { return g.VDC != vdc }), nil
}

// checkPeers checks that every peer group of g's rules is g itself or
// another of groups (the VDC's): NOT_FOUND of rules[i].peerGroup else.
func checkPeers(g *catalog.SecurityGroup, groups []*catalog.SecurityGroup) error {
	for i, r := range g.Rules {
		if r.PeerGroup == "" || r.PeerGroup == g.ShortName() {
			continue
		}
		if !slices.ContainsFunc(groups, func(o *catalog.SecurityGroup) bool { return o.ShortName() == r.PeerGroup }) {
			return &fault.Error{Kind: fault.NotFound, Field: fmt.Sprintf("rules[%d].peerGroup", i),
				Message: fmt.Sprintf("no security group %q in the VDC", r.PeerGroup)}
		}
	}
	return nil
}
