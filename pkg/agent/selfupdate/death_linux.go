package selfupdate

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the agent die with the launcher, as the launcher
// dies with its supervisor.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
