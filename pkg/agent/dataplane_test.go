package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/pvesim"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// TestDataListenerRefuses: the data listener stores a file only for the
// ticket issued for it, once: a request without a ticket, with a ticket
// that is not one, whose secret is wrong, that expired, that was used, or
// that was issued for another file, and a body longer or shorter than the
// ticket's size or past its bound, are refused and store nothing; an
// agent without a listener issues no ticket, and a ticket for a target
// UploadVolume would refuse is not issued. The certificate's pinning is
// the orchestrator's (TestDirectUpload in pkg/dev/meshtest).
func TestDataListenerRefuses(t *testing.T) {
	t.Parallel()
	sim, p := startSim(t, pvesim.Config{Cluster: "lab", Nodes: 1, FileRoot: t.TempDir()})
	a := &Agent{cfg: Config{NodeName: "pve1", FileRoot: sim.NodeRoot("pve1")}, pve: p, log: slog.New(slog.DiscardHandler)}
	svc := &service{a: a}
	ctx := t.Context()
	req := func(name string, size, maxSize int64) *agentv1.IssueUploadTicketRequest {
		return &agentv1.IssueUploadTicketRequest{Storage: "local", Content: "import", Filename: name, Size: size, MaxSize: maxSize}
	}
	if _, err := svc.IssueUploadTicket(ctx, req("a.raw", 1, 0)); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a ticket without a data listener: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.serveData(ln, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.closeData(context.Background()) })

	for name, r := range map[string]*agentv1.IssueUploadTicketRequest{
		"traversal":       req("../a.raw", 1, 0),
		"content":         {Storage: "local", Content: "snippets", Filename: "a.raw"},
		"size over bound": req("a.raw", 2<<20, 1<<20),
		"bound too large": req("a.raw", 0, MaxUploadBytes+1),
	} {
		if _, err := svc.IssueUploadTicket(ctx, r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("ticket for %s: %v, want InvalidArgument", name, err)
		}
	}
	ticket := func(name string, size, maxSize int64) *agentv1.IssueUploadTicketResponse {
		t.Helper()
		tk, err := svc.IssueUploadTicket(ctx, req(name, size, maxSize))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(tk.GetUrl(), "https://"+ln.Addr().String()+"/") || len(tk.GetCertSha256()) != 64 || tk.GetTtlSeconds() != 60 {
			t.Fatalf("ticket %+v", tk)
		}
		return tk
	}
	// Not pinned here: the agent's side is under test.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(hc.CloseIdleConnections)
	file := bytes.Repeat([]byte("flexplane direct bytes "), 150000)
	// put sends body (its length unknown when chunked) with ticket to url.
	put := func(url, ticket string, body []byte, chunked bool) (int, string) {
		t.Helper()
		var rd io.Reader = bytes.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd)
		}
		r, err := http.NewRequestWithContext(ctx, http.MethodPut, url, rd)
		if err != nil {
			t.Fatal(err)
		}
		if ticket != "" {
			r.Header.Set("Authorization", "Bearer "+ticket)
		}
		resp, err := hc.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	size := int64(len(file))
	tk := ticket("a.raw", size, 0)
	id, _, _ := strings.Cut(tk.GetTicket(), ".")
	other := ticket("b.raw", size, 0)
	expired, _ := a.uploads.add(uploadTicket{target: uploadTarget{storage: "local", content: "import", filename: "c.raw", size: size}, secret: []byte("s")},
		time.Now().Add(-time.Millisecond), 0)
	long, unknown, short := ticket("long.raw", size-1, 0), ticket("bound.raw", 0, 1<<20), ticket("short.raw", size+1, 0)
	for _, c := range []struct {
		name, url, ticket string
		chunked           bool
		want              int
	}{
		{"no ticket", tk.GetUrl(), "", false, http.StatusUnauthorized},
		{"not a ticket", tk.GetUrl(), "nonsense", false, http.StatusUnauthorized},
		{"a wrong secret", tk.GetUrl(), id + "." + strings.Repeat("00", 32), false, http.StatusUnauthorized},
		{"an expired ticket", strings.Replace(tk.GetUrl(), "a.raw", "c.raw", 1), expired + "." + hex.EncodeToString([]byte("s")), false, http.StatusUnauthorized},
		{"another file's ticket", other.GetUrl(), tk.GetTicket(), false, http.StatusForbidden},
		{"a ticket refused for another file", tk.GetUrl(), tk.GetTicket(), false, http.StatusUnauthorized},
		{"more than the ticket's size", long.GetUrl(), long.GetTicket(), false, http.StatusRequestEntityTooLarge},
		{"more than the ticket's bound, chunked", unknown.GetUrl(), unknown.GetTicket(), true, http.StatusRequestEntityTooLarge},
		{"less than the ticket's size, chunked", short.GetUrl(), short.GetTicket(), true, http.StatusBadRequest},
	} {
		if code, msg := put(c.url, c.ticket, file, c.chunked); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, msg, c.want)
		}
	}
	if code, _ := put(strings.Replace(other.GetUrl(), "/v1/upload/", "/v1/other/", 1), other.GetTicket(), file, false); code != http.StatusNotFound {
		t.Errorf("another path: %d, want 404", code)
	}
	if got := importVolumes(t, p); len(got) != 0 {
		t.Fatalf("refused uploads stored %v", got)
	}

	good := ticket("good.raw", size, 0)
	code, msg := put(good.GetUrl(), good.GetTicket(), file, true)
	if code != http.StatusOK {
		t.Fatalf("upload: %d %s", code, msg)
	}
	var out struct {
		UPID, SHA256, Volume string
		Size                 int64
	}
	if err := json.Unmarshal([]byte(msg), &out); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(file)
	if out.SHA256 != hex.EncodeToString(sum[:]) || out.Size != size || out.Volume != "local:import/good.raw" || out.UPID != "" {
		t.Fatalf("answer %s", msg)
	}
	if code, msg := put(good.GetUrl(), good.GetTicket(), file, false); code != http.StatusUnauthorized {
		t.Fatalf("a used ticket: %d %s", code, msg)
	}
	// Written by the agent: stored when answered.
	if got := importVolumes(t, p); len(got) != 1 || got[0] != "local:import/good.raw" {
		t.Fatalf("stored %v, want good.raw alone", got)
	}
	// Another upload of that name is refused, the file kept.
	dup := ticket("good.raw", 3, 0)
	if code, msg := put(dup.GetUrl(), dup.GetTicket(), []byte("new"), false); code != http.StatusConflict {
		t.Fatalf("an upload over an existing file: %d %s, want 409", code, msg)
	}
	if b, err := os.ReadFile(filepath.Join(sim.NodeRoot("pve1"), "var", "lib", "vz", "import", "good.raw")); err != nil || !bytes.Equal(b, file) {
		t.Fatalf("the existing file changed: %d bytes, %v", len(b), err)
	}
}
