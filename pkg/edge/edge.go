// Package edge is the edge gateway of a VDC in a zone, run by an agent in a network
// namespace of its node: a leg on each of the VDC's VNet bridges holding the network's
// gateway address, an uplink on the zone's external network, SNAT of egress to the
// VDC's public address, DNAT of port forwards and 1:1 addresses, an ordered firewall
// with default-deny inbound and counters per rule, and bandwidth limits both ways.
//
// The orchestrator sends the whole desired state (a Gateway); Manager.Apply makes the
// namespace match it idempotently, the whole ruleset replaced in one nftables
// transaction (no flush window; conntrack entries, so established flows, are kept).
// Nothing is stored outside the kernel: an agent restarted finds the namespace and its
// ruleset as it left them (Manager.List reports them, by the VDC and revision each
// namespace records) and the next Apply reconverges.
package edge

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
)

// Gateway is the desired state of one VDC's edge gateway in a zone.
type Gateway struct {
	// VDC names the VDC; it names the namespace and devices too.
	VDC string
	// Legs are the VDC's networks in the zone.
	Legs []Leg
	// Uplink is the gateway's address on the zone's external network.
	Uplink Uplink
	// PortForwards are DNAT rules from a public address and port to a VM.
	PortForwards []PortForward
	// OneToOne maps public addresses to VMs' addresses both ways.
	OneToOne []OneToOne
	// Rules are the firewall rules, in order; the first that matches decides.
	Rules []Rule
	// EgressMbps and IngressMbps limit the VDC's traffic to and from the external
	// network in Mbit/s; 0 is no limit.
	EgressMbps, IngressMbps int
	// Balancers are the VDC's load balancers' addresses.
	Balancers []Balancer
	// Endpoints are platform services the VDC's VMs reach at a leg's
	// gateway address.
	Endpoints []Endpoint
	// Revision is an opaque label of this state chosen by the caller: the
	// namespace records it once Apply completes, and Manager.List reports
	// it, so a caller finding it there need not send the same state again.
	// "" records none. It changes nothing that carries traffic.
	Revision string
}

// Balancer is a load balancer's public address on the uplink: its listeners'
// ports forwarded to the zone's flexgateway replicas (SNATed to Public, so that
// replies come back through the gateway), and relay ports that only Sources (the
// replicas) may use, forwarded to the VDC's VMs. Both are accepted before the
// firewall rules: the address is the balancer's alone.
type Balancer struct {
	ID        string
	Public    netip.Addr
	Frontends []Forward
	Relays    []Forward
	Sources   []netip.Prefix
}

// Endpoint is a platform service the VDC's networks reach at a leg's gateway
// address: TCP connections to Address:Port are forwarded to Target:TargetPort on
// the external network, SNATed to the uplink's address as all egress is. They are
// accepted before the firewall rules, which are the tenant's, as the service is
// the platform's: the hosted API server of one of the VDC's Kubernetes clusters,
// reached by its workers at an address inside their network that needs no DNS.
type Endpoint struct {
	ID         string
	Address    netip.Addr
	Port       uint16
	Target     netip.Addr
	TargetPort uint16
}

// Forward sends TCP connections to Port on to Target:TargetPort.
type Forward struct {
	Port       uint16
	Target     netip.Addr
	TargetPort uint16
}

// Leg is the gateway's NIC on one VDC network.
type Leg struct {
	// Bridge is the VNet's bridge on the node (the VNet id).
	Bridge string
	// Address is the network's gateway address with the network's prefix length.
	Address netip.Prefix
}

// Uplink is the gateway's NIC on the zone's external network.
type Uplink struct {
	// Bridge is the external network's bridge on the node.
	Bridge string
	// Address is the VDC's public address (egress is SNATed to it) with the
	// external network's prefix length.
	Address netip.Prefix
	// Gateway is the external network's router.
	Gateway netip.Addr
}

