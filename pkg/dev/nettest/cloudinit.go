//go:build linux

package nettest

import "strings"

// FileServerPy is a Python program that listens on TCP port 7100 of every
// address and answers each connection with the file srv/hello.txt of its
// working directory, then closes it: what a test's cloud-config writes
// (write_files) and starts (runcmd) in a simulated guest.
const FileServerPy = `import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7100))
s.listen()
while True:
    c, _ = s.accept()
    c.sendall(open("srv/hello.txt", "rb").read())
    c.close()
`

// Indent indents every line of s by n spaces, for a YAML block scalar.
func Indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n"+pad)
}
