//go:build linux

package nsnet

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("nsnet tests need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)")
	}
}

func name(t *testing.T) string {
	n := fmt.Sprintf("fpns%d-%s", os.Getpid(), t.Name())
	if len(n) > 40 {
		n = n[:40]
	}
	t.Cleanup(func() {
		if err := Delete(n); err != nil {
			t.Error(err)
		}
	})
	return n
}

// A bare file in Dir (how a namespace looks between its creation and its mount, or
// after a crash) is no namespace: Exists says so, Ensure makes a real one over it
// and Delete removes it.
func TestBareFileIsNoNamespace(t *testing.T) {
	needRoot(t)
	n := name(t)
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(Dir, n), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if Exists(n) {
		t.Fatal("a bare file counts as a namespace")
	}
	if err := Do(n, func() error { return nil }); err == nil {
		t.Fatal("entered a bare file")
	}
	if err := Ensure(n); err != nil {
		t.Fatalf("Ensure over a bare file: %v", err)
	}
	if !Exists(n) {
		t.Fatal("Ensure left no namespace")
	}
	if err := Do(n, func() error { return nil }); err != nil {
		t.Fatalf("enter: %v", err)
	}
	if err := Delete(n); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(Dir, n)); !os.IsNotExist(err) {
		t.Fatalf("after Delete: %v", err)
	}

	if err := os.WriteFile(filepath.Join(Dir, n), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := Delete(n); err != nil {
		t.Fatalf("Delete of a bare file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(Dir, n)); !os.IsNotExist(err) {
		t.Fatalf("bare file left: %v", err)
	}
}

// Many callers ensuring one namespace at once all succeed, and every one of them
// can enter it as soon as its Ensure returns.
func TestConcurrentEnsure(t *testing.T) {
	needRoot(t)
	n := name(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			if err := Ensure(n); err != nil {
				errs <- err
				return
			}
			if err := Do(n, func() error { return nil }); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
