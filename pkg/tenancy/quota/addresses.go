package quota

import (
	"context"
	"errors"
	"fmt"

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
	v, err := catalog.Get[*catalog.VDC](ctx, s, vdc)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil // no VDC object, no quota (the API checks the VDC exists)
	}
	if err != nil {
		return fmt.Errorf("public addresses quota: %w", err)
	}
	limit := v.Quotas.PublicAddresses
	if limit == nil {
		return nil
	}
	held, err := catalog.PublicAddressesOf(ctx, s, vdc)
	if err != nil {
		return fmt.Errorf("public addresses quota: %w", err)
	}
	if held+more > *limit {
		return &ExceededError{VDC: vdc, Resource: "publicAddresses", Limit: *limit, Used: held, Requested: more}
	}
	return nil
}

// CheckNewPublicAddresses is CheckPublicAddresses for n addresses of
// zone's pool that live on vdc's edge gateway there: when the VDC has no
// gateway in the zone yet, the address the gateway will take counts too.
func CheckNewPublicAddresses(ctx context.Context, s catalog.Store, vdc, zone string, n int) error {
	has, err := catalog.HasEdgeGateway(ctx, s, vdc, zone)
	if err != nil {
		return fmt.Errorf("public addresses quota: %w", err)
	}
	if !has {
		n++
	}
	return CheckPublicAddresses(ctx, s, vdc, n)
}
