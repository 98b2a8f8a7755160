package pveapi_test

import (
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

func TestTasksGuestsAndErrors(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "alpha", 1)
	ctx := vmtest.Ctx(t)
	id, err := pveapi.NextID(ctx, z.Client)
	if err != nil || id != 100 {
		t.Fatalf("next id %d, %v", id, err)
	}
	upid, err := pveapi.Run(ctx, z.Client, "POST", "/nodes/pve1/qemu", map[string]any{"vmid": id, "cores": 2, "tags": "flexplane;x"})
	if err != nil || upid == "" {
		t.Fatalf("create: %q, %v", upid, err)
	}
	if node, err := pveapi.NodeOfUPID(upid); err != nil || node != "pve1" {
		t.Errorf("node of %s: %q, %v", upid, node, err)
	}
	if _, err := pveapi.NodeOfUPID("nonsense"); err == nil {
		t.Error("a malformed UPID parsed")
	}
	_, err = pveapi.Run(ctx, z.Client, "POST", "/nodes/pve1/qemu", map[string]any{"vmid": id})
	if !pveapi.IsAlreadyExists(err) {
		t.Errorf("second create: %v, want already exists", err)
	}
	g, ok, err := pveapi.FindGuest(ctx, z.Client, id)
	if err != nil || !ok || g.MaxCPU != 2 || !g.HasTag("x") || g.HasTag("y") {
		t.Fatalf("guest %+v, %v, %v", g, ok, err)
	}
	cfg, err := pveapi.GuestConfig(ctx, z.Client, "pve1", id)
	if err != nil || cfg.Int("cores") != 2 || cfg.Digest() == "" {
		t.Fatalf("config %v, %v", cfg, err)
	}
	// A write with a stale digest is refused as such.
	if _, err := pveapi.Run(ctx, z.Client, "POST", "/nodes/pve1/qemu/100/config", map[string]any{"cores": 3}); err != nil {
		t.Fatal(err)
	}
	_, err = pveapi.Run(ctx, z.Client, "POST", "/nodes/pve1/qemu/100/config", map[string]any{"cores": 4, "digest": cfg.Digest()})
	if !pveapi.IsDigestMismatch(err) {
		t.Errorf("stale digest: %v", err)
	}
	// A failing task is a *TaskError with Proxmox's exit status.
	_, err = pveapi.Run(ctx, z.Client, "POST", "/nodes/pve1/qemu/100/status/start", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = pveapi.Run(ctx, z.Client, "POST", "/nodes/pve1/qemu/100/status/start", map[string]any{})
	if te, ok := pveapi.AsTaskError(err); !ok || !strings.Contains(te.ExitStatus, "already running") {
		t.Errorf("second start: %v, want a task failing with Proxmox's exit status", err)
	}
	if _, ok, err := pveapi.FindGuest(ctx, z.Client, 999); ok || err != nil {
		t.Errorf("absent guest found: %v", err)
	}
	if _, err := pveapi.GuestConfig(ctx, z.Client, "pve1", 999); !pveapi.IsNotFound(err) {
		t.Errorf("config of an absent guest: %v", err)
	}
}
