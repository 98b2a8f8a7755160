package selfupdate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/flexplane/flexplane/pkg/release"
)

// ErrBusy: an update is being staged already.
var ErrBusy = errors.New("selfupdate: an update is in progress")

// ErrNoKey: the agent has no release key configured, so it takes no update.
var ErrNoKey = errors.New("selfupdate: no release public key is configured")

// Updater stages releases for a running agent.
type Updater struct {
	dir      *Dir
	verify   *release.Verifier
	running  string
	platform string
	log      *slog.Logger

	mu   sync.Mutex
	busy bool // protected by mu
}

// UpdaterConfig configures an Updater.
type UpdaterConfig struct {
	// Dir is the update directory. Required.
	Dir *Dir
	// Verifier checks manifests; nil refuses every update (ErrNoKey).
	Verifier *release.Verifier
	// Version is the running agent's version.
	Version string
	// Platform is the running agent's GOOS/GOARCH. Default release.Platform().
	Platform string
	// Logger receives the updater's logs. Default slog.Default().
	Logger *slog.Logger
}

// NewUpdater returns an updater.
func NewUpdater(cfg UpdaterConfig) *Updater {
	if cfg.Platform == "" {
		cfg.Platform = release.Platform()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Updater{dir: cfg.Dir, verify: cfg.Verifier, running: cfg.Version, platform: cfg.Platform, log: cfg.Logger}
}

// State is the agent's update state.
func (u *Updater) State() (State, error) { return u.dir.State() }

// Stage receives a release: it checks manifest and signature (a trusted
// key, not expired, not below the floor) before accepting any byte, then
// reads the binary from next (until io.EOF), checking its size and hash as
// it streams, writes it beside the running version with its signed
// manifest, checks it again as the launcher will (Dir.Verify: the version
// is the signed manifest's; the binary is never run to ask it), and
// switches the current link to it. The caller then restarts the agent (the launcher
// starts the new version on probation). A refused release leaves the
// running version and the links as they were; its reason is recorded in
// the state as Refused and the error wraps release.ErrRefused.
func (u *Updater) Stage(ctx context.Context, operation string, manifest, signature []byte, next func() ([]byte, error)) (*release.Manifest, error) {
	if u.verify == nil {
		return nil, ErrNoKey
	}
	u.mu.Lock()
	if u.busy {
		u.mu.Unlock()
		return nil, ErrBusy
	}
	u.busy = true
	u.mu.Unlock()
	defer func() { u.mu.Lock(); u.busy = false; u.mu.Unlock() }()

	st := State{Phase: Downloading, From: u.running, Operation: operation}
	refuse := func(err error) (*release.Manifest, error) {
		st.Phase, st.Reason = Refused, err.Error()
		if serr := u.dir.SetState(st); serr != nil {
			u.log.Warn("selfupdate: record refusal", "err", serr)
		}
		u.log.Warn("selfupdate: release refused", "version", st.Version, "reason", err)
		return nil, fmt.Errorf("selfupdate: %w", err)
	}
	m, err := u.verify.Manifest(manifest, signature)
	if err != nil {
		return refuse(err)
	}
	st.Version = m.Version
	if err := m.Replaces(u.running, u.platform); err != nil {
		return refuse(err)
	}
	floor, err := u.dir.Floor(u.verify)
	if err != nil {
		return refuse(err)
	}
	if err := floor.Allows(m.Version); err != nil {
		return refuse(err)
	}
	if err := u.dir.SetState(st); err != nil {
		return nil, err
	}
	u.log.Info("selfupdate: downloading", "version", m.Version, "size", m.Size, "operation", operation)

	versionDir := filepath.Join(u.dir.root, "versions", m.Version)
	os.RemoveAll(versionDir) // a version staged before and rolled back
	partial := filepath.Join(u.dir.root, "versions", "."+m.Version+".partial")
	defer os.Remove(partial)
	if err := receive(ctx, partial, m, next, func() error {
		st.Phase = Verifying
		return u.dir.SetState(st)
	}); err != nil {
		if errors.Is(err, release.ErrRefused) {
			return refuse(err)
		}
		return refuse(fmt.Errorf("download: %w", err))
	}
	if err := os.MkdirAll(versionDir, 0o700); err != nil {
		return nil, fmt.Errorf("selfupdate: %w", err)
	}
	if err := u.dir.writeManifest(m.Version, manifest, signature); err != nil {
		os.RemoveAll(versionDir)
		return nil, err
	}
	if err := os.Rename(partial, u.dir.binary(m.Version)); err != nil {
		os.RemoveAll(versionDir)
		return nil, fmt.Errorf("selfupdate: %w", err)
	}
	if err := u.dir.Verify(u.verify, m.Version); err != nil {
		os.RemoveAll(versionDir)
		return refuse(err)
	}

	st.Phase = Restarting
	if err := u.dir.SetState(st); err != nil {
		return nil, err
	}
	cur, err := u.dir.Current()
	if err != nil {
		return nil, err
	}
	if err := u.dir.setLink("previous", cur); err != nil {
		return nil, err
	}
	if err := u.dir.setLink("current", m.Version); err != nil {
		return nil, err
	}
	u.dir.prune()
	u.log.Info("selfupdate: staged; restarting into the new version", "version", m.Version, "previous", u.running)
	return m, nil
}

// receive writes the binary from next to path, checking it; verifying is
// called once every byte has arrived.
func receive(ctx context.Context, path string, m *release.Manifest, next func() ([]byte, error), verifying func() error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o700)
	if err != nil {
		return err
	}
	defer f.Close()
	check := release.NewCheck(m)
	w := io.MultiWriter(check, f)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		b, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	if err := verifying(); err != nil {
		return err
	}
	if err := check.Done(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// SeeFloor keeps a floor sent with an update when it is higher than the
// one the agent has seen (Dir.RaiseFloor).
func (u *Updater) SeeFloor(raw, signature []byte) (*release.Floor, error) {
	if u.verify == nil {
		return nil, ErrNoKey
	}
	f, err := u.dir.RaiseFloor(u.verify, raw, signature)
	if err != nil {
		return nil, err
	}
	u.log.Info("selfupdate: floor in force", "minVersion", f.MinVersion)
	return f, nil
}

// Healthy ends a probation of the running version: the agent calls it
// once it is healthy (on the mesh, serving gRPC to the orchestrator,
// reaching Proxmox). It does nothing outside a probation.
func (u *Updater) Healthy() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	st, err := u.dir.State()
	if err != nil {
		return err
	}
	if st.Phase != Probation || st.Version != u.running {
		return nil
	}
	st.Phase, st.Deadline = Done, time.Time{}
	u.log.Info("selfupdate: healthy on probation: update done", "version", st.Version, "from", st.From)
	return u.dir.SetState(st)
}
