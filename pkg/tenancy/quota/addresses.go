package quota

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/flexplane/flexplane/pkg/catalog"
)

// CheckPublicAddresses refuses, with an *ExceededError of resource
// "publicAddresses", vdc taking more addresses of the zones' external
// networks when it would then hold more than its quota allows; more = 0
// checks what it holds now. Every address the VDC holds counts, whatever
// its use (edge gateways, 1:1 addresses, load balancers), so every path
// that allocates one shares this one bound.
//
// A check alone races: a caller checks with the addresses it needs, takes
// them, then checks again with more = 0 and gives them back when over (of
// racers, all may give up; none goes over).
func CheckPublicAddresses(ctx context.Context, s catalog.Store, vdc string, more int) error {
	held := func(ctx context.Context) (int, error) { return catalog.PublicAddressesOf(ctx, s, vdc) }
	return checkCount(ctx, s, vdc, "publicAddresses", func(q catalog.VDCQuotas) *int { return q.PublicAddresses }, held, more)
}

// checkCount refuses, with an *ExceededError of resource, vdc holding
// more than its bound of a counted resource (limit picks the bound of the
// VDC's quotas, nil for none) once it takes more; held counts what it
// holds, and is not called without a bound. A VDC that has no object has
// no quota (the API checks the VDC exists). Failures to read are wrapped
// with the resource's name; the *ExceededError is returned as it is.
func checkCount(ctx context.Context, s catalog.Store, vdc, resource string, limit func(catalog.VDCQuotas) *int,
	held func(context.Context) (int, error), more int) error {
	v, err := catalog.Get[*catalog.VDC](ctx, s, vdc)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s quota: %w", resource, err)
	}
	bound := limit(v.Quotas)
	if bound == nil {
		return nil
	}
	n, err := held(ctx)
	if err != nil {
		return fmt.Errorf("%s quota: %w", resource, err)
	}
	if n+more > *bound {
		return &ExceededError{VDC: vdc, Resource: resource, Limit: *bound, Used: n, Requested: more}
	}
	return nil
}

// EnsureEdgeGateway returns vdc's gateway in zone, made when it has none
// (catalog.EnsureEdgeGateway) within the VDC's publicAddresses quota, which
// the gateway's own address counts against. A gateway that is there is
// returned whatever the quota says: a quota lowered below what the VDC
// holds refuses no change of it (nor the removals that bring it back
// under).
func EnsureEdgeGateway(ctx context.Context, s catalog.Store, vdc, zone string) (*catalog.EdgeGateway, error) {
	has, err := catalog.HasEdgeGateway(ctx, s, vdc, zone)
	if err != nil {
		return nil, fmt.Errorf("public addresses quota: %w", err)
	}
	if !has {
		if err := CheckPublicAddresses(ctx, s, vdc, 1); err != nil {
			return nil, err
		}
	}
	return catalog.EnsureEdgeGateway(ctx, s, vdc, zone)
}

// TakePublicAddress allocates to vdc an address of zone's pool for use
// (want, or any free one when want is zero; field names want in a
// validation error), one that lives on vdc's edge gateway there, within
// the VDC's publicAddresses quota: the gateway, made when the VDC has
// none in the zone yet, and the address it takes count too. Racers for
// the quota's last addresses may all get one, so it counts again once the
// address is held and gives it back when over (of racers, all may give
// up; none goes over). The caller gives the address back
// (catalog.ReleasePublicAddress) when what it takes it for fails.
func TakePublicAddress(ctx context.Context, s catalog.Store, vdc, zone, use string, want netip.Addr, field string) (netip.Addr, error) {
	has, err := catalog.HasEdgeGateway(ctx, s, vdc, zone)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("public addresses quota: %w", err)
	}
	n := 1
	if !has {
		n++ // the gateway's own address
	}
	if err := CheckPublicAddresses(ctx, s, vdc, n); err != nil {
		return netip.Addr{}, err
	}
	if _, err := catalog.EnsureEdgeGateway(ctx, s, vdc, zone); err != nil {
		return netip.Addr{}, err
	}
	addr, err := catalog.AllocatePublicAddress(ctx, s, zone, vdc, use, want, field)
	if err != nil {
		return netip.Addr{}, err
	}
	if err := CheckPublicAddresses(ctx, s, vdc, 0); err != nil {
		return netip.Addr{}, errors.Join(err, catalog.ReleasePublicAddress(context.WithoutCancel(ctx), s, zone, vdc, addr))
	}
	return addr, nil
}
