package compute

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

func TestStageErrorIsClientSafe(t *testing.T) {
	t.Parallel()
	te := &pveapi.TaskError{UPID: "UPID:pve1:0000475B:0083D602:6B0C8D91:download:fp-img-3248c30b9f54.qcow2:root@pam!fp:",
		ExitStatus: "refusing to override existing file '/var/lib/vz/import/fp-img-3248c30b9f54.qcow2'"}
	err := stageError("debian-12", "fra1", fmt.Errorf("images: download: %w", te))
	got := publicError(err)
	want := "staging image debian-12 in zone fra1 failed: download task ended: refusing to override existing file"
	if got != want {
		t.Errorf("publicError = %q, want %q", got, want)
	}
	got = publicError(stageError("debian-12", "fra1", errors.New("images: list nodes: 401 token root@pam!fp=secret")))
	want = "staging image debian-12 in zone fra1 failed: see the orchestrator's logs"
	if got != want {
		t.Errorf("publicError = %q, want %q", got, want)
	}
}

// TestVMStatusIsPveapiState: a VM's status is pveapi's one mapping.
func TestVMStatusIsPveapiState(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"running", "stopped", "paused", "suspended", "unknown"} {
		for _, lock := range []string{"", "clone", "create", "suspended", "migrate"} {
			g := pveapi.Resource{Type: "qemu", VMID: 100, Status: status, Lock: lock, RawTags: tenancy.GuestTags("red")}
			if got := vmFromGuest(Zone{ID: "z"}, g, nil, false).Status; got != g.State(tenancy.Creating(g.Tags())) {
				t.Errorf("status %q lock %q: %s, pveapi says %s", status, lock, got, g.State(tenancy.Creating(g.Tags())))
			}
		}
	}
}

// TestTaskOfThisGuest: a task counts as the guest's from the second of its
// create on, or, once it moved across zones, from the second the move
// made the target guest; every task counts for a guest with no intent.
func TestTaskOfThisGuest(t *testing.T) {
	created := time.Date(2025, 3, 1, 10, 0, 0, 700e6, time.UTC)
	moved := created.Add(time.Hour)
	in := &Intent{Created: created}
	inMoved := &Intent{Created: created, Move: &MoveIntent{Started: moved}}
	for _, c := range []struct {
		in      *Intent
		started time.Time
		want    bool
	}{
		{nil, time.Unix(1, 0), true},
		{in, created.Truncate(time.Second), true}, // the create's second
		{in, created.Add(-time.Second), false},
		{in, created.Add(time.Minute), true},
		{inMoved, created.Add(time.Minute), false}, // the guest at the place before
		{inMoved, moved.Truncate(time.Second), true},
		{inMoved, moved.Add(time.Second), true},
	} {
		if got := taskOfThisGuest(c.started, c.in); got != c.want {
			t.Errorf("task at %s, intent %+v: %v, want %v", c.started, c.in, got, c.want)
		}
	}
	u, err := pveapi.ParseUPID("UPID:pve1:000032F4:0083D614:6B148084:qmstart:101:root@pam:")
	if err != nil || !u.Started.Equal(time.Unix(0x6B148084, 0)) {
		t.Errorf("ParseUPID: %+v, %v", u, err)
	}
}
