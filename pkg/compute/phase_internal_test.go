package compute

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"
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
	want := []string{"claim", "stage", "clone", "configure", "resize", "user-data", "firewall", "start", "finish"}
	if got := phaseNames(createPhases()); !slices.Equal(got, want) {
		t.Fatalf("create phases %v, want %v", got, want)
	}
	if got := phaseNames(deletePhases()); !slices.Equal(got, []string{"stop", "destroy", "release"}) {
		t.Fatalf("delete phases %v", got)
	}
	if got := phaseNames(powerPhases()); !slices.Equal(got, []string{"lookup", "request"}) {
		t.Fatalf("power phases %v", got)
	}
	if got := phaseNames(snapshotPhases()); !slices.Equal(got, []string{"check", "reserve", "request"}) {
		t.Fatalf("snapshot phases %v", got)
	}
	if got := phaseNames(migratePhases()); !slices.Equal(got, []string{"preflight", "request"}) {
		t.Fatalf("migrate phases %v", got)
	}
	if got := phaseNames(movePhases()); !slices.Equal(got, []string{"target", "stop", "copy", "cutover", "finish"}) {
		t.Fatalf("move phases %v", got)
	}
	if got := phaseNames(movePreparePhases()); !slices.Equal(got, []string{"preflight", "reserve", "claim"}) {
		t.Fatalf("move prepare phases %v", got)
	}
	if got := phaseNames(rollbackPhases()); !slices.Equal(got, []string{"check", "request"}) {
		t.Fatalf("rollback phases %v", got)
	}
	if got := phaseNames(snapshotDeletePhases()); !slices.Equal(got, []string{"check", "request"}) {
		t.Fatalf("snapshot delete phases %v", got)
	}
	if got := phaseNames(stagePhases()); !slices.Equal(got, []string{"request", "template"}) {
		t.Fatalf("staging phases %v", got)
	}
	if got := phaseNames(attachPhases()); !slices.Equal(got, []string{"check", "reserve", "request"}) {
		t.Fatalf("attach phases %v", got)
	}
	if got := phaseNames(diskResizePhases()); !slices.Equal(got, []string{"check", "reserve", "request"}) {
		t.Fatalf("disk resize phases %v", got)
	}
	if got := phaseNames(detachPhases()); !slices.Equal(got, []string{"check", "request"}) {
		t.Fatalf("detach phases %v", got)
	}
	if got := phaseNames(resizePhases()); !slices.Equal(got, []string{"check", "plan", "reserve", "apply", "reboot"}) {
		t.Fatalf("resize phases %v", got)
	}
}

// TestSnapshotPhasesNameTheirFailure: a rollback or a snapshot's deletion
// of a VM that is not there fails in its check phase, which the failure
// names, with the NOT_FOUND it met; the request phase never runs.
func TestSnapshotPhasesNameTheirFailure(t *testing.T) {
	t.Parallel()
	d := &deps{eng: newEngine(slog.New(slog.DiscardHandler), nil), find: &finder{zones: StaticZones{}, timeout: time.Second}}
	ref := snapshotRef{vdc: "blue", id: "not-a-vm", name: "before"}
	for name, run := range map[string]func() error{
		"rollback": func() error {
			return runPhases(context.Background(), d.eng, "", "", rollbackPhases(), &rollbackScope{deps: d, snap: ref})
		},
		"delete": func() error {
			return runPhases(context.Background(), d.eng, "", "", snapshotDeletePhases(), &snapshotDeleteScope{deps: d, snap: ref})
		},
	} {
		err := run()
		if phase, ok := failedPhase(err); !ok || phase != "check" || !IsKind(cause(err), KindNotFound) {
			t.Errorf("%s: %v, want NOT_FOUND in phase check", name, err)
		}
	}
}

// TestRecoveryHooks: Recover gives a guest to the move's hook before the
// create's (a move's target carries the intent of a create too), and the
// resize's last (it takes only created guests).
func TestRecoveryHooks(t *testing.T) {
	t.Parallel()
	var names []string
	for _, h := range recoveryHooks(&deps{}) {
		names = append(names, h.name)
	}
	if !slices.Equal(names, []string{"move", "create", "resize"}) {
		t.Fatalf("recovery hooks %v", names)
	}
}
