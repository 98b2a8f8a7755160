package compute

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// MigrateInput says where a VM moves.
type MigrateInput struct {
	// VDC is the caller's VDC; a VM of another VDC is NOT_FOUND.
	VDC string
	// ID is the VM's id.
	ID string
	// Host is the host to move to: a host id or the Proxmox node name.
	// Within the VM's zone it is required; across zones "" lets the
	// target zone choose.
	Host string
	// Zone is the name of the zone to move to; "" (or the VM's own zone)
	// moves it within its zone.
	Zone string
	// Networks maps the VM's networks to networks of its VDC in the target
	// zone (across zones only); a network not mapped goes to the one of the
	// same name.
	Networks []NetworkMapping
}

// NetworkMapping maps one network of a VM to one of the target zone.
type NetworkMapping struct {
	// From is the id of a network a NIC of the VM is on.
	From string
	// To is the id of a network of the VDC in the target zone.
	To string
}

// Progress is how far an operation that copies bytes has come.
type Progress struct {
	// Done and Total are bytes copied and to copy (disks, and the memory
	// of a running VM moving within its zone).
	Done, Total int64
	// BytesPerSecond is the current copy rate (0 when unknown).
	BytesPerSecond float64
}

// MigrateVM moves VM id of vdc: within its zone with Proxmox's own
// migration (online for a running VM, copying local disks when needed),
// or to another zone (migrateAcross). The operation follows the move.
func (s *Service) MigrateVM(ctx context.Context, in MigrateInput) (*Operation, error) {
	d := s.d
	z, g, intent, err := d.find.lookup(ctx, in.VDC, in.ID)
	if err != nil {
		return nil, err
	}
	if isCreating(g) {
		return nil, newError(KindConflict, "the VM is still being created")
	}
	if g.Lock != "" {
		return nil, newError(KindConflict, "the VM is locked (%s)", g.Lock)
	}
	if in.Zone != "" && in.Zone != z.Name && in.Zone != z.ID {
		return migrateAcross(ctx, d, z, g, in)
	}
	sc := &migrateScope{deps: d, in: in, z: z, g: g, intent: intent}
	if err := runPhases(ctx, d.eng, "", "", migratePhases(), sc); err != nil {
		return nil, cause(err)
	}
	op := Operation{ID: taskOpID(z.ID, g.VMID, OpMigrate, sc.upid), Kind: OpMigrate, State: OpRunning, Step: pveapi.TypeOfUPID(sc.upid),
		VMID: in.ID, Started: time.Now(), Progress: &Progress{}}
	return &op, nil
}

// migrateScope is what the phases of a move within a zone work on.
type migrateScope struct {
	*deps
	in MigrateInput
	z  Zone
	g  pveapi.Resource
	// intent is the VM's (nil when flexplane did not create it).
	intent *Intent
	// node and params: the target node and the migration's parameters
	// (preflight).
	node   string
	params map[string]any
	// online and localDisks: the VM runs; how many local disks it has.
	online     bool
	localDisks int
	upid       string // the migration task (request)
}

// migratePhases are the phases of a move within a zone, in order:
// preflight (the target host, and Proxmox's preconditions: no devices of
// the host, a target it allows; online for a running VM, with its local
// disks if it has any), request (Proxmox's migration task, which the
// operation then follows).
func migratePhases() []phase[migrateScope] {
	return []phase[migrateScope]{
		step("preflight", (*migrateScope).preflight),
		step("request", (*migrateScope).request),
	}
}

// request asks Proxmox for the migration's task.
func (sc *migrateScope) request(ctx context.Context) error {
	z, g := sc.z, sc.g
	if err := sc.copyUserData(ctx); err != nil {
		return err
	}
	if err := z.Client.Post(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/migrate", g.Node, g.VMID), sc.params, &sc.upid); err != nil {
		return conflict(err)
	}
	sc.log.Info("migrating a VM", "zone", z.Name, "vmid", g.VMID, "from", g.Node, "to", sc.node, "online", sc.online,
		"local_disks", sc.localDisks, "upid", sc.upid)
	return nil
}

