// Package release is what an agent release is: a signed manifest (version,
// platform, size, SHA-256 of the binary, the oldest version it may replace,
// a not-after date) and the binary it describes. The manifest is signed with
// minisign (ed25519); the signing key stays offline and only its public key
// is configured where releases are checked. A Verifier checks a manifest
// before any byte of the binary is accepted, and a Check verifies the binary
// while it streams. Store keeps published releases in a directory that
// several orchestrator replicas may share.
package release

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"runtime"
	"strings"
	"time"

	"aead.dev/minisign"
	"golang.org/x/mod/semver"
)

// MaxManifest bounds a manifest's size (and its signature's).
const MaxManifest = 16 << 10

// MaxBinary bounds a release's binary.
const MaxBinary = 512 << 20

// Manifest describes one release binary. Its signed JSON encoding is what
// a release is known by.
type Manifest struct {
	// Version is the release's semantic version, "v1.4.0".
	Version string `json:"version"`
	// Platform is GOOS/GOARCH, "linux/amd64".
	Platform string `json:"platform"`
	// Size is the binary's size in bytes.
	Size int64 `json:"size"`
	// SHA256 is the binary's SHA-256, lowercase hex.
	SHA256 string `json:"sha256"`
	// MinVersion is the oldest running version this release may replace;
	// "" allows any.
	MinVersion string `json:"minVersion,omitempty"`
	// NotAfter is when the manifest stops being accepted.
	NotAfter time.Time `json:"notAfter"`
}

// Platform is the platform of the running binary.
func Platform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// ErrRefused is the kind of every error of a release that must not be
// installed (bad signature, expired, not newer, tampered binary).
var ErrRefused = errors.New("release refused")

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// Validate checks a manifest's fields.
func (m *Manifest) Validate() error {
	switch {
	case !ValidVersion(m.Version):
		return fmt.Errorf("release: version %q is not a semantic version like v1.2.3", m.Version)
	case !strings.Contains(m.Platform, "/"):
		return fmt.Errorf("release: platform %q is not GOOS/GOARCH", m.Platform)
	case m.Size <= 0 || m.Size > MaxBinary:
		return fmt.Errorf("release: size %d is not between 1 and %d", m.Size, MaxBinary)
	case len(m.SHA256) != 64 || strings.ToLower(m.SHA256) != m.SHA256:
		return fmt.Errorf("release: sha256 %q is not 64 lowercase hex digits", m.SHA256)
	case m.MinVersion != "" && !ValidVersion(m.MinVersion):
		return fmt.Errorf("release: minVersion %q is not a semantic version", m.MinVersion)
	case m.NotAfter.IsZero():
		return errors.New("release: notAfter is required")
	}
	if _, err := hex.DecodeString(m.SHA256); err != nil {
		return fmt.Errorf("release: sha256: %w", err)
	}
	return nil
}

// Encode is the manifest's JSON, the bytes that are signed.
func (m *Manifest) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("release: encode: %w", err)
	}
	return append(b, '\n'), nil
}

// Decode parses a manifest (unknown fields refused) and validates it. It
// does not check a signature: Verifier.Manifest does.
func Decode(b []byte) (*Manifest, error) {
	if len(b) > MaxManifest {
		return nil, fmt.Errorf("release: manifest of %d bytes exceeds %d", len(b), MaxManifest)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("release: manifest: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// ValidVersion reports whether v is a semantic version with a leading v.
func ValidVersion(v string) bool { return semver.IsValid(v) && semver.Canonical(v) == v }

// Compare compares two valid versions as semver.Compare does.
func Compare(a, b string) int { return semver.Compare(a, b) }

// Sign signs a manifest's encoding with a minisign private key.
func Sign(key minisign.PrivateKey, manifest []byte) []byte {
	return minisign.SignWithComments(key, manifest, "flexplane agent release", "signature of a flexplane agent release manifest")
}

// Verifier checks manifests against a public key.
type Verifier struct {
	key minisign.PublicKey
	now func() time.Time
}

// NewVerifier parses a minisign public key (the .pub file's text or its
// base64 line).
func NewVerifier(publicKey string) (*Verifier, error) {
	var key minisign.PublicKey
	text := strings.TrimSpace(publicKey)
	if lines := strings.Split(text, "\n"); len(lines) > 1 {
		text = strings.TrimSpace(lines[len(lines)-1])
	}
	if err := key.UnmarshalText([]byte(text)); err != nil {
		return nil, fmt.Errorf("release: public key: %w", err)
	}
	return &Verifier{key: key, now: time.Now}, nil
}

// WithClock returns a verifier whose "now" is now (tests of expiry).
func (v *Verifier) WithClock(now func() time.Time) *Verifier {
	return &Verifier{key: v.key, now: now}
}

// Manifest verifies a manifest's signature and expiry and decodes it.
func (v *Verifier) Manifest(manifest, signature []byte) (*Manifest, error) {
	if len(signature) > MaxManifest {
		return nil, refused("signature of %d bytes", len(signature))
	}
	if !minisign.Verify(v.key, manifest, signature) {
		return nil, refused("the manifest's signature is not valid for the configured key")
	}
	m, err := Decode(manifest)
	if err != nil {
		return nil, refused("%v", err)
	}
	if now := v.now(); now.After(m.NotAfter) {
		return nil, refused("the manifest of %s expired at %s", m.Version, m.NotAfter.UTC().Format(time.RFC3339))
	}
	return m, nil
}

// Replaces checks that m may replace the running version on platform:
// the platform matches, the version is newer (versions only go forward),
// and running is at least m.MinVersion.
func (m *Manifest) Replaces(running, platform string) error {
	if m.Platform != platform {
		return refused("release %s is for %s, not %s", m.Version, m.Platform, platform)
	}
	if !ValidVersion(running) {
		return refused("the running version %q is not a semantic version: it cannot be compared", running)
	}
	if Compare(m.Version, running) <= 0 {
		return refused("release %s is not newer than the running %s", m.Version, running)
	}
	if m.MinVersion != "" && Compare(running, m.MinVersion) < 0 {
		return refused("release %s replaces %s or newer, not %s", m.Version, m.MinVersion, running)
	}
	return nil
}

// Check verifies a binary while it streams: Write refuses bytes beyond the
// manifest's size, Done checks the size and the hash.
type Check struct {
	m *Manifest
	h hash.Hash
	n int64
}

// NewCheck starts checking the binary of m.
func NewCheck(m *Manifest) *Check { return &Check{m: m, h: sha256.New()} }

// Write hashes p, refusing a binary longer than the manifest says.
func (c *Check) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.m.Size {
		return 0, refused("the binary is longer than the manifest's %d bytes", c.m.Size)
	}
	c.n += int64(len(p))
	c.h.Write(p)
	return len(p), nil
}

// Sum is the SHA-256 of what was written, lowercase hex.
func (c *Check) Sum() string { return hex.EncodeToString(c.h.Sum(nil)) }

// Done checks that the whole binary arrived and hashes as the manifest says.
func (c *Check) Done() error {
	if c.n != c.m.Size {
		return refused("the binary is truncated: %d of %d bytes", c.n, c.m.Size)
	}
	if got := hex.EncodeToString(c.h.Sum(nil)); got != c.m.SHA256 {
		return refused("the binary's SHA-256 %s is not the manifest's %s", got, c.m.SHA256)
	}
	return nil
}
