package catalog_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/catalogtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

func openStore(t *testing.T, dir string) *catalog.DirStore {
	t.Helper()
	s, err := catalog.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDirStore holds DirStore to the behaviour of every store, two stores
// on one directory standing for two replicas on one volume.
func TestDirStore(t *testing.T) {
	t.Parallel()
	catalogtest.Run(t, func(t *testing.T) (catalog.Store, catalog.Store) {
		dir := t.TempDir()
		return openStore(t, dir), openStore(t, dir)
	})
}

// TestManifestOnDisk: an object is a readable manifest at
// <dir>/<plural>/<name>.yaml, and nothing else is left in the directory.
func TestManifestOnDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir)
	v, err := catalog.Create(t.Context(), s, catalogtest.VDC("prod", 16))
	if err != nil {
		t.Fatal(err)
	}
	v.Quotas.VCPUs = 17
	if _, err := catalog.Update(t.Context(), s, v); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "vdcs", "prod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"apiVersion: flexplane.io/v1alpha1", "kind: VDC", "name: prod", "vcpus: 17"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("manifest lacks %q:\n%s", want, data)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "vdcs")); len(entries) != 1 {
		t.Errorf("vdcs dir holds %d entries, want the one manifest", len(entries))
	}
}

func TestRejectsBadManifest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir)
	manifest := "apiVersion: flexplane.io/v1alpha1\nkind: VDC\nmetadata:\n  name: hand\nspec:\n  quota: {}\n"
	if err := os.WriteFile(filepath.Join(dir, "vdcs", "hand.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := s.Get(context.Background(), catalog.KindVDC, "hand")
	if err == nil || !strings.Contains(err.Error(), `unknown field "quota"`) {
		t.Fatalf("got %v, want unknown field error", err)
	}
}

// TestSecretsOnlyTheOwnerReads: the directory store keeps a secret as a
// file of mode 0600 in a directory of mode 0700, and never exports it.
func TestSecretsOnlyTheOwnerReads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir)
	if err := s.PutSecret(t.Context(), "lb.prod.web", map[string][]byte{"tls.key": []byte("PRIVATE")}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{filepath.Join(dir, "secrets"): 0o700, filepath.Join(dir, "secrets", "lb.prod.web.json"): 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", p, got, want)
		}
	}
	var out strings.Builder
	if _, err := catalog.Export(t.Context(), s, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "PRIVATE") {
		t.Errorf("the export holds the secret: %s", out.String())
	}
}

// TestDirStoreWatch: a store's own writes are signalled at once, another
// store's on the directory (another process) within the poll interval,
// deletes included; a burst leaves one signal waiting; the channel closes
// with its context.
func TestDirStoreWatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b, c := openStore(t, dir), openStore(t, dir), openStore(t, dir)
	// a's own writes: a never polls within the test (an hour); c never
	// writes, so its signals are the others' writes.
	a.PollInterval, c.PollInterval = time.Hour, 20*time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	own, others := a.Watch(ctx), c.Watch(ctx)
	signalled := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("no signal after %s", what)
		}
	}
	v, err := catalog.Create(t.Context(), a, catalogtest.VDC("prod", 16))
	if err != nil {
		t.Fatal(err)
	}
	signalled(own, "a write of the store itself")
	signalled(others, "another store's create")
	v.Quotas.VCPUs = 17
	if _, err := catalog.Update(t.Context(), b, v); err != nil {
		t.Fatal(err)
	}
	signalled(others, "another store's update")
	if err := catalog.Delete[*catalog.VDC](t.Context(), b, "prod", ""); err != nil {
		t.Fatal(err)
	}
	signalled(others, "another store's delete")
	for i := range 20 {
		if _, err := catalog.Create(t.Context(), a, catalogtest.VDC(fmt.Sprint("burst", i), 1)); err != nil {
			t.Fatal(err)
		}
	}
	signalled(own, "a burst")
	select {
	case <-own:
		t.Error("a burst left more than one signal waiting")
	default:
	}
	cancel()
	poll.True(t, 10*time.Second, "the channel closed with its context", func() bool {
		select {
		case _, ok := <-own:
			return !ok
		default:
			return false
		}
	})
}
