package catalog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"
)

// ExternalNetwork is a zone's external network, decided by the platform
// admin: the bridge on every node of the zone that reaches the outside,
// its router and the pool of public addresses the VDCs' edge gateways are
// given. Its name is the zone's name (one per zone). Its status records
// which VDC holds which address of the pool; an allocation is an update
// conditional on the object's resourceVersion, so no address is ever
// handed out twice, whichever replica allocates.
type ExternalNetwork struct {
	TypeMeta
	ObjectMeta          `json:"metadata"`
	ExternalNetworkSpec `json:"spec"`
	// Status holds the pool's allocations (written by the orchestrator).
	Status ExternalNetworkStatus `json:"status,omitzero"`
}

// ExternalNetworkSpec is the shape of an external network.
type ExternalNetworkSpec struct {
	// Description is free text for humans (at most 1024 bytes).
	Description string `json:"description,omitempty"`
	// Bridge is the Linux bridge of the external network on every node of
	// the zone (e.g. vmbr0).
	Bridge string `json:"bridge"`
	// CIDR is the external network, an IPv4 network address with its prefix
	// length (e.g. 203.0.113.0/24).
	CIDR string `json:"cidr"`
	// Gateway is the network's router, inside CIDR: the gateways' default
	// route.
	Gateway string `json:"gateway"`
	// PoolStart and PoolEnd bound the public addresses handed to VDCs
	// (inclusive, inside CIDR, not its network, broadcast or gateway
	// address; at most MaxPoolSize addresses).
	PoolStart string `json:"poolStart"`
	PoolEnd   string `json:"poolEnd"`
}

// ExternalNetworkStatus is what the orchestrator records on an external
// network.
type ExternalNetworkStatus struct {
	// Allocations are the pool's addresses in use, sorted by address.
	Allocations []PublicAllocation `json:"allocations,omitempty"`
}

// The uses of a public address.
const (
	// UseGateway is a VDC's own address: its egress is SNATed to it and
	// its port forwards listen on it.
	UseGateway = "gateway"
	// UseOneToOne is an address given to one VM both ways.
	UseOneToOne = "oneToOne"
)

// PublicAllocation is one address of a pool held by a VDC.
type PublicAllocation struct {
	// Address is the public IPv4 address.
	Address string `json:"address"`
	// VDC holds the address.
	VDC string `json:"vdc"`
	// Use is UseGateway or UseOneToOne.
	Use string `json:"use"`
}

// ObjectKind implements Object.
func (*ExternalNetwork) ObjectKind() Kind { return KindExternalNetwork }

// DeepCopyObject implements Object.
func (n *ExternalNetwork) DeepCopyObject() Object {
	c := *n
	c.Status.Allocations = slices.Clone(n.Status.Allocations)
	return &c
}

// Pool returns the network's prefix and pool bounds (valid once Validate
// passed).
func (s *ExternalNetworkSpec) Pool() (cidr netip.Prefix, start, end netip.Addr) {
	cidr, _ = netip.ParsePrefix(s.CIDR)
	start, _ = netip.ParseAddr(s.PoolStart)
	end, _ = netip.ParseAddr(s.PoolEnd)
	return cidr, start, end
}

// PoolSize is how many addresses the pool has.
func (s *ExternalNetworkSpec) PoolSize() int {
	_, start, end := s.Pool()
	return int(ipv4Num(end)) - int(ipv4Num(start)) + 1
}

// InPool reports whether a is an address of the pool.
func (s *ExternalNetworkSpec) InPool(a netip.Addr) bool {
	_, start, end := s.Pool()
	return a.Is4() && start.Compare(a) <= 0 && a.Compare(end) <= 0
}

// Holder returns the allocation of a, if any.
func (n *ExternalNetwork) Holder(a netip.Addr) (PublicAllocation, bool) {
	for _, al := range n.Status.Allocations {
		if al.Address == a.String() {
			return al, true
		}
	}
	return PublicAllocation{}, false
}

// EdgeGateway is the edge gateway of one VDC in one zone as the VDC wants
// it: its public address (from the zone's external network), its firewall
// rules in order, port forwards, 1:1 addresses and bandwidth limits. Its
// name is EdgeGatewayName(vdc, zone). The orchestrator derives the
// gateway's whole state from it, the VDC's networks and its VMs'
// addresses, and sends it to the agent that runs it.
type EdgeGateway struct {
	TypeMeta
	ObjectMeta      `json:"metadata"`
	EdgeGatewaySpec `json:"spec"`
}

