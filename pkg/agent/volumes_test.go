package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/agent/privhelper"
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

// moveGuest creates guest vmid on pve1 of p with one disk and tags, and
// returns its disk.
func moveGuest(t *testing.T, p *pve, vmid int, tags string) string {
	t.Helper()
	ctx := t.Context()
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

	guest := func(vmid int, tags string) string { return moveGuest(t, p, vmid, tags) }
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

// TestVolumesOfOutgoingTemplates: for a VDC's image copied into another
// zone the agent offers the disk of a template of its node tagged
// outgoing, and nothing else so tagged: not a guest that is no template,
// not a template not so tagged (another image's, or one whose copy
// ended); it never writes into such a template.
func TestVolumesOfOutgoingTemplates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, p := startSim(t, pvesim.Config{DiskDir: t.TempDir()})
	a := &Agent{cfg: Config{NodeName: "pve1"}, pve: p, policy: newPolicy(), log: slog.New(slog.DiscardHandler)}
	s := &service{a: a}
	template := func(vmid int, tags string) string {
		t.Helper()
		moveGuest(t, p, vmid, tags)
		resp, err := p.do(ctx, http.MethodPost, fmt.Sprintf("/nodes/pve1/qemu/%d/template", vmid), "", nil, "")
		if err != nil || resp.status != http.StatusOK {
			t.Fatalf("convert %d: %v %v", vmid, resp, err)
		}
		var vol string
		poll.Until(t, 30*time.Second, fmt.Sprintf("guest %d a template", vmid), func() error {
			var cfg map[string]any
			if err := p.get(ctx, fmt.Sprintf("/nodes/pve1/qemu/%d/config", vmid), &cfg); err != nil {
				return err
			}
			if fmt.Sprint(cfg["template"]) != "1" {
				return fmt.Errorf("template %v", cfg["template"])
			}
			s, _ := cfg["scsi0"].(string)
			vol, _, _ = strings.Cut(s, ",")
			return nil
		})
		return vol
	}
	outgoing := template(221, "fp-image-out")
	unmarked := template(222, "")
	notTemplate := moveGuest(t, p, 223, "fp-image-out")

	if vmid, err := a.readableGuest(ctx, outgoing); err != nil || vmid != 221 {
		t.Fatalf("the disk of the outgoing template: %d %v", vmid, err)
	}
	for what, vol := range map[string]string{"a template not marked": unmarked, "a guest marked outgoing that is no template": notTemplate} {
		if _, err := s.OfferVolume(ctx, &agentv1.OfferVolumeRequest{Volume: vol, Reader: "beta-pve1"}); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("offer the disk of %s: %v, want FAILED_PRECONDITION", what, err)
		}
	}
	err := s.PullVolume(&agentv1.PullVolumeRequest{SourceAddr: "100.64.0.9:50052", Capability: "c", Volume: outgoing}, pullStream{ctx: ctx})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("write into the outgoing template: %v, want FAILED_PRECONDITION", err)
	}
	if n := len(a.offers.m); n != 0 {
		t.Errorf("%d offers were made", n)
	}
}

// writeGuestConfig writes guest vmid's config as p answers it into dir
// as Proxmox keeps it in its cluster file system (<vmid>.conf, `key:
// value` lines), where the helper reads it.
func writeGuestConfig(t *testing.T, p *pve, dir string, vmid int) {
	t.Helper()
	var cfg map[string]any
	if err := p.get(t.Context(), fmt.Sprintf("/nodes/pve1/qemu/%d/config", vmid), &cfg); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		fmt.Fprintf(&b, "%s: %v\n", k, cfg[k])
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.conf", vmid)), []byte(b.String()), 0o640); err != nil {
		t.Fatal(err)
	}
}

// TestVolumesThroughTheHelper: with a helper, the agent reads a leaving
// guest's disk and writes an arriving guest's (through PullVolume's
// writer, checksum and sync) over the helper's socket; and the helper
// checks the guest's mark itself, in the guest's config file: an agent
// that skips its own check (a compromised one) still cannot open an
// unmarked guest's disk, nor another guest's file as a marked guest's
// volume.
func TestVolumesThroughTheHelper(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	disks, confs := t.TempDir(), t.TempDir()
	_, p := startSim(t, pvesim.Config{DiskDir: disks})
	a := &Agent{cfg: Config{NodeName: "pve1"}, pve: p, policy: newPolicy(), log: slog.New(slog.DiscardHandler)}
	a.helper = startHelper(t, privhelper.Config{VolumeDirs: []string{disks}, GuestConfigDir: confs})
	leaving, plain, arriving := moveGuest(t, p, 211, "fp-leaving"), moveGuest(t, p, 212, ""), moveGuest(t, p, 213, "fp-incoming")
	path := map[string]string{}
	for vmid, vol := range map[int]string{211: leaving, 212: plain, 213: arriving} {
		writeGuestConfig(t, p, confs, vmid)
		v, err := a.localVolume(ctx, vol)
		if err != nil {
			t.Fatal(err)
		}
		path[vol] = v.Path
	}
	want := bytes.Repeat([]byte("a leaving disk "), 100_000)
	if err := os.WriteFile(path[leaving], want, 0o600); err != nil {
		t.Fatal(err)
	}

	vmid, err := a.movingGuest(ctx, leaving, leavingTag)
	if err != nil {
		t.Fatal(err)
	}
	f, err := a.openVolume(ctx, vmid, leaving, path[leaving], false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(io.NewSectionReader(f, 0, int64(len(want))))
	f.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes through the helper (%v), want the disk's %d", len(got), err, len(want))
	}

	vmid, err = a.movingGuest(ctx, arriving, arrivingTag)
	if err != nil {
		t.Fatal(err)
	}
	f, err = a.openVolume(ctx, vmid, arriving, path[arriving], true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &volumeWriter{f: f, h: sha256.New(), chunks: make(chan *agentv1.ReadVolumeResponse, readAhead), done: make(chan error, 1)}
	go w.run()
	w.chunks <- &agentv1.ReadVolumeResponse{Offset: 3 << 20, Data: want}
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	size := int64(4<<20 + len(want))
	if err := w.hashTo(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	disk, err := os.ReadFile(path[arriving])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(disk[3<<20:3<<20+len(want)], want) {
		t.Fatal("the arriving disk does not hold what was written")
	}
	if sum := sha256.Sum256(disk[:size]); !bytes.Equal(w.h.Sum(nil), sum[:]) {
		t.Fatal("the writer's checksum is not the disk's")
	}

	for _, tc := range []struct {
		what         string
		vmid         int
		volume, path string
		write        bool
	}{
		{"an unmarked guest's disk", 212, plain, path[plain], false},
		{"an unmarked guest's disk, for writing", 212, plain, path[plain], true},
		{"a leaving guest's disk, for writing", 211, leaving, path[leaving], true},
		{"an unmarked guest's file as a leaving guest's volume", 211, leaving, path[plain], false},
	} {
		if f, err := a.openVolume(ctx, tc.vmid, tc.volume, tc.path, tc.write); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: %v, want PERMISSION_DENIED", tc.what, err)
			if err == nil {
				f.Close()
			}
		}
	}
}
