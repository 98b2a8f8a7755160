package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/flexplane/flexplane/pkg/support/atomicfile"
)

func TestWriteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, content := range []string{"first", "second, longer than the first"} {
		if err := atomicfile.WriteFile(path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != content {
			t.Fatalf("read back %q, %v; want %q", b, err, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, %v; want 0640", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file (no temporary left)", len(entries))
	}
}

func TestWriteFileFailsWithoutDirectory(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing", "state.json")
	if err := atomicfile.WriteFile(path, []byte("x"), 0o600); err == nil {
		t.Fatal("wrote into a missing directory")
	}
}

// TestWriteFileIn: a file replaced inside a root, with its mode and no
// temporary left; a name or a link leading out of the root is refused and
// writes nothing there.
func TestWriteFileIn(t *testing.T) {
	t.Parallel()
	dir, outside := t.TempDir(), t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, content := range []string{"first", "second, longer than the first"} {
		if err := atomicfile.WriteFileIn(root, "user.yaml", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "user.yaml"))
		if err != nil || string(b) != content {
			t.Fatalf("read back %q, %v; want %q", b, err, content)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "user.yaml")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi, err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../escaped", "out/escaped"} {
		if err := atomicfile.WriteFileIn(root, name, []byte("x"), 0o600); err == nil {
			t.Errorf("%s: written outside the root", name)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the directory outside the root holds %d entries", len(entries))
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("the root holds %d entries, want the file and the link (no temporary left)", len(entries))
	}
}
