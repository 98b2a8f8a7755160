package graph

import (
	"context"
	"errors"
	"time"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/compute/images"
)

// compute returns the VM lifecycle service, or an error when the API runs
// without one.
func (r *Resolver) compute() (*compute.Service, error) {
	if r.Compute == nil {
		return nil, apierr.New(apierr.Internal, "VM operations are not available")
	}
	return r.Compute, nil
}

// computeError maps an error of the VM lifecycle for clients; input is
// where the call's input sits in the request ("input" for createVM's
// input object), so that a field of it becomes e.g. "input.nics[0]".
// Other errors pass unchanged.
func computeError(err error, input string) error {
	var ce *compute.Error
	if !errors.As(err, &ce) {
		return err
	}
	return apierr.From(err, input)
}

// opModel renders an operation.
func opModel(op *compute.Operation) *model.Operation {
	m := &model.Operation{ID: op.ID, Kind: model.OperationKind(op.Kind), State: model.OperationState(op.State),
		Step: op.Step, UpdatedAt: op.Updated}
	if m.UpdatedAt.IsZero() {
		m.UpdatedAt = time.Now()
	}
	if op.Error != "" {
		m.Error = &op.Error
	}
	if op.VMID != "" {
		m.VMID = &op.VMID
	}
	if !op.Started.IsZero() {
		m.StartedAt = &op.Started
	}
	if p := op.Progress; p != nil {
		m.Progress = &model.OperationProgress{BytesMoved: float64(p.Done), BytesTotal: float64(p.Total), BytesPerSecond: p.BytesPerSecond}
	}
	return m
}

// creatingVMModel renders a VM createVM just started.
func (r *Resolver) creatingVMModel(vm *compute.VM) *model.VM {
	m := &model.VM{ID: vm.ID, Place: vm.Ref, Name: vm.Name, Status: model.VMStatusCreating, Vcpus: vm.VCPUs,
		MemoryMiB: vm.MemoryMiB, DiskGiB: vm.DiskGiB, IPAddresses: vm.Addresses}
	if z, ok := r.zoneByID(vm.Ref.ZoneID); ok {
		m.Zone = zoneModel(z, r.agentTarget())
	} else {
		m.Zone = &model.Zone{ID: vm.Ref.ZoneID, Name: vm.Zone, Status: model.ZoneStatusOnline}
	}
	return m
}

// power runs one of the power actions of the compute service on VM id of
// the request's VDC.
func (r *Resolver) power(ctx context.Context, id string, do func(*compute.Service, context.Context, string, string) (*compute.Operation, error)) (*model.Operation, error) {
	return r.vmOp(ctx, "", func(svc *compute.Service, vdc string) (*compute.Operation, error) { return do(svc, ctx, vdc, id) })
}

func imageStateModel(zone string, st images.Status) *model.ImageZoneState {
	m := &model.ImageZoneState{Zone: zone, State: model.ImageStagingState(st.State)}
	if st.Reason != "" {
		m.Reason = &st.Reason
	}
	return m
}

// vmOp runs an operation of the compute service on a VM of the request's
// VDC; input is where the call's input object sits ("" for top-level
// arguments).
func (r *Resolver) vmOp(ctx context.Context, input string, do func(svc *compute.Service, vdc string) (*compute.Operation, error)) (*model.Operation, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.compute()
	if err != nil {
		return nil, err
	}
	op, err := do(svc, scope.VDC.Name)
	if err != nil {
		return nil, computeError(err, input)
	}
	return opModel(op), nil
}
