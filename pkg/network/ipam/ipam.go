// Package ipam hands out the addresses of flexplane's networks through the
// Proxmox SDN IPAM, the system of record for IP allocations. A claim is an
// IP mapping created with POST /cluster/sdn/vnets/{vnet}/ips, which Proxmox
// creates only if the address is not mapped yet: two orchestrator replicas
// claiming one address concurrently get one success and one refusal. The
// MAC of every claim starts with MACPrefix, so flexplane's mappings are told
// apart from others (gateways, addresses of other tools).
package ipam

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// MACPrefix starts every MAC flexplane generates (a locally administered,
// unicast prefix: 02, then "FP" in ASCII).
const MACPrefix = "02:46:50"

// Errors returned (wrapped) by Claim.
var (
	// ErrTaken: the static address is mapped already.
	ErrTaken = errors.New("address is already in use")
	// ErrExhausted: no free address is left in the subnet.
	ErrExhausted = errors.New("no free address left in the subnet")
	// ErrReserved: the address is the subnet's network, broadcast or gateway
	// address, or outside the subnet.
	ErrReserved = errors.New("address is not assignable in the subnet")
)

// Subnet is the subnet of a VNet addresses are claimed in.
type Subnet struct {
	// Zone is the Proxmox SDN zone of the VNet.
	Zone string
	// VNet is the Proxmox SDN VNet id.
	VNet string
	// Prefix is the subnet's CIDR.
	Prefix netip.Prefix
	// Gateway is the subnet's gateway (may be invalid when there is none).
	Gateway netip.Addr
}

// Assignable reports whether addr may be given to a guest: inside the
// subnet and not its network, broadcast (IPv4) or gateway address.
func (s Subnet) Assignable(addr netip.Addr) bool {
	p := s.Prefix.Masked()
	if !p.Contains(addr) || addr == p.Addr() || addr == s.Gateway {
		return false
	}
	if addr.Is4() && p.Bits() < 31 && addr == lastAddr(p) {
		return false
	}
	return true
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	host := len(b)*8 - p.Bits()
	for i := len(b) - 1; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(1<<n - 1)
		host -= n
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// NewMAC returns a random MAC with MACPrefix, in Proxmox's upper-case form.
func NewMAC() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%02X:%02X:%02X", MACPrefix, b[0], b[1], b[2])
}

// IsFlexplaneMAC reports whether mac was made by NewMAC.
func IsFlexplaneMAC(mac string) bool {
	return strings.HasPrefix(strings.ToUpper(mac), MACPrefix)
}

// Mapping is one IP mapping of the Proxmox IPAM (pveapi's one model of it).
type Mapping = pveapi.IPMapping

// Mappings lists every mapping of the Proxmox IPAM.
func Mappings(ctx context.Context, c *proxmox.Client) ([]Mapping, error) {
	out, err := pveapi.IPAMStatus(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("ipam: list mappings: %w", err)
	}
	return out, nil
}

// Claim maps addr (a static address) or, when addr is the zero Addr, the
// first free address of s to mac, and returns the address. A taken static
// address fails with ErrTaken; automatic allocation tries the next free
// address when another claim wins one first, and fails with ErrExhausted
// when none is left.
func Claim(ctx context.Context, c *proxmox.Client, s Subnet, addr netip.Addr, mac string) (netip.Addr, error) {
	if addr.IsValid() {
		if !s.Assignable(addr) {
			return netip.Addr{}, fmt.Errorf("ipam: claim %s: %w", addr, ErrReserved)
		}
		if err := create(ctx, c, s, addr, mac); err != nil {
			return netip.Addr{}, err
		}
		return addr, nil
	}
	maps, err := Mappings(ctx, c)
	if err != nil {
		return netip.Addr{}, err
	}
	used := map[netip.Addr]bool{}
	for _, m := range maps {
		if a, err := netip.ParseAddr(m.IP); err == nil && m.Zone == s.Zone {
			used[a] = true
		}
	}
	p := s.Prefix.Masked()
	for a := p.Addr().Next(); a.IsValid() && p.Contains(a); a = a.Next() {
		if used[a] || !s.Assignable(a) {
			continue
		}
		err := create(ctx, c, s, a, mac)
		if errors.Is(err, ErrTaken) {
			continue // another claim won it since the list was read
		}
		if err != nil {
			return netip.Addr{}, err
		}
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("ipam: claim in %s: %w", p, ErrExhausted)
}

func create(ctx context.Context, c *proxmox.Client, s Subnet, addr netip.Addr, mac string) error {
	err := c.Post(ctx, "/cluster/sdn/vnets/"+s.VNet+"/ips",
		map[string]any{"zone": s.Zone, "ip": addr.String(), "mac": mac}, nil)
	if pveapi.IsAlreadyExists(err) {
		return fmt.Errorf("ipam: claim %s: %w", addr, ErrTaken)
	}
	if err != nil {
		return fmt.Errorf("ipam: claim %s: %w", addr, err)
	}
	return nil
}

// Release deletes the mapping of addr in vnet if it is still mapped to mac
// (so a release never frees an address someone else claimed since). An
// address that is not mapped is released already.
func Release(ctx context.Context, c *proxmox.Client, zone, vnet string, addr netip.Addr, mac string) error {
	maps, err := Mappings(ctx, c)
	if err != nil {
		return err
	}
	for _, m := range maps {
		if m.Zone == zone && m.IP == addr.String() && m.Gateway == 0 {
			if mac != "" && !strings.EqualFold(m.MAC, mac) {
				return nil
			}
			return releaseMapping(ctx, c, m)
		}
	}
	return nil
}

func releaseMapping(ctx context.Context, c *proxmox.Client, m Mapping) error {
	err := c.DeleteWithParams(ctx, "/cluster/sdn/vnets/"+m.VNet+"/ips",
		map[string]any{"zone": m.Zone, "ip": m.IP, "mac": m.MAC}, nil)
	if err != nil && !pveapi.IsNotFound(err) {
		return fmt.Errorf("ipam: release %s: %w", m.IP, err)
	}
	return nil
}

// ReleaseMACs releases every flexplane mapping whose MAC is one of macs.
func ReleaseMACs(ctx context.Context, c *proxmox.Client, macs []string) error {
	if len(macs) == 0 {
		return nil
	}
	want := map[string]bool{}
	for _, m := range macs {
		want[strings.ToUpper(m)] = true
	}
	maps, err := Mappings(ctx, c)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range maps {
		if m.Gateway == 0 && want[strings.ToUpper(m.MAC)] {
			errs = append(errs, releaseMapping(ctx, c, m))
		}
	}
	return errors.Join(errs...)
}

// Assign records on the mapping of addr (claimed under mac) the guest vmid
// that uses it, so readers of the IPAM see whose address it is. It is
// idempotent.
func Assign(ctx context.Context, c *proxmox.Client, zone, vnet string, addr netip.Addr, mac string, vmid int) error {
	err := c.Put(ctx, "/cluster/sdn/vnets/"+vnet+"/ips",
		map[string]any{"zone": zone, "ip": addr.String(), "mac": mac, "vmid": vmid}, nil)
	if err != nil {
		return fmt.Errorf("ipam: assign %s to %d: %w", addr, vmid, err)
	}
	return nil
}
