package gobin_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/gobin"
)

// module writes a module of one command that prints msg.
func module(t *testing.T, dir, msg string) {
	t.Helper()
	for name, text := range map[string]string{
		"go.mod":  "module example.test/hello\n\ngo 1.24\n",
		"main.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Print(" + `"` + msg + `"` + ") }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const marker = "\x00gobin test mark"

// mark appends marker to the file path.
func mark(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(marker); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// marked reports whether the file path ends in marker.
func marked(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.HasSuffix(string(b), marker)
}

func output(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	return string(out)
}

// TestCachedBuildRelinksOnlyWhatChanged: a second build of the same
// command is copied from the cache without a link, and a change of its
// source is linked again.
func TestCachedBuildRelinksOnlyWhatChanged(t *testing.T) {
	cache, mod := t.TempDir(), t.TempDir()
	t.Setenv(gobin.CacheEnv, cache)
	module(t, mod, "one")
	first := filepath.Join(t.TempDir(), "hello")
	gobin.Build(t, mod, first, ".")
	if got := output(t, first); got != "one" {
		t.Fatalf("first build prints %q", got)
	}
	cached, err := filepath.Glob(filepath.Join(cache, "*", "out"))
	if err != nil || len(cached) != 1 {
		t.Fatalf("cache holds %v, %v: want one binary", cached, err)
	}
	// A mark after the end of the cached binary stays there unless go
	// build writes the binary again.
	mark(t, cached[0])

	second := filepath.Join(t.TempDir(), "hello")
	gobin.Build(t, mod, second, ".")
	if !marked(t, cached[0]) {
		t.Error("the unchanged command was linked again")
	}
	if got := output(t, second); got != "one" {
		t.Fatalf("second build prints %q", got)
	}

	module(t, mod, "two")
	third := filepath.Join(t.TempDir(), "hello")
	gobin.Build(t, mod, third, ".")
	if got := output(t, third); got != "two" {
		t.Fatalf("after the change the build prints %q, want two", got)
	}
	if marked(t, cached[0]) {
		t.Error("the changed command was not linked again in the cache")
	}
	if got := output(t, second); got != "one" {
		t.Fatalf("an earlier copy changed: it prints %q", got)
	}

	// Into a directory, as for several commands at once.
	dir := filepath.Join(t.TempDir(), "bin") + string(filepath.Separator)
	gobin.Build(t, mod, dir, ".")
	if got := output(t, filepath.Join(dir, "hello")); got != "two" {
		t.Fatalf("the build into a directory prints %q, want two", got)
	}
}

// TestUncachedBuildWritesOnlyTheOutput: without a cache, the binary is
// built where it is wanted, as go build does.
func TestUncachedBuildWritesOnlyTheOutput(t *testing.T) {
	t.Setenv(gobin.CacheEnv, "")
	mod := t.TempDir()
	module(t, mod, "plain")
	out := filepath.Join(t.TempDir(), "hello")
	gobin.Build(t, mod, out, ".")
	if got := output(t, out); got != "plain" {
		t.Fatalf("the build prints %q", got)
	}
}

// TestOneEntryPerBinary: one binary asked for in different words (its
// import path from another directory of the module, its directory with an
// empty -ldflags) is one entry of the cache, linked once.
func TestOneEntryPerBinary(t *testing.T) {
	cache, mod := t.TempDir(), t.TempDir()
	t.Setenv(gobin.CacheEnv, cache)
	module(t, mod, "same")
	sub := filepath.Join(mod, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, b := range []struct {
		dir  string
		args []string
	}{
		{mod, []string{"."}},
		{sub, []string{"example.test/hello"}},
		{sub, []string{"-ldflags", "", ".."}},
		{filepath.Join(sub, ".."), []string{"./"}},
	} {
		out := filepath.Join(t.TempDir(), "hello")
		gobin.Build(t, b.dir, out, b.args...)
		if got := output(t, out); got != "same" {
			t.Fatalf("build %d (%v in %s) prints %q", i, b.args, b.dir, got)
		}
		entries, err := filepath.Glob(filepath.Join(cache, "*", "out"))
		if err != nil || len(entries) != 1 {
			t.Fatalf("after build %d (%v in %s) the cache holds %v, %v: want one binary", i, b.args, b.dir, entries, err)
		}
	}
}
