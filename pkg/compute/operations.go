package compute

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/support/paging"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// OpKind is what an operation does.
type OpKind string

// Operation kinds.
const (
	OpCreate   OpKind = "CREATE_VM"
	OpStart    OpKind = "START_VM"
	OpStop     OpKind = "STOP_VM"
	OpShutdown OpKind = "SHUTDOWN_VM"
	OpReboot   OpKind = "REBOOT_VM"
	OpDelete   OpKind = "DELETE_VM"
	OpMigrate  OpKind = "MIGRATE_VM"
	// OpCreateImage is createImageFromVM: its id names the VM's zone, the
	// image and its version, from which any replica derives its state
	// (its image is listed once it succeeded).
	OpCreateImage OpKind = "CREATE_IMAGE"
)

// OpState is where an operation is.
type OpState string

// Operation states.
const (
	OpRunning   OpState = "RUNNING"
	OpSucceeded OpState = "SUCCEEDED"
	OpFailed    OpState = "FAILED"
)

// Operation is the progress of a create, power action or delete.
//
// Operations are derived from Proxmox, so any replica answers for them:
// a power action's id names its Proxmox task (state = the task's status,
// error = its exit status); a create's id names the zone, the guest's VMID
// and the create's operation id, and its state follows the guest: marked
// fp-creating → RUNNING (the step is read off the guest: locked by the
// clone, not yet configured, not yet started), unmarked → SUCCEEDED; a
// createImageFromVM's id names the VM's zone, the image and its version,
// and its state follows the image's record and template guest
// (imageOperation). What a
// replica that did not start a create cannot see: the error of a create
// that failed and was cleaned up (the guest is gone, so it answers
// NOT_FOUND), and a create still waiting for its image to be staged (it
// has no guest yet, so its id carries no VMID and only the starting
// replica knows it).
type Operation struct {
	ID    string
	Kind  OpKind
	State OpState
	// Step is the phase the operation runs (RUNNING), failed in (FAILED)
	// or ended with (SUCCEEDED); for one that follows a Proxmox task, the
	// task's type.
	Step string
	// Error says why the operation failed (FAILED).
	Error string
	// VMID is the opaque id of the VM the operation works on ("" while a
	// create has no guest yet).
	VMID    string
	Started time.Time
	Updated time.Time
	// Progress is how far a migration has copied (nil for other kinds).
	Progress *Progress
}

// HistoryKey is op's key (paging.Key) in History's order, newest first:
// Proxmox keeps task start times in seconds, and within one second a task
// is newer than the create that started it.
func HistoryKey(op Operation) string {
	var sec int64
	if !op.Started.IsZero() {
		sec = op.Started.Unix()
	}
	tie := "0"
	if op.Kind == OpCreate {
		tie = "1"
	}
	return paging.Key(fmt.Sprintf("%019d", math.MaxInt64-sec), tie, op.ID)
}

// Done reports whether the operation has ended.
func (o Operation) Done() bool { return o.State != OpRunning }

// operation ids: base64url of "c/<zoneID>/<vmid>/<op>" (create) or
// "t/<zoneID>/<vmid>/<kind>/<upid>" (task).
func createOpID(zoneID string, vmid int, op string) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "c/%s/%d/%s", zoneID, vmid, op))
}

func taskOpID(zoneID string, vmid int, kind OpKind, upid string) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "t/%s/%d/%s/%s", zoneID, vmid, kind, upid))
}

type opRef struct {
	create bool
	zoneID string
	vmid   int
	op     string // create: operation id
	kind   OpKind
	upid   string
}

// parseOpID reads an operation id; it accepts only the encoding createOpID
// and taskOpID give (the decoder also takes other last characters and
// ignores newlines; the VMID must be canonical), so that an operation has
// exactly one id.
func parseOpID(id string) (opRef, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || base64.RawURLEncoding.EncodeToString(raw) != id {
		return opRef{}, false
	}
	parts := strings.SplitN(string(raw), "/", 5)
	if len(parts) < 4 {
		return opRef{}, false
	}
	vmid, err := strconv.Atoi(parts[2])
	if err != nil || strconv.Itoa(vmid) != parts[2] {
		return opRef{}, false
	}
	switch {
	case parts[0] == "c" && len(parts) == 4:
		return opRef{create: true, zoneID: parts[1], vmid: vmid, op: parts[3], kind: OpCreate}, true
	case parts[0] == "t" && len(parts) == 5:
		return opRef{zoneID: parts[1], vmid: vmid, kind: OpKind(parts[3]), upid: parts[4]}, true
	}
	return opRef{}, false
}

// publicError is what a client may see of a failure.
func publicError(err error) string {
	if ce := (*Error)(nil); errors.As(err, &ce) {
		return ce.Message
	}
	if te, ok := pveapi.AsTaskError(err); ok {
		return "Proxmox task failed: " + taskFailure(te)
	}
	return "the operation failed; see the orchestrator's logs"
}

// quotedPath is a quoted file path in a Proxmox message.
var quotedPath = regexp.MustCompile(`\s*'[^']*/[^']*'`)

// taskFailure is the client-safe account of a failed task: its type and
// its exit status without file paths.
func taskFailure(te *pveapi.TaskError) string {
	msg := strings.TrimSpace(quotedPath.ReplaceAllString(te.ExitStatus, ""))
	if typ := pveapi.TypeOfUPID(te.UPID); typ != "" {
		return typ + " task ended: " + msg
	}
	return msg
}

