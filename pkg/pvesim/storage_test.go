package pvesim_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

func TestDownloadURL(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Nodes: 2})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	src, sum := imageServer(t, "alpine.iso", 1<<20)
	node, err := cl.Node(ctx, "pve2")
	if err != nil {
		t.Fatal(err)
	}
	st, err := node.Storage(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}

	// A wrong checksum fails the task and stores nothing.
	bad := strings.Repeat("0", 64)
	task, err := st.DownloadURLWithHash(ctx, "iso", "alpine.iso", src, bad, "sha256")
	exit := waitFailed(t, ctx, task, err)
	if !strings.Contains(exit, "checksum mismatch: got '"+sum+"' != expect '"+bad+"'") {
		t.Fatalf("exit status %q", exit)
	}
	if _, err := st.ISO(ctx, "alpine.iso"); err == nil {
		t.Fatal("volume stored despite the checksum mismatch")
	}
	// A URL that answers 404 fails the task.
	task, err = st.DownloadURL(ctx, "iso", "missing.iso", strings.Replace(src, "alpine.iso", "missing.iso", 1))
	exit = waitFailed(t, ctx, task, err)
	if !strings.Contains(exit, "404") {
		t.Fatalf("exit status %q", exit)
	}

	// The right checksum stores the volume with the downloaded size.
	task, err = st.DownloadURLWithHash(ctx, "iso", "alpine.iso", src, strings.ToUpper(sum), "sha256")
	waitOK(t, ctx, task, err)
	if task.Type != "download" || task.Node != "pve2" {
		t.Fatalf("task %+v", task)
	}
	content, err := st.GetContent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(content) != 1 || content[0].Volid != "local:iso/alpine.iso" || content[0].Size != 1<<20 || content[0].Format != "iso" {
		t.Fatalf("content = %+v", content)
	}
	log, err := task.Log(ctx, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) == 0 || log[len(log)-1] != "TASK OK" {
		t.Fatalf("log = %v", log)
	}
	// local storage is per node: pve1 does not see it.
	r := call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/local/content", nil)
	if r.status != http.StatusOK || len(r.data.([]any)) != 0 {
		t.Fatalf("pve1 local content: %s", r.body)
	}
	// Bad input is refused before any task starts.
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve2/storage/local-lvm/download-url", url.Values{
		"content": {"iso"}, "filename": {"x.iso"}, "url": {src},
	})
	if r.status != http.StatusBadRequest || r.errors["content"] == "" {
		t.Fatalf("iso on local-lvm: %d %s", r.status, r.body)
	}
	r = call(t, c, testToken, http.MethodPost, "/nodes/pve2/storage/local/download-url", url.Values{
		"content": {"iso"}, "filename": {"x.txt"}, "url": {src},
	})
	if r.status != http.StatusBadRequest || r.errors["filename"] == "" {
		t.Fatalf("bad extension: %d %s", r.status, r.body)
	}
}
