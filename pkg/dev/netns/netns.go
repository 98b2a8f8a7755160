// Package netns keeps the dev stack's and the tests' mesh nodes off the
// machine's network: it runs a process (the dev stack, a test binary) in a
// network namespace of its own whose only interface is loopback, and it lists
// the sockets processes listen on, so that a test can check that nothing is
// reachable from outside.
//
// tsnet (tailscale v1.94) binds every mesh node's WireGuard UDP sockets and
// its peer API's TCP socket on all interfaces and has no setting to change
// it. In a namespace whose only interface is lo, "all interfaces" is
// loopback: the sockets are reachable from that namespace only.
//
// A test package whose tests start mesh nodes runs itself isolated:
//
//	func TestMain(m *testing.M) { netns.Main(m) }
//
// Main re-executes the test binary, with the same arguments, in a new
// namespace (CLONE_NEWNET; with a user namespace mapping the caller to root
// when it is not root, so that no privilege is needed where the kernel allows
// unprivileged user namespaces) and exits with its status; in the namespace it
// brings lo up and runs the tests. A machine that allows neither makes Main
// fail loudly.
package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// EnvInside is set (to "1") in the environment of a process started in its
// own namespace by Isolate, and so in its children's.
const EnvInside = "FLEXPLANE_NETNS"

// Address is the address LoopbackUp gives lo besides 127.0.0.1 (of
// 198.18.0.0/15, the benchmarking range of RFC 2544, routed nowhere; not
// TEST-NET-1, which tests use as an address no machine has). tsnet takes a
// machine with loopback addresses only for one without a network and never
// contacts its control server; an address of lo leads nowhere else.
const Address = "198.18.0.1"

// Inside reports whether this process was started by Isolate (or is a child
// of one that was).
func Inside() bool { return os.Getenv(EnvInside) == "1" }

// Runner is what TestMain gets (a *testing.M).
type Runner interface{ Run() int }

// Main runs m's tests in a network namespace of their own whose only
// interface is loopback (see the package doc): outside one, it re-executes
// the binary there and exits with its status; inside, it brings lo up and
// exits with m.Run's status. It never returns.
func Main(m Runner) {
	if Inside() {
		if err := LoopbackUp(); err != nil {
			fmt.Fprintln(os.Stderr, "netns:", err)
			os.Exit(1)
		}
		os.Exit(m.Run())
	}
	os.Exit(Reexec(nil))
}

// Reexec runs this program again, with the same arguments, standard streams
// and environment, in a new network namespace (Isolate), passes it SIGINT
// and SIGTERM, and returns its exit status once it has exited (1 and a
// message on stderr when it could not start).
// env is added to the environment and extra become its file descriptors 3,
// 4, ...
func Reexec(env []string, extra ...*os.File) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "netns:", err)
		return 1
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = extra
	cmd.Env = append(os.Environ(), env...)
	Isolate(cmd)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "netns: start %s in a network namespace of its own (it needs root, or unprivileged user namespaces): %v\n", self, err)
		return 1
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	default:
		fmt.Fprintln(os.Stderr, "netns:", err)
		return 1
	}
}
