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
