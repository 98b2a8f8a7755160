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

func keyPair(t *testing.T) (minisign.PublicKey, minisign.PrivateKey) {
	t.Helper()
	pub, priv, err := minisign.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// TestKeyIDs: signatures name their key id; a verifier trusts a set of
// keys given as ID=BASE64KEY; a release signed by a key not in the set is
// refused naming that key, one by any trusted key accepted; a release
// signed by the old and the new key (rotation) verifies with either.
func TestKeyIDs(t *testing.T) {
	t.Parallel()
	oldPub, oldKey := keyPair(t)
	newPub, newKey := keyPair(t)
	_, strangerKey := keyPair(t)
	entry := func(p minisign.PublicKey) string { return release.KeyID(p.ID()) + "=" + p.String() }
	both, err := release.NewVerifier("# old and new\n" + entry(oldPub) + "," + entry(newPub))
	if err != nil {
		t.Fatal(err)
	}
	if got := both.KeyIDs(); len(got) != 2 {
		t.Fatalf("trusted keys %v, want 2", got)
	}
	onlyNew, err := release.NewVerifier(entry(newPub))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.NewVerifier(release.KeyID(oldPub.ID()) + "=" + newPub.String()); err == nil {
		t.Error("a key named with another key's id was accepted")
	}
	bin := []byte("the agent binary")
	raw, _ := signed(t, oldKey, bin, "v1.2.0", time.Now().Add(time.Hour))

	if sig := release.Sign(newKey, raw); !strings.Contains(string(sig), release.KeyID(newPub.ID())) {
		t.Errorf("the signature does not name its key id %s:\n%s", release.KeyID(newPub.ID()), sig)
	}
	if _, err := both.Manifest(raw, release.Sign(newKey, raw)); err != nil {
		t.Errorf("signed by the second trusted key: %v", err)
	}
	_, err = both.Manifest(raw, release.Sign(strangerKey, raw))
	if !errors.Is(err, release.ErrRefused) || !strings.Contains(err.Error(), release.KeyID(strangerKey.ID())) {
		t.Errorf("signed by an unknown key: %v, want refused naming its id", err)
	}
	if _, err := onlyNew.Manifest(raw, release.Sign(oldKey, raw)); !errors.Is(err, release.ErrRefused) {
		t.Errorf("signed by a removed key: %v, want refused", err)
	}
	dual := release.SignAll([]minisign.PrivateKey{oldKey, newKey}, raw)
	for name, v := range map[string]*release.Verifier{"both": both, "only the new": onlyNew} {
		if _, err := v.Manifest(raw, dual); err != nil {
			t.Errorf("signed with both keys, checked with %s: %v", name, err)
		}
	}
	forged := release.SignAll([]minisign.PrivateKey{strangerKey}, raw)
	forged = append(forged, release.Sign(newKey, []byte("another manifest"))...)
	if _, err := both.Manifest(raw, forged); !errors.Is(err, release.ErrRefused) {
		t.Errorf("a trusted key's signature of other bytes: %v, want refused", err)
	}
}

// TestFloorInStore: the store's floor is the highest published one that
// verifies; a floor of an untrusted key is refused.
func TestFloorInStore(t *testing.T) {
	t.Parallel()
	v, key := verifier(t)
	_, stranger := keyPair(t)
	store, err := release.OpenStore(t.TempDir(), v)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := store.Floor(); err != nil || f != nil {
		t.Fatalf("an empty store's floor: %v %v", f, err)
	}
	floor := func(version string) []byte {
		f := release.Floor{Kind: release.FloorKind, MinVersion: version, IssuedAt: time.Now().UTC()}
		raw, err := f.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	for _, ver := range []string{"v1.2.0", "v1.1.0"} {
		raw := floor(ver)
		if _, err := store.AddFloor(raw, release.SignFloor([]minisign.PrivateKey{key}, raw)); err != nil {
			t.Fatal(err)
		}
	}
	raw := floor("v9.0.0")
	if _, err := store.AddFloor(raw, release.SignFloor([]minisign.PrivateKey{stranger}, raw)); !errors.Is(err, release.ErrRefused) {
		t.Errorf("a floor of an untrusted key: %v, want refused", err)
	}
	f, err := store.Floor()
	if err != nil || f == nil || f.Floor.MinVersion != "v1.2.0" {
		t.Fatalf("floor %+v %v, want v1.2.0", f, err)
	}
	if err := f.Floor.Allows("v1.1.9"); !errors.Is(err, release.ErrRefused) {
		t.Errorf("v1.1.9 under a floor v1.2.0: %v, want refused", err)
	}
	if err := f.Floor.Allows("v1.2.0"); err != nil {
		t.Errorf("v1.2.0 under a floor v1.2.0: %v", err)
	}
	// A manifest's signature is not a floor's.
	m, sig := signed(t, key, []byte("bin"), "v1.3.0", time.Now().Add(time.Hour))
	if _, err := v.Floor(m, sig); !errors.Is(err, release.ErrRefused) {
		t.Errorf("a manifest taken as a floor: %v", err)
	}
}
