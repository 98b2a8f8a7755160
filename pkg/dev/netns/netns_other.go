//go:build !linux

package netns

import (
	"context"
	"errors"
	"net"
	"os/exec"
)

// Isolate needs Linux; elsewhere the command fails to start.
func Isolate(cmd *exec.Cmd) { cmd.Path = "/netns-needs-linux" }

// LoopbackUp needs Linux.
func LoopbackUp() error { return errors.New("netns: network namespaces need Linux") }

// DialerOf needs Linux.
func DialerOf(int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("netns: network namespaces need Linux")
	}
}

// AddLoopbackAddress needs Linux.
func AddLoopbackAddress(string) error { return errors.New("netns: network namespaces need Linux") }