// Operation returns the operation id of vdc: this process's own record if
// it runs (or ran) it, else derived from Proxmox.
func (s *Service) Operation(ctx context.Context, vdc, id string) (*Operation, error) {
	d := s.d
	if st, ok := d.eng.local(id); ok {
		if st.vdc != vdc {
			return nil, newError(KindNotFound, "no such operation")
		}
		return &st.op, nil
	}
	if _, _, _, _, ok := parseImageOpID(id); ok {
		return imageOperation(ctx, d, vdc, id)
	}
	ref, ok := parseOpID(id)
	if !ok || ref.vmid == 0 {
		return nil, newError(KindNotFound, "no such operation")
	}
	// The id names the place of the guest the task ran on, which is not
	// the VM's id once the VM has moved across zones: the guest is read
	// at that place, and the operation names the id the VM kept.
	place := tenancy.VMRef{ZoneID: ref.zoneID, VMID: ref.vmid}
	z, g, in, err := d.find.lookupPlace(ctx, vdc, place)
	if IsKind(err, KindNotFound) {
		// An operation of a VM from before it moved away: the VM is
		// where it went.
		z, g, in, err = d.find.lookup(ctx, vdc, place.ID())
	}
	if err != nil {
		if IsKind(err, KindNotFound) {
			return nil, newError(KindNotFound, "no such operation")
		}
		return nil, err
	}
	vmID, notVM := keptID(place, g.Tags())
	if notVM {
		return nil, newError(KindNotFound, "no such operation")
	}
	op := &Operation{ID: id, Kind: ref.kind, VMID: vmID, Updated: time.Now()}
	if ref.create {
		if in == nil || in.Op != ref.op {
			return nil, newError(KindNotFound, "no such operation")
		}
		op.Started = in.Created
		op.State, op.Step = OpSucceeded, "finish"
		if isCreating(g) {
			op.State = OpRunning
			op.Step = observeStep(ctx, z, g, in)
		}
		return op, nil
	}
	// The id is the client's to forge: the task must be one of this VM
	// (not of an earlier guest with its VMID), on its node, of the kind
	// the id says, before Proxmox is asked.
	u, err := pveapi.ParseUPID(ref.upid)
	if err != nil || !ownTask(u, g, in, ref.kind) {
		return nil, newError(KindNotFound, "no such operation")
	}
	if ref.kind == OpMigrate {
		if err := migrateTask(ctx, z, ref.upid, op); err != nil || op.Step != u.Type {
			return nil, newError(KindNotFound, "no such operation")
		}
		return op, d.settleHA(ctx, z, ref.upid, g, op)
	}
	ts, err := pveapi.Task(ctx, z.Client, ref.upid)
	if err != nil || ts.Type != u.Type {
		return nil, newError(KindNotFound, "no such operation")
	}
	op.Step = ts.Type
	op.State, op.Error = taskState(ts)
	if err := d.settleHA(ctx, z, ref.upid, g, op); err != nil {
		return nil, err
	}
	if ref.kind == OpCreateBackup && op.State == OpFailed {
		op.Error = backupFailure(ctx, z, ref.upid, op.Error)
	}
	return op, nil
}

// observeStep names the phase an unfinished create is in, read off the
// guest (createPhases).
func observeStep(ctx context.Context, z Zone, g pveapi.Resource, in *Intent) string {
	if g.Lock == "clone" {
		return "clone"
	}
	cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, g.VMID)
	if err != nil {
		return "unknown"
	}
	if ch, _ := plannedConfig(cfg, in); len(ch) > 0 {
		return "configure"
	}
	if size, _ := parseSize(propOf(cfg.Str("scsi0"), "size")); size < int64(in.DiskGiB)<<30 {
		return "resize"
	}
	if g.Status != "running" {
		return "start"
	}
	return "finish"
}

// WatchInterval is how often Watch reads an operation this process runs
// (from memory); RemoteWatchInterval how often it derives one another
// replica runs from Proxmox (two or three API calls each time).
const (
	WatchInterval       = 50 * time.Millisecond
	RemoteWatchInterval = 500 * time.Millisecond
)

// Watch sends the operation id of vdc whenever it changes, until it ends
// (the last value sent is the final one) or ctx ends; then the channel is
// closed. It reads the operation like Operation does, so it works on any
// replica (polling: a process has no other news of another's progress).
func (s *Service) Watch(ctx context.Context, vdc, id string) (<-chan Operation, error) {
	first, err := s.Operation(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	ch := make(chan Operation, 1)
	go func() {
		defer close(ch)
		cur := *first
		ch <- cur
		every := RemoteWatchInterval
		if _, ok := s.d.eng.local(id); ok {
			every = WatchInterval
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for !cur.Done() {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			next, err := s.Operation(ctx, vdc, id)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				next = &Operation{ID: id, Kind: cur.Kind, VMID: cur.VMID, State: OpFailed, Step: cur.Step, Error: "the VM is gone", Updated: time.Now()}
			}
			if next.State == cur.State && next.Step == cur.Step && sameProgress(next.Progress, cur.Progress) {
				continue
			}
			cur = *next
			select {
			case ch <- cur:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// sameProgress reports whether two progress reports say the same.
func sameProgress(a, b *Progress) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
