// Package browsertest is test support for the portal's browser tests
// (portal/tests/*.mjs, playwright-core driving Debian's chromium): it checks
// that the built portal, its packages, the browser and node are installed,
// runs the node test files against a deployment given by the environment,
// and checks the screenshots they leave.
package browsertest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Chromium is the browser the tests drive (Debian's package, installed by
// portal/scripts/install-browser.sh).
const Chromium = "/usr/bin/chromium"

// Prerequisites fails the test when the built portal, its packages, the
// browser or node are missing (see Find): the browser tests never skip,
// `make test` installs all of it. It returns the portal's source directory
// and its build.
func Prerequisites(t testing.TB, repo string) (root, public string) {
	t.Helper()
	root, public, err := Find(repo)
	if err != nil {
		t.Fatalf("%v (make test installs it)", err)
	}
	return root, public
}

// Find returns the portal's source directory (portal/ of the module at
// repo) and its build, or an error saying what is missing and how to
// install it: the built portal, its packages, the browser or node.
func Find(repo string) (root, public string, err error) {
	root, err = filepath.Abs(filepath.Join(repo, "portal"))
	if err != nil {
		return "", "", fmt.Errorf("browsertest: %w", err)
	}
	public = filepath.Join(root, ".output", "public")
	for _, need := range []struct{ path, fix string }{
		{filepath.Join(public, "index.html"), "build the portal: make portal"},
		{filepath.Join(root, "node_modules", "playwright-core", "package.json"), "install the portal's packages: make portal"},
		{Chromium, "install the browser: make browser"},
	} {
		if _, err := os.Stat(need.path); err != nil {
			return "", "", fmt.Errorf("browsertest: %s is missing: %s", need.path, need.fix)
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", "", fmt.Errorf("browsertest: node is not installed: %w", err)
	}
	return root, public, nil
}

// Run runs the node test files (relative to root) with env added to the
// environment, logging their output, and fails the test when they fail or
// take longer than timeout; it returns when they started.
func Run(t testing.TB, root string, timeout time.Duration, env []string, files ...string) time.Time {
	t.Helper()
	runCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := append([]string{"--test", "--test-concurrency=1", "--test-reporter=spec"}, files...)
	cmd := exec.CommandContext(runCtx, "node", args...)
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), "CHROMIUM="+Chromium), env...)
	// node, chromium and its helpers form one process group, ended as a
	// whole on timeout and after the run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		t.Log(sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("browser tests %v failed after %s: %v", files, time.Since(start).Round(time.Millisecond), err)
	}
	t.Logf("browser tests %v passed in %s", files, time.Since(start).Round(time.Millisecond))
	return start
}

// CheckScreenshots fails the test unless each page has a screenshot
// (page.png) in dir taken since start.
func CheckScreenshots(t testing.TB, dir string, start time.Time, pages ...string) {
	t.Helper()
	for _, page := range pages {
		if st, err := os.Stat(filepath.Join(dir, page+".png")); err != nil || st.ModTime().Before(start) || st.Size() == 0 {
			t.Errorf("no fresh screenshot of %s in %s: %v", page, dir, err)
		}
	}
}
