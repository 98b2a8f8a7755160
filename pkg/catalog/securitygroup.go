package catalog

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Limits of security groups.
const (
	// MaxSecurityRules bounds the rules of one security group.
	MaxSecurityRules = 200
	// MaxSecurityGroups bounds the security groups of one VDC.
	MaxSecurityGroups = 100
	// MaxVMSecurityGroups bounds the security groups one VM is in.
	MaxVMSecurityGroups = 16
	// maxPortEntries bounds the comma-separated entries of a rule's ports.
	maxPortEntries = 32
)

// Protocols of a security group's rule.
const (
	SecurityProtocolTCP  = "tcp"
	SecurityProtocolUDP  = "udp"
	SecurityProtocolICMP = "icmp"
	SecurityProtocolAny  = "any"
)

// SecurityGroup is a security group of a VDC: rules that allow traffic
// to and from the VDC's VMs that are its members, written by the
// orchestrator to each zone's Proxmox firewall. Its name is
// SecurityGroupName(vdc, name). Which VMs are its members is a fact of
// each VM (recorded on the guest), not of the group.
type SecurityGroup struct {
	TypeMeta
	ObjectMeta        `json:"metadata"`
	SecurityGroupSpec `json:"spec"`
}

// SecurityGroupSpec is what a VDC wants of a security group.
type SecurityGroupSpec struct {
	// VDC is the VDC the group belongs to.
	VDC string `json:"vdc"`
	// Description is free text for humans (at most 1024 bytes).
	Description string `json:"description,omitempty"`
	// Rules only allow (at most MaxSecurityRules): inbound traffic to a
	// member is denied unless a rule of one of its groups allows it (or it
	// comes from a member of the same group); outbound traffic is allowed
	// unless one of its groups has outbound rules, then only what they
	// allow leaves.
	Rules []SecurityRule `json:"rules,omitempty"`
}

// SecurityRule is one rule of a security group: it allows traffic.
type SecurityRule struct {
	// Direction is DirectionInbound (to the member) or DirectionOutbound
	// (from it).
	Direction string `json:"direction"`
	// Protocol is SecurityProtocolTCP, UDP, ICMP or Any.
	Protocol string `json:"protocol"`
	// Ports are the destination ports as Proxmox writes them ("22",
	// "8000:8100", "80,443"); "" is every port. TCP and UDP only.
	Ports string `json:"ports,omitempty"`
	// PeerCIDR is the other end's network (IPv4 or IPv6, its host bits
	// zero); "" is none.
	PeerCIDR string `json:"peerCidr,omitempty"`
	// PeerGroup is the other end as a security group of the same VDC (by
	// its short name): its members' addresses. "" is none; with PeerCIDR
	// also "" the peer is any address.
	PeerGroup string `json:"peerGroup,omitempty"`
	// Description is free text for humans (at most 1024 bytes).
	Description string `json:"description,omitempty"`
}

// SecurityGroupName is the name of vdc's security group called name.
func SecurityGroupName(vdc, name string) string { return vdc + "." + name }

// ShortName is the group's name within its VDC.
func (g *SecurityGroup) ShortName() string {
	_, n, _ := strings.Cut(g.Name, ".")
	return n
}

// HasOutbound reports whether the group has an outbound rule (which makes
// its members' outbound traffic denied unless allowed).
func (g *SecurityGroup) HasOutbound() bool {
	return slices.ContainsFunc(g.Rules, func(r SecurityRule) bool { return r.Direction == DirectionOutbound })
}

// ObjectKind implements Object.
func (*SecurityGroup) ObjectKind() Kind { return KindSecurityGroup }

// DeepCopyObject implements Object.
func (g *SecurityGroup) DeepCopyObject() Object {
	c := *g
	c.Rules = slices.Clone(g.Rules)
	return &c
}

// Validate implements Object.
func (g *SecurityGroup) Validate() error {
	if err := firstError(ValidateLabel("vdc", g.VDC), ValidateName(KindSecurityGroup, g.Name), validateDescription(g.Description)); err != nil {
		return err
	}
	if vdc, _, _ := strings.Cut(g.Name, "."); vdc != g.VDC {
		return invalid("name", "%q must start with its VDC %q", g.Name, g.VDC)
	}
	return ValidateSecurityRules("rules", g.Rules)
}

// ValidateSecurityRules checks a group's rules; the field of an error is
// field[i].<name> of the rule at fault.
func ValidateSecurityRules(field string, rules []SecurityRule) error {
	if len(rules) > MaxSecurityRules {
		return invalid(field, "at most %d rules, got %d", MaxSecurityRules, len(rules))
	}
	for i, r := range rules {
		if err := r.validate(fmt.Sprintf("%s[%d].", field, i)); err != nil {
			return err
		}
	}
	return nil
}

func (r SecurityRule) validate(at string) error {
	switch r.Direction {
	case DirectionInbound, DirectionOutbound:
	default:
		return invalid(at+"direction", "%q is not %q or %q", r.Direction, DirectionInbound, DirectionOutbound)
	}
	switch r.Protocol {
	case SecurityProtocolTCP, SecurityProtocolUDP:
		if err := ValidatePorts(at+"ports", r.Ports); err != nil {
			return err
		}
	case SecurityProtocolICMP, SecurityProtocolAny:
		if r.Ports != "" {
			return invalid(at+"ports", "ports are for TCP and UDP only")
		}
	default:
		return invalid(at+"protocol", "%q is not tcp, udp, icmp or any", r.Protocol)
	}
	if r.PeerCIDR != "" && r.PeerGroup != "" {
		return invalid(at+"peerGroup", "give a peer CIDR or a peer group, not both")
	}
	if r.PeerCIDR != "" {
		p, err := netip.ParsePrefix(r.PeerCIDR)
		if err != nil {
			return invalid(at+"peerCidr", "%q is not a CIDR (an address and a prefix length, e.g. 10.0.0.0/24)", r.PeerCIDR)
		}
		if p.Masked() != p {
			return invalid(at+"peerCidr", "%q has host bits set: the network is %s", r.PeerCIDR, p.Masked())
		}
	}
	if r.PeerGroup != "" {
		if err := ValidateLabel(at+"peerGroup", r.PeerGroup); err != nil {
			return err
		}
	}
	if len(r.Description) > maxDescriptionLen {
		return invalid(at+"description", "must be at most %d bytes", maxDescriptionLen)
	}
	return nil
}

var portsRE = regexp.MustCompile(`^[0-9]+(:[0-9]+)?(,[0-9]+(:[0-9]+)?)*$`)

// ValidatePorts checks destination ports as Proxmox's firewall writes
// them: a comma-separated list of ports and ranges low:high, each port 1
// to 65535, a range's low below its high; "" is every port.
func ValidatePorts(field, s string) error {
	if s == "" {
		return nil
	}
	if !portsRE.MatchString(s) {
		return invalid(field, "%q is not ports as 22, 8000:8100 or 80,443", s)
	}
	entries := strings.Split(s, ",")
	if len(entries) > maxPortEntries {
		return invalid(field, "at most %d ports or ranges", maxPortEntries)
	}
	for _, e := range entries {
		lo, hi, isRange := strings.Cut(e, ":")
		a, errA := strconv.Atoi(lo)
		b := a
		var errB error
		if isRange {
			b, errB = strconv.Atoi(hi)
		}
		switch {
		case errA != nil || errB != nil || a < 1 || a > 65535 || b < 1 || b > 65535:
			return invalid(field, "%q: ports are 1 to 65535", e)
		case isRange && a >= b:
			return invalid(field, "%q: a range's first port must be below its last", e)
		}
	}
	return nil
}
