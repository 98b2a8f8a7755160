package meshtest_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/orchestrator/snippets"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// TestDirectUpload: an upload to an agent with a data listener takes the
// direct path (a ticket over the mesh, the bytes over TLS to the pinned
// listener) and is stored with the agent's checksum; a client pinning
// another fingerprint cannot connect, and the ticket it did not send
// still works; an agent whose advertised data address is unreachable gets
// the upload over the mesh, with one warning.
func TestDirectUpload(t *testing.T) {
	t.Parallel()
	rec := meshtest.NewLogRecorder()
	h := meshtest.New(t, meshtest.WithLogHandler(rec), meshtest.WithClusters(
		meshtest.ClusterSpec{Name: "alpha", Nodes: 1, DataListen: "127.0.0.1:0"},
		// Nothing listens on port 1 of loopback.
		meshtest.ClusterSpec{Name: "beta", Nodes: 1, DataListen: "127.0.0.1:0", DataAdvertise: "127.0.0.1:1"}))
	h.WaitOnline(t, 30*time.Second)
	ctx := t.Context()
	reg := h.Orchestrator.Zones()
	up := orchestrator.NewVolumeUploader(reg, slog.New(rec).With("component", "uploads"))
	file := bytes.Repeat([]byte("flexplane bytes beside the mesh "), 100000)
	sum := sha256.Sum256(file)

	upload := func(c *meshtest.Cluster, name string) {
		t.Helper()
		z := h.Zone(t, c)
		ref := compute.UploadRef{ZoneID: z.ID, Node: "pve1", Storage: "local", Content: "import", Filename: name, MaxSize: 64 << 20}
		res, err := up.UploadVolume(ctx, ref, int64(len(file)), bytes.NewReader(file))
		if err != nil {
			t.Fatalf("upload into %s: %v", z.Name, err)
		}
		// Storage local is a file storage: the agent wrote the file itself
		// (no Proxmox task), and it is stored when answered.
		if res.SHA256 != hex.EncodeToString(sum[:]) || res.Size != int64(len(file)) || res.Volume != "local:import/"+name || res.UPID != "" {
			t.Fatalf("upload into %s: %+v", z.Name, res)
		}
		var vols []struct{ VolID string }
		if err := reg.Client(z.ID).Get(ctx, "/nodes/pve1/storage/local/content?content=import", &vols); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(vols, func(v struct{ VolID string }) bool { return v.VolID == res.Volume }) {
			t.Fatalf("upload into %s: %s not stored: %v", z.Name, res.Volume, vols)
		}
	}
	logged := func(parts ...string) bool {
		for line := range strings.Lines(string(rec.Bytes())) {
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
				return true
			}
		}
		return false
	}

	upload(h.Clusters[0], "direct.raw")
	if !logged("agent: uploaded", `via="data listener"`, "file=direct.raw") || logged("upload over the mesh") {
		t.Fatalf("the upload into alpha did not take the data listener:\n%s", rec.Bytes())
	}

	// A ticket over the mesh; a client pinning another certificate does
	// not connect, so the ticket stays unused.
	c, _, ok := reg.AgentOfNode(h.Zone(t, h.Clusters[0]).ID, "pve1")
	if !ok {
		t.Fatal("no agent of alpha's pve1")
	}
	tk, err := c.IssueUploadTicket(ctx, &agentv1.IssueUploadTicketRequest{Storage: "local", Content: "import", Filename: "pinned.raw", Size: int64(len(file))})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(tk.GetUrl())
	if err != nil {
		t.Fatal(err)
	}
	wrong := sha256.Sum256([]byte("another certificate"))
	if conn, err := (&tls.Dialer{Config: snippets.PinnedTLS(hex.EncodeToString(wrong[:]))}).DialContext(ctx, "tcp", u.Host); err == nil {
		conn.Close()
		t.Fatal("a client pinning another fingerprint connected")
	} else if !strings.Contains(err.Error(), "is not the pinned") {
		t.Fatalf("a client pinning another fingerprint: %v", err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: snippets.PinnedTLS(tk.GetCertSha256())}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, tk.GetUrl(), bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tk.GetTicket())
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the pinned upload with its ticket: %s", resp.Status)
	}

	upload(h.Clusters[1], "fallback.raw")
	if !logged("level=WARN", "upload over the mesh", "data listener is unreachable", "127.0.0.1:1") ||
		!logged("agent: uploaded", "via=mesh", "file=fallback.raw") {
		t.Fatalf("the upload into beta did not fall back to the mesh with a warning:\n%s", rec.Bytes())
	}
}
