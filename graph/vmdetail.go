package graph

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/99designs/gqlgen/graphql"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/pkg/api/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
)

// The detail of a VM: NICs, disks and the operations that ran on it. Each
// reads the VM again through the compute service, which answers NOT_FOUND
// for anything not of the request's VDC; nics and disks share one read per
// operation.

// hardwareRead is one read of a VM's configuration, shared by the fields of
// an operation that need it.
type hardwareRead struct {
	once sync.Once
	vdc  string
	zone zones.Zone
	hw   compute.Hardware
	err  error
}

// hardware returns the VDC, zone, NICs and disks of vm, read once per
// operation.
func (r *Resolver) hardware(ctx context.Context, vm *model.VM) (string, zones.Zone, compute.Hardware, error) {
	h := &hardwareRead{}
	if req := requestFrom(ctx); req != nil {
		req.mu.Lock()
		if req.hardware[vm.ID] == nil {
			req.hardware[vm.ID] = h
		}
		h = req.hardware[vm.ID]
		req.mu.Unlock()
	}
	h.once.Do(func() { h.vdc, h.zone, h.hw, h.err = r.readHardware(ctx, vm) })
	return h.vdc, h.zone, h.hw, h.err
}

func (r *Resolver) readHardware(ctx context.Context, vm *model.VM) (string, zones.Zone, compute.Hardware, error) {
	scope, ok := VDCScopeFrom(ctx)
	if !ok {
		return "", zones.Zone{}, compute.Hardware{}, vmNotFound()
	}
	svc, err := r.compute()
	if err != nil {
		return "", zones.Zone{}, compute.Hardware{}, err
	}
	cz, hw, err := svc.Hardware(ctx, scope.VDC.Name, vm.ID)
	if err != nil {
		return "", zones.Zone{}, compute.Hardware{}, computeError(err, "")
	}
	z, ok := r.zoneByID(cz.ID)
	if !ok {
		return "", zones.Zone{}, compute.Hardware{}, vmNotFound()
	}
	return scope.VDC.Name, z, hw, nil
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

func (r *Resolver) vmNICs(ctx context.Context, vm *model.VM) ([]*model.VMNic, error) {
	vdc, z, hw, err := r.hardware(ctx, vm)
	if r.zoneFailed(ctx, vm, err) {
		return []*model.VMNic{}, nil
	}
	if err != nil {
		return nil, err
	}
	// The VDC's networks name the bridges; the IPAM holds the addresses.
	// A zone failing here leaves those out, with its ZONE_UNAVAILABLE.
	nets, err := r.estate().Networks(ctx, z, vdc)
	r.reportDown(ctx, err)
	ips, err := r.session(ctx).AddressesByMAC(ctx, z.ID)
	r.reportDown(ctx, err)
	zm := zoneModel(z, r.agentTarget())
	out := make([]*model.VMNic, 0, len(hw.NICs))
	for _, n := range hw.NICs {
		m := &model.VMNic{Index: n.Index, Bridge: n.Bridge, Model: n.Model, Mac: n.MAC, IPAddresses: ips[strings.ToLower(n.MAC)]}
		if m.IPAddresses == nil {
			m.IPAddresses = []string{}
		}
		for _, nw := range nets {
			if nw.VNet == n.Bridge {
				m.Network = networkModel(zm, nw, z.ID)
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// storageProfileOf returns the storage profile that offers d's storage in
// zone, preferring one whose limits are d's (profiles is sorted by name),
// or nil.
func storageProfileOf(profiles []*catalog.StorageProfile, zone string, d compute.Disk) *catalog.StorageProfile {
	var found *catalog.StorageProfile
	for _, p := range profiles {
		for _, zp := range p.Pools {
			if zp.Zone != zone || zp.Pool != d.Storage {
				continue
			}
			if p.ReadMBps == d.ReadMBps && p.WriteMBps == d.WriteMBps {
				return p
			}
			if found == nil {
				found = p
			}
		}
	}
	return found
}

// positive is n, or nil when n is not positive (no limit).
func positive(n int) *int {
	if n <= 0 {
		return nil
	}
	return &n
}

func (r *Resolver) vmOperations(ctx context.Context, vm *model.VM, first *int) ([]*model.Operation, error) {
	scope, ok := VDCScopeFrom(ctx)
	if !ok {
		return nil, vmNotFound()
	}
	n := 20
	if first != nil {
		n = *first
	}
	svc, err := r.compute()
	if err != nil {
		return nil, err
	}
	if n < 1 || n > compute.MaxHistory {
		return nil, apierr.BadInput("first", "first must be between 1 and %d", compute.MaxHistory)
	}
	ops, err := svc.History(ctx, scope.VDC.Name, vm.ID, n)
	err = computeError(err, "")
	if r.zoneFailed(ctx, vm, err) {
		return []*model.Operation{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]*model.Operation, 0, len(ops))
	for i := range ops {
		out = append(out, opModel(&ops[i]))
	}
	return out, nil
}

// vmCounters reads vm's byte counters off the zone's resources (the
// operation's view of the estate read them for the VM itself); a VM the
// zone no longer lists counts 0.
func (r *Resolver) vmCounters(ctx context.Context, vm *model.VM) (estate.Counters, error) {
	c, err := r.session(ctx).Counters(ctx, vm.Place)
	if err != nil {
		return c, estateError(err)
	}
	return c, nil
}
