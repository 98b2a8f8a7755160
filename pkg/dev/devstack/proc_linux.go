package devstack

import "syscall"

// sysProcAttr puts a child in its own process group and has the kernel
// kill it when the devstack dies, even by SIGKILL, so nothing is left
// behind. (Linux sends the signal when the thread that started the child
// exits; the Go runtime ends threads only for goroutines that exit while
// locked to one, which the devstack never does.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
