package release_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"aead.dev/minisign"

	"github.com/flexplane/flexplane/pkg/release"
)

func signed(t *testing.T, key minisign.PrivateKey, bin []byte, version string, notAfter time.Time) (raw, sig []byte) {
	t.Helper()
	sum := sha256.Sum256(bin)
	m := release.Manifest{Version: version, Platform: "linux/amd64", Size: int64(len(bin)), SHA256: hex.EncodeToString(sum[:]), NotAfter: notAfter}
	raw, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return raw, release.Sign(key, raw)
}

func verifier(t *testing.T) (*release.Verifier, minisign.PrivateKey) {
	t.Helper()
	pub, priv, err := minisign.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := pub.MarshalText()
	v, err := release.NewVerifier(string(text))
	if err != nil {
		t.Fatal(err)
	}
	return v, priv
}

func TestVerifyAndReplace(t *testing.T) {
	t.Parallel()
	v, key := verifier(t)
	_, other := verifier(t)
	bin := []byte("the agent binary")
	raw, sig := signed(t, key, bin, "v1.2.0", time.Now().Add(time.Hour))
	m, err := v.Manifest(raw, sig)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Replaces("v1.1.9", "linux/amd64"); err != nil {
		t.Errorf("v1.2.0 replacing v1.1.9: %v", err)
	}
	for name, err := range map[string]error{
		"same version":   m.Replaces("v1.2.0", "linux/amd64"),
		"newer running":  m.Replaces("v1.3.0", "linux/amd64"),
		"other platform": m.Replaces("v1.0.0", "linux/arm64"),
		"dev running":    m.Replaces("dev", "linux/amd64"),
	} {
		if !errors.Is(err, release.ErrRefused) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
	tampered := []byte(strings.Replace(string(raw), "v1.2.0", "v1.9.0", 1))
	_, wrongSig := signed(t, other, bin, "v1.2.0", time.Now().Add(time.Hour))
	expRaw, expSig := signed(t, key, bin, "v1.2.0", time.Now().Add(-time.Second))
	for name, c := range map[string][2][]byte{"edited manifest": {tampered, sig}, "wrong key": {raw, wrongSig}, "expired": {expRaw, expSig}} {
		if _, err := v.Manifest(c[0], c[1]); !errors.Is(err, release.ErrRefused) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
	check := release.NewCheck(m)
	check.Write(bin[:5])
	if err := check.Done(); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("truncated: %v", err)
	}
	check = release.NewCheck(m)
	if _, err := check.Write(append(append([]byte(nil), bin...), 'x')); err == nil {
		t.Error("a binary longer than its manifest was accepted")
	}
	flipped := append([]byte(nil), bin...)
	flipped[3] ^= 1
	check = release.NewCheck(m)
	check.Write(flipped)
	if err := check.Done(); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("flipped byte: %v", err)
	}
}

func TestStore(t *testing.T) {
	t.Parallel()
	v, key := verifier(t)
	dir := t.TempDir()
	store, err := release.OpenStore(filepath.Join(dir, "releases"), v)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "agent")
	os.WriteFile(bin, []byte("binary one"), 0o755)
	raw, sig := signed(t, key, []byte("binary one"), "v1.0.0", time.Now().Add(time.Hour))
	if _, err := store.Add(bin, raw, sig); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Add(bin, raw, sig); err != nil {
		t.Errorf("adding the same release again: %v", err)
	}
	raw2, sig2 := signed(t, key, []byte("binary one"), "v1.0.0", time.Now().Add(2*time.Hour))
	if _, err := store.Add(bin, raw2, sig2); !errors.Is(err, release.ErrConflict) {
		t.Errorf("another manifest of a published version: %v, want conflict", err)
	}
	bad, badSig := signed(t, key, []byte("binary two"), "v1.1.0", time.Now().Add(time.Hour))
	if _, err := store.Add(bin, bad, badSig); !errors.Is(err, release.ErrRefused) {
		t.Errorf("a binary that is not the manifest's: %v, want refused", err)
	}
	// A second replica's view of the same directory.
	other, err := release.OpenStore(filepath.Join(dir, "releases"), v)
	if err != nil {
		t.Fatal(err)
	}
	list, err := other.List()
	if err != nil || len(list) != 1 || list[0].Manifest.Version != "v1.0.0" {
		t.Fatalf("list: %v %v", list, err)
	}
	if _, err := other.Get("v1.1.0", "linux/amd64"); !errors.Is(err, release.ErrNotFound) {
		t.Errorf("a refused release was published: %v", err)
	}
}
