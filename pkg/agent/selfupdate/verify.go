package selfupdate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/flexplane/flexplane/pkg/release"
	"github.com/flexplane/flexplane/pkg/support/atomicfile"
)

// storedFloor is update/floor.json: the highest floor the agent has seen,
// as it was signed.
type storedFloor struct {
	Raw       []byte `json:"floor"`
	Signature []byte `json:"signature"`
}

func (d *Dir) floorPath() string { return filepath.Join(d.root, "floor.json") }

// Floor is the highest floor the agent has seen that verifies with v; nil
// when there is none (or none that the trusted keys verify).
func (d *Dir) Floor(v *release.Verifier) (*release.Floor, error) {
	b, err := os.ReadFile(d.floorPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("selfupdate: floor: %w", err)
	}
	var sf storedFloor
	if err := json.Unmarshal(b, &sf); err != nil {
		return nil, fmt.Errorf("selfupdate: floor: %w", err)
	}
	if v == nil {
		return nil, nil
	}
	f, err := v.Floor(sf.Raw, sf.Signature)
	if err != nil {
		return nil, fmt.Errorf("selfupdate: floor: %w", err)
	}
	return f, nil
}

// RaiseFloor verifies a floor and keeps it when it is higher than the one
// kept; it returns the floor in force.
func (d *Dir) RaiseFloor(v *release.Verifier, raw, signature []byte) (*release.Floor, error) {
	if v == nil {
		return nil, ErrNoKey
	}
	f, err := v.Floor(raw, signature)
	if err != nil {
		return nil, fmt.Errorf("selfupdate: floor: %w", err)
	}
	cur, err := d.Floor(v)
	if err != nil && !errors.Is(err, release.ErrRefused) {
		return nil, err
	}
	if cur != nil && release.Compare(cur.MinVersion, f.MinVersion) >= 0 {
		return cur, nil
	}
	b, err := json.Marshal(storedFloor{Raw: raw, Signature: signature})
	if err != nil {
		return nil, fmt.Errorf("selfupdate: floor: %w", err)
	}
	if err := atomicfile.WriteFile(d.floorPath(), b, 0o600); err != nil {
		return nil, fmt.Errorf("selfupdate: floor: %w", err)
	}
	return f, nil
}

// writeManifest keeps a version's signed manifest beside its binary: what
// the launcher checks the binary against before every start.
func (d *Dir) writeManifest(version string, manifest, signature []byte) error {
	dir := filepath.Dir(d.binary(version))
	for name, b := range map[string][]byte{release.ManifestFile: manifest, release.SignatureFile: signature} {
		if err := atomicfile.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return fmt.Errorf("selfupdate: %w", err)
		}
	}
	return nil
}

// Verify checks an installed version without running it: its signed
// manifest (beside the binary) verifies with v and has not expired, names
// this version and platform, the version is not below the floor, and the
// binary's size and SHA-256 are the manifest's. Every refusal wraps
// release.ErrRefused.
func (d *Dir) Verify(v *release.Verifier, version string) error {
	if v == nil {
		return fmt.Errorf("%w: no release public key is configured to check %s with", release.ErrRefused, version)
	}
	dir := filepath.Dir(d.binary(version))
	raw, err := os.ReadFile(filepath.Join(dir, release.ManifestFile))
	if err != nil {
		return fmt.Errorf("%w: the signed manifest of %s: %v", release.ErrRefused, version, err)
	}
	sig, err := os.ReadFile(filepath.Join(dir, release.SignatureFile))
	if err != nil {
		return fmt.Errorf("%w: the signature of %s: %v", release.ErrRefused, version, err)
	}
	m, err := v.Manifest(raw, sig)
	if err != nil {
		return err
	}
	if m.Version != version || m.Platform != release.Platform() {
		return fmt.Errorf("%w: the manifest installed as %s is of %s for %s", release.ErrRefused, version, m.Version, m.Platform)
	}
	floor, err := d.Floor(v)
	if err != nil {
		return err
	}
	if err := floor.Allows(version); err != nil {
		return err
	}
	f, err := os.Open(d.binary(version))
	if err != nil {
		return fmt.Errorf("%w: the binary of %s: %v", release.ErrRefused, version, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, release.MaxBinary+1))
	if err != nil {
		return fmt.Errorf("%w: the binary of %s: %v", release.ErrRefused, version, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != m.Size || sum != m.SHA256 {
		return fmt.Errorf("%w: the installed binary of %s (%d bytes, SHA-256 %s) is not the one its manifest signs (%d bytes, %s)",
			release.ErrRefused, version, n, sum, m.Size, m.SHA256)
	}
	return nil
}
