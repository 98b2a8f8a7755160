package release

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/support/atomicfile"
)

// Names of a release's files in its store directory.
const (
	BinaryFile    = "agent"
	ManifestFile  = "manifest.json"
	SignatureFile = "manifest.json.minisig"
)

// ErrNotFound: no such release in the store.
var ErrNotFound = errors.New("release not found")

// ErrConflict: another release of the same version and platform is
// published already.
var ErrConflict = errors.New("release conflicts with a published one")

// Store is a directory of published releases, one directory per version and
// platform: DIR/v1.4.0/linux-amd64/{agent,manifest.json,manifest.json.minisig}.
// A release appears by one rename of a complete directory, so any number of
// readers (orchestrator replicas sharing a volume) see it whole or not at
// all; files are never changed once published. Nothing is cached: every
// replica reads the directory when asked.
type Store struct {
	dir    string
	verify *Verifier
}

// Published is a release in a store.
type Published struct {
	Manifest  *Manifest
	Signature []byte
	// Raw is the manifest's signed encoding.
	Raw []byte
	dir string
}

// BinaryPath is the path of the release's binary.
func (p *Published) BinaryPath() string { return filepath.Join(p.dir, BinaryFile) }

// OpenStore opens (creating) the store in dir. verify checks what is added
// and what is read; it is required.
func OpenStore(dir string, verify *Verifier) (*Store, error) {
	if verify == nil {
		return nil, errors.New("release: a store needs the releases' public key")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("release: store: %w", err)
	}
	return &Store{dir: dir, verify: verify}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func platformDir(platform string) string { return strings.ReplaceAll(platform, "/", "-") }

// Add publishes the binary at path described by manifest and signature
// after checking both: the signature against the store's key, the binary's
// size and hash against the manifest. Adding the same release again
// changes nothing; another release of a published version and platform is
// ErrConflict.
func (s *Store) Add(path string, manifest, signature []byte) (*Published, error) {
	m, err := s.verify.Manifest(manifest, signature)
	if err != nil {
		return nil, fmt.Errorf("release: add: %w", err)
	}
	final := filepath.Join(s.dir, m.Version, platformDir(m.Platform))
	if p, err := s.Get(m.Version, m.Platform); err == nil {
		if string(p.Raw) == string(manifest) {
			return p, nil
		}
		return nil, fmt.Errorf("release: add %s %s: %w", m.Version, m.Platform, ErrConflict)
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return nil, fmt.Errorf("release: add: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(final), "."+platformDir(m.Platform)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("release: add: %w", err)
	}
	defer os.RemoveAll(tmp) // harmless once renamed
	if err := copyChecked(path, filepath.Join(tmp, BinaryFile), m); err != nil {
		return nil, fmt.Errorf("release: add: %w", err)
	}
	for name, b := range map[string][]byte{ManifestFile: manifest, SignatureFile: signature} {
		if err := atomicfile.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			return nil, fmt.Errorf("release: add: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("release: add: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another replica published the same release meanwhile.
		if p, gerr := s.Get(m.Version, m.Platform); gerr == nil && string(p.Raw) == string(manifest) {
			return p, nil
		}
		return nil, fmt.Errorf("release: add: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(final)); err != nil {
		return nil, fmt.Errorf("release: add: %w", err)
	}
	return s.Get(m.Version, m.Platform)
}

// copyChecked copies src to dst, checking it against m.
func copyChecked(src, dst string, m *Manifest) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	defer out.Close()
	check := NewCheck(m)
	if _, err := io.Copy(io.MultiWriter(check, out), in); err != nil {
		return err
	}
	if err := check.Done(); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	return out.Close()
}

// Get returns the published release of version for platform, its manifest
// verified again (a store is shared; what is read is checked).
func (s *Store) Get(version, platform string) (*Published, error) {
	if !ValidVersion(version) || !strings.Contains(platform, "/") || strings.ContainsAny(platform, `\.`) {
		return nil, fmt.Errorf("release: %s %s: %w", version, platform, ErrNotFound)
	}
	dir := filepath.Join(s.dir, version, platformDir(platform))
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("release: %s %s: %w", version, platform, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	sig, err := os.ReadFile(filepath.Join(dir, SignatureFile))
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	m, err := s.verify.Manifest(raw, sig)
	if err != nil {
		return nil, fmt.Errorf("release: %s %s: %w", version, platform, err)
	}
	if m.Version != version || m.Platform != platform {
		return nil, fmt.Errorf("release: %s %s: %w: its manifest names %s %s", version, platform, ErrRefused, m.Version, m.Platform)
	}
	return &Published{Manifest: m, Signature: sig, Raw: raw, dir: dir}, nil
}

// List returns the published releases that verify (expired ones too, for
// the record: an agent refuses them), newest version first.
func (s *Store) List() ([]*Published, error) {
	versions, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("release: list: %w", err)
	}
	var out []*Published
	for _, v := range versions {
		if !v.IsDir() || !ValidVersion(v.Name()) {
			continue
		}
		plats, err := os.ReadDir(filepath.Join(s.dir, v.Name()))
		if err != nil {
			return nil, fmt.Errorf("release: list: %w", err)
		}
		for _, p := range plats {
			if !p.IsDir() || strings.HasPrefix(p.Name(), ".") {
				continue
			}
			goos, arch, ok := strings.Cut(p.Name(), "-")
			if !ok {
				continue
			}
			pub, err := s.verifyAnyClock(v.Name(), goos+"/"+arch)
			if err != nil {
				continue // not a release of this key, or torn: never served
			}
			out = append(out, pub)
		}
	}
	slices.SortFunc(out, func(a, b *Published) int {
		if c := Compare(b.Manifest.Version, a.Manifest.Version); c != 0 {
			return c
		}
		return strings.Compare(a.Manifest.Platform, b.Manifest.Platform)
	})
	return out, nil
}

// verifyAnyClock is Get with expiry not checked.
func (s *Store) verifyAnyClock(version, platform string) (*Published, error) {
	saved := *s
	saved.verify = s.verify.WithClock(func() time.Time { return time.Time{} })
	return saved.Get(version, platform)
}

// Names of a floor's files in the store: DIR/floor/<minVersion>/{floor.json,floor.json.minisig}.
const (
	FloorDir           = "floor"
	FloorFile          = "floor.json"
	FloorSignatureFile = "floor.json.minisig"
)

// PublishedFloor is a floor in a store.
type PublishedFloor struct {
	Floor *Floor
	// Raw and Signature are the floor's signed encoding and its signature,
	// as agents get them.
	Raw, Signature []byte
}

// AddFloor publishes a floor after checking its signature. Floors appear
// like releases (one rename of a complete directory) and are never
// changed; the highest published one is the store's floor, so adding a
// lower one changes nothing.
func (s *Store) AddFloor(raw, signature []byte) (*PublishedFloor, error) {
	f, err := s.verify.Floor(raw, signature)
	if err != nil {
		return nil, fmt.Errorf("release: add floor: %w", err)
	}
	root := filepath.Join(s.dir, FloorDir)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("release: add floor: %w", err)
	}
	final := filepath.Join(root, f.MinVersion)
	if _, err := os.Stat(final); err != nil {
		tmp, err := os.MkdirTemp(root, "."+f.MinVersion+".tmp-*")
		if err != nil {
			return nil, fmt.Errorf("release: add floor: %w", err)
		}
		defer os.RemoveAll(tmp) // harmless once renamed
		for name, b := range map[string][]byte{FloorFile: raw, FloorSignatureFile: signature} {
			if err := atomicfile.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
				return nil, fmt.Errorf("release: add floor: %w", err)
			}
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			return nil, fmt.Errorf("release: add floor: %w", err)
		}
		if err := os.Rename(tmp, final); err != nil && !errors.Is(err, fs.ErrExist) {
			if _, serr := os.Stat(final); serr != nil {
				return nil, fmt.Errorf("release: add floor: %w", err)
			}
		}
		if err := atomicfile.SyncDir(root); err != nil {
			return nil, fmt.Errorf("release: add floor: %w", err)
		}
	}
	return s.Floor()
}

// Floor is the highest published floor that verifies; nil when there is
// none.
func (s *Store) Floor() (*PublishedFloor, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, FloorDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("release: floor: %w", err)
	}
	var best *PublishedFloor
	for _, e := range entries {
		if !e.IsDir() || !ValidVersion(e.Name()) {
			continue
		}
		dir := filepath.Join(s.dir, FloorDir, e.Name())
		raw, rerr := os.ReadFile(filepath.Join(dir, FloorFile))
		sig, serr := os.ReadFile(filepath.Join(dir, FloorSignatureFile))
		if rerr != nil || serr != nil {
			continue
		}
		f, err := s.verify.Floor(raw, sig)
		if err != nil || f.MinVersion != e.Name() {
			continue // not a floor of these keys: never served
		}
		if best == nil || Compare(f.MinVersion, best.Floor.MinVersion) > 0 {
			best = &PublishedFloor{Floor: f, Raw: raw, Signature: sig}
		}
	}
	return best, nil
}
