package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
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

// TestUploadVolume: the agent forwards a streamed file to its Proxmox's
// upload endpoint, answering its SHA-256 and the import task, and the file
// is stored; a stream shorter or longer than announced, or one that
// breaks, stores nothing; a content, file name or size out of bounds is
// refused before anything is sent.
func TestUploadVolume(t *testing.T) {
	t.Parallel()
	_, p := startSim(t, pvesim.Config{Cluster: "lab", Nodes: 1})
	svc := &service{a: &Agent{cfg: Config{NodeName: "pve1"}, pve: p, log: slog.New(slog.DiscardHandler)}}
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

	for name, c := range map[string]struct {
		s    *uploadStream
		code codes.Code
	}{
		"short":       {&uploadStream{msgs: chunks(head("short.qcow2", int64(len(file))+1), file, 1<<20), end: io.EOF}, codes.DataLoss},
		"long":        {&uploadStream{msgs: chunks(head("long.qcow2", int64(len(file))-1), file, 1<<20), end: io.EOF}, codes.DataLoss},
		"broken":      {&uploadStream{msgs: chunks(head("broken.qcow2", 0), file[:1<<20], 1<<19), end: status.Error(codes.Canceled, "gone")}, codes.Canceled},
		"content":     {&uploadStream{msgs: []*agentv1.UploadVolumeRequest{{Storage: "local", Content: "snippets", Filename: "a.qcow2"}}, end: io.EOF}, codes.InvalidArgument},
		"traversal":   {&uploadStream{msgs: []*agentv1.UploadVolumeRequest{head("../a.qcow2", 1)}, end: io.EOF}, codes.InvalidArgument},
		"extension":   {&uploadStream{msgs: []*agentv1.UploadVolumeRequest{head("a.sh", 1)}, end: io.EOF}, codes.InvalidArgument},
		"too large":   {&uploadStream{msgs: []*agentv1.UploadVolumeRequest{head("a.raw", MaxUploadBytes+1)}, end: io.EOF}, codes.InvalidArgument},
		"bad storage": {&uploadStream{msgs: []*agentv1.UploadVolumeRequest{{Storage: "a/b", Content: "import", Filename: "a.raw"}}, end: io.EOF}, codes.InvalidArgument},
	} {
		c.s.ctx = ctx
		if err := svc.UploadVolume(c.s); status.Code(err) != c.code {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
	}
	if got := volumes(); len(got) != 0 {
		t.Fatalf("refused uploads stored %v", got)
	}

	s := &uploadStream{ctx: ctx, msgs: chunks(head("app.qcow2", int64(len(file))), file, 1<<20), end: io.EOF}
	if err := svc.UploadVolume(s); err != nil {
		t.Fatal(err)
	}
	if s.resp.GetSha256() != hex.EncodeToString(sum[:]) || s.resp.GetSize() != int64(len(file)) ||
		s.resp.GetVolume() != "local:import/app.qcow2" || s.resp.GetUpid() == "" {
		t.Fatalf("answer %+v", s.resp)
	}
	poll.True(t, 10*time.Second, "the uploaded file stored", func() bool {
		got := volumes()
		return len(got) == 1 && got[0] == "local:import/app.qcow2"
	})
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
