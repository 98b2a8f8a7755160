package pvetest

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/luthermonson/go-proxmox"
)

// EnableSnippets adds `snippets` to the content of storage "local" (as an
// operator enables it for cloud-init user-data) through px. The cluster
// keeps snippets as files only with a pvesim Config.FileRoot.
func EnableSnippets(t testing.TB, px *proxmox.Client) {
	t.Helper()
	ctx := context.Background()
	var st struct {
		Content string `json:"content"`
	}
	if err := px.Get(ctx, "/storage/local", &st); err != nil {
		t.Fatalf("pvetest: storage local: %v", err)
	}
	content := strings.Split(st.Content, ",")
	if slices.Contains(content, "snippets") {
		return
	}
	content = append(content, "snippets")
	if err := px.Put(ctx, "/storage/local", map[string]string{"content": strings.Join(content, ",")}, nil); err != nil {
		t.Fatalf("pvetest: enable snippets on local: %v", err)
	}
}
