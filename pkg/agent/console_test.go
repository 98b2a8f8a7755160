package agent

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/support/rfb"
)

// TestOpenConsole: the agent's Proxmox client opens a running VM's VNC
// console on (simulated) Proxmox and logs in with the ticket, so what it
// hands on is at ClientInit; a stopped VM and a missing one are told
// apart.
func TestOpenConsole(t *testing.T) {
	t.Parallel()
	const token = "flexplane@pve!agent=0123456789abcdef"
	sim, err := pvesim.Start(pvesim.Config{Tokens: []string{token}})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	ctx := t.Context()
	p, err := newPVE(sim.URL(), token, sim.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, form string) {
		t.Helper()
		resp, err := p.do(ctx, http.MethodPost, path, "", []byte(form), "application/x-www-form-urlencoded")
		if err != nil || resp.status != http.StatusOK {
			t.Fatalf("POST %s: %d %s %v", path, resp.status, resp.reason, err)
		}
	}
	post("/nodes/pve1/qemu", "vmid=100&name=web-1")
	if _, err := p.openConsole(ctx, "pve1", 101); !errors.Is(err, errNoGuest) {
		t.Fatalf("console of a missing VM: %v", err)
	}
	if _, err := p.openConsole(ctx, "pve1", 100); !errors.Is(err, errNotRunning) {
		t.Fatalf("console of a stopped VM: %v", err)
	}
	post("/nodes/pve1/qemu/100/status/start", "")
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st struct {
			Status string `json:"status"`
		}
		if err := p.get(ctx, "/nodes/pve1/qemu/100/status/current", &st); err != nil {
			t.Fatal(err)
		}
		if st.Status == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the VM did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := p.openConsole(ctx, "pve1", 100)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	si, err := rfb.ClientInit(conn)
	if err != nil {
		t.Fatal(err)
	}
	if si.Name != "web-1" {
		t.Fatalf("desktop %q, want web-1", si.Name)
	}
}
