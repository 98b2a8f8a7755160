package compute

import (
	"errors"
	"fmt"
	"testing"

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
