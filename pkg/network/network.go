// Package network manages the networks of VDCs on Proxmox SDN, the system
// of record: per VDC one SDN zone of type vxlan in each Proxmox cluster
// (id tenancy.SDNZoneID) whose peers are the cluster's nodes, so a network
// spans every node of the zone; per network one VNet (tenancy.VNetID,
// alias tenancy.VNetAlias) with its own VXLAN VNI (the VNet's tag, unique
// in the cluster) and one subnet with its gateway, registered in the PVE
// IPAM. A VXLAN zone is layer 2 only: nothing routes between VNets, so a
// VDC's only router is its edge gateway (package edge), which holds the
// subnets' gateway addresses. Every change is applied to the
// cluster with PUT /cluster/sdn before it returns. Nothing is kept outside
// Proxmox; the calls go through a zone's go-proxmox client.
package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Network is a network of a VDC in one zone.
type Network struct {
	VDC  string
	Name string
	// VNet is the Proxmox VNet id (the bridge a NIC names).
	VNet    string
	CIDR    netip.Prefix
	Gateway netip.Addr
}

// Spec is a network to create.
type Spec struct {
	VDC     string
	Name    string
	CIDR    string
	Gateway string
}

// InputError is a Spec field at fault. Field is "name", "cidr" or
// "gateway".
type InputError struct {
	Field   string
	Message string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Message }

// Errors of Create and Delete (matched with errors.Is).
var (
	ErrExists   = errors.New("network already exists")
	ErrNotFound = errors.New("network not found")
	ErrInUse    = errors.New("network in use")
)

