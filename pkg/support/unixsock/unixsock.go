// Package unixsock listens on owner-only unix sockets, the control sockets
// of the development tools (the dev stack's, the Proxmox simulator's) and
// the agent's privileged helper's (which then opens it to the agent's
// group).
package unixsock

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"
)

// ErrInUse is returned by Listen when a live process serves the socket.
var ErrInUse = errors.New("another process serves it")

// Listen listens on the unix socket path and makes it readable and writable
// by its owner only (keep its directory private too: the mode is set just
// after the socket appears). A socket file left behind by a process that
// was killed is replaced; one that a live process answers on is not
// (ErrInUse).
func Listen(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == fs.ModeSocket {
		if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
			conn.Close()
			return nil, fmt.Errorf("unixsock: %s: %w", path, ErrInUse)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("unixsock: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("unixsock: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("unixsock: %w", err)
	}
	return ln, nil
}
