package devstack

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"aead.dev/minisign"

	"github.com/flexplane/flexplane/pkg/release"
)

// The agent versions of the dev stack: its agents start at AgentVersion;
// NextAgentVersion is a second build of the same code the stack publishes
// as a release, so that an admin can update the agents from the portal.
const (
	AgentVersion     = "v0.1.0"
	NextAgentVersion = "v0.1.1"
)

// releaseKey makes (once) the stack's release signing key in
// Dir/release and returns the public key's path.
func (s *stack) releaseKey() (pub string, priv minisign.PrivateKey, err error) {
	dir := s.path("release")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", priv, err
	}
	pub, privPath := filepath.Join(dir, "release.pub"), filepath.Join(dir, "release.key")
	b, err := os.ReadFile(privPath)
	if errors.Is(err, fs.ErrNotExist) {
		pk, sk, gerr := minisign.GenerateKey(rand.Reader)
		if gerr != nil {
			return "", priv, gerr
		}
		pubText, _ := pk.MarshalText()
		privText, _ := sk.MarshalText()
		if err := os.WriteFile(pub, append(pubText, '\n'), 0o644); err != nil {
			return "", priv, err
		}
		if err := os.WriteFile(privPath, append(privText, '\n'), 0o600); err != nil {
			return "", priv, err
		}
		return pub, sk, nil
	}
	if err != nil {
		return "", priv, err
	}
	if err := priv.UnmarshalText(b); err != nil {
		return "", priv, fmt.Errorf("release key: %w", err)
	}
	return pub, priv, nil
}

// publishNext signs the second agent build and publishes it with
// `orchestrator releases add`, replacing what an earlier start published
// (the code may have changed since). The agents' update directories are
// reset too: a start runs the freshly built agents, at AgentVersion.
func (s *stack) publishNext(ctx context.Context, orchDir, pub string, priv minisign.PrivateKey) error {
	bin := s.path("bin", "agent-"+NextAgentVersion)
	b, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	check := release.NewCheck(&release.Manifest{Size: int64(len(b))})
	_, _ = check.Write(b)
	m := release.Manifest{Version: NextAgentVersion, Platform: release.Platform(), Size: int64(len(b)), SHA256: check.Sum(),
		NotAfter: time.Now().Add(30 * 24 * time.Hour).UTC().Truncate(time.Second)}
	raw, err := m.Encode()
	if err != nil {
		return err
	}
	manifest, sig := bin+".manifest.json", bin+".manifest.json.minisig"
	if err := os.WriteFile(manifest, raw, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(sig, release.Sign(priv, raw), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(orchDir, "releases", NextAgentVersion)); err != nil {
		return err
	}
	_, err = s.mux.run(ctx, "releases", s.cfg.Dir, s.path("bin", "orchestrator"),
		"releases", "add", "-data-dir", orchDir, "-release-key-file", pub, bin, manifest, sig)
	if err != nil {
		return fmt.Errorf("publish agent %s: %w", NextAgentVersion, err)
	}
	return nil
}
