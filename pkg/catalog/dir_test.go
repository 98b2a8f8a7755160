package catalog_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/catalogtest"
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
