package pveschema

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/flexplane/flexplane/pkg/pveschema/internal/apitrim"
)

// TestEmbeddedSchemaIsFresh checks that the committed apidata.json is exactly what the
// generator produces from the full Proxmox schema, when that schema is available.
func TestEmbeddedSchemaIsFresh(t *testing.T) {
	t.Parallel()
	src := os.Getenv("PVE_APIDATA")
	switch {
	case src == "":
		src = "/work/shared/pve-api/apidata.json"
	case !filepath.IsAbs(src):
		src = filepath.Join("..", "..", src) // relative to the repository root, as in make
	}
	full, err := os.ReadFile(src)
	if os.IsNotExist(err) {
		t.Skipf("%s absent; set PVE_APIDATA to check staleness", src)
	}
	if err != nil {
		t.Fatal(err)
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
		t.Fatalf("pkg/pveschema/apidata.json is stale: run make generate PVE_APIDATA=%s", src)
	}
	again, err := apitrim.Trim(full)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, want) {
		t.Fatal("generator output is not deterministic")
	}
}
