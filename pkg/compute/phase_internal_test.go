package compute

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
)

// TestRunPhases: phases run in order, the operation's step names the
// running phase, the hook follows each completed phase, the first failure
// stops the run naming its phase, and errDone ends it successfully.
func TestRunPhases(t *testing.T) {
	t.Parallel()
	type scope struct{ ran, steps []string }
	var hooked []string
	e := newEngine(slog.New(slog.DiscardHandler), func(_ context.Context, op, phase string) {
		hooked = append(hooked, op+"/"+phase)
	})
	e.record("vdc", "zone", Operation{ID: "op1", State: OpRunning})
	boom := errors.New("boom")
	step := func(name string, err error) phase[scope] {
		return phase[scope]{name: name, run: func(_ context.Context, sc *scope) error {
			sc.ran = append(sc.ran, name)
			st, _ := e.local("op1")
			sc.steps = append(sc.steps, st.op.Step)
			return err
		}}
	}
	ctx := context.Background()

	sc := &scope{}
	err := runPhases(ctx, e, "op1", "in", []phase[scope]{step("a", nil), step("b", boom), step("c", nil)}, sc)
	if name, ok := failedPhase(err); !ok || name != "b" || !errors.Is(err, boom) || err.Error() != "phase b: boom" {
		t.Fatalf("runPhases = %v, want the failure of phase b", err)
	}
	if !slices.Equal(sc.ran, []string{"a", "b"}) || !slices.Equal(sc.steps, []string{"a", "b"}) || !slices.Equal(hooked, []string{"in/a"}) {
		t.Fatalf("ran %v with steps %v, hooks %v", sc.ran, sc.steps, hooked)
	}
	if st, _ := e.local("op1"); st.op.Step != "b" {
		t.Fatalf("step after the failure %q, want b", st.op.Step)
	}
	if cause(err) != boom {
		t.Fatalf("cause = %v", cause(err))
	}

	sc = &scope{}
	if err := runPhases(ctx, e, "op1", "in", []phase[scope]{step("a", errDone), step("b", nil)}, sc); err != nil || !slices.Equal(sc.ran, []string{"a"}) {
		t.Fatalf("errDone: %v, ran %v", err, sc.ran)
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	sc = &scope{}
	if err := runPhases(canceled, e, "op1", "in", []phase[scope]{step("a", nil)}, sc); !errors.Is(err, context.Canceled) || len(sc.ran) != 0 {
		t.Fatalf("canceled: %v, ran %v", err, sc.ran)
	}
	if got := phaseNames(from([]phase[scope]{step("a", nil), step("b", nil)}, "b")); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("from b: %v", got)
	}
}

// TestCreatePhaseNames: the phases of a create are the ones the package
// documents, in order.
func TestCreatePhaseNames(t *testing.T) {
	t.Parallel()
	want := []string{"claim", "stage", "clone", "configure", "resize", "user-data", "start", "finish"}
	if got := phaseNames((&Service{}).createPhases()); !slices.Equal(got, want) {
		t.Fatalf("create phases %v, want %v", got, want)
	}
	if got := phaseNames((&Service{}).deletePhases()); !slices.Equal(got, []string{"stop", "destroy", "release"}) {
		t.Fatalf("delete phases %v", got)
	}
	if got := phaseNames((&Service{}).powerPhases()); !slices.Equal(got, []string{"lookup", "request"}) {
		t.Fatalf("power phases %v", got)
	}
	if got := phaseNames((&Service{}).snapshotPhases()); !slices.Equal(got, []string{"check", "reserve", "request"}) {
		t.Fatalf("snapshot phases %v", got)
	}
	if got := phaseNames((&Service{}).migratePhases()); !slices.Equal(got, []string{"preflight", "request"}) {
		t.Fatalf("migrate phases %v", got)
	}
	if got := phaseNames((&Service{}).movePhases()); !slices.Equal(got, []string{"target", "stop", "copy", "cutover", "finish"}) {
		t.Fatalf("move phases %v", got)
	}
}

// TestRecoveryHooks: Recover gives a guest to the move's hook before the
// create's (a move's target carries the intent of a create too).
func TestRecoveryHooks(t *testing.T) {
	t.Parallel()
	var names []string
	for _, h := range (&Service{}).recoveryHooks() {
		names = append(names, h.name)
	}
	if !slices.Equal(names, []string{"move", "create"}) {
		t.Fatalf("recovery hooks %v", names)
	}
}
