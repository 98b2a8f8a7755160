package selfupdate_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"aead.dev/minisign"

	"github.com/flexplane/flexplane/pkg/agent/selfupdate"
	"github.com/flexplane/flexplane/pkg/release"
)

// env is an agent's update directory, a trusted key and scripts standing
// for agent binaries: each writes a marker file when it runs, so a test
// sees what was executed.
type env struct {
	t       *testing.T
	dir     *selfupdate.Dir
	key     minisign.PrivateKey
	verify  *release.Verifier
	markers string
	self    string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pub, key, err := minisign.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	v, err := release.NewVerifier(release.KeyID(pub.ID()) + "=" + pub.String())
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dir, err := selfupdate.OpenDir(filepath.Join(root, "state"))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, key: key, verify: v, markers: filepath.Join(root, "markers")}
	if err := os.Mkdir(e.markers, 0o755); err != nil {
		t.Fatal(err)
	}
	e.self = filepath.Join(root, "installed-agent")
	if err := os.WriteFile(e.self, e.script("installed"), 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

// script is a binary that records that it ran as name.
func (e *env) script(name string) []byte {
	return fmt.Appendf(nil, "#!/bin/sh\necho ran > %s/%s\necho %s\n", e.markers, name, name)
}

// ran reports whether the script name ran.
func (e *env) ran(name string) bool {
	_, err := os.Stat(filepath.Join(e.markers, name))
	return err == nil
}

// release signs a release of bin at version, valid for validity.
func (e *env) release(bin []byte, version string, validity time.Duration) (raw, sig []byte) {
	e.t.Helper()
	sum := sha256.Sum256(bin)
	m := release.Manifest{Version: version, Platform: release.Platform(), Size: int64(len(bin)), SHA256: hex.EncodeToString(sum[:]),
		NotAfter: time.Now().Add(validity).UTC()}
	raw, err := m.Encode()
	if err != nil {
		e.t.Fatal(err)
	}
	return raw, release.Sign(e.key, raw)
}

// stage stages bin as version over a running v1.0.0.
func (e *env) stage(bin []byte, version string, validity time.Duration) error {
	raw, sig := e.release(bin, version, validity)
	u := selfupdate.NewUpdater(selfupdate.UpdaterConfig{Dir: e.dir, Verifier: e.verify, Version: "v1.0.0", Logger: quiet()})
	sent := false
	_, err := u.Stage(context.Background(), "upd-test", raw, sig, func() ([]byte, error) {
		if sent {
			return nil, io.EOF
		}
		sent = true
		return bin, nil
	})
	return err
}

// floor makes the agent see a floor at minVersion.
func (e *env) floor(minVersion string) {
	e.t.Helper()
	f := release.Floor{Kind: release.FloorKind, MinVersion: minVersion, IssuedAt: time.Now().UTC()}
	raw, err := f.Encode()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.dir.RaiseFloor(e.verify, raw, release.SignFloor([]minisign.PrivateKey{e.key}, raw)); err != nil {
		e.t.Fatal(err)
	}
}

// launch runs the launcher with v until the agent it starts exits.
func (e *env) launch(v *release.Verifier) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := selfupdate.Launch(ctx, selfupdate.LaunchConfig{Dir: e.dir, Self: e.self, SelfVersion: "v1.0.0", Verifier: v,
		RestartDelay: 10 * time.Millisecond, Stdout: io.Discard, Stderr: io.Discard, Logger: quiet()})
	if err != nil {
		e.t.Fatal(err)
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestStageNeverRunsTheNewBinary: the version of a staged release is its
// signed manifest's; the binary is not run to ask it (a binary that would
// report another version is not executed either).
func TestStageNeverRunsTheNewBinary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.stage(e.script("new"), "v1.1.0", time.Hour); err != nil {
		t.Fatalf("stage: %v", err)
	}
	if e.ran("new") {
		t.Fatal("staging ran the new binary")
	}
	if cur, _ := e.dir.Current(); cur != "v1.1.0" {
		t.Fatalf("current is %q, want v1.1.0", cur)
	}
	// The launcher then runs it: it verifies. (It exits at once, so its
	// probation ends in a rollback: only its start matters here.)
	e.launch(e.verify)
	if !e.ran("new") {
		t.Fatal("the launcher did not start the staged version")
	}
}

// TestLaunchRefusesTamperedBinary: a binary changed after it was staged
// is not executed; the launcher falls back to the installed binary and
// says why.
func TestLaunchRefusesTamperedBinary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.stage(e.script("new"), "v1.1.0", time.Hour); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(e.dir.Root(), "versions", "v1.1.0", "agent")
	if err := os.WriteFile(bin, e.script("tampered"), 0o700); err != nil {
		t.Fatal(err)
	}
	e.launch(e.verify)
	if e.ran("tampered") || e.ran("new") {
		t.Fatal("the launcher ran a tampered binary")
	}
	if !e.ran("installed") {
		t.Fatal("the launcher did not fall back to the installed binary")
	}
	wantFallback(t, e, "SHA-256")
}

// TestLaunchRefusesExpired: a staged release whose manifest has expired
// since is not started.
func TestLaunchRefusesExpired(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.stage(e.script("new"), "v1.1.0", 14*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	later := e.verify.WithClock(func() time.Time { return time.Now().Add(15 * 24 * time.Hour) })
	e.launch(later)
	if e.ran("new") || !e.ran("installed") {
		t.Fatalf("an expired release: new ran %v, installed ran %v", e.ran("new"), e.ran("installed"))
	}
	wantFallback(t, e, "expired")
}

// TestFloor: a release below the highest floor seen is refused at stage,
// and one staged before the floor rose is not started.
func TestFloor(t *testing.T) {
	t.Parallel()
	t.Run("stage", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.floor("v1.2.0")
		err := e.stage(e.script("new"), "v1.1.0", time.Hour)
		if !errors.Is(err, release.ErrRefused) || !strings.Contains(err.Error(), "floor") {
			t.Fatalf("stage below the floor: %v, want refused", err)
		}
		if cur, _ := e.dir.Current(); cur != "" {
			t.Fatalf("current is %q after a refusal", cur)
		}
		if st, _ := e.dir.State(); st.Phase != selfupdate.Refused {
			t.Fatalf("state %+v, want refused", st)
		}
		// A lower floor seen later does not lower it.
		e.floor("v1.0.0")
		if err := e.stage(e.script("new"), "v1.1.0", time.Hour); !errors.Is(err, release.ErrRefused) {
			t.Fatalf("stage after a lower floor: %v, want refused", err)
		}
		if err := e.stage(e.script("new"), "v1.2.0", time.Hour); err != nil {
			t.Fatalf("stage at the floor: %v", err)
		}
	})
	t.Run("launch", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		if err := e.stage(e.script("new"), "v1.1.0", time.Hour); err != nil {
			t.Fatal(err)
		}
		e.floor("v1.2.0")
		e.launch(e.verify)
		if e.ran("new") || !e.ran("installed") {
			t.Fatalf("a version below the floor: new ran %v, installed ran %v", e.ran("new"), e.ran("installed"))
		}
		wantFallback(t, e, "floor")
	})
}

// wantFallback checks that the launcher fell back to the installed binary
// and recorded why.
func wantFallback(t *testing.T, e *env, reason string) {
	t.Helper()
	if cur, _ := e.dir.Current(); cur != "" {
		t.Errorf("current is %q, want the installed binary", cur)
	}
	st, err := e.dir.State()
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != selfupdate.RolledBack || !strings.Contains(st.Reason, reason) {
		t.Errorf("state %+v, want rolled back saying %q", st, reason)
	}
}
