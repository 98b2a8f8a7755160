package graph

import (
	"cmp"
	"context"
	"errors"

	"github.com/99designs/gqlgen/graphql"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
)

// The detail of a VM: NICs, disks and the operations that ran on it. Each
// reads the VM again through the compute service, which answers NOT_FOUND
// for anything not of the request's VDC; nics and disks share one read per
// operation.

// hardware returns the VDC, zone, NICs and disks of vm, read once per
// operation.
func (r *Resolver) hardware(ctx context.Context, vm *model.VM) (string, fleet.Zone, compute.Hardware, error) {
	scope, ok := VDCScopeFrom(ctx)
	svc, err := r.compute()
	if !ok || err != nil {
		return "", fleet.Zone{}, compute.Hardware{}, cmp.Or(err, vmNotFound())
	}
	type read struct {
		zone fleet.Zone
		hw   compute.Hardware
	}
	v, err := r.session(ctx).Memo("hardware/"+vm.ID, func() (any, error) {
		cz, hw, err := svc.Hardware(ctx, scope.VDC.Name, vm.ID)
		if err != nil {
			return read{}, computeError(err, "")
		}
		z, ok := r.zoneByID(cz.ID)
		if !ok {
			return read{}, vmNotFound()
		}
		return read{z, hw}, nil
	})
	h, _ := v.(read)
	return scope.VDC.Name, h.zone, h.hw, err
}

// zoneFailed reports whether err is vm's zone failing; if so the zone is
// reported unavailable (once per operation): the VM itself was read, so
// the field is empty rather than the VM missing.
func (r *Resolver) zoneFailed(ctx context.Context, vm *model.VM, err error) bool {
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Code != apierr.ZoneUnavailable {
		return false
	}
	if z, ok := r.zoneByID(vm.Place.ZoneID); ok {
		r.zoneDown(ctx, z, err)
	} else {
		graphql.AddError(ctx, ae)
	}
	return true
}

// positive is n, or nil when n is not positive (no limit).
func positive(n int) *int {
	if n <= 0 {
		return nil
	}
	return &n
}

// history is the operations that ran on vm, newest first, at most n
// (compute.HistoryLimit); none when its zone fails (reported).
func (r *Resolver) history(ctx context.Context, vm *model.VM, n *int) ([]compute.Operation, error) {
	scope, ok := VDCScopeFrom(ctx)
	if !ok {
		return nil, vmNotFound()
	}
	svc, err := r.compute()
	if err != nil {
		return nil, err
	}
	limit, err := compute.HistoryLimit(n)
	if err != nil {
		return nil, computeError(err, "")
	}
	ops, err := svc.History(ctx, scope.VDC.Name, vm.ID, limit)
	if err = computeError(err, ""); r.zoneFailed(ctx, vm, err) {
		return nil, nil
	}
	return ops, err
}

// vmCounters reads vm's byte counters off the zone's resources (the
// operation's view of the estate read them for the VM itself); a VM the
// zone no longer lists counts 0.
func (r *Resolver) vmCounters(ctx context.Context, vm *model.VM) (estate.Counters, error) {
	c, err := r.session(ctx).Counters(ctx, vm.Place)
	if err != nil {
		return c, apierr.From(err, "")
	}
	return c, nil
}
