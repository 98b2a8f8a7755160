package cmdrun_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/cmdrun"
)

func TestRunCollectsOutputAndExitCode(t *testing.T) {
	t.Parallel()
	got := cmdrun.Run(t, exec.Command("sh", "-c", "echo out; echo err >&2; exit 3"))
	if got != (cmdrun.Result{Stdout: "out\n", Stderr: "err\n", Code: 3}) {
		t.Fatalf("got %+v", got)
	}
	if got := cmdrun.Run(t, exec.Command("true")); got.Code != 0 {
		t.Fatalf("true: %+v", got)
	}
}

func TestCombinedInterleaves(t *testing.T) {
	t.Parallel()
	out, code := cmdrun.Combined(t, exec.Command("sh", "-c", "echo a; echo b >&2; echo c; exit 4"))
	if out != "a\nb\nc\n" || code != 4 {
		t.Fatalf("got %q, exit %d", out, code)
	}
}

// failT records a failure instead of ending the test.
type failT struct {
	testing.TB
	failed bool
}

func (f *failT) Helper()               {}
func (f *failT) Fatalf(string, ...any) { f.failed = true }

func TestACommandThatCannotRunFails(t *testing.T) {
	t.Parallel()
	ft := &failT{TB: t}
	cmdrun.Run(ft, exec.Command(filepath.Join(t.TempDir(), "missing")))
	if !ft.failed {
		t.Fatal("a missing binary did not fail the test")
	}
	ft = &failT{TB: t}
	cmd := exec.Command("true")
	cmd.Dir = filepath.Join(t.TempDir(), "missing")
	cmdrun.Combined(ft, cmd)
	if !ft.failed {
		t.Fatal("a missing directory did not fail the test")
	}
}
