package devstack

import "syscall"

// sysProcAttr puts a child in its own process group and has the kernel
// kill it when the devstack dies, even by SIGKILL, so nothing is left
// behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
