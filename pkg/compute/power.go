package compute

import (
	"context"
	"fmt"
	"time"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

var powerPaths = map[OpKind]string{OpStart: "start", OpStop: "stop", OpShutdown: "shutdown", OpReboot: "reboot"}

// StartVM starts VM id of vdc; the operation follows the Proxmox task.
func (s *Service) StartVM(ctx context.Context, vdc, id string) (*Operation, error) {
	return s.power(ctx, vdc, id, OpStart)
}

// StopVM stops VM id of vdc at once (power off).
func (s *Service) StopVM(ctx context.Context, vdc, id string) (*Operation, error) {
	return s.power(ctx, vdc, id, OpStop)
}

// ShutdownVM asks the guest OS of VM id of vdc to shut down.
func (s *Service) ShutdownVM(ctx context.Context, vdc, id string) (*Operation, error) {
	return s.power(ctx, vdc, id, OpShutdown)
}

// RebootVM reboots VM id of vdc.
func (s *Service) RebootVM(ctx context.Context, vdc, id string) (*Operation, error) {
	return s.power(ctx, vdc, id, OpReboot)
}

// powerScope is what the phases of a power action work on.
type powerScope struct {
	vdc, id string
	kind    OpKind
	// vm: the VM's zone and guest (lookup).
	vm target
	// upid is the Proxmox task of the action (request).
	upid string
}

// powerPhases are the phases of a power action, in order: lookup (the VM
// of the VDC, refused while it is being created), request (the Proxmox
// task, which the operation then follows).
func (s *Service) powerPhases() []phase[powerScope] {
	return []phase[powerScope]{
		{name: "lookup", run: func(ctx context.Context, sc *powerScope) error {
			var err error
			sc.vm, err = s.settledVM(ctx, sc.vdc, sc.id)
			return err
		}},
		{name: "request", run: func(ctx context.Context, sc *powerScope) error {
			z, g := sc.vm.z, sc.vm.g
			if err := z.Client.Post(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/status/%s", g.Node, g.VMID, powerPaths[sc.kind]), map[string]any{}, &sc.upid); err != nil {
				return conflict(err)
			}
			return nil
		}},
	}
}

// power runs the power action kind on VM id of vdc; it returns once
// Proxmox has its task.
func (s *Service) power(ctx context.Context, vdc, id string, kind OpKind) (*Operation, error) {
	sc := &powerScope{vdc: vdc, id: id, kind: kind}
	if err := runPhases(ctx, s.engine, "", "", s.powerPhases(), sc); err != nil {
		return nil, cause(err)
	}
	z, g := sc.vm.z, sc.vm.g
	op := Operation{ID: taskOpID(z.ID, g.VMID, kind, sc.upid), Kind: kind, State: OpRunning, Step: "qm" + powerPaths[kind],
		VMID: id, Started: time.Now()}
	return &op, nil
}

// target is a VM found for an operation: its zone, guest and intent.
type target struct {
	z  Zone
	g  pveapi.Resource
	in *Intent
}

// settledVM looks VM id of vdc up for an operation that needs it created:
// one still being created is CONFLICT.
func (s *Service) settledVM(ctx context.Context, vdc, id string) (target, error) {
	z, g, in, err := s.lookup(ctx, vdc, id)
	if err != nil {
		return target{}, err
	}
	if isCreating(g) {
		return target{}, newError(KindConflict, "the VM is still being created")
	}
	return target{z: z, g: g, in: in}, nil
}
