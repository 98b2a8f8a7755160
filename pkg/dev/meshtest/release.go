package meshtest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"aead.dev/minisign"

	"github.com/flexplane/flexplane/pkg/release"
)

// ReleaseKey is a release signing key pair made for a test.
type ReleaseKey struct {
	// Public is the public key's text, what WithReleases and the agents'
	// FLEXPLANE_RELEASE_KEY take.
	Public string
	priv   minisign.PrivateKey
}

// NewReleaseKey makes a signing key pair.
func NewReleaseKey(t testing.TB) ReleaseKey {
	t.Helper()
	pub, priv, err := minisign.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	text, err := pub.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	return ReleaseKey{Public: string(text), priv: priv}
}

// Manifest returns a manifest of the binary at path, for this machine's
// platform, and its signature.
func (k ReleaseKey) Manifest(t testing.TB, path, version string, notAfter time.Time) (raw, sig []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	m := release.Manifest{Version: version, Platform: release.Platform(), Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:]), NotAfter: notAfter}
	raw, err = m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return raw, release.Sign(k.priv, raw)
}

// Publish adds the binary at path as release version, valid for an hour,
// to the release store of h (WithReleases), as `orchestrator releases
// add` does.
func (k ReleaseKey) Publish(t testing.TB, h *Harness, path, version string) {
	t.Helper()
	raw, sig := k.Manifest(t, path, version, time.Now().Add(time.Hour))
	if _, err := k.store(t, h).Add(path, raw, sig); err != nil {
		t.Fatal(err)
	}
}

// Floor returns a floor at minVersion signed with this key, and its
// signature.
func (k ReleaseKey) Floor(t testing.TB, minVersion string) (raw, sig []byte) {
	t.Helper()
	f := release.Floor{Kind: release.FloorKind, MinVersion: minVersion, IssuedAt: time.Now().UTC()}
	raw, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return raw, release.SignFloor([]minisign.PrivateKey{k.priv}, raw)
}

// PublishFloor adds a floor at minVersion to the release store of h, as
// `orchestrator releases floor` does.
func (k ReleaseKey) PublishFloor(t testing.TB, h *Harness, minVersion string) {
	t.Helper()
	raw, sig := k.Floor(t, minVersion)
	if _, err := k.store(t, h).AddFloor(raw, sig); err != nil {
		t.Fatal(err)
	}
}

// store opens the release store of h (WithReleases) with this key.
func (k ReleaseKey) store(t testing.TB, h *Harness) *release.Store {
	t.Helper()
	v, err := release.NewVerifier(k.Public)
	if err != nil {
		t.Fatal(err)
	}
	store, err := release.OpenStore(filepath.Join(h.DataDir(), "releases"), v)
	if err != nil {
		t.Fatal(err)
	}
	return store
}