// preflight checks a move within the zone before anything moves.
func (sc *migrateScope) preflight(ctx context.Context) error {
	in, z, g := sc.in, sc.z, sc.g
	if len(in.Networks) > 0 {
		return badInput("networks", "networks map NICs to another zone's networks; the VM stays in zone %s", z.Name)
	}
	if in.Host == "" {
		return badInput("host", "a move within zone %s needs the host to move to", z.Name)
	}
	node, err := sc.find.targetNode(ctx, z, in.Host)
	if err != nil {
		return err
	}
	if node == g.Node {
		return badInput("host", "the VM already runs on host %s", node)
	}
	if err := checkSpreadTarget(ctx, sc.deps, z, g, sc.intent, node); err != nil {
		return err
	}
	check, err := pveapi.MigratePreconditions(ctx, z.Client, g.Node, g.VMID, node)
	if err != nil {
		return zoneDown(z.Name, err)
	}
	if len(check.LocalResources) > 0 {
		return newError(KindConflict, "the VM uses devices of its host (%v) and cannot move", check.LocalResources)
	}
	if why, ok := check.NotAllowed[node]; ok {
		return &Error{Kind: KindConflict, Field: "host", Message: fmt.Sprintf("Proxmox refuses to move the VM to %s: %s", node, why)}
	}
	if !slices.Contains(check.Allowed, node) {
		return &Error{Kind: KindConflict, Field: "host", Message: fmt.Sprintf("host %s is not online", node)}
	}
	sc.node, sc.params = node, map[string]any{"target": node}
	sc.online, sc.localDisks = check.Running, len(check.LocalDisks)
	if check.Running {
		sc.params["online"] = 1
	}
	if len(check.LocalDisks) > 0 {
		sc.params["with-local-disks"] = 1
	}
	return nil
}

// migrateTask reads a migration's task: its state and, from its log, its
// progress. The task runs on the node the VM left, so it is found by its
// UPID, which names that node.
func migrateTask(ctx context.Context, z Zone, upid string, op *Operation) error {
	ts, err := pveapi.Task(ctx, z.Client, upid)
	if err != nil {
		return err
	}
	op.Step = ts.Type
	op.State, op.Error = taskState(ts)
	lines, err := pveapi.TaskLog(ctx, z.Client, upid)
	if err != nil {
		return err
	}
	tr := pveapi.ParseTransfer(lines)
	op.Progress = &Progress{Done: tr.Done, Total: tr.Total, BytesPerSecond: tr.BytesPerSecond}
	return nil
}

// ownTask reports whether the task u may be read for an operation of kind
// on guest g with intent in: the guest's (its VMID, and started since the
// guest is the VM: taskOfThisGuest), of the kind's task type, on its node
// (a migration's on any node of the zone, since the guest has left it).
func ownTask(u pveapi.UPID, g pveapi.Resource, in *Intent, kind OpKind) bool {
	ofKind := taskKinds[u.Type] == kind || kind == OpResize && resizeTasks[u.Type]
	if u.ID != strconv.Itoa(g.VMID) || !ofKind || !taskOfThisGuest(u.Started, in) {
		return false
	}
	return kind == OpMigrate || u.Node == g.Node
}

// ownedSince is when the guest with intent in came to be the VM at its
// place, to the second (Proxmox's task times are whole seconds): its
// create, or, for a VM moved across zones, the move's creation of the
// target guest (MoveIntent.Started, recorded before it), whichever is
// later. Zero for a guest flexplane did not create (no intent).
func ownedSince(in *Intent) time.Time {
	if in == nil {
		return time.Time{}
	}
	t := in.Created
	if in.Move != nil && in.Move.Started.After(t) {
		t = in.Move.Started
	}
	return t.Truncate(time.Second)
}

// taskOfThisGuest reports whether a task of the guest's VMID that started
// at started ran on this guest rather than on an earlier one with the
// same VMID (VMIDs are reused, across VDCs too): it started at or after
// ownedSince, in the same second counting as this guest's.
func taskOfThisGuest(started time.Time, in *Intent) bool {
	return !started.Truncate(time.Second).Before(ownedSince(in))
}

// copyUserData copies the VM's user-data snippet to the target node
// before the move (a node's snippet storage is its own), under the same
// volume id, which the VM's cicustom keeps naming.
func (sc *migrateScope) copyUserData(ctx context.Context) error {
	z, g := sc.z, sc.g
	cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, g.VMID)
	if err != nil {
		return zoneDown(z.Name, err)
	}
	cur := cfg.Str("cicustom")
	got, err := sc.snips.copyUserData(ctx, z, g.Node, g.VMID, cur, z, sc.node, g.VMID)
	if err != nil {
		return internal("copying the VM's cloud-init user-data to the target host failed", err)
	}
	if got != "" && got != cur {
		return &Error{Kind: KindConflict, Field: "host", Message: fmt.Sprintf("host %s keeps snippets on another storage than the VM's cloud-init user-data (%s)", sc.node, cur)}
	}
	return nil
}
