// Package selfupdate is how an agent replaces itself: it receives a signed
// release over the mesh and verifies it while it streams, keeps versions
// side by side (A/B) with a `current` link switched atomically, runs the new
// binary once to check its version, restarts into it, and holds it on
// probation: a new version that crashes repeatedly or is not healthy within
// a deadline is switched back by the launcher, the process the supervisor
// (systemd, the dev stack) starts, which is never replaced itself.
//
// The directory, below the agent's state directory:
//
//	update/versions/<version>/agent   the binaries (current and previous kept)
//	update/current  -> versions/<v>   what the launcher runs; absent: itself
//	update/previous -> versions/<v>   what a rollback returns to; absent: itself
//	update/state.json                 the update state the agent reports
package selfupdate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/flexplane/flexplane/pkg/support/atomicfile"
)

// Phase is the state of an agent's update.
type Phase string

// Update phases, in the order an update goes through them.
const (
	Idle        Phase = "idle"
	Downloading Phase = "downloading"
	Verifying   Phase = "verifying"
	Restarting  Phase = "restarting"
	Probation   Phase = "probation"
	Done        Phase = "done"
	RolledBack  Phase = "rolled-back"
	// Refused: a release was refused before anything ran (bad signature,
	// tampered or truncated binary, not newer, expired).
	Refused Phase = "refused"
)

// State is an agent's update state, kept in update/state.json.
type State struct {
	Phase Phase `json:"phase"`
	// Version is the version being (or last) installed; From the one it
	// replaces.
	Version string `json:"version,omitempty"`
	From    string `json:"from,omitempty"`
	// Reason says why an update was refused or rolled back.
	Reason string `json:"reason,omitempty"`
	// Operation is the rollout that asked for the update.
	Operation string `json:"operation,omitempty"`
	// Starts counts the new version's starts during probation.
	Starts int `json:"starts,omitempty"`
	// Deadline ends the probation: healthy by then, or rolled back.
	Deadline  time.Time `json:"deadline,omitzero"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// Dir is an agent's update directory.
type Dir struct{ root string }

// OpenDir opens (creating) the update directory below stateDir.
func OpenDir(stateDir string) (*Dir, error) {
	d := &Dir{root: filepath.Join(stateDir, "update")}
	if err := os.MkdirAll(filepath.Join(d.root, "versions"), 0o700); err != nil {
		return nil, fmt.Errorf("selfupdate: %w", err)
	}
	return d, nil
}

// Root is the directory.
func (d *Dir) Root() string { return d.root }

func (d *Dir) statePath() string { return filepath.Join(d.root, "state.json") }

// State reads the update state; none yet is Idle.
func (d *Dir) State() (State, error) {
	b, err := os.ReadFile(d.statePath())
	if errors.Is(err, fs.ErrNotExist) {
		return State{Phase: Idle}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("selfupdate: state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, fmt.Errorf("selfupdate: state: %w", err)
	}
	return s, nil
}

// SetState replaces the update state.
func (d *Dir) SetState(s State) error {
	s.UpdatedAt = time.Now().UTC()
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("selfupdate: state: %w", err)
	}
	if err := atomicfile.WriteFile(d.statePath(), b, 0o600); err != nil {
		return fmt.Errorf("selfupdate: state: %w", err)
	}
	return nil
}

// binary is the path of version's binary.
func (d *Dir) binary(version string) string {
	return filepath.Join(d.root, "versions", version, "agent")
}

// link returns the version a link (current, previous) points to; "" when
// it does not exist.
func (d *Dir) link(name string) (string, error) {
	target, err := os.Readlink(filepath.Join(d.root, name))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("selfupdate: %s: %w", name, err)
	}
	return filepath.Base(target), nil
}

// setLink points name at version atomically ("" removes it): a new
// symlink renamed over the old one.
func (d *Dir) setLink(name, version string) error {
	path := filepath.Join(d.root, name)
	if version == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("selfupdate: %s: %w", name, err)
		}
		return atomicfile.SyncDir(d.root)
	}
	tmp := path + ".tmp"
	os.Remove(tmp)
	if err := os.Symlink(filepath.Join("versions", version), tmp); err != nil {
		return fmt.Errorf("selfupdate: %s: %w", name, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("selfupdate: %s: %w", name, err)
	}
	return atomicfile.SyncDir(d.root)
}

// Current is the version the launcher runs ("" for the installed binary).
func (d *Dir) Current() (string, error) { return d.link("current") }

// Previous is the version a rollback returns to ("" for the installed
// binary).
func (d *Dir) Previous() (string, error) { return d.link("previous") }

// rollback points current back at previous and records why.
func (d *Dir) rollback(st State, reason string) (State, error) {
	prev, err := d.Previous()
	if err != nil {
		return st, err
	}
	if err := d.setLink("current", prev); err != nil {
		return st, err
	}
	st.Phase, st.Reason, st.Deadline = RolledBack, reason, time.Time{}
	return st, d.SetState(st)
}

// prune removes the versions neither current nor previous points to.
func (d *Dir) prune() {
	cur, _ := d.Current()
	prev, _ := d.Previous()
	entries, err := os.ReadDir(filepath.Join(d.root, "versions"))
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Name() != cur && e.Name() != prev {
			os.RemoveAll(filepath.Join(d.root, "versions", e.Name()))
		}
	}
}