// EdgeGatewaySpec is what a VDC wants of its gateway in a zone.
type EdgeGatewaySpec struct {
	// VDC is the VDC the gateway belongs to.
	VDC string `json:"vdc"`
	// Zone is the zone's name.
	Zone string `json:"zone"`
	// PublicAddress is the VDC's address in the zone (allocated from the
	// external network's pool with use UseGateway).
	PublicAddress string `json:"publicAddress"`
	// EgressMbps and IngressMbps limit the VDC's traffic to and from the
	// external network in Mbit/s (0 to MaxMbps); 0 is no limit.
	EgressMbps  int `json:"egressMbps"`
	IngressMbps int `json:"ingressMbps"`
	// FirewallRules are the VDC's rules in order: the first that matches
	// decides; inbound traffic no rule allows is dropped.
	FirewallRules []FirewallRule `json:"firewallRules,omitempty"`
	// PortForwards send a public address's port on to a VM's.
	PortForwards []PortForward `json:"portForwards,omitempty"`
	// OneToOne give VMs public addresses of their own, both ways.
	OneToOne []OneToOneAddress `json:"oneToOne,omitempty"`
	// KubeEndpoints are where the workers of the VDC's Kubernetes clusters
	// in the zone reach their hosted API servers.
	KubeEndpoints []KubeEndpoint `json:"kubeEndpoints,omitempty"`
}

// KubeEndpoint is the endpoint of a Kubernetes cluster of the VDC: a port
// of one of its networks' gateway addresses, which the gateway forwards to
// the cluster's hosted API server (where the management cluster serves it),
// so that the workers reach it from inside their network, by an address
// and without DNS. Claimed with ClaimKubeEndpoint before the cluster is
// made (it is in the API server's certificate), given back with
// ReleaseKubeEndpoint once it is gone.
type KubeEndpoint struct {
	// Cluster is the cluster's id (its namespace in the management cluster).
	Cluster string `json:"cluster"`
	// Address is the gateway address of the cluster's network.
	Address string `json:"address"`
	// Port is 1 to 65535.
	Port int `json:"port"`
	// Claimed is when it was claimed: a claim whose cluster never came to be
	// is given back after a while.
	Claimed time.Time `json:"claimed"`
}

// Directions of a firewall rule.
const (
	DirectionInbound  = "in"
	DirectionOutbound = "out"
)

// Actions of a firewall rule.
const (
	ActionAllow = "allow"
	ActionDeny  = "deny"
)

// FirewallRule is one rule of a VDC's firewall.
type FirewallRule struct {
	// ID names the rule in its gateway (1 to 32 lower-case letters and
	// digits).
	ID string `json:"id"`
	// Description is free text for humans (at most 1024 bytes).
	Description string `json:"description,omitempty"`
	// Direction is DirectionInbound (from the external network; the
	// destination is the VM's address and port after DNAT) or
	// DirectionOutbound.
	Direction string `json:"direction"`
	// Protocol is tcp, udp, icmp or any.
	Protocol string `json:"protocol"`
	// FromPort..ToPort is the destination port range (tcp and udp only);
	// both 0 is any port.
	FromPort int `json:"fromPort,omitempty"`
	ToPort   int `json:"toPort,omitempty"`
	// Source and Destination are IPv4 CIDRs; "" is any address.
	Source      string `json:"source,omitempty"`
	Destination string `json:"destination,omitempty"`
	// Action is ActionAllow or ActionDeny.
	Action string `json:"action"`
}

// PortForward sends Protocol traffic to PublicAddress:PublicPort on to the
// VM VMID (its address in the VDC's network) at TargetPort.
type PortForward struct {
	// ID names the port forward in its gateway.
	ID string `json:"id"`
	// Protocol is tcp or udp.
	Protocol string `json:"protocol"`
	// PublicAddress is the gateway's public address.
	PublicAddress string `json:"publicAddress"`
	// PublicPort is 1 to 65535.
	PublicPort int `json:"publicPort"`
	// VMID is the VM's Proxmox VMID in the zone.
	VMID int `json:"vmid"`
	// TargetPort is 1 to 65535.
	TargetPort int `json:"targetPort"`
}

// OneToOneAddress gives the VM VMID the public address PublicAddress
// (allocated with use UseOneToOne), both ways.
type OneToOneAddress struct {
	// ID names the mapping in its gateway.
	ID string `json:"id"`
	// PublicAddress is the VM's public address.
	PublicAddress string `json:"publicAddress"`
	// VMID is the VM's Proxmox VMID in the zone.
	VMID int `json:"vmid"`
}

