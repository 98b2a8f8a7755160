package pveschema

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// This file holds the formats of pve-firewall's rules (PVE::Firewall's verifiers) and the
// parsers behind them, which the simulator's data plane uses to read a rule as pve-firewall
// compiles it.

var (
	// ipsetRefRE is an ipset reference of a rule's source or dest: "+name", "+dc/name",
	// "+guest/name" or "+sdn/name".
	ipsetRefRE = regexp.MustCompile(`^\+(?:(dc|guest|sdn)/)?([A-Za-z][A-Za-z0-9\-_]+)$`)
	// aliasRefRE is an alias reference: "name", "dc/name" or "guest/name".
	aliasRefRE  = regexp.MustCompile(`^(?:(dc|guest)/)?([A-Za-z][A-Za-z0-9\-_]+)$`)
	portRangeRE = regexp.MustCompile(`^([0-9]+):([0-9]+)$`)
	portRE      = regexp.MustCompile(`^[0-9]+$`)
)

// FirewallSetRef parses an ipset reference ("+name", "+dc/name", "+guest/name",
// "+sdn/name") into its scope ("" for the unscoped older form) and name.
func FirewallSetRef(v string) (scope, name string, ok bool) {
	m := ipsetRefRE.FindStringSubmatch(v)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// FirewallAliasRef parses an alias reference ("name", "dc/name", "guest/name").
func FirewallAliasRef(v string) (scope, name string, ok bool) {
	m := aliasRefRE.FindStringSubmatch(v)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// AddrRange is an inclusive range of addresses of one family.
type AddrRange struct {
	From, To netip.Addr
}

// ParseFirewallAddr parses one address as pve-firewall takes it (Net::IP): an address,
// a CIDR network or a range "A-B".
func ParseFirewallAddr(v string) (AddrRange, error) {
	if a, b, ok := strings.Cut(v, "-"); ok {
		from, err1 := netip.ParseAddr(strings.TrimSpace(a))
		to, err2 := netip.ParseAddr(strings.TrimSpace(b))
		if err1 != nil || err2 != nil || from.Zone() != "" || to.Zone() != "" {
			return AddrRange{}, netIPError("Invalid IP address range", v)
		}
		if from.Is4() != to.Is4() || to.Less(from) {
			return AddrRange{}, netIPError("Begin address is greater than End address", v)
		}
		return AddrRange{From: from, To: to}, nil
	}
	if strings.Contains(v, "/") {
		p, err := netip.ParsePrefix(v)
		if err != nil || p.Addr().Zone() != "" {
			return AddrRange{}, netIPError("Invalid prefix", v)
		}
		if p.Masked() != p {
			return AddrRange{}, netIPError("Invalid prefix", v)
		}
		return AddrRange{From: p.Addr(), To: lastAddr(p)}, nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil || a.Zone() != "" {
		return AddrRange{}, netIPError("Invalid IP", v)
	}
	return AddrRange{From: a, To: a}, nil
}

// netIPError is one of Net::IP's messages, which pve-firewall passes on as they are.
func netIPError(msg, v string) error { return errors.New(msg + " " + v) }

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// ParseFirewallAddrList parses a rule's literal source or dest: a comma-separated list of
// addresses, networks and ranges of one IP version (at most one range, alone), as
// pve-firewall's parse_address_list does. It returns the IP version.
func ParseFirewallAddrList(list string) ([]AddrRange, int, error) {
	elems := strings.Split(list, ",")
	if slices0(elems) {
		return nil, 0, errors.New("extraneous commas in list")
	}
	var out []AddrRange
	version, ranges := 0, false
	for _, e := range elems {
		r, err := ParseFirewallAddr(e)
		if err != nil {
			return nil, 0, fmt.Errorf("invalid IP address: %w", err)
		}
		ranges = ranges || strings.Contains(e, "-")
		v := 4
		if r.From.Is6() {
			v = 6
		}
		if version != 0 && v != version {
			return nil, 0, fmt.Errorf("detected mixed ipv4/ipv6 addresses in address list '%s'", list)
		}
		version = v
		out = append(out, r)
	}
	if ranges && len(elems) > 1 {
		return nil, 0, errors.New("you can use a range in a list")
	}
	return out, version, nil
}

func slices0(elems []string) bool {
	for _, e := range elems {
		if e == "" {
			return true
		}
	}
	return false
}

// verifyFirewallAddrSpec is pve-fw-addr-spec: an ipset reference, an alias name or an
// address list.
func verifyFirewallAddrSpec(v string) error {
	if strings.HasPrefix(v, "+") {
		if _, _, ok := FirewallSetRef(v); !ok {
			return errors.New("malformed ipset name")
		}
		return nil
	}
	if _, _, ok := FirewallAliasRef(v); ok {
		return nil
	}
	_, _, err := ParseFirewallAddrList(v)
	return err
}

// verifyIPOrCIDROrAlias is IPorCIDRorAlias: an ipset entry.
func verifyIPOrCIDROrAlias(v string) error {
	if _, _, ok := FirewallAliasRef(v); ok {
		return nil
	}
	if !strings.Contains(v, "-") {
		if addr, bits, ok := strings.Cut(v, "/"); ok {
			if (isIPv4(addr) || isIPv6(addr)) && isUint(bits, 128) {
				if _, err := ParseFirewallAddr(v); err != nil {
					return err
				}
				return nil
			}
		} else if isIPv4(v) || isIPv6(v) {
			return nil
		}
	}
	return errors.New("value does not look like a valid IP address or CIDR network")
}

// PortRange is an inclusive range of TCP/UDP ports.
type PortRange struct {
	From, To uint16
}

// ParseFirewallPorts parses a rule's dport or sport as pve-firewall's
// parse_port_name_number_or_range: "22", "8000:8100", service names of /etc/services,
// comma-separated, at most 15 numbers (a range counts 2). In a dport, ICMP type names
// are accepted alone (the older spelling of icmp-type): icmp holds them.
func ParseFirewallPorts(v string, dport bool) (ports []PortRange, icmp []string, err error) {
	elems := strings.Split(v, ",")
	if slices0(elems) {
		return nil, nil, errors.New("extraneous commas in list")
	}
	count := 0
	for _, item := range elems {
		if m := portRangeRE.FindStringSubmatch(item); m != nil {
			count += 2
			a, b := portNumber(m[1]), portNumber(m[2])
			if a < 0 {
				return nil, nil, fmt.Errorf("invalid port '%s'", m[1])
			}
			if b < 0 {
				return nil, nil, fmt.Errorf("invalid port '%s'", m[2])
			}
			if a > b {
				return nil, nil, fmt.Errorf("backwards range '%s:%s' not allowed, did you mean '%s:%s'?", m[1], m[2], m[2], m[1])
			}
			ports = append(ports, PortRange{From: uint16(a), To: uint16(b)})
			continue
		}
		if portRE.MatchString(item) {
			count++
			n := portNumber(item)
			if n < 0 {
				return nil, nil, fmt.Errorf("invalid port '%s'", item)
			}
			ports = append(ports, PortRange{From: uint16(n), To: uint16(n)})
			continue
		}
		if dport {
			if _, ok := ICMPType(item, false); ok {
				icmp = append(icmp, item)
				continue
			}
			if _, ok := ICMPType(item, true); ok {
				icmp = append(icmp, item)
				continue
			}
		}
		n, ok := services[item]
		if !ok {
			return nil, nil, fmt.Errorf("invalid port '%s'", item)
		}
		ports = append(ports, PortRange{From: n, To: n})
	}
	if len(icmp) > 0 && count > 0 {
		return nil, nil, errors.New("ICMP ports not allowed in port range")
	}
	if count > 15 {
		return nil, nil, errors.New("too many entries in port list (> 15 numbers)")
	}
	return ports, icmp, nil
}

func portNumber(s string) int {
	if len(s) > 5 {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > 65535 {
		return -1
	}
	return n
}

// FirewallProtocol returns the IP protocol number of a rule's proto: a name or number of
// /etc/protocols ("icmpv6" too, as pve-firewall takes it).
func FirewallProtocol(v string) (int, bool) {
	if n, ok := protocols[v]; ok {
		return n, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || strconv.Itoa(n) != v {
		return 0, false
	}
	for _, p := range protocols {
		if p == n {
			return n, true
		}
	}
	return 0, false
}

// ICMPType returns the ICMP (v6: ICMPv6) type number of a type name of iptables; -1 for
// "any".
func ICMPType(name string, v6 bool) (int, bool) {
	if v6 {
		n, ok := icmpv6Types[name]
		return n, ok
	}
	n, ok := icmpTypes[name]
	return n, ok
}

func firewallVerifiers() map[string]func(string) error {
	return map[string]func(string) error{
		"pve-fw-addr-spec": verifyFirewallAddrSpec,
		"IPorCIDRorAlias":  verifyIPOrCIDROrAlias,
		"pve-fw-dport-spec": func(v string) error {
			_, _, err := ParseFirewallPorts(v, true)
			return err
		},
		"pve-fw-sport-spec": func(v string) error {
			_, _, err := ParseFirewallPorts(v, false)
			return err
		},
		"pve-fw-protocol-spec": func(v string) error {
			if _, ok := FirewallProtocol(v); v != "" && !ok {
				return fmt.Errorf("unknown protocol '%s'", v)
			}
			return nil
		},
		"pve-fw-icmp-type-spec": func(v string) error {
			_, ok4 := ICMPType(v, false)
			_, ok6 := ICMPType(v, true)
			if v != "" && !ok4 && !ok6 {
				return fmt.Errorf("invalid icmp-type value '%s'", v)
			}
			return nil
		},
	}
}

// protocols are the entries of Debian's /etc/protocols.
var protocols = map[string]int{
	"ip": 0, "hopopt": 0, "icmp": 1, "igmp": 2, "ggp": 3, "ipencap": 4, "st": 5, "tcp": 6, "egp": 8,
	"igp": 9, "pup": 12, "udp": 17, "hmp": 20, "xns-idp": 22, "rdp": 27, "iso-tp4": 29, "dccp": 33,
	"xtp": 36, "ddp": 37, "idpr-cmtp": 38, "ipv6": 41, "ipv6-route": 43, "ipv6-frag": 44, "idrp": 45,
	"rsvp": 46, "gre": 47, "esp": 50, "ah": 51, "skip": 57, "ipv6-icmp": 58, "icmpv6": 58,
	"ipv6-nonxt": 59, "ipv6-opts": 60, "rspf": 73, "vmtp": 81, "eigrp": 88, "ospf": 89, "ax.25": 93,
	"ipip": 94, "etherip": 97, "encap": 98, "pim": 103, "ipcomp": 108, "vrrp": 112, "l2tp": 115,
	"isis": 124, "sctp": 132, "fc": 133, "mobility-header": 135, "udplite": 136, "mpls-in-ip": 137,
	"manet": 138, "hip": 139, "shim6": 140, "wesp": 141, "rohc": 142, "ethernet": 143,
}

// services are the commonest TCP/UDP service names of Debian's /etc/services.
var services = map[string]uint16{
	"ftp-data": 20, "ftp": 21, "ssh": 22, "telnet": 23, "smtp": 25, "domain": 53, "bootps": 67,
	"bootpc": 68, "tftp": 69, "http": 80, "kerberos": 88, "pop3": 110, "sunrpc": 111, "ntp": 123,
	"netbios-ssn": 139, "imap2": 143, "snmp": 161, "bgp": 179, "ldap": 389, "https": 443,
	"microsoft-ds": 445, "isakmp": 500, "syslog": 514, "submission": 587, "ldaps": 636,
	"domain-s": 853, "rsync": 873, "imaps": 993, "pop3s": 995, "openvpn": 1194, "nfs": 2049,
	"mysql": 3306, "ms-wbt-server": 3389, "ipsec-nat-t": 4500, "postgresql": 5432,
	"http-alt": 8080, "zabbix-agent": 10050,
}

// icmpTypes are iptables' ICMP type names (a code name stands for its type).
var icmpTypes = map[string]int{
	"any": -1, "echo-reply": 0, "destination-unreachable": 3, "network-unreachable": 3,
	"host-unreachable": 3, "protocol-unreachable": 3, "port-unreachable": 3,
	"fragmentation-needed": 3, "source-route-failed": 3, "network-unknown": 3, "host-unknown": 3,
	"network-prohibited": 3, "host-prohibited": 3, "TOS-network-unreachable": 3,
	"TOS-host-unreachable": 3, "communication-prohibited": 3, "host-precedence-violation": 3,
	"precedence-cutoff": 3, "source-quench": 4, "redirect": 5, "network-redirect": 5,
	"host-redirect": 5, "TOS-network-redirect": 5, "TOS-host-redirect": 5, "echo-request": 8,
	"router-advertisement": 9, "router-solicitation": 10, "time-exceeded": 11,
	"ttl-zero-during-transit": 11, "ttl-zero-during-reassembly": 11, "parameter-problem": 12,
	"ip-header-bad": 12, "required-option-missing": 12, "timestamp-request": 13,
	"timestamp-reply": 14, "address-mask-request": 17, "address-mask-reply": 18,
}

// icmpv6Types are ip6tables' ICMPv6 type names.
var icmpv6Types = map[string]int{
	"destination-unreachable": 1, "no-route": 1, "communication-prohibited": 1,
	"beyond-scope": 1, "address-unreachable": 1, "port-unreachable": 1, "failed-policy": 1,
	"reject-route": 1, "packet-too-big": 2, "time-exceeded": 3, "ttl-zero-during-transit": 3,
	"ttl-zero-during-reassembly": 3, "parameter-problem": 4, "bad-header": 4,
	"unknown-header-type": 4, "unknown-option": 4, "echo-request": 128, "echo-reply": 129,
	"router-solicitation": 133, "router-advertisement": 134, "neighbour-solicitation": 135,
	"neighbor-solicitation": 135, "neighbour-advertisement": 136, "neighbor-advertisement": 136,
	"redirect": 137,
}
