package catalog

import (
	"fmt"
	"net/netip"
	"regexp"
)

// Limits of the edge objects.
const (
	// MaxPoolSize bounds the addresses of an external network's pool.
	MaxPoolSize = 4096
	// MaxMbps bounds a bandwidth limit.
	MaxMbps = 100000
	// MaxFirewallRules bounds a gateway's rules.
	MaxFirewallRules = 1000
	// MaxPortForwards bounds a gateway's port forwards.
	MaxPortForwards = 1000
	// MaxOneToOne bounds a gateway's 1:1 addresses.
	MaxOneToOne = 256
	// MaxKubeEndpointsPerGateway bounds a gateway's Kubernetes endpoints.
	MaxKubeEndpointsPerGateway = 256
)

var (
	// A Linux interface name of a bridge (at most 15 bytes).
	bridgeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,14}$`)
	// The id of a rule, port forward or 1:1 address in its gateway.
	edgeIDRE = regexp.MustCompile(`^[a-z0-9]{1,32}$`)
)

// ParseIPv4 parses an IPv4 address for field.
func ParseIPv4(field, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, invalid(field, "%q is not an IPv4 address", s)
	}
	return a, nil
}

// ParseCIDR parses an IPv4 network in CIDR notation for field: its
// address must be the network's (10.0.0.0/8, not 10.1.2.3/8).
func ParseCIDR(field, s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, invalid(field, "%q is not an IPv4 CIDR such as 10.0.0.0/8", s)
	}
	if p != p.Masked() {
		return netip.Prefix{}, invalid(field, "%q is not a network address: did you mean %s?", s, p.Masked())
	}
	return p, nil
}

func lastOf(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n |= 1<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

func ipv4Num(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// Validate implements Object.
func (n *ExternalNetwork) Validate() error {
	if err := firstError(ValidateLabel("name", n.Name), validateDescription(n.Description)); err != nil {
		return err
	}
	if !bridgeRE.MatchString(n.Bridge) {
		return invalid("bridge", "%q is not a bridge name (a letter, then up to 14 letters, digits or _ . -)", n.Bridge)
	}
	cidr, err := ParseCIDR("cidr", n.CIDR)
	if err != nil {
		return err
	}
	if cidr.Bits() > 30 {
		return invalid("cidr", "%s is too small: a /30 at most", n.CIDR)
	}
	gw, err := ParseIPv4("gateway", n.Gateway)
	if err != nil {
		return err
	}
	usable := func(field string, a netip.Addr) error {
		if !cidr.Contains(a) || a == cidr.Addr() || a == lastOf(cidr) {
			return invalid(field, "%s is not a host address of %s", a, n.CIDR)
		}
		return nil
	}
	if err := usable("gateway", gw); err != nil {
		return err
	}
	start, err := ParseIPv4("poolStart", n.PoolStart)
	if err != nil {
		return err
	}
	end, err := ParseIPv4("poolEnd", n.PoolEnd)
	if err != nil {
		return err
	}
	if err := firstError(usable("poolStart", start), usable("poolEnd", end)); err != nil {
		return err
	}
	switch {
	case end.Less(start):
		return invalid("poolEnd", "%s is before poolStart %s", end, start)
	case ipv4Num(end)-ipv4Num(start) >= MaxPoolSize:
		return invalid("poolEnd", "the pool holds at most %d addresses", MaxPoolSize)
	case !gw.Less(start) && !end.Less(gw):
		return invalid("gateway", "%s is inside the pool %s-%s", gw, start, end)
	}
	seen := map[string]bool{}
	for i, al := range n.Status.Allocations {
		f := fmt.Sprintf("status.allocations[%d]", i)
		a, err := ParseIPv4(f+".address", al.Address)
		if err != nil {
			return err
		}
		switch {
		case !n.InPool(a):
			return invalid(f+".address", "%s is outside the pool", a)
		case seen[al.Address]:
			return invalid(f+".address", "%s is allocated twice", a)
		case al.Use != UseGateway && al.Use != UseOneToOne && al.Use != UseLoadBalancer:
			return invalid(f+".use", "%q is not %s, %s or %s", al.Use, UseGateway, UseOneToOne, UseLoadBalancer)
		}
		if err := ValidateLabel(f+".vdc", al.VDC); err != nil {
			return err
		}
		seen[al.Address] = true
	}
	return nil
}

// Validate implements Object.
func (g *EdgeGateway) Validate() error {
	if err := firstError(ValidateLabel("vdc", g.VDC), ValidateLabel("zone", g.Zone)); err != nil {
		return err
	}
	if g.Name != EdgeGatewayName(g.VDC, g.Zone) {
		return invalid("name", "%q must be %q (<vdc>.<zone>)", g.Name, EdgeGatewayName(g.VDC, g.Zone))
	}
	public, err := ParseIPv4("publicAddress", g.PublicAddress)
	if err != nil {
		return err
	}
	if err := firstError(validateRange("egressMbps", g.EgressMbps, 0, MaxMbps), validateRange("ingressMbps", g.IngressMbps, 0, MaxMbps)); err != nil {
		return err
	}
	switch {
	case len(g.FirewallRules) > MaxFirewallRules:
		return invalid("firewallRules", "at most %d rules", MaxFirewallRules)
	case len(g.PortForwards) > MaxPortForwards:
		return invalid("portForwards", "at most %d port forwards", MaxPortForwards)
	case len(g.OneToOne) > MaxOneToOne:
		return invalid("oneToOne", "at most %d 1:1 addresses", MaxOneToOne)
	}
	ids := map[string]bool{}
	checkID := func(field, id string) error {
		if !edgeIDRE.MatchString(id) {
			return invalid(field, "%q is not 1 to 32 lower-case letters and digits", id)
		}
		if ids[id] {
			return invalid(field, "%q is used twice", id)
		}
		ids[id] = true
		return nil
	}
	for i, r := range g.FirewallRules {
		f := fmt.Sprintf("firewallRules[%d]", i)
		if err := checkID(f+".id", r.ID); err != nil {
			return err
		}
		if err := r.validate(f); err != nil {
			return err
		}
	}
	oneToOne := map[netip.Addr]bool{}
	for i, o := range g.OneToOne {
		f := fmt.Sprintf("oneToOne[%d]", i)
		if err := checkID(f+".id", o.ID); err != nil {
			return err
		}
		a, err := ParseIPv4(f+".publicAddress", o.PublicAddress)
		if err != nil {
			return err
		}
		if a == public || oneToOne[a] {
			return invalid(f+".publicAddress", "%s is in use", a)
		}
		oneToOne[a] = true
		if err := validateVMID(f+".vmid", o.VMID); err != nil {
			return err
		}
	}
	if len(g.KubeEndpoints) > MaxKubeEndpointsPerGateway {
		return invalid("kubeEndpoints", "at most %d", MaxKubeEndpointsPerGateway)
	}
	clusters, ports := map[string]bool{}, map[string]bool{}
	for i, e := range g.KubeEndpoints {
		f := fmt.Sprintf("kubeEndpoints[%d]", i)
		if err := ValidateLabel(f+".cluster", e.Cluster); err != nil {
			return err
		}
		a, err := ParseIPv4(f+".address", e.Address)
		if err != nil {
			return err
		}
		if err := validatePort(f+".port", e.Port); err != nil {
			return err
		}
		key := fmt.Sprintf("%s:%d", a, e.Port)
		switch {
		case clusters[e.Cluster]:
			return invalid(f+".cluster", "%q has two endpoints", e.Cluster)
		case ports[key]:
			return invalid(f+".port", "%s is the endpoint of two clusters", key)
		}
		clusters[e.Cluster], ports[key] = true, true
	}
	forwarded := map[string]bool{}
	for i, pf := range g.PortForwards {
		f := fmt.Sprintf("portForwards[%d]", i)
		if err := checkID(f+".id", pf.ID); err != nil {
			return err
		}
		if pf.Protocol != "tcp" && pf.Protocol != "udp" {
			return invalid(f+".protocol", "%q is not tcp or udp", pf.Protocol)
		}
		a, err := ParseIPv4(f+".publicAddress", pf.PublicAddress)
		if err != nil {
			return err
		}
		if a != public {
			return invalid(f+".publicAddress", "%s is not the gateway's public address %s", a, public)
		}
		if err := firstError(validatePort(f+".publicPort", pf.PublicPort), validatePort(f+".targetPort", pf.TargetPort), validateVMID(f+".vmid", pf.VMID)); err != nil {
			return err
		}
		key := fmt.Sprintf("%s/%s:%d", pf.Protocol, a, pf.PublicPort)
		if forwarded[key] {
			return invalid(f+".publicPort", "%s port %d of %s is forwarded already", pf.Protocol, pf.PublicPort, a)
		}
		forwarded[key] = true
	}
	return nil
}

func validatePort(field string, p int) error {
	if p < 1 || p > 65535 {
		return invalid(field, "port %d is out of range: 1 to 65535", p)
	}
	return nil
}

func validateVMID(field string, id int) error {
	if id < 100 || id > 999999999 {
		return invalid(field, "%d is not a VMID (100 to 999999999)", id)
	}
	return nil
}

// validate checks a rule; field is its path.
func (r FirewallRule) validate(field string) error {
	switch {
	case r.Direction != DirectionInbound && r.Direction != DirectionOutbound:
		return invalid(sub(field, "direction"), "%q is not %q or %q", r.Direction, DirectionInbound, DirectionOutbound)
	case r.Protocol != "tcp" && r.Protocol != "udp" && r.Protocol != "icmp" && r.Protocol != "any":
		return invalid(sub(field, "protocol"), "%q is not tcp, udp, icmp or any", r.Protocol)
	case r.Action != ActionAllow && r.Action != ActionDeny:
		return invalid(sub(field, "action"), "%q is not %q or %q", r.Action, ActionAllow, ActionDeny)
	case len(r.Description) > maxDescriptionLen:
		return invalid(sub(field, "description"), "must be at most %d bytes", maxDescriptionLen)
	}
	if r.FromPort != 0 || r.ToPort != 0 {
		if r.Protocol != "tcp" && r.Protocol != "udp" {
			return invalid(sub(field, "fromPort"), "ports need protocol tcp or udp, not %s", r.Protocol)
		}
		if err := firstError(validatePort(sub(field, "fromPort"), r.FromPort), validatePort(sub(field, "toPort"), r.ToPort)); err != nil {
			return err
		}
		if r.ToPort < r.FromPort {
			return invalid(sub(field, "toPort"), "%d is below fromPort %d", r.ToPort, r.FromPort)
		}
	}
	for _, c := range []struct{ f, v string }{{"source", r.Source}, {"destination", r.Destination}} {
		if c.v == "" {
			continue
		}
		if _, err := ParseCIDR(sub(field, c.f), c.v); err != nil {
			return err
		}
	}
	return nil
}

// ValidateFirewallRule checks one rule as part of a gateway would be
// (fields named without a prefix: "source", "fromPort").
func ValidateFirewallRule(r FirewallRule) error { return r.validate("") }

// sub is the path of field name under field.
func sub(field, name string) string {
	if field == "" {
		return name
	}
	return field + "." + name
}