// EdgeGatewayName is the name of vdc's gateway object in zone.
func EdgeGatewayName(vdc, zone string) string { return vdc + "." + zone }

// ObjectKind implements Object.
func (*EdgeGateway) ObjectKind() Kind { return KindEdgeGateway }

// DeepCopyObject implements Object.
func (g *EdgeGateway) DeepCopyObject() Object {
	c := *g
	c.FirewallRules = slices.Clone(g.FirewallRules)
	c.PortForwards = slices.Clone(g.PortForwards)
	c.OneToOne = slices.Clone(g.OneToOne)
	return &c
}

// Errors of public address allocation (wrapped in *ValidationError where
// they are the caller's input, matched with errors.Is).
var (
	// ErrNoExternalNetwork: the zone has no external network.
	ErrNoExternalNetwork = errors.New("the zone has no external network")
	// ErrPoolExhausted: every address of the pool is allocated.
	ErrPoolExhausted = errors.New("no free public address is left in the pool")
	// ErrAddressInUse: the address asked for is allocated already.
	ErrAddressInUse = errors.New("the public address is in use")
)

// maxAllocateTries bounds the retries of an allocation that keeps losing
// its conditional write to others.
const maxAllocateTries = 50

// backoff waits a little longer after each lost write (with jitter, so
// that writers that collided do not collide again), or until ctx ends.
func backoff(ctx context.Context, try int) error {
	d := time.Duration(1+rand.IntN(5*(try+1))) * time.Millisecond
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// AllocatePublicAddress gives vdc an address of zone's external network's
// pool for use: want when it is valid (it must be in the pool and free:
// a *ValidationError on field otherwise), else the lowest free one. The
// allocation is an update conditional on the external network's
// resourceVersion, retried when another writer got there first, so two
// concurrent allocations never get one address.
func AllocatePublicAddress(ctx context.Context, s Store, zone, vdc, use string, want netip.Addr, field string) (netip.Addr, error) {
	var addr netip.Addr
	missing := &ValidationError{Field: "zone", Message: fmt.Sprintf("zone %q has no external network", zone), err: ErrNoExternalNetwork}
	err := changePool(ctx, s, zone, missing, func(n *ExternalNetwork) (bool, error) {
		a, err := n.pick(want, field)
		if err != nil {
			return false, err
		}
		addr = a
		n.Status.Allocations = append(n.Status.Allocations, PublicAllocation{Address: a.String(), VDC: vdc, Use: use})
		slices.SortFunc(n.Status.Allocations, func(x, y PublicAllocation) int {
			return netip.MustParseAddr(x.Address).Compare(netip.MustParseAddr(y.Address))
		})
		return true, nil
	})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("allocate public address: %w", err)
	}
	return addr, nil
}

// pick chooses want (checked) or the lowest free address of the pool.
func (n *ExternalNetwork) pick(want netip.Addr, field string) (netip.Addr, error) {
	if want.IsValid() {
		if !n.InPool(want) {
			return netip.Addr{}, &ValidationError{Field: field, Message: fmt.Sprintf("%s is outside the pool %s-%s of zone %s's external network", want, n.PoolStart, n.PoolEnd, n.Name)}
		}
		if _, taken := n.Holder(want); taken {
			return netip.Addr{}, &ValidationError{Field: field, Message: fmt.Sprintf("%s is in use", want), err: ErrAddressInUse}
		}
		return want, nil
	}
	_, start, end := n.Pool()
	for a := start; a.IsValid() && a.Compare(end) <= 0; a = a.Next() {
		if _, taken := n.Holder(a); !taken {
			return a, nil
		}
	}
	return netip.Addr{}, &ValidationError{Field: "zone", Message: fmt.Sprintf("zone %s's external network has no free public address left", n.Name), err: ErrPoolExhausted}
}

// errNotHeld is a release of an address its VDC does not hold: a no-op.
var errNotHeld = errors.New("not held")

// ReleasePublicAddress gives back vdc's address a of zone's pool (a no-op
// when vdc does not hold it), conditionally as AllocatePublicAddress.
func ReleasePublicAddress(ctx context.Context, s Store, zone, vdc string, a netip.Addr) error {
	err := changePool(ctx, s, zone, nil, func(n *ExternalNetwork) (bool, error) {
		i := slices.IndexFunc(n.Status.Allocations, func(al PublicAllocation) bool { return al.Address == a.String() && al.VDC == vdc })
		if i < 0 {
			return false, errNotHeld
		}
		n.Status.Allocations = slices.Delete(n.Status.Allocations, i, i+1)
		return true, nil
	})
	if err != nil && !errors.Is(err, errNotHeld) {
		return fmt.Errorf("release public address: %w", err)
	}
	return nil
}