// PortForward sends Protocol traffic to PublicAddr:PublicPort on to Target:TargetPort.
type PortForward struct {
	ID         string
	Protocol   string // "tcp" or "udp"
	PublicAddr netip.Addr
	PublicPort uint16
	Target     netip.Addr
	TargetPort uint16
}

// OneToOne gives Private the public address Public, both ways.
type OneToOne struct {
	ID      string
	Public  netip.Addr
	Private netip.Addr
}

// Direction of a firewall rule.
const (
	Inbound  = "in"  // from the external network to the VDC (after DNAT)
	Outbound = "out" // from the VDC to the external network
)

// Rule is one firewall rule. Inbound rules see the destination after DNAT (the VM's
// address and port), and only traffic a DNAT addressed (a port forward, a 1:1
// address): a packet from the external network sent to a VM's private address is
// dropped before the rules, whatever they allow (counted by NotDNATedID).
type Rule struct {
	ID        string
	Direction string // Inbound or Outbound
	Protocol  string // "tcp", "udp", "icmp" or "any"
	// FromPort..ToPort is the destination port range (tcp, udp); 0, 0 is any.
	FromPort, ToPort uint16
	// Source and Destination are CIDRs; the zero Prefix is any.
	Source, Destination netip.Prefix
	Allow               bool
}

// InputError is a field of a Gateway at fault.
type InputError struct {
	Field   string
	Message string
}

func (e *InputError) Error() string { return "edge: " + e.Field + ": " + e.Message }

// Validate checks a gateway before anything is applied.
func (g *Gateway) Validate() error {
	if g.VDC == "" {
		return &InputError{"vdc", "required"}
	}
	if g.Uplink.Bridge == "" || !g.Uplink.Address.IsValid() || !g.Uplink.Address.Addr().Is4() {
		return &InputError{"uplink", "a bridge and an IPv4 address with its prefix are required"}
	}
	if len(g.Legs) > 64 {
		return &InputError{"legs", "at most 64"}
	}
	for i, l := range g.Legs {
		if l.Bridge == "" || !l.Address.IsValid() || !l.Address.Addr().Is4() {
			return &InputError{fmt.Sprintf("legs[%d]", i), "a bridge and an IPv4 address with its prefix are required"}
		}
	}
	for i, pf := range g.PortForwards {
		f := fmt.Sprintf("portForwards[%d]", i)
		switch {
		case pf.Protocol != "tcp" && pf.Protocol != "udp":
			return &InputError{f, fmt.Sprintf("protocol %q is not tcp or udp", pf.Protocol)}
		case pf.PublicPort == 0 || pf.TargetPort == 0:
			return &InputError{f, "ports must be 1 to 65535"}
		case !pf.PublicAddr.Is4() || !pf.Target.Is4():
			return &InputError{f, "addresses must be IPv4"}
		}
	}
	for i, o := range g.OneToOne {
		if !o.Public.Is4() || !o.Private.Is4() {
			return &InputError{fmt.Sprintf("oneToOne[%d]", i), "addresses must be IPv4"}
		}
	}
	for i, b := range g.Balancers {
		f := fmt.Sprintf("balancers[%d]", i)
		if !b.Public.Is4() {
			return &InputError{f, "the public address must be IPv4"}
		}
		ports := map[uint16]bool{}
		for _, fw := range append(append([]Forward{}, b.Frontends...), b.Relays...) {
			switch {
			case fw.Port == 0 || fw.TargetPort == 0:
				return &InputError{f, "ports must be 1 to 65535"}
			case !fw.Target.Is4():
				return &InputError{f, "targets must be IPv4"}
			case ports[fw.Port]:
				return &InputError{f, fmt.Sprintf("port %d is forwarded twice", fw.Port)}
			}
			ports[fw.Port] = true
		}
		if len(b.Relays) > 0 && len(b.Sources) == 0 {
			return &InputError{f, "relays need the replicas' sources"}
		}
		for _, p := range b.Sources {
			if !p.IsValid() || !p.Addr().Is4() {
				return &InputError{f, "sources must be IPv4 CIDRs"}
			}
		}
	}
	legAddrs := map[netip.Addr]bool{}
	for _, l := range g.Legs {
		legAddrs[l.Address.Addr()] = true
	}
	type addrPort struct {
		a netip.Addr
		p uint16
	}
	endpoints := map[addrPort]bool{}
	for i, e := range g.Endpoints {
		f := fmt.Sprintf("endpoints[%d]", i)
		switch {
		case e.ID == "":
			return &InputError{f, "an id is required"}
		case !legAddrs[e.Address]:
			return &InputError{f, fmt.Sprintf("address %s is no leg's gateway address", e.Address)}
		case e.Port == 0 || e.TargetPort == 0:
			return &InputError{f, "ports must be 1 to 65535"}
		case !e.Target.Is4():
			return &InputError{f, "the target must be IPv4"}
		case e.Target == g.Uplink.Address.Addr():
			return &InputError{f, "the target is the gateway's own uplink address"}
		case endpoints[addrPort{e.Address, e.Port}]:
			return &InputError{f, fmt.Sprintf("%s port %d is forwarded twice", e.Address, e.Port)}
		}
		endpoints[addrPort{e.Address, e.Port}] = true
	}
	for i, r := range g.Rules {
		if err := r.Validate(); err != nil {
			return &InputError{fmt.Sprintf("rules[%d]", i), err.(*InputError).Message}
		}
	}
	if g.EgressMbps < 0 || g.IngressMbps < 0 || g.EgressMbps > 100000 || g.IngressMbps > 100000 {
		return &InputError{"bandwidth", "limits must be 0 (none) to 100000 Mbit/s"}
	}
	return nil
}

