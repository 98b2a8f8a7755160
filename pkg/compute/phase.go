package compute

import (
	"context"
	"errors"
	"fmt"
)

// phase is one named step of an operation over the operation's scope S
// (its inputs and what earlier phases found). A phase observes before it
// acts and does only what is still to be done, so that running it again,
// in this process or in another after a crash, is safe.
type phase[S any] struct {
	// name is what the operation's Step says while the phase runs (and
	// after it failed), what the logs and the phase hook name.
	name string
	// run does the phase's work; it returns errDone to end the operation
	// successfully without the later phases (someone else finished it).
	run func(ctx context.Context, sc *S) error
}

// errDone, returned by a phase, ends its operation successfully: the
// later phases have nothing left to do.
var errDone = errors.New("compute: the operation is done")

// phaseError is the failure of a phase: it names the phase and wraps the
// cause (an *Error keeps its kind and client-safe message through it).
type phaseError struct {
	phase string
	err   error
}

func (e *phaseError) Error() string { return fmt.Sprintf("phase %s: %v", e.phase, e.err) }

// Unwrap returns the cause.
func (e *phaseError) Unwrap() error { return e.err }

// failedPhase returns the phase err names, if it is the failure of one.
func failedPhase(err error) (string, bool) {
	var pe *phaseError
	if errors.As(err, &pe) {
		return pe.phase, true
	}
	return "", false
}

// cause returns the error a phase failed with (err itself when it is not
// a phaseError): what a synchronous caller returns to its own caller.
func cause(err error) error {
	var pe *phaseError
	if errors.As(err, &pe) {
		return pe.err
	}
	return err
}

// step is the phase name whose work is run, a method of the scope (a
// method expression such as (*createScope).claim): an operation's logic
// is on its scope, not on the Service.
func step[S any](name string, run func(sc *S, ctx context.Context) error) phase[S] {
	return phase[S]{name: name, run: func(ctx context.Context, sc *S) error { return run(sc, ctx) }}
}

// phaseNames lists the names of phases, in order.
func phaseNames[S any](phases []phase[S]) []string {
	names := make([]string, len(phases))
	for i, p := range phases {
		names[i] = p.name
	}
	return names
}

// from returns phases from the one called name on (none if there is no
// such phase).
func from[S any](phases []phase[S], name string) []phase[S] {
	for i, p := range phases {
		if p.name == name {
			return phases[i:]
		}
	}
	return nil
}

// runPhases runs phases in order over sc: before each, the record of
// operation opID (if this process has one; "" for an operation that is
// not recorded) says the phase is its step, and a debug log names it;
// after each, the phase hook is called with hook (the operation's intent
// op; "" for an operation without one, which the hook does not see). It stops at the first phase that fails, returning a *phaseError
// that names it, or that says errDone (returning nil), and between phases
// when ctx ends (returning ctx's error, unwrapped: the runner is only
// stopping).
func runPhases[S any](ctx context.Context, e *engine, opID, hook string, phases []phase[S], sc *S) error {
	for _, p := range phases {
		if err := ctx.Err(); err != nil {
			return err
		}
		if opID != "" {
			e.setStep(opID, p.name)
			e.log.Debug("phase", "op", opID, "phase", p.name)
		}
		err := p.run(ctx, sc)
		if errors.Is(err, errDone) {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return err
			}
			return &phaseError{phase: p.name, err: err}
		}
		if hook != "" {
			e.after(ctx, hook, p.name)
		}
	}
	return nil
}
