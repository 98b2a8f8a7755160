// Package gobin builds the module's commands for tests. Linking a large
// binary (the orchestrator, the agent, the dev stack) costs seconds to
// minutes of a loaded machine, and several packages' tests link the same
// ones, in every run. With a cache directory (CacheEnv, which `make test`
// sets), each binary is built there, in a directory named by what is built
// (the module's directory and go build's arguments), and copied to where
// the test wants it: go build relinks it only when one of its sources or
// flags changed (the binary's build ID no longer matches), so a second
// package's test, or the next run, links nothing. Without it, the binary
// is built where the test wants it, as go build does.
package gobin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// CacheEnv names the environment variable of the cache directory; unset
// or empty, nothing is cached.
const CacheEnv = "FLEXPLANE_TEST_BIN_CACHE"

// Build runs `go build -o out args...` in the module directory dir: out is
// a file, or a directory when it ends in a path separator (for several
// packages at once). With a cache (CacheEnv), the binaries are built in the
// cache and copied to out. A failed build fails t with go's output.
func Build(t testing.TB, dir, out string, args ...string) {
	t.Helper()
	if err := Run(dir, out, args...); err != nil {
		t.Fatal(err)
	}
}

// Run is Build for a caller without a test: it returns what failed.
func Run(dir, out string, args ...string) error {
	cache := os.Getenv(CacheEnv)
	if cache == "" {
		return goBuild(dir, out, args)
	}
	abs, args, err := normalize(dir, args)
	if err != nil {
		return err
	}
	// One entry per module directory, kind of output and arguments: go
	// build's own check of the build ID decides whether the binary there
	// is up to date.
	toDir := strings.HasSuffix(out, string(filepath.Separator))
	sum := sha256.Sum256([]byte(strings.Join(append([]string{abs, fmt.Sprint(toDir)}, args...), "\x00")))
	entry := filepath.Join(cache, hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(entry, 0o755); err != nil {
		return fmt.Errorf("gobin: %w", err)
	}
	unlock, err := lock(filepath.Join(entry, ".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	target := filepath.Join(entry, "out")
	if toDir {
		target += string(filepath.Separator)
	}
	if err := goBuild(abs, target, args); err != nil {
		return err
	}
	if !toDir {
		return copyFile(target, out)
	}
	entries, err := os.ReadDir(target)
	if err != nil {
		return fmt.Errorf("gobin: %w", err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("gobin: %w", err)
	}
	for _, e := range entries {
		if err := copyFile(filepath.Join(target, e.Name()), filepath.Join(out, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// normalize spells one build one way, so that the callers that build the
// same binary share its entry: it moves dir up to its module's root, names
// the module's packages relative to it (./cmd/agent for
// github.com/flexplane/flexplane/cmd/agent, or for ./agent in cmd), and
// drops an empty -ldflags. An argument after -ldflags is its value, and
// stays as it is.
func normalize(dir string, args []string) (string, []string, error) {
	from, err := filepath.Abs(dir)
	if err != nil {
		return "", nil, fmt.Errorf("gobin: %w", err)
	}
	root := from
	var mod []byte
	for {
		if mod, err = os.ReadFile(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			return "", nil, fmt.Errorf("gobin: no go.mod in %s or above", dir)
		}
		root = parent
	}
	var path string
	for line := range strings.Lines(string(mod)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			path = strings.Trim(strings.TrimSpace(p), `"`)
			break
		}
	}
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-ldflags" && i+1 < len(args):
			if args[i+1] != "" {
				out = append(out, a, args[i+1])
			}
			i++
			continue
		case path != "" && (a == path || strings.HasPrefix(a, path+"/")):
			if a = "./" + strings.TrimPrefix(a, path+"/"); a == "./"+path {
				a = "."
			}
		case a == "." || a == ".." || strings.HasPrefix(a, "./") || strings.HasPrefix(a, "../"):
			// A directory relative to dir, which the build now runs in
			// root, above it.
			rel, err := filepath.Rel(root, filepath.Join(from, a))
			if err != nil {
				return "", nil, fmt.Errorf("gobin: %w", err)
			}
			if a = "./" + filepath.ToSlash(rel); rel == "." {
				a = "."
			}
		}
		out = append(out, a)
	}
	return root, out, nil
}

// goBuild runs go build -o out args in dir.
func goBuild(dir, out string, args []string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", out}, args...)...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("gobin: go build -o %s %s: %w\n%s", out, strings.Join(args, " "), err, b)
	}
	return nil
}

// lock takes an exclusive lock on the file path, which other processes
// building the same entry take too; unlock releases it.
func lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("gobin: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("gobin: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// copyFile copies the executable src to dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("gobin: %w", err)
	}
	defer in.Close()
	o, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return fmt.Errorf("gobin: %w", err)
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return fmt.Errorf("gobin: copy %s: %w", src, err)
	}
	if err := o.Close(); err != nil {
		return fmt.Errorf("gobin: %w", err)
	}
	return nil
}