// Validate checks one rule.
func (r Rule) Validate() error {
	switch {
	case r.Direction != Inbound && r.Direction != Outbound:
		return &InputError{"direction", fmt.Sprintf("%q is not %q or %q", r.Direction, Inbound, Outbound)}
	case r.Protocol != "tcp" && r.Protocol != "udp" && r.Protocol != "icmp" && r.Protocol != "any":
		return &InputError{"protocol", fmt.Sprintf("%q is not tcp, udp, icmp or any", r.Protocol)}
	case (r.FromPort != 0 || r.ToPort != 0) && r.Protocol != "tcp" && r.Protocol != "udp":
		return &InputError{"ports", "ports need protocol tcp or udp"}
	case (r.FromPort == 0) != (r.ToPort == 0) || r.FromPort > r.ToPort:
		return &InputError{"ports", fmt.Sprintf("%d-%d is not a port range of 1 to 65535", r.FromPort, r.ToPort)}
	case r.Source.IsValid() && !r.Source.Addr().Is4(), r.Destination.IsValid() && !r.Destination.Addr().Is4():
		return &InputError{"cidr", "CIDRs must be IPv4"}
	}
	return nil
}

// id is a short stable hex id of s.
func id(s string, n int) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])[:n]
}

// Namespace is the name of the gateway namespace of vdc under prefix.
func Namespace(prefix, vdc string) string { return namespaces(prefix) + id(vdc, 10) }

// namespaces starts the name of every gateway namespace under prefix.
func namespaces(prefix string) string { return prefix + "gw-" }

// mac is a stable locally administered MAC of the gateway's NIC what: a gateway
// rebuilt on another node keeps its MACs, so neighbours' caches stay right.
func mac(vdc, what string) net.HardwareAddr {
	h := sha256.Sum256([]byte(vdc + "/" + what))
	m := net.HardwareAddr(h[:6])
	m[0] = m[0]&0xfe | 0x02
	return m
}

// hostIf is the node-side name of a gateway NIC: "fg", 8 hex digits of the VDC and
// the NIC's short name ("u", "l0".."l63"), at most 15 characters.
func hostIf(vdc, short string) string { return "fg" + id(vdc, 8) + short }
