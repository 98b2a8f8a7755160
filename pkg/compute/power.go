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
	return power(ctx, s.d, vdc, id, OpStart)
}

// StopVM stops VM id of vdc at once (power off).
func (s *Service) StopVM(ctx context.Context, vdc, id string) (*Operation, error) {
	return power(ctx, s.d, vdc, id, OpStop)
}

// ShutdownVM asks the guest OS of VM id of vdc to shut down.
func (s *Service) ShutdownVM(ctx context.Context, vdc, id string) (*Operation, error) {
	return power(ctx, s.d, vdc, id, OpShutdown)
}

// RebootVM reboots VM id of vdc.
func (s *Service) RebootVM(ctx context.Context, vdc, id string) (*Operation, error) {
	return power(ctx, s.d, vdc, id, OpReboot)
}

// powerScope is what the phases of a power action work on.
type powerScope struct {
	*deps
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
func powerPhases() []phase[powerScope] {
	return []phase[powerScope]{
		step("lookup", (*powerScope).lookup),
		step("request", (*powerScope).request),
	}
}

// lookup finds the VM, refused while it is being created.
func (sc *powerScope) lookup(ctx context.Context) error {
	var err error
	sc.vm, err = sc.find.settledVM(ctx, sc.vdc, sc.id)
	return err
}

// request asks Proxmox for the action's task.
func (sc *powerScope) request(ctx context.Context) error {
	z, g := sc.vm.z, sc.vm.g
	if err := z.Client.Post(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/status/%s", g.Node, g.VMID, powerPaths[sc.kind]), map[string]any{}, &sc.upid); err != nil {
		return conflict(err)
	}
	return nil
}

// power runs the power action kind on VM id of vdc; it returns once
// Proxmox has its task.
func power(ctx context.Context, d *deps, vdc, id string, kind OpKind) (*Operation, error) {
	sc := &powerScope{deps: d, vdc: vdc, id: id, kind: kind}
	if err := runPhases(ctx, d.eng, "", "", powerPhases(), sc); err != nil {
		return nil, cause(err)
	}
	z, g := sc.vm.z, sc.vm.g
	op := Operation{ID: taskOpID(z.ID, g.VMID, kind, sc.upid), Kind: kind, State: OpRunning, Step: pveapi.TypeOfUPID(sc.upid),
		VMID: id, Started: time.Now()}
	return &op, nil
}
