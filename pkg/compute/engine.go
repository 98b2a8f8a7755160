package compute

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// engine runs the operations of a Service, whatever they do: it keeps
// this process's records of them (what Operation and Watch answer from
// memory), runs their runners under one base context that shutdown
// cancels, knows the guests a runner works on and the creates being
// started (so that Recover leaves them alone), runs an operation's phases
// (phase.go) and calls the phase hook after each. It knows nothing of
// Proxmox: what an operation does is in its phases.
type engine struct {
	log *slog.Logger
	// afterPhase is Config.AfterStep (nil: none).
	afterPhase func(ctx context.Context, op, phase string)

	base   context.Context // parent of every runner; canceled by shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup // runners; Add only under runMu while !closed

	runMu  sync.Mutex
	closed bool // shutdown began: no runner starts; protected by runMu

	mu   sync.Mutex
	ops  map[string]*opState // operation id -> state; protected by mu
	live map[string]string   // "zoneID/vmid" -> intent op of a live runner; protected by mu
	// starting: intent ops of creates in CreateVM (before their
	// operation is recorded); protected by mu
	starting map[string]bool
}

// newEngine returns an engine that logs to log and calls after (if not
// nil) once each phase of an operation has completed.
func newEngine(log *slog.Logger, after func(ctx context.Context, op, phase string)) *engine {
	e := &engine{log: log, afterPhase: after, ops: map[string]*opState{}, live: map[string]string{}, starting: map[string]bool{}}
	e.base, e.cancel = context.WithCancel(context.Background())
	return e
}

// opState is an operation this process runs or ran.
type opState struct {
	vdc  string
	zone string // name of the zone the operation works in
	op   Operation
}

// keepOps is how long this process remembers an ended operation (after
// that, it is derived from Proxmox like any other replica does).
const keepOps = time.Hour

// record stores (or updates) an operation of this process in zone and
// forgets operations that ended more than keepOps ago.
func (e *engine) record(vdc, zone string, op Operation) {
	op.Updated = time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, st := range e.ops {
		if st.op.Done() && time.Since(st.op.Updated) > keepOps {
			delete(e.ops, id)
		}
	}
	e.ops[op.ID] = &opState{vdc: vdc, zone: zone, op: op}
}

// update changes the record of operation id of this process, if it has
// one, with f.
func (e *engine) update(id string, f func(op *Operation)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if st := e.ops[id]; st != nil {
		f(&st.op)
		st.op.Updated = time.Now()
	}
}

// setStep updates the step of a running operation of this process.
func (e *engine) setStep(id, step string) {
	e.update(id, func(op *Operation) { op.Step = step })
}

// finishOp ends operation id: SUCCEEDED, or FAILED with the client-safe
// message of err; a failure is logged with its cause and the step (the
// phase) it failed in.
func (e *engine) finishOp(id string, err error) {
	e.mu.Lock()
	st := e.ops[id]
	if st == nil {
		e.mu.Unlock()
		if err != nil {
			e.log.Error("operation failed", "op", id, "err", err)
		}
		return
	}
	st.op.State = OpSucceeded
	if err != nil {
		st.op.State = OpFailed
		st.op.Error = publicError(err)
	}
	st.op.Updated = time.Now()
	done := *st
	e.mu.Unlock()
	if err != nil {
		e.log.Error("operation failed", "op", id, "kind", done.op.Kind, "step", done.op.Step, "zone", done.zone,
			"vdc", done.vdc, "vm", done.op.VMID, "error", done.op.Error, "err", err)
	}
}

// local returns this process's record of an operation.
func (e *engine) local(id string) (opState, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.ops[id]
	if st == nil {
		return opState{}, false
	}
	return *st, true
}

// spawn runs f in the background with the engine's base context, unless
// shutdown began: then f does not run (what it would finish is recorded on
// the guest or the catalog, and a later Recover finishes it), so that no
// runner is added while shutdown waits for them.
func (e *engine) spawn(f func(ctx context.Context)) {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	if e.closed {
		return
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f(e.base)
	}()
}

// shutdown stops every runner and waits for them until ctx ends.
func (e *engine) shutdown(ctx context.Context) error {
	e.runMu.Lock()
	e.closed = true
	e.runMu.Unlock()
	e.cancel()
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("compute: shutdown: %w", ctx.Err())
	}
}

// after calls the phase hook: phase of the operation whose intent op is
// op has completed.
func (e *engine) after(ctx context.Context, op, phase string) {
	if e.afterPhase != nil {
		e.afterPhase(ctx, op, phase)
	}
}

func liveKey(z Zone, vmid int) string { return z.ID + "/" + strconv.Itoa(vmid) }

// setLive records that a runner of this process works on guest vmid of z.
func (e *engine) setLive(z Zone, vmid int, op string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.live[liveKey(z, vmid)] = op
}

func (e *engine) clearLive(z Zone, vmid int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.live, liveKey(z, vmid))
}

// isLive reports whether a runner of this process works on guest vmid of z.
func (e *engine) isLive(z Zone, vmid int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.live[liveKey(z, vmid)]
	return ok
}

// begin marks the create of intent op as live before its operation is
// recorded; the function it returns ends that.
func (e *engine) begin(op string) (end func()) {
	e.mu.Lock()
	e.starting[op] = true
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		delete(e.starting, op)
		e.mu.Unlock()
	}
}

// createLive reports whether this process runs the create of intent op.
func (e *engine) createLive(op string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.starting[op] {
		return true
	}
	for id, st := range e.ops {
		if ref, ok := parseOpID(id); ok && ref.create && ref.op == op && !st.op.Done() {
			return true
		}
	}
	return false
}

// setProgress updates the progress of a running operation of this process.
func (e *engine) setProgress(id string, done, total int64, rate float64) {
	e.update(id, func(op *Operation) { op.Progress = &Progress{Done: done, Total: total, BytesPerSecond: rate} })
}
