package release

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"aead.dev/minisign"
)

// FloorKind is the kind every floor names, so that a floor's signature can
// never be taken for a manifest's (a manifest refuses unknown fields).
const FloorKind = "flexplane-agent-floor"

// Floor is a signed statement that agent versions below MinVersion are
// refused: the agent stages and launches none of them, the orchestrator
// rolls none of them out. Floors do not expire; the highest one seen wins,
// so a floor can only rise.
type Floor struct {
	// Kind is FloorKind.
	Kind string `json:"kind"`
	// MinVersion is the lowest version allowed.
	MinVersion string `json:"minVersion"`
	// IssuedAt is when the floor was signed (for the record).
	IssuedAt time.Time `json:"issuedAt"`
	// Reason says why (for the record), e.g. the advisory that revoked the
	// versions below.
	Reason string `json:"reason,omitempty"`
}

// Encode is the floor's JSON, the bytes that are signed.
func (f *Floor) Encode() ([]byte, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("release: encode floor: %w", err)
	}
	return append(b, '\n'), nil
}

func (f *Floor) validate() error {
	switch {
	case f.Kind != FloorKind:
		return fmt.Errorf("release: floor: kind %q is not %q", f.Kind, FloorKind)
	case !ValidVersion(f.MinVersion):
		return fmt.Errorf("release: floor: minVersion %q is not a semantic version like v1.2.3", f.MinVersion)
	case f.IssuedAt.IsZero():
		return fmt.Errorf("release: floor: issuedAt is required")
	}
	return nil
}

// SignFloor signs a floor's encoding with each key (see SignAll).
func SignFloor(keys []minisign.PrivateKey, floor []byte) []byte { return SignAll(keys, floor) }

// Floor verifies a floor's signature and decodes it (unknown fields
// refused).
func (v *Verifier) Floor(raw, signature []byte) (*Floor, error) {
	if len(raw) > MaxManifest {
		return nil, refused("floor of %d bytes", len(raw))
	}
	if _, err := v.verify(raw, signature); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var f Floor
	if err := dec.Decode(&f); err != nil {
		return nil, refused("floor: %v", err)
	}
	if err := f.validate(); err != nil {
		return nil, refused("%v", err)
	}
	return &f, nil
}

// Allows refuses version when it is below the floor; a nil floor allows
// any.
func (f *Floor) Allows(version string) error {
	if f == nil {
		return nil
	}
	if !ValidVersion(version) || Compare(version, f.MinVersion) < 0 {
		return refused("version %s is below the floor %s: versions below it are revoked", version, f.MinVersion)
	}
	return nil
}
