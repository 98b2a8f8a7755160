package sgsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// recheck is how often WaitVM reads the zone again while no pass of this
// replica ends (another replica leads, or a pass takes long).
const recheck = time.Second

// WaitVM asks for a pass and waits until zone's firewall holds what VM
// vmid of vdc needs, as Proxmox reports it: the VM's firewall options and
// its rules exactly the platform group and its groups (each written in
// the zone), firewall=1 on every NIC, its addresses in the members' sets
// of its groups, and the VDC's other members there switched to the
// platform group that counts the VM's networks as the VDC's. Creates and moves call it before they start the
// guest (compute.Config.Firewall), so that a VM in groups never runs
// without them. It returns when ctx ends with an error saying what is
// missing and the last pass's failure in the zone, if any. The
// datacenter firewall being off does not hold it back (the groups are
// written; Zones reports the zone ERROR).
func (s *Syncer) WaitVM(ctx context.Context, zone, vdc string, vmid int) error {
	for {
		s.mu.Lock()
		passed := s.passed
		s.mu.Unlock()
		s.Kick()
		missing, err := s.vmMissing(ctx, zone, vdc, vmid)
		if err == nil && missing == "" {
			return nil
		}
		t := time.NewTimer(recheck)
		select {
		case <-passed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if err != nil {
				missing = err.Error()
			}
			s.mu.Lock()
			failure := s.failures[zone+"/"+vdc]
			s.mu.Unlock()
			if failure != "" && !strings.Contains(failure, errDatacenterOff.Error()) {
				missing += "; the last pass there failed: " + failure
			}
			return fmt.Errorf("sgsync: the firewall of VM %d is not written in zone %s (%s): %w", vmid, zone, missing, ctx.Err())
		}
		t.Stop()
	}
}

// vmMissing says what zone's firewall lacks of VM vmid of vdc ("" for
// nothing), read from Proxmox.
func (s *Syncer) vmMissing(ctx context.Context, zone, vdc string, vmid int) (string, error) {
	i := slices.IndexFunc(s.cfg.Zones.Zones(ctx), func(z compute.Zone) bool { return z.Name == zone })
	if i < 0 {
		return "", errors.New("the zone cannot be reached")
	}
	z := s.cfg.Zones.Zones(ctx)[i]
	ms, errs := s.cfg.VMs.Members(ctx, vdc)
	if err := errs[zone]; err != nil {
		return "", fmt.Errorf("its VMs cannot be read: %w", err)
	}
	ms = slices.DeleteFunc(ms, func(m compute.Member) bool { return m.ZoneName != zone })
	groups, err := catalog.List[*catalog.SecurityGroup](ctx, s.cfg.Store)
	if err != nil {
		return "", fmt.Errorf("the catalog cannot be read: %w", err)
	}
	groups = slices.DeleteFunc(groups, func(g *catalog.SecurityGroup) bool { return g.VDC != vdc })
	w := newZoneWant()
	w.addVDC(vdc, groups, ms)
	j := slices.IndexFunc(w.vms, func(v vmWant) bool { return v.m.Ref.VMID == vmid })
	if j < 0 {
		return "the VM is not yet seen in a group", nil
	}
	v := w.vms[j]
	for k, val := range v.m.Nets {
		if !strings.Contains(","+val+",", ",firewall=1,") {
			return "the firewall of " + k + " is off", nil
		}
	}
	applied, err := readZone(ctx, z.Client)
	if err != nil {
		return "", err
	}
	for _, g := range v.groups {
		if applied.groups[g] == "" {
			return "its Proxmox group " + g + " is not written", nil
		}
	}
	for _, name := range v.m.Groups {
		set := MemberSet(vdc, name)
		if applied.sets[set] == "" {
			return "the members' set of group " + name + " is not written", nil
		}
		have, err := pveapi.IPSetEntries(ctx, z.Client, set)
		if err != nil {
			return "", err
		}
		for _, n := range v.m.NICs {
			if !slices.ContainsFunc(have, func(e pveapi.IPSetEntry) bool { return e.CIDR == n.Address && e.NoMatch == 0 }) {
				return "its address " + n.Address + " is not in the members' set of group " + name, nil
			}
		}
	}
	opts, err := pveapi.GuestFirewallOptions(ctx, z.Client, v.m.Node, vmid)
	if err != nil {
		return "", err
	}
	if opts != v.options {
		return "its firewall options are not written", nil
	}
	rules, err := pveapi.GuestFirewallRules(ctx, z.Client, v.m.Node, vmid)
	if err != nil {
		return "", err
	}
	if len(rules) != len(v.groups) {
		return "its groups are not attached", nil
	}
	for i, g := range v.groups {
		if !rules[i].Same(attached(g)) {
			return "its groups are not attached", nil
		}
	}
	// The VDC's other members take the VM's networks for the VDC's own
	// (the platform group's set of what is outside them, first of their
	// rules): a VM on a network new in the zone is not taken for traffic
	// the gateway let in.
	for _, o := range w.vms {
		if o.m.Ref.VMID == vmid {
			continue
		}
		rules, err := pveapi.GuestFirewallRules(ctx, z.Client, o.m.Node, o.m.Ref.VMID)
		if err != nil {
			return "", err
		}
		if len(rules) == 0 || !rules[0].Same(attached(o.groups[0])) {
			return fmt.Sprintf("VM %d of the VDC does not have its platform group yet", o.m.Ref.VMID), nil
		}
	}
	return "", nil
}

// attached is the rule of a VM's firewall that attaches group g.
func attached(g string) pveapi.FirewallRule {
	return pveapi.FirewallRule{Type: "group", Action: g, Enable: 1, Comment: "flexplane"}
}