// changePool applies change to zone's external network and writes it,
// conditional on the resourceVersion read, again from a fresh read when
// another writer got there first; a missing network is missing. When
// change writes nothing because of what it read (the pool exhausted, an
// address held or not held), the store may have answered from a cache a
// change has not reached yet: that outcome stands only once an unchanged
// write, conditional on the same read, shows the read was current.
func changePool(ctx context.Context, s Store, zone string, missing error, change func(*ExternalNetwork) (write bool, err error)) error {
	for try := range maxAllocateTries {
		n, err := Get[*ExternalNetwork](ctx, s, zone)
		if errors.Is(err, ErrNotFound) {
			return missing
		}
		if err != nil {
			return err
		}
		write, outcome := change(n)
		if !write && !errors.Is(outcome, ErrPoolExhausted) && !errors.Is(outcome, ErrAddressInUse) && !errors.Is(outcome, errNotHeld) {
			return outcome // refused for what the caller asked, not for the pool's state
		}
		_, err = Update(ctx, s, n)
		if errors.Is(err, ErrConflict) {
			if err := backoff(ctx, try); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		return outcome
	}
	return &ConflictError{Kind: KindExternalNetwork, Name: zone}
}

// EnsureEdgeGateway returns vdc's gateway object in zone, creating it with
// a public address of the zone's pool when there is none yet. Two
// concurrent ensures create one object: the loser gives its address back
// and returns the winner's.
func EnsureEdgeGateway(ctx context.Context, s Store, vdc, zone string) (*EdgeGateway, error) {
	name := EdgeGatewayName(vdc, zone)
	g, err := Get[*EdgeGateway](ctx, s, name)
	if err == nil || !errors.Is(err, ErrNotFound) {
		return g, err
	}
	addr, err := AllocatePublicAddress(ctx, s, zone, vdc, UseGateway, netip.Addr{}, "zone")
	if err != nil {
		return nil, err
	}
	g = &EdgeGateway{EdgeGatewaySpec: EdgeGatewaySpec{VDC: vdc, Zone: zone, PublicAddress: addr.String()}}
	g.Name = name
	created, err := Create(ctx, s, g)
	if err == nil {
		return created, nil
	}
	if rerr := ReleasePublicAddress(context.WithoutCancel(ctx), s, zone, vdc, addr); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if errors.Is(err, ErrAlreadyExists) {
		return Get[*EdgeGateway](ctx, s, name)
	}
	return nil, fmt.Errorf("ensure edge gateway: %w", err)
}

// DeleteEdgeGateway deletes vdc's gateway object in zone (ErrNotFound when
// it has none), conditional on the resourceVersion read and read again when
// another writer changed it, then gives the addresses it held (its public
// address and its 1:1 addresses) back to the zone's pool in one write. It
// returns the addresses given back, sorted.
func DeleteEdgeGateway(ctx context.Context, s Store, vdc, zone string) ([]netip.Addr, error) {
	name := EdgeGatewayName(vdc, zone)
	var gone *EdgeGateway
	for try := range maxAllocateTries {
		g, err := Get[*EdgeGateway](ctx, s, name)
		if err != nil {
			return nil, fmt.Errorf("delete edge gateway: %w", err)
		}
		err = Delete[*EdgeGateway](ctx, s, name, g.ResourceVersion)
		if errors.Is(err, ErrConflict) {
			if err := backoff(ctx, try); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("delete edge gateway: %w", err)
		}
		gone = g
		break
	}
	if gone == nil {
		return nil, &ConflictError{Kind: KindEdgeGateway, Name: name}
	}
	held := map[string]bool{}
	for _, a := range append([]string{gone.PublicAddress}, oneToOneAddresses(gone)...) {
		held[a] = true
	}
	var released []netip.Addr
	err := changePool(ctx, s, zone, nil, func(n *ExternalNetwork) (bool, error) {
		released = nil
		n.Status.Allocations = slices.DeleteFunc(n.Status.Allocations, func(al PublicAllocation) bool {
			if al.VDC != vdc || !held[al.Address] {
				return false
			}
			released = append(released, netip.MustParseAddr(al.Address))
			return true
		})
		if len(released) == 0 {
			return false, errNotHeld
		}
		return true, nil
	})
	if err != nil && !errors.Is(err, errNotHeld) {
		return nil, fmt.Errorf("delete edge gateway: release its addresses: %w", err)
	}
	return released, nil
}

func oneToOneAddresses(g *EdgeGateway) []string {
	out := make([]string, 0, len(g.OneToOne))
	for _, o := range g.OneToOne {
		out = append(out, o.PublicAddress)
	}
	return out
}

// PublicAddressesOf counts the addresses of every zone's external network
// that vdc holds, whatever their use.
func PublicAddressesOf(ctx context.Context, s Store, vdc string) (int, error) {
	nets, err := List[*ExternalNetwork](ctx, s)
	if err != nil {
		return 0, fmt.Errorf("public addresses of %s: %w", vdc, err)
	}
	n := 0
	for _, en := range nets {
		for _, a := range en.Status.Allocations {
			if a.VDC == vdc {
				n++
			}
		}
	}
	return n, nil
}

// HasEdgeGateway reports whether vdc has its edge gateway in zone (which
// holds an address of the zone's pool).
func HasEdgeGateway(ctx context.Context, s Store, vdc, zone string) (bool, error) {
	_, err := Get[*EdgeGateway](ctx, s, EdgeGatewayName(vdc, zone))
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Ports ClaimKubeEndpoint gives out: a gateway address serves at most
// MaxKubeEndpoints clusters.
const (
	FirstKubeEndpointPort = 6443
	MaxKubeEndpoints      = 64
)

// ClaimKubeEndpoint claims for cluster the lowest free port from
// FirstKubeEndpointPort of address addr on vdc's gateway in zone, which
// must exist (EnsureEdgeGateway), and returns it; a cluster that holds one
// gets it again. The claim is an update conditional on the gateway's
// resourceVersion, retried when another writer got there first, so two
// clusters never get one port.
func ClaimKubeEndpoint(ctx context.Context, s Store, vdc, zone, cluster string, addr netip.Addr) (int, error) {
	port := 0
	err := changeGateway(ctx, s, vdc, zone, func(g *EdgeGateway) (bool, error) {
		used := map[int]bool{}
		for _, e := range g.KubeEndpoints {
			if e.Cluster == cluster {
				port = e.Port
				return false, nil
			}
			if e.Address == addr.String() {
				used[e.Port] = true
			}
		}
		for p := FirstKubeEndpointPort; p < FirstKubeEndpointPort+MaxKubeEndpoints; p++ {
			if !used[p] {
				port = p
				g.KubeEndpoints = append(g.KubeEndpoints, KubeEndpoint{Cluster: cluster, Address: addr.String(), Port: p, Claimed: time.Now().UTC().Truncate(time.Second)})
				return true, nil
			}
		}
		return false, &ValidationError{Field: "network", Message: fmt.Sprintf("the network's gateway address %s serves %d clusters already", addr, MaxKubeEndpoints)}
	})
	if err != nil {
		return 0, fmt.Errorf("claim kube endpoint: %w", err)
	}
	return port, nil
}

// ReleaseKubeEndpoint gives back the endpoint of cluster on vdc's gateway
// in zone; none (or no gateway) is no error.
func ReleaseKubeEndpoint(ctx context.Context, s Store, vdc, zone, cluster string) error {
	err := changeGateway(ctx, s, vdc, zone, func(g *EdgeGateway) (bool, error) {
		n := len(g.KubeEndpoints)
		g.KubeEndpoints = slices.DeleteFunc(g.KubeEndpoints, func(e KubeEndpoint) bool { return e.Cluster == cluster })
		return len(g.KubeEndpoints) != n, nil
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("release kube endpoint: %w", err)
	}
	return nil
}

// changeGateway applies change to vdc's gateway in zone and writes it when
// change says so, conditional on the resourceVersion read, reading it again
// when another writer changed it. A change's error is returned as it is,
// nothing written.
func changeGateway(ctx context.Context, s Store, vdc, zone string, change func(*EdgeGateway) (write bool, err error)) error {
	name := EdgeGatewayName(vdc, zone)
	for try := range maxAllocateTries {
		g, err := Get[*EdgeGateway](ctx, s, name)
		if err != nil {
			return err
		}
		write, err := change(g)
		if err != nil || !write {
			return err
		}
		_, err = Update(ctx, s, g)
		if errors.Is(err, ErrConflict) {
			if err := backoff(ctx, try); err != nil {
				return err
			}
			continue
		}
		return err
	}
	return &ConflictError{Kind: KindEdgeGateway, Name: name}
}
