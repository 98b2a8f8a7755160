package pveapi_test

import (
	"encoding/json"
	"slices"
	"testing"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// TestStateOfEveryStatusAndLock is the one mapping of a guest's Proxmox
// status and lock (and whether its tags mark a create, which
// pkg/tenancy's tests read) to its state, over every status Proxmox
// reports and every lock of the qemu config schema.
func TestStateOfEveryStatusAndLock(t *testing.T) {
	t.Parallel()
	statuses := map[string]pveapi.GuestState{
		"running": pveapi.StateRunning, "stopped": pveapi.StateStopped,
		"paused": pveapi.StatePaused, "suspended": pveapi.StatePaused,
		"unknown": pveapi.StateUnknown, "prelaunch": pveapi.StateUnknown, "": pveapi.StateUnknown,
	}
	locks := map[string]pveapi.GuestState{
		"clone": pveapi.StateCreating, "create": pveapi.StateCreating,
		"suspending": pveapi.StatePaused, "suspended": pveapi.StatePaused,
		// These leave the state to the status.
		"": "", "backup": "", "migrate": "", "rollback": "", "snapshot": "", "snapshot-delete": "",
	}
	for status, byStatus := range statuses {
		for lock, byLock := range locks {
			want := byLock
			if want == "" {
				want = byStatus
			}
			r := pveapi.Resource{Type: "qemu", Status: status, Lock: lock, RawTags: "flexplane;fp-vdc-red"}
			if got := r.State(false); got != want {
				t.Errorf("status %q lock %q: %s, want %s", status, lock, got, want)
			}
			// A guest marked creating is CREATING unless a lock says more.
			w := pveapi.StateCreating
			if byLock == pveapi.StatePaused {
				w = pveapi.StatePaused
			}
			if got := r.State(true); got != w {
				t.Errorf("status %q lock %q, marked creating: %s, want %s", status, lock, got, w)
			}
			// A template is never CREATING by its marker.
			r.Template = 1
			if got := r.State(true); got != want {
				t.Errorf("template, status %q lock %q: %s, want %s", status, lock, got, want)
			}
		}
	}
}

// TestSplitTags: Proxmox separates tags with ';' (older lists with ','
// or ' '); empty parts are no tags.
func TestSplitTags(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"": nil, "a": {"a"}, "a;b": {"a", "b"}, "a,b c": {"a", "b", "c"}, ";;a;;": {"a"},
	} {
		if got := pveapi.SplitTags(in); !slices.Equal(got, want) {
			t.Errorf("SplitTags(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestIPMappingVMID: the IPAM's vmid arrives as a string or a number and
// decodes the same with encoding/json and the inventory's decoder.
func TestIPMappingVMID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]pveapi.VMID{
		`{"vmid": "130"}`: 130, `{"vmid": 130}`: 130, `{"vmid": ""}`: 0, `{"vmid": null}`: 0, `{}`: 0,
	} {
		var a, b pveapi.IPMapping
		if err := json.Unmarshal([]byte(in), &a); err != nil || a.VMID != want {
			t.Errorf("encoding/json %s: %d, %v", in, a.VMID, err)
		}
		if err := jsonv1.Unmarshal([]byte(in), &b); err != nil || b.VMID != want {
			t.Errorf("json/v1 %s: %d, %v", in, b.VMID, err)
		}
	}
	for _, in := range []string{`{"vmid": true}`, `{"vmid": "web"}`, `{"vmid": 1.5}`} {
		var m pveapi.IPMapping
		if err := json.Unmarshal([]byte(in), &m); err == nil {
			t.Errorf("%s decoded as %d", in, m.VMID)
		}
	}
}
