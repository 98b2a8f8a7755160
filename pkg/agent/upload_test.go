package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// uploadStream is the server side of an UploadVolume call: it hands the
// agent msgs, then end (io.EOF: the sender closed the stream, another
// error: the stream broke), and keeps the answer.
type uploadStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []*agentv1.UploadVolumeRequest
	end  error
	resp *agentv1.UploadVolumeResponse
}

func (s *uploadStream) Context() context.Context { return s.ctx }

func (s *uploadStream) Recv() (*agentv1.UploadVolumeRequest, error) {
	if len(s.msgs) == 0 {
		return nil, s.end
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

func (s *uploadStream) SendAndClose(r *agentv1.UploadVolumeResponse) error { s.resp = r; return nil }

// TestUploadVolume: the agent writes a streamed file into a file
// storage's import directory itself (no Proxmox task), answering its
// SHA-256, and Proxmox lists it; it refuses a name that exists, leaving
// that file as it was; a stream shorter or longer than announced, or one
// that breaks, leaves no file (not even a temporary one); a content, file
// name or size out of bounds is refused before anything is written. Into
// a storage without a path (lvmthin) the agent POSTs the file to
// Proxmox's upload endpoint (which refuses that storage). With a helper
// doing the agent's file work, the helper writes the file (root's, 0644,
// the agent's hash, no Proxmox task) into a directory it allows, refuses
// one it does not, an existing name and a short stream, and leaves
// nothing of them.
func TestUploadVolume(t *testing.T) {
	t.Parallel()
	sim, p := startSim(t, pvesim.Config{Cluster: "lab", Nodes: 1, FileRoot: t.TempDir()})
	svc := &service{a: &Agent{cfg: Config{NodeName: "pve1", FileRoot: sim.NodeRoot("pve1")}, pve: p, log: slog.New(slog.DiscardHandler)}}
	importDir := filepath.Join(sim.NodeRoot("pve1"), "var", "lib", "vz", "import")
	ctx := t.Context()
	file := []byte(strings.Repeat("flexplane image bytes ", 100000))
	sum := sha256.Sum256(file)
	chunks := func(first *agentv1.UploadVolumeRequest, data []byte, n int) []*agentv1.UploadVolumeRequest {
		msgs := []*agentv1.UploadVolumeRequest{first}
		for len(data) > 0 {
			k := min(n, len(data))
			msgs = append(msgs, &agentv1.UploadVolumeRequest{Data: data[:k]})
			data = data[k:]
		}
		return msgs
	}
	head := func(name string, size int64) *agentv1.UploadVolumeRequest {
		return &agentv1.UploadVolumeRequest{Storage: "local", Content: "import", Filename: name, Size: size}
	}
	volumes := func() []string { return importVolumes(t, p) }
	files := func() []string {
		ents, _ := os.ReadDir(importDir)
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}

	for name, c := range map[string]struct {
		s    *uploadStream
		code codes.Code
	}{
		"short":       {&uploadStream{msgs: chunks(head("short.qcow2", int64(len(file))+1), file, 1<<20), end: io.EOF}, codes.DataLoss},
		"long":        {&uploadStream{msgs: chunks(head("long.qcow2", int64(len(file))-1), file, 1<<20), end: io.EOF}, codes.DataLoss},
		"broken":      {&uploadStream{msgs: chunks(head("broken.qcow2", 0), file[:1<<20], 1<<19), end: status.Error(codes.Canceled, "gone")}, codes.Canceled},
		"content":     {&uploadStream{msgs: []*agentv1.UploadVolumeRequest{{Storage: "local", Content: "snippets", Filename: "a.qcow2"}}, end: io.EOF}, codes.InvalidArgument},
		"traversal":   {&uploadStream{msgs: []*agentv1.UploadVolumeRequest{head("../a.qcow2", 1)}, end: io.EOF}, codes.InvalidArgument},
		"subdir":      {&uploadStream{msgs: []*agentv1.UploadVolumeRequest{head("x/a.qcow2", 1)}, end: io.EOF}, codes.InvalidArgument},
		"hidden":      {&uploadStream{msgs: []*agentv1.UploadVolumeRequest{head(".a.qcow2", 1)}, end: io.EOF}, codes.InvalidArgument},
		"extension":   {&uploadStream{msgs: []*agentv1.UploadVolumeRequest{head("a.sh", 1)}, end: io.EOF}, codes.InvalidArgument},
		"too large":   {&uploadStream{msgs: []*agentv1.UploadVolumeRequest{head("a.raw", MaxUploadBytes+1)}, end: io.EOF}, codes.InvalidArgument},
		"bad storage": {&uploadStream{msgs: []*agentv1.UploadVolumeRequest{{Storage: "a/b", Content: "import", Filename: "a.raw"}}, end: io.EOF}, codes.InvalidArgument},
		// No path: the agent POSTs, and Proxmox refuses the storage type.
		"block storage": {&uploadStream{msgs: chunks(&agentv1.UploadVolumeRequest{Storage: "local-lvm", Content: "import", Filename: "lvm.raw", Size: int64(len(file))}, file, 1<<20), end: io.EOF}, codes.FailedPrecondition},
	} {
		c.s.ctx = ctx
		err := svc.UploadVolume(c.s)
		if status.Code(err) != c.code {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
		if name == "block storage" && !strings.Contains(status.Convert(err).Message(), "proxmox answered 500") {
			t.Errorf("%s: %v, want Proxmox's refusal", name, err)
		}
	}
	if got, left := volumes(), files(); len(got) != 0 || len(left) != 0 {
		t.Fatalf("refused uploads stored %v, left files %v", got, left)
	}

	s := &uploadStream{ctx: ctx, msgs: chunks(head("app.qcow2", int64(len(file))), file, 1<<20), end: io.EOF}
	if err := svc.UploadVolume(s); err != nil {
		t.Fatal(err)
	}
	if s.resp.GetSha256() != hex.EncodeToString(sum[:]) || s.resp.GetSize() != int64(len(file)) ||
		s.resp.GetVolume() != "local:import/app.qcow2" || s.resp.GetUpid() != "" {
		t.Fatalf("answer %+v", s.resp)
	}
	// Stored when answered: no task to wait for.
	if got := volumes(); len(got) != 1 || got[0] != "local:import/app.qcow2" {
		t.Fatalf("volumes after the upload: %v", got)
	}
	path := filepath.Join(importDir, "app.qcow2")
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, file) {
		t.Fatalf("the uploaded file: %d bytes, %v", len(b), err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("the uploaded file's mode: %v, %v", fi.Mode(), err)
	}

	// An existing name: refused, before or after the bytes, and kept.
	again := &uploadStream{ctx: ctx, msgs: chunks(head("app.qcow2", 3), []byte("new"), 1<<20), end: io.EOF}
	if err := svc.UploadVolume(again); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("an upload over an existing file: %v, want AlreadyExists", err)
	}
	if err := writeUpload(importDir, uploadTarget{storage: "local", content: "import", filename: "app.qcow2"}, strings.NewReader("new")); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("a link over an existing file: %v, want AlreadyExists", err)
	}
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, file) {
		t.Fatalf("the existing file changed: %d bytes, %v", len(b), err)
	}
	if left := files(); len(left) != 1 {
		t.Fatalf("files after the refused uploads: %v", left)
	}

	// With a helper, the helper writes the file (the bytes over its
	// socket), root's and 0644, stored when answered; a helper not
	// configured for the directory refuses it, and nothing is stored.
	withHelper := func(dirs ...string) *service {
		return &service{a: &Agent{cfg: Config{NodeName: "pve1", FileRoot: sim.NodeRoot("pve1")}, pve: p, log: slog.New(slog.DiscardHandler),
			helper: startHelper(t, privhelper.Config{UploadDirs: dirs})}}
	}
	s = &uploadStream{ctx: ctx, msgs: chunks(head("elsewhere.qcow2", int64(len(file))), file, 1<<20), end: io.EOF}
	if err := withHelper(filepath.Join(t.TempDir(), "import")).UploadVolume(s); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("an upload into a directory the helper does not allow: %v, want PERMISSION_DENIED", err)
	}
	if left := files(); len(left) != 1 {
		t.Fatalf("files after the refused upload: %v", left)
	}
	helped := withHelper(importDir)
	s = &uploadStream{ctx: ctx, msgs: chunks(head("helped.qcow2", int64(len(file))), file, 1<<20), end: io.EOF}
	if err := helped.UploadVolume(s); err != nil {
		t.Fatal(err)
	}
	if s.resp.GetSha256() != hex.EncodeToString(sum[:]) || s.resp.GetSize() != int64(len(file)) || s.resp.GetUpid() != "" {
		t.Fatalf("answer %+v", s.resp)
	}
	path = filepath.Join(importDir, "helped.qcow2")
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, file) {
		t.Fatalf("the file the helper wrote: %d bytes, %v", len(b), err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("the file the helper wrote: %v, %v, want 0644 of root", fi, err)
	}
	if got := volumes(); len(got) != 2 {
		t.Fatalf("volumes after the helper's upload: %v", got)
	}
	again = &uploadStream{ctx: ctx, msgs: chunks(head("helped.qcow2", 3), []byte("new"), 1<<20), end: io.EOF}
	if err := helped.UploadVolume(again); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("an upload through the helper over an existing file: %v, want AlreadyExists", err)
	}
	short := &uploadStream{ctx: ctx, msgs: chunks(head("short.qcow2", int64(len(file))+1), file, 1<<20), end: io.EOF}
	if err := helped.UploadVolume(short); status.Code(err) != codes.DataLoss {
		t.Fatalf("a short upload through the helper: %v, want DataLoss", err)
	}
	poll.True(t, 10*time.Second, "nothing left of the refused uploads", func() bool { return len(files()) == 2 })
}

// importVolumes lists the volumes of storage local of node pve1 of p
// whose content is import.
func importVolumes(t *testing.T, p *pve) []string {
	t.Helper()
	resp, err := p.do(t.Context(), http.MethodGet, "/nodes/pve1/storage/local/content", "content=import", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	var vols []struct{ VolID string }
	if err := decodeData(resp.body, &vols); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vols {
		out = append(out, v.VolID)
	}
	return out
}