var nameRE = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$`)

// Prefix lengths a network may have: /29 leaves 5 addresses for guests.
const minBits, maxBits = 8, 29

// Validate checks a spec without asking Proxmox and returns its parsed
// CIDR and gateway, or an *InputError.
func (s Spec) Validate() (netip.Prefix, netip.Addr, error) {
	if !nameRE.MatchString(s.Name) {
		return netip.Prefix{}, netip.Addr{}, &InputError{"name", "must be 1 to 40 lowercase letters, digits and '-', start with a letter and not end with '-'"}
	}
	pfx, err := netip.ParsePrefix(s.CIDR)
	if err != nil || !pfx.Addr().Is4() {
		return netip.Prefix{}, netip.Addr{}, &InputError{"cidr", fmt.Sprintf("%q is not an IPv4 network in CIDR notation (e.g. 10.1.0.0/24)", s.CIDR)}
	}
	if pfx.Bits() < minBits || pfx.Bits() > maxBits {
		return netip.Prefix{}, netip.Addr{}, &InputError{"cidr", fmt.Sprintf("the prefix length must be between %d and %d, not %d", minBits, maxBits, pfx.Bits())}
	}
	if pfx.Masked() != pfx {
		return netip.Prefix{}, netip.Addr{}, &InputError{"cidr", fmt.Sprintf("%s is not a network address; did you mean %s?", pfx, pfx.Masked())}
	}
	gw, err := netip.ParseAddr(s.Gateway)
	if err != nil || !gw.Is4() {
		return netip.Prefix{}, netip.Addr{}, &InputError{"gateway", fmt.Sprintf("%q is not an IPv4 address", s.Gateway)}
	}
	if !pfx.Contains(gw) {
		return netip.Prefix{}, netip.Addr{}, &InputError{"gateway", fmt.Sprintf("%s is not inside %s", gw, pfx)}
	}
	if gw == pfx.Addr() {
		return netip.Prefix{}, netip.Addr{}, &InputError{"gateway", fmt.Sprintf("%s is the network address of %s", gw, pfx)}
	}
	if gw == broadcast(pfx) {
		return netip.Prefix{}, netip.Addr{}, &InputError{"gateway", fmt.Sprintf("%s is the broadcast address of %s", gw, pfx)}
	}
	return pfx, gw, nil
}

func broadcast(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n |= 1<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

type vnetEntry struct {
	VNet  string `json:"vnet"`
	Zone  string `json:"zone"`
	Alias string `json:"alias"`
}

type subnetEntry struct {
	Subnet  string `json:"subnet"`
	CIDR    string `json:"cidr"`
	Gateway string `json:"gateway"`
}

// List returns the networks of vdc in the zone of c, sorted by name.
func List(ctx context.Context, c *proxmox.Client, vdc string) ([]Network, error) {
	var vnets []vnetEntry
	if err := c.Get(ctx, "/cluster/sdn/vnets", &vnets); err != nil {
		return nil, fmt.Errorf("network: list vnets: %w", err)
	}
	var mine []vnetEntry
	for _, v := range vnets {
		if tenancy.VNetBelongs(vdc, v.Zone, v.Alias) {
			mine = append(mine, v)
		}
	}
	out := make([]Network, len(mine))
	errs := make([]error, len(mine))
	var wg sync.WaitGroup
	for i, v := range mine {
		wg.Go(func() { out[i], errs[i] = read(ctx, c, v) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Network) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// read completes a VNet of a VDC with its subnet.
func read(ctx context.Context, c *proxmox.Client, v vnetEntry) (Network, error) {
	vdc, name, _ := tenancy.VNetOf(v.Zone, v.Alias)
	n := Network{VDC: vdc, Name: name, VNet: v.VNet}
	var subnets []subnetEntry
	if err := c.Get(ctx, "/cluster/sdn/vnets/"+url.PathEscape(v.VNet)+"/subnets", &subnets); err != nil {
		return Network{}, fmt.Errorf("network: list subnets of %s: %w", v.VNet, err)
	}
	if len(subnets) > 0 {
		n.CIDR, _ = netip.ParsePrefix(subnets[0].CIDR)
		n.Gateway, _ = netip.ParseAddr(subnets[0].Gateway)
	}
	return n, nil
}

// Get returns the network of vdc with VNet id vnet; ErrNotFound when there
// is none or it belongs to another VDC.
func Get(ctx context.Context, c *proxmox.Client, vdc, vnet string) (Network, error) {
	nets, err := List(ctx, c, vdc)
	if err != nil {
		return Network{}, err
	}
	for _, n := range nets {
		if n.VNet == vnet {
			return n, nil
		}
	}
	return Network{}, ErrNotFound
}

// Create validates s, checks it against the VDC's networks in the zone of
// c (a name taken is ErrExists, an overlapping CIDR an *InputError), then
// creates the VDC's SDN zone if needed, the VNet and its subnet, and
// applies the SDN configuration. Refused input changes nothing; a failure
// half-way removes the VNet again.
func Create(ctx context.Context, c *proxmox.Client, s Spec) (Network, error) {
	pfx, gw, err := s.Validate()
	if err != nil {
		return Network{}, err
	}
	nets, err := List(ctx, c, s.VDC)
	if err != nil {
		return Network{}, err
	}
	if err := check(nets, s.Name, pfx); err != nil {
		return Network{}, err
	}
	zone := tenancy.SDNZoneID(s.VDC)
	if err := ensureZone(ctx, c, zone); err != nil {
		return Network{}, err
	}
	n := Network{VDC: s.VDC, Name: s.Name, VNet: tenancy.VNetID(s.VDC, s.Name), CIDR: pfx, Gateway: gw}
	if err := createVNet(ctx, c, zone, n.VNet, tenancy.VNetAlias(s.VDC, s.Name)); err != nil {
		// A concurrent create of the same name wins the VNet id.
		if again, lerr := List(ctx, c, s.VDC); lerr == nil && slices.ContainsFunc(again, func(o Network) bool { return o.Name == s.Name }) {
			return Network{}, fmt.Errorf("network: create %s: %w", s.Name, ErrExists)
		}
		return Network{}, fmt.Errorf("network: create vnet %s: %w", n.VNet, err)
	}
	if err := c.Post(ctx, "/cluster/sdn/vnets/"+n.VNet+"/subnets", map[string]any{
		"subnet": pfx.String(), "type": "subnet", "gateway": gw.String(),
	}, nil); err != nil {
		// Remove the VNet again, and apply: another create may have
		// applied it meanwhile.
		if derr := c.Delete(ctx, "/cluster/sdn/vnets/"+n.VNet, nil); derr != nil {
			err = errors.Join(err, fmt.Errorf("remove vnet again: %w", derr))
		} else if aerr := Apply(ctx, c); aerr != nil {
			err = errors.Join(err, aerr)
		}
		// A concurrent create may have taken an overlapping range.
		if again, lerr := List(ctx, c, s.VDC); lerr == nil {
			if cerr := check(again, s.Name, pfx); cerr != nil {
				return Network{}, cerr
			}
		}
		return Network{}, fmt.Errorf("network: create subnet %s: %w", pfx, err)
	}
	if err := Apply(ctx, c); err != nil {
		return Network{}, err
	}
	return n, nil
}

// check refuses a name taken or a range overlapping one of nets.
func check(nets []Network, name string, pfx netip.Prefix) error {
	for _, o := range nets {
		if o.Name == name {
			return fmt.Errorf("network: create %s: %w", name, ErrExists)
		}
	}
	for _, o := range nets {
		if o.CIDR.IsValid() && o.CIDR.Overlaps(pfx) {
			return &InputError{"cidr", fmt.Sprintf("%s overlaps %s of network %s", pfx, o.CIDR, o.Name)}
		}
	}
	return nil
}

// FirstVNI is the lowest VXLAN VNI flexplane gives a VNet; lower ones are
// left to the operator's own VNets.
const FirstVNI = 10000

// createVNet creates the VNet with the lowest VXLAN VNI (its tag) that no
// VNet of the cluster has. Proxmox refuses a tag another VNet holds, so two
// concurrent creates that guess the same VNI do not both get it: the loser
// reads the VNets again and takes the next free one.
func createVNet(ctx context.Context, c *proxmox.Client, zone, vnet, alias string) error {
	var lastErr error
	for range 20 {
		var vnets []struct {
			VNet string `json:"vnet"`
			Tag  *int   `json:"tag"`
		}
		if err := c.Get(ctx, "/cluster/sdn/vnets", &vnets); err != nil {
			return fmt.Errorf("network: list vnets: %w", err)
		}
		used := map[int]bool{}
		for _, v := range vnets {
			if v.VNet == vnet {
				return fmt.Errorf("network: create vnet %s: it exists", vnet)
			}
			if v.Tag != nil {
				used[*v.Tag] = true
			}
		}
		tag := FirstVNI
		for used[tag] {
			tag++
		}
		err := c.Post(ctx, "/cluster/sdn/vnets", map[string]any{"vnet": vnet, "zone": zone, "alias": alias, "tag": tag}, nil)
		if err == nil || !strings.Contains(err.Error(), "already exist in vnet") {
			return err
		}
		lastErr = err
	}
	return fmt.Errorf("network: no free VXLAN VNI: %w", lastErr)
}

// zonePeers is the peers list of a VXLAN zone: the addresses of the
// cluster's nodes, from /cluster/status, sorted.
func zonePeers(ctx context.Context, c *proxmox.Client) (string, error) {
	var st []struct {
		Type string `json:"type"`
		IP   string `json:"ip"`
	}
	if err := c.Get(ctx, "/cluster/status", &st); err != nil {
		return "", fmt.Errorf("network: cluster status: %w", err)
	}
	var ips []netip.Addr
	for _, e := range st {
		if a, err := netip.ParseAddr(e.IP); e.Type == "node" && err == nil {
			ips = append(ips, a)
		}
	}
	if len(ips) == 0 {
		return "", errors.New("network: cluster status names no node address for the VXLAN peers")
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	out := make([]string, len(ips))
	for i, a := range ips {
		out[i] = a.String()
	}
	return strings.Join(out, ","), nil
}

// VXLANMTU is the MTU of a VDC's VXLAN zone (and so of its VNet bridges and
// guest NICs): 1500 of the nodes' network less the 50 bytes of VXLAN over
// IPv4.
const VXLANMTU = 1450

// ensureZone creates the VDC's SDN zone (type vxlan, the cluster's nodes as
// peers) unless it exists.
func ensureZone(ctx context.Context, c *proxmox.Client, zone string) error {
	has := func() (bool, error) {
		var zs []struct {
			Zone string `json:"zone"`
		}
		if err := c.Get(ctx, "/cluster/sdn/zones", &zs); err != nil {
			return false, fmt.Errorf("network: list SDN zones: %w", err)
		}
		return slices.ContainsFunc(zs, func(z struct {
			Zone string `json:"zone"`
		}) bool {
			return z.Zone == zone
		}), nil
	}
	ok, err := has()
	if err != nil || ok {
		return err
	}
	peers, err := zonePeers(ctx, c)
	if err != nil {
		return err
	}
	if err := c.Post(ctx, "/cluster/sdn/zones", map[string]any{"zone": zone, "type": "vxlan", "peers": peers, "mtu": VXLANMTU, "ipam": "pve"}, nil); err != nil {
		if ok, _ := has(); ok { // created concurrently
			return nil
		}
		return fmt.Errorf("network: create SDN zone %s: %w", zone, err)
	}
	return nil
}

// RemoveVDC removes the SDN zone of vdc from the cluster of c (and
// applies that), once its networks are deleted; a zone that does not exist
// is no error. While the VDC has networks Proxmox refuses.
func RemoveVDC(ctx context.Context, c *proxmox.Client, vdc string) error {
	zone := tenancy.SDNZoneID(vdc)
	var zs []struct {
		Zone string `json:"zone"`
	}
	if err := c.Get(ctx, "/cluster/sdn/zones", &zs); err != nil {
		return fmt.Errorf("network: remove VDC %s: %w", vdc, err)
	}
	if !slices.ContainsFunc(zs, func(z struct {
		Zone string `json:"zone"`
	}) bool {
		return z.Zone == zone
	}) {
		return nil
	}
	if err := c.Delete(ctx, "/cluster/sdn/zones/"+zone, nil); err != nil {
		return fmt.Errorf("network: remove VDC %s: delete SDN zone %s: %w", vdc, zone, err)
	}
	return Apply(ctx, c)
}

// Apply applies the pending SDN configuration of the cluster and waits for
// the task.
func Apply(ctx context.Context, c *proxmox.Client) error {
	var upid proxmox.UPID
	if err := c.Put(ctx, "/cluster/sdn", nil, &upid); err != nil {
		return fmt.Errorf("network: apply SDN: %w", err)
	}
	t := proxmox.NewTask(upid, c)
	if err := t.Wait(ctx, 100*time.Millisecond, time.Minute); err != nil {
		return fmt.Errorf("network: apply SDN: %w", err)
	}
	if t.IsFailed {
		return fmt.Errorf("network: apply SDN: task %s failed: %s", upid, t.ExitStatus)
	}
	return nil
}

// Delete removes the network of vdc with VNet id vnet: ErrNotFound when
// there is none or it belongs to another VDC, ErrInUse while a guest has a
// NIC on it or the IPAM holds an address in it (other than the gateway).
func Delete(ctx context.Context, c *proxmox.Client, vdc, vnet string) error {
	n, err := Get(ctx, c, vdc, vnet)
	if err != nil {
		return err
	}
	if err := inUse(ctx, c, n); err != nil {
		return err
	}
	var subnets []subnetEntry
	if err := c.Get(ctx, "/cluster/sdn/vnets/"+n.VNet+"/subnets", &subnets); err != nil {
		return fmt.Errorf("network: delete %s: %w", n.Name, err)
	}
	// A create may claim an address between the check and the deletes
	// (Proxmox then refuses the subnet's): that is the network in use.
	inUseNow := func(err error) error {
		if uerr := inUse(ctx, c, n); errors.Is(uerr, ErrInUse) {
			return uerr
		}
		return err
	}
	for _, s := range subnets {
		if err := c.Delete(ctx, "/cluster/sdn/vnets/"+n.VNet+"/subnets/"+url.PathEscape(s.Subnet), nil); err != nil {
			return inUseNow(fmt.Errorf("network: delete subnet %s: %w", s.Subnet, err))
		}
	}
	if err := c.Delete(ctx, "/cluster/sdn/vnets/"+n.VNet, nil); err != nil {
		return inUseNow(fmt.Errorf("network: delete vnet %s: %w", n.VNet, err))
	}
	return Apply(ctx, c)
}

// inUse returns ErrInUse (wrapped, saying why) when n has addresses in the
// IPAM or a guest with a NIC on it.
func inUse(ctx context.Context, c *proxmox.Client, n Network) error {
	ms, err := ipam.Mappings(ctx, c)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.VNet == n.VNet && m.Gateway == 0 {
			return fmt.Errorf("network: %s: %w: the IPAM holds address %s", n.Name, ErrInUse, m.IP)
		}
	}
	gs, err := pveapi.Guests(ctx, c)
	if err != nil {
		return err
	}
	var (
		mu    sync.Mutex
		users []string
		errs  []error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 8)
	)
	for _, r := range gs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			var conf map[string]any
			err := c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/config", url.PathEscape(r.Node), r.VMID), &conf)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("network: read config of guest %d: %w", r.VMID, err))
				return
			}
			if nicOn(conf, n.VNet) {
				users = append(users, fmt.Sprint(r.VMID))
			}
		})
	}
	wg.Wait()
	if len(users) > 0 {
		slices.Sort(users)
		return fmt.Errorf("network: %s: %w: guests %s have a NIC on it", n.Name, ErrInUse, strings.Join(users, ", "))
	}
	return errors.Join(errs...)
}

// nicOn reports whether a guest config has a NIC (netN) bridged to vnet.
func nicOn(conf map[string]any, vnet string) bool {
	for k, v := range conf {
		if !strings.HasPrefix(k, "net") || strings.Trim(k[3:], "0123456789") != "" || len(k) == 3 {
			continue
		}
		s, _ := v.(string)
		for _, part := range strings.Split(s, ",") {
			if part == "bridge="+vnet {
				return true
			}
		}
	}
	return false
}
