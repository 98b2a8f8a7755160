package unixsock

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestListenIsOwnerOnlyAndReplacesOnlyAStaleSocket(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v (%v), want 0600", fi.Mode(), err)
	}
	if _, err := Listen(path); !errors.Is(err, ErrInUse) {
		t.Fatalf("second Listen while served: %v, want ErrInUse", err)
	}
	// A stale socket: the file stays, nobody answers (as after SIGKILL).
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatal(err)
	}
	ln, err = Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	defer ln.Close()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
}

func TestListenLeavesAnotherFileAlone(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "not-a-socket")
	if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
	if b, _ := os.ReadFile(path); string(b) != "keep" {
		t.Fatalf("file is now %q", b)
	}
}
