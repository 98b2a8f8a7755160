// Package cmdrun runs a command for a test, as a user would run it, and
// collects what it printed and its exit code. A command that ran and exited
// non-zero is an outcome the test checks; one that could not be run at all
// (a missing binary, a bad directory) fails the test.
package cmdrun

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
)

// Result is what a command printed and how it exited.
type Result struct {
	// Stdout and Stderr are what the command wrote to each.
	Stdout, Stderr string
	// Code is the command's exit code: -1 when a signal ended it (for
	// example its context's deadline, with exec.CommandContext).
	Code int
}

// Run runs cmd, whose Stdout and Stderr must be unset, and returns what it
// printed to each and its exit code. It fails t when cmd cannot be run.
func Run(t testing.TB, cmd *exec.Cmd) Result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := wait(t, cmd, cmd.Run())
	return Result{Stdout: stdout.String(), Stderr: stderr.String(), Code: code}
}

// Combined runs cmd, whose Stdout and Stderr must be unset, and returns
// its standard output and error interleaved as written, and its exit code.
// It fails t when cmd cannot be run.
func Combined(t testing.TB, cmd *exec.Cmd) (string, int) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	return string(out), wait(t, cmd, err)
}

// wait returns the exit code of cmd, which ended with err, and fails t when
// err says cmd did not run.
func wait(t testing.TB, cmd *exec.Cmd, err error) int {
	t.Helper()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		t.Fatalf("%s %q: %v", filepath.Base(cmd.Path), cmd.Args[1:], err)
	}
	return 0
}
