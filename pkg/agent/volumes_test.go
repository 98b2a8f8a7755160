package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// pullStream is the server side of a PullVolume call that only has a
// context: the checks under test end the call before anything is sent.
type pullStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s pullStream) Context() context.Context { return s.ctx }

func (s pullStream) Send(*agentv1.PullVolumeResponse) error { return nil }

// TestVolumesOnlyOfMovingGuests: the agent offers only a disk of a stopped
// guest of its node tagged leaving, and writes only into a disk of a
// stopped guest tagged incoming, as it reads them itself from its local
// Proxmox; a volume merely named like a marked guest's, a guest not
// marked, or one still running is refused with FAILED_PRECONDITION before
// any offer is made or any byte written.
func TestVolumesOnlyOfMovingGuests(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, p := startSim(t, pvesim.Config{DiskDir: t.TempDir()})
	a := &Agent{cfg: Config{NodeName: "pve1"}, pve: p, policy: newPolicy(), log: slog.New(slog.DiscardHandler)}
	s := &service{a: a}

	// guest creates a guest with one disk and tags, and returns its disk.
	guest := func(vmid int, tags string) string {
		t.Helper()
		form := url.Values{"vmid": {fmt.Sprint(vmid)}, "scsi0": {"local-lvm:1"}}
		if tags != "" {
			form.Set("tags", tags)
		}
		resp, err := p.do(ctx, http.MethodPost, "/nodes/pve1/qemu", "", []byte(form.Encode()), "application/x-www-form-urlencoded")
		if err != nil || resp.status != http.StatusOK {
			t.Fatalf("create %d: %v %v", vmid, resp, err)
		}
		var vol string
		poll.Until(t, 30*time.Second, fmt.Sprintf("guest %d's disk", vmid), func() error {
			var cfg map[string]any
			if err := p.get(ctx, fmt.Sprintf("/nodes/pve1/qemu/%d/config", vmid), &cfg); err != nil {
				return err
			}
			s, _ := cfg["scsi0"].(string)
			if vol, _, _ = strings.Cut(s, ","); vol == "" {
				return fmt.Errorf("no disk yet")
			}
			return nil
		})
		return vol
	}
	leaving := guest(201, "fp-leaving")
	plain := guest(202, "")
	arriving := guest(203, "fp-incoming")
	running := guest(204, "fp-leaving")
	resp, err := p.do(ctx, http.MethodPost, "/nodes/pve1/qemu/204/status/start", "", nil, "")
	if err != nil || resp.status != http.StatusOK {
		t.Fatalf("start 204: %v %v", resp, err)
	}
	poll.Until(t, 30*time.Second, "guest 204 running", func() error {
		var st struct{ Status string }
		if err := p.get(ctx, "/nodes/pve1/qemu/204/status/current", &st); err != nil {
			return err
		}
		if st.Status != "running" {
			return fmt.Errorf("status %s", st.Status)
		}
		return nil
	})
	if vmid, err := a.movingGuest(ctx, leaving, leavingTag); err != nil || vmid != 201 {
		t.Fatalf("the disk of the leaving guest: %d %v", vmid, err)
	}
	if vmid, err := a.movingGuest(ctx, arriving, arrivingTag); err != nil || vmid != 203 {
		t.Fatalf("the disk of the arriving guest: %d %v", vmid, err)
	}

	refused := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("%s: %v, want FAILED_PRECONDITION", what, err)
		}
	}
	offer := func(volume string) error {
		_, err := s.OfferVolume(ctx, &agentv1.OfferVolumeRequest{Volume: volume, Reader: "beta-pve1"})
		return err
	}
	refused("offer a disk of a guest not marked", offer(plain))
	refused("offer a disk of a guest marked arriving", offer(arriving))
	refused("offer a disk of a running guest marked leaving", offer(running))
	// Named like the leaving guest's, but no disk of its config.
	storage, _, _ := strings.Cut(leaving, ":")
	form := url.Values{"vmid": {"201"}, "filename": {"vm-201-disk-9"}, "size": {"1G"}, "format": {"raw"}}
	if resp, err := p.do(ctx, http.MethodPost, "/nodes/pve1/storage/"+storage+"/content", "", []byte(form.Encode()), "application/x-www-form-urlencoded"); err != nil || resp.status != http.StatusOK {
		t.Fatalf("allocate a volume: %v %v", resp, err)
	}
	refused("offer a volume not in the leaving guest's config", offer(storage+":vm-201-disk-9"))
	if n := len(a.offers.m); n != 0 {
		t.Errorf("%d offers were made", n)
	}

	pull := func(volume string) error {
		return s.PullVolume(&agentv1.PullVolumeRequest{SourceAddr: "100.64.0.9:50052", Capability: "c", Volume: volume}, pullStream{ctx: ctx})
	}
	refused("write into a guest not marked", pull(plain))
	refused("write into a guest marked leaving", pull(leaving))
}
