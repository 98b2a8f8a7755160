package compute

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// A VM's security groups are a fact of the VM: they are recorded in its
// intent (the guest's description), beside its NICs and addresses, and
// written with the config digest read, like every other change of a
// guest. The groups' members are read from the VMs, so nothing of a
// group's membership is kept elsewhere that could disagree with the VM, a
// VM that moves takes its groups along, and a deleted VM leaves its groups
// with it.

// Member is a VM of a VDC as its security groups see it.
type Member struct {
	// ID is the VM's id; Ref where its guest is now.
	ID  string
	Ref tenancy.VMRef
	// ZoneName is the name of its zone; Node the Proxmox node.
	ZoneName, Node string
	// Groups are its security groups' short names.
	Groups []string
	// PlacementGroup is its placement group's short name, "" for none.
	PlacementGroup string
	// NICs are its NICs, in order, as its intent records them.
	NICs []NICIntent
	// Nets are its NICs' configurations by key (net0, net1...) and
	// Digest the configuration's digest they were read at.
	Nets   map[string]string
	Digest string
}

// createGroups checks the security groups of a create: those named (nil:
// the VDC's default, if any), each a group of vdc.
func createGroups(ctx context.Context, store catalog.Store, vdc string, names []string) ([]string, error) {
	if names == nil {
		v, err := catalog.Get[*catalog.VDC](ctx, store, vdc)
		if err != nil {
			return nil, internal("reading the VDC failed", err)
		}
		if v.DefaultSecurityGroup == "" {
			return nil, nil
		}
		names = []string{v.DefaultSecurityGroup}
	}
	return checkGroups(ctx, store, vdc, "securityGroups", names)
}

// checkGroups checks names as the security groups of a VM of vdc: at most
// catalog.MaxVMSecurityGroups, none twice, each a group of vdc (another
// VDC's or an unknown one is NOT_FOUND, naming the field).
func checkGroups(ctx context.Context, store catalog.Store, vdc, field string, names []string) ([]string, error) {
	if len(names) > catalog.MaxVMSecurityGroups {
		return nil, badInput(field, "a VM is in at most %d security groups", catalog.MaxVMSecurityGroups)
	}
	out := make([]string, 0, len(names))
	for i, n := range names {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := catalog.ValidateLabel(f, n); err != nil {
			return nil, badInput(f, "%q is not a security group's name", n)
		}
		if slices.Contains(out, n) {
			return nil, badInput(f, "security group %q is given twice", n)
		}
		if _, err := catalog.Get[*catalog.SecurityGroup](ctx, store, catalog.SecurityGroupName(vdc, n)); err != nil {
			if errors.Is(err, catalog.ErrNotFound) {
				return nil, &Error{Kind: KindNotFound, Field: f, Message: fmt.Sprintf("no security group %q", n)}
			}
			return nil, internal("reading the catalog failed", err)
		}
		out = append(out, n)
	}
	return out, nil
}

// SecurityGroups returns the security groups VM id of vdc is in; anything
// not a VM of vdc is NOT_FOUND.
func (s *Service) SecurityGroups(ctx context.Context, vdc, id string) ([]string, error) {
	_, _, in, err := s.d.find.lookup(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	if in == nil {
		return []string{}, nil
	}
	return append([]string{}, in.SecurityGroups...), nil
}

// SetSecurityGroups puts VM id of vdc in exactly the security groups
// named (none: in no group, its firewall as before groups), recorded in
// its intent conditionally on the config digest read (a concurrent write
// is CONFLICT). Errors are those of createVM's securityGroups (the field
// "securityGroups[i]") and NOT_FOUND for a VM not of vdc; a VM without an
// intent (not created by flexplane) is BAD_INPUT of "vm".
func (s *Service) SetSecurityGroups(ctx context.Context, vdc, id string, names []string) (*VM, error) {
	groups, err := checkGroups(ctx, s.d.cfg.Catalog, vdc, "securityGroups", names)
	if err != nil {
		return nil, err
	}
	z, g, in, cfg, err := s.d.find.lookupConfig(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	if in == nil {
		return nil, badInput("vm", "the VM was not created by flexplane: it has no record to keep its groups in")
	}
	in.SecurityGroups = groups
	_, err = pveapi.Run(ctx, z.Client, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/config", g.Node, g.VMID),
		map[string]any{"description": in.Description(), "digest": cfg.Digest()})
	if err != nil {
		if pveapi.IsDigestMismatch(err) || pveapi.IsLocked(err) {
			return nil, newError(KindConflict, "the VM changed meanwhile; try again")
		}
		return nil, zoneDown(z.Name, err)
	}
	return s.VM(ctx, vdc, id)
}

// Members lists the VMs of vdc in every zone that answers (templates and
// guests without an intent left out) with their security groups, NICs and
// the NICs' configurations. The error of each zone that did not answer (a
// known zone that cannot be reached included) is returned by zone name.
func (s *Service) Members(ctx context.Context, vdc string) ([]Member, map[string]error) {
	f := s.d.find
	zs := f.zones.Zones(ctx)
	errs := map[string]error{}
	if k, ok := f.zones.(KnownZones); ok {
		for _, z := range k.Known(ctx) {
			if !slices.ContainsFunc(zs, func(r Zone) bool { return r.ID == z.ID }) {
				errs[z.Name] = zoneDown(z.Name, errUnreachable)
			}
		}
	}
	out, zerrs := eachZone(ctx, f.timeout, zs, func(ctx context.Context, z Zone) ([]Member, error) {
		return zoneMembers(ctx, z, vdc)
	})
	var all []Member
	for i, ms := range out {
		if zerrs[i] != nil {
			errs[zs[i].Name] = zoneDown(zs[i].Name, zerrs[i])
			continue
		}
		all = append(all, ms...)
	}
	return all, errs
}

// zoneMembers lists vdc's VMs in z with their intents.
func zoneMembers(ctx context.Context, z Zone, vdc string) ([]Member, error) {
	gs, err := pveapi.PoolGuests(ctx, z.Client, tenancy.PoolID(vdc))
	if err != nil {
		return nil, err
	}
	var out []Member
	for _, g := range gs {
		if g.Template == 1 {
			continue
		}
		cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, g.VMID)
		if pveapi.IsNotFound(err) {
			continue // gone meanwhile
		}
		if err != nil {
			return nil, err
		}
		g.RawTags = cfg.Str("tags")
		in, ok := ParseIntent(cfg.Str("description"))
		if owner, _ := tenancy.VDCOf(g.Tags()); !ok || in.VDC != vdc || (owner != "" && owner != vdc) || g.HasTag(movedTag) {
			continue
		}
		m := Member{Ref: tenancy.VMRef{ZoneID: z.ID, VMID: g.VMID}, ZoneName: z.Name, Node: g.Node,
			Groups: slices.Clone(in.SecurityGroups), PlacementGroup: in.PlacementGroup, NICs: slices.Clone(in.NICs), Nets: map[string]string{}, Digest: cfg.Digest()}
		m.ID = m.Ref.ID()
		if was, moved := wasOf(g.Tags()); moved {
			m.ID = was.ID()
		}
		for i := range in.NICs {
			key := fmt.Sprintf("net%d", i)
			if v := cfg.Str(key); v != "" {
				m.Nets[key] = v
			}
		}
		out = append(out, m)
	}
	return out, nil
}
