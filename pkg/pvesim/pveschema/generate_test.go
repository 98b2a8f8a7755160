package pveschema

import (
	"bytes"
	"cmp"
	"os"
	"path/filepath"
	"testing"

	"github.com/flexplane/flexplane/pkg/pvesim/pveschema/internal/apitrim"
)

// TestEmbeddedSchemaIsFresh checks that the committed apidata.json is exactly what the
// generator produces from the full Proxmox schema the repository carries (upstream/).
func TestEmbeddedSchemaIsFresh(t *testing.T) {
	t.Parallel()
	// PVE_APIDATA (as the Makefile's, relative to the repository root)
	// checks against another copy of the full schema.
	src := cmp.Or(os.Getenv("PVE_APIDATA"), "pkg/pvesim/pveschema/upstream/apidata.json.gz")
	if !filepath.IsAbs(src) {
		src = filepath.Join("..", "..", "..", src)
	}
	full, err := apitrim.ReadFull(src)
	if err != nil {
		t.Fatalf("the full Proxmox schema: %v (set PVE_APIDATA)", err)
	}
	want, err := apitrim.Trim(full)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(".", "apidata.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("pkg/pvesim/pveschema/apidata.json is stale: run make generate PVE_APIDATA=%s", src)
	}
	again, err := apitrim.Trim(full)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, want) {
		t.Fatal("generator output is not deterministic")
	}
}
