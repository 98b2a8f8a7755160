package compute_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

// createPhases are the phases of a create as the package documents them.
var createPhases = []string{"claim", "stage", "clone", "configure", "resize", "user-data", "firewall", "start", "finish"}

// TestCreateRunsItsPhasesInOrder: the phase hook sees each phase of a
// create once it completed, in the documented order (stage only for the
// create that stages the image), and the operation ends at finish.
func TestCreateRunsItsPhasesInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	ctx := vmtest.Ctx(t)
	var mu sync.Mutex
	var seen []string
	cfg := e.cfg
	cfg.AfterStep = func(_ context.Context, _, step string) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, step)
	}
	svc := e.newService(cfg)
	for _, c := range []struct {
		name string
		want []string
	}{
		{"stages", createPhases},
		{"staged", slices.DeleteFunc(slices.Clone(createPhases), func(p string) bool { return p == "stage" })},
	} {
		mu.Lock()
		seen = nil
		mu.Unlock()
		_, op, err := svc.CreateVM(ctx, e.input("alpha", c.name))
		if err != nil {
			t.Fatalf("%s: create: %v", c.name, err)
		}
		final := e.wait(svc, "blue", op.ID)
		if final.State != compute.OpSucceeded || final.Step != "finish" {
			t.Fatalf("%s: operation %+v, want SUCCEEDED at finish", c.name, final)
		}
		mu.Lock()
		got := slices.Clone(seen)
		mu.Unlock()
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: phases %v, want %v", c.name, got, c.want)
		}
	}
}

// TestFailingPhaseNamesItself: a create whose start Proxmox keeps
// refusing fails in its start phase: the operation's step and error say
// so, and the logged failure names the phase with its cause.
func TestFailingPhaseNamesItself(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha")
	e.stage(e.zones[0])
	rec := &recorder{}
	cfg := e.cfg
	cfg.Logger = slog.New(rec)
	svc := e.newService(cfg)
	e.zones[0].Sim.InjectFault(pvesim.Fault{Method: "POST", Path: "/nodes/*/qemu/*/status/start", Status: 500, Count: 1000})
	ctx := vmtest.Ctx(t)
	_, op, err := svc.CreateVM(ctx, e.input("alpha", "doomed"))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	final := e.wait(svc, "blue", op.ID)
	if final.State != compute.OpFailed || final.Step != "start" || !strings.Contains(final.Error, "at its start step") {
		t.Fatalf("operation %+v, want FAILED in phase start", final)
	}
	attrs, ok := rec.find(slog.LevelError, "operation failed")
	if !ok {
		t.Fatal("no Error record of the failed operation")
	}
	if attrs["op"] != op.ID || attrs["step"] != "start" || !strings.HasPrefix(attrs["err"], "phase start: ") {
		t.Errorf("logged %v; want op %s, step start and the err of phase start", attrs, op.ID)
	}
}
