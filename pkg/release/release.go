// Package release is what an agent release is: a signed manifest (version,
// platform, size, SHA-256 of the binary, the oldest version it may replace,
// a not-after date) and the binary it describes. The manifest is signed with
// minisign (ed25519); every signature names the id of its key, the signing
// keys stay offline and only their public keys are configured where
// releases are checked (several while keys rotate). A floor is a signed
// statement that versions below one are refused, distributed like
// releases. A Verifier checks a manifest
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
	"slices"
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

// DefaultValidity is how long a release's manifest is accepted after it
// is signed unless the signer says otherwise: short, so that a release
// stops being installable (and launchable) soon after it is no longer
// re-signed.
const DefaultValidity = 14 * 24 * time.Hour

// KeyID is the text form of a minisign key id: 16 uppercase hex digits,
// as the minisign tool prints it.
func KeyID(id uint64) string { return fmt.Sprintf("%016X", id) }

// Sign signs a manifest's encoding with a minisign private key. The
// signature names the key's id.
func Sign(key minisign.PrivateKey, manifest []byte) []byte {
	return minisign.SignWithComments(key, manifest, "flexplane agent release, key "+KeyID(key.ID()), "signature of a flexplane agent release manifest")
}

// SignAll signs data with each key and concatenates the signatures: a
// signature file that verifies with any of the keys (a release signed
// with the old and the new key while keys rotate).
func SignAll(keys []minisign.PrivateKey, data []byte) []byte {
	var out []byte
	for _, k := range keys {
		sig := Sign(k, data)
		if len(sig) > 0 && sig[len(sig)-1] != '\n' {
			sig = append(sig, '\n')
		}
		out = append(out, sig...)
	}
	return out
}

// Verifier checks manifests and floors against a set of trusted public
// keys, each known by its key id.
type Verifier struct {
	keys map[uint64]minisign.PublicKey
	now  func() time.Time
}

// NewVerifier parses the trusted public keys: a minisign .pub file's text,
// or any number of entries separated by newlines, commas or spaces, each
// `ID=BASE64KEY` (the id is checked against the key's own) or a bare
// base64 key. Lines starting with "#" or "untrusted comment:" are skipped.
func NewVerifier(publicKeys string) (*Verifier, error) {
	v := &Verifier{keys: map[uint64]minisign.PublicKey{}, now: time.Now}
	for line := range strings.SplitSeq(publicKeys, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "untrusted comment:") {
			continue
		}
		for entry := range strings.FieldsFuncSeq(line, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
			id, text, named := strings.Cut(entry, "=")
			if !named || len(id) != 16 {
				// A bare key (base64 may end in "=").
				id, text, named = "", entry, false
			}
			var key minisign.PublicKey
			if err := key.UnmarshalText([]byte(text)); err != nil {
				return nil, fmt.Errorf("release: public key %q: %w", entry, err)
			}
			if named && !strings.EqualFold(id, KeyID(key.ID())) {
				return nil, fmt.Errorf("release: public key named %s has the key id %s", id, KeyID(key.ID()))
			}
			v.keys[key.ID()] = key
		}
	}
	if len(v.keys) == 0 {
		return nil, errors.New("release: no public key given")
	}
	return v, nil
}

// KeyIDs are the ids of the trusted keys, sorted.
func (v *Verifier) KeyIDs() []string {
	var out []string
	for id := range v.keys {
		out = append(out, KeyID(id))
	}
	slices.Sort(out)
	return out
}

// WithClock returns a verifier whose "now" is now (tests of expiry).
func (v *Verifier) WithClock(now func() time.Time) *Verifier {
	return &Verifier{keys: v.keys, now: now}
}

// Now is the verifier's time.
func (v *Verifier) Now() time.Time { return v.now() }

// verify checks that signature (one or more minisign signatures, one after
// another) holds a valid signature of data by a trusted key, and returns
// that key's id. Signatures by keys not trusted are skipped; one by a
// trusted key that does not verify refuses.
func (v *Verifier) verify(data, signature []byte) (string, error) {
	if len(signature) > MaxManifest {
		return "", refused("signature of %d bytes", len(signature))
	}
	lines := strings.Split(strings.TrimRight(string(signature), "\n"), "\n")
	if len(lines)%4 != 0 || len(lines) == 0 {
		return "", refused("the signature is not minisign signatures of 4 lines each")
	}
	var unknown []string
	for i := 0; i < len(lines); i += 4 {
		one := []byte(strings.Join(lines[i:i+4], "\n"))
		var sig minisign.Signature
		if err := sig.UnmarshalText(one); err != nil {
			return "", refused("signature %d: %v", i/4+1, err)
		}
		key, ok := v.keys[sig.KeyID]
		if !ok {
			unknown = append(unknown, KeyID(sig.KeyID))
			continue
		}
		if !minisign.Verify(key, data, one) {
			return "", refused("the signature by key %s is not valid", KeyID(sig.KeyID))
		}
		return KeyID(sig.KeyID), nil
	}
	return "", refused("signed by key %s, none of the trusted keys %s", strings.Join(unknown, ", "), strings.Join(v.KeyIDs(), ", "))
}

// Manifest verifies a manifest's signature and expiry and decodes it.
func (v *Verifier) Manifest(manifest, signature []byte) (*Manifest, error) {
	if _, err := v.verify(manifest, signature); err != nil {
		return nil, err
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
