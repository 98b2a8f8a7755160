package ociimage_test

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/flexplane/flexplane/pkg/dev/ociimage"
)

// input writes a binary and a directory tree to dir, with the modification
// times and permissions given (which must not matter).
func input(t *testing.T, dir string, mtime time.Time, perm os.FileMode) ociimage.Config {
	t.Helper()
	files := map[string]string{"bin/app": "#!binary", "site/index.html": "<html>", "site/_nuxt/a.js": "js", "site/b/c.css": "css"}
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(full, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	return ociimage.Config{
		Files: []ociimage.File{
			{Source: filepath.Join(dir, "bin/app"), Target: "/usr/bin/app", Mode: 0o755},
			{Source: filepath.Join(dir, "site"), Target: "/usr/share/app/site"},
		},
		Entrypoint:   []string{"/usr/bin/app"},
		ExposedPorts: []string{"8080/tcp"},
		Labels:       map[string]string{"org.opencontainers.image.title": "app"},
	}
}

// TestReproducible builds the image twice from equal inputs made at other
// times in other directories, written to tarballs: the digests are equal.
// A changed file changes the digest. The image runs as the non-root user
// and holds what was put in.
func TestReproducible(t *testing.T) {
	t.Parallel()
	a := input(t, t.TempDir(), time.Now(), 0o644)
	b := input(t, t.TempDir(), time.Now().Add(-48*time.Hour), 0o600)
	var tarballs []string
	digest := func(cfg ociimage.Config) string {
		img, err := ociimage.Build(cfg, "amd64")
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "image.tar")
		if err := ociimage.WriteTarball(out, ociimage.OrchestratorRef, img); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		tarballs = append(tarballs, string(raw))
		tag, err := name.NewTag(ociimage.OrchestratorRef)
		if err != nil {
			t.Fatal(err)
		}
		loaded, err := tarball.ImageFromPath(out, &tag)
		if err != nil {
			t.Fatal(err)
		}
		d, err := loaded.Digest()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := img.Digest()
		if d != want {
			t.Fatalf("tarball holds %s, built %s", d, want)
		}
		return d.String()
	}
	da, db := digest(a), digest(b)
	if da != db {
		t.Fatalf("equal inputs gave digests %s and %s", da, db)
	}
	if tarballs[0] != tarballs[1] {
		t.Fatal("equal inputs gave tarballs that differ")
	}
	if err := os.WriteFile(b.Files[1].Source+"/index.html", []byte("<html>!"), 0o644); err != nil {
		t.Fatal(err)
	}
	if dc := digest(b); dc == da {
		t.Fatalf("a changed file kept digest %s", dc)
	}

	img, err := ociimage.Build(a, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || cf.OS != "linux" || cf.Config.Entrypoint[0] != "/usr/bin/app" {
		t.Fatalf("config: user %q os %q entrypoint %v", cf.Config.User, cf.OS, cf.Config.Entrypoint)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: owner %d:%d, time %s", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		got[h.Name] = h.Mode
	}
	for p, mode := range map[string]int64{"usr/bin/app": 0o755, "usr/share/app/site/index.html": 0o644,
		"usr/share/app/site/b/c.css": 0o644, "etc/passwd": 0o644, "tmp/": 0o1777} {
		if got[p] != mode {
			t.Errorf("%s: mode %o, want %o (entries %v)", p, got[p], mode, got)
		}
	}
}
