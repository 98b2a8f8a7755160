//go:build unix && !linux

package devstack

import "syscall"

// sysProcAttr puts a child in its own process group. Without Linux's
// parent-death signal, children outlive a devstack killed by SIGKILL.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
