//go:build !linux

package netns

import (
	"errors"
	"os/exec"
)

// Isolate needs Linux; elsewhere the command fails to start.
func Isolate(cmd *exec.Cmd) { cmd.Path = "/netns-needs-linux" }

// LoopbackUp needs Linux.
func LoopbackUp() error { return errors.New("netns: network namespaces need Linux") }
