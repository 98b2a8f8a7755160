package pvesim_test

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/support/rfb"
)

// dialConsole opens vncwebsocket with the token; a refusal returns the
// HTTP status.
func dialConsole(t *testing.T, c *pvesim.Cluster, token, node string, vmid int, port any, ticket string) (net.Conn, int, error) {
	t.Helper()
	q := url.Values{"port": {toString(port)}, "vncticket": {ticket}}
	u := "wss" + strings.TrimPrefix(c.URL(), "https") + "/api2/json/nodes/" + node + "/qemu/" + strconv.Itoa(vmid) + "/vncwebsocket?" + q.Encode()
	ws, resp, err := rfb.DialWebsocket(testCtx(t), u, httpClient(t, c), http.Header{"Authorization": {"PVEAPIToken=" + token}}, 0)
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	return ws, status, err
}

func toString(v any) string {
	switch v := v.(type) {
	case float64:
		return strconv.Itoa(int(v))
	case int:
		return strconv.Itoa(v)
	}
	return v.(string)
}

// TestVNCConsole opens a VM's console as Proxmox's web UI does: vncproxy
// with websocket=1 answers the schema's port/ticket/user/cert/upid and
// starts a vncproxy task; vncwebsocket with that port and ticket upgrades
// to a websocket whose VNC server takes the ticket as its VNC password and
// shows the test picture with the VM's name. The ticket works once, only
// with its port, VM and token; a stopped VM has no console, a token
// without VM.Console gets none, and the task ends with the session.
func TestVNCConsole(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{})
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	ctx := testCtx(t)
	vm := newVM(t, cl, "pve1", 100, proxmox.VirtualMachineOption{Name: "name", Value: "web-1"})

	if r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/vncproxy", url.Values{"websocket": {"1"}}); r.status != http.StatusInternalServerError || r.reason != "500 VM 100 not running" {
		t.Fatalf("vncproxy of a stopped VM: %s", r.reason)
	}
	task, err := vm.Start(ctx)
	waitOK(t, ctx, task, err)

	open := func() (port any, ticket, upid string) {
		t.Helper()
		r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu/100/vncproxy", url.Values{"websocket": {"1"}})
		if r.status != http.StatusOK {
			t.Fatalf("vncproxy: %s", r.reason)
		}
		d := r.data.(map[string]any)
		if d["user"] != testTokenID || !strings.Contains(d["cert"].(string), "BEGIN CERTIFICATE") || !strings.HasPrefix(d["ticket"].(string), "PVEVNC:") {
			t.Fatalf("vncproxy answered %v", d)
		}
		if p := d["port"].(float64); p < 5900 || p > 5999 {
			t.Fatalf("port %v outside 5900-5999", p)
		}
		return d["port"], d["ticket"].(string), d["upid"].(string)
	}
	port, ticket, upid := open()
	if !strings.Contains(upid, ":vncproxy:100:") {
		t.Fatalf("upid %q is not a vncproxy task of VM 100", upid)
	}

	// Refusals: another port, another VM, a wrong ticket, a bad port, a
	// token without VM.Console.
	if _, st, err := dialConsole(t, c, testToken, "pve1", 100, 5999, ticket); err == nil || st != http.StatusUnauthorized {
		t.Fatalf("another port: status %d, %v", st, err)
	}
	if _, st, err := dialConsole(t, c, testToken, "pve1", 100, port, ticket+"x"); err == nil || st != http.StatusUnauthorized {
		t.Fatalf("wrong ticket: status %d, %v", st, err)
	}
	if _, st, err := dialConsole(t, c, testToken, "pve1", 100, 6000, ticket); err == nil || st != http.StatusBadRequest {
		t.Fatalf("port 6000: status %d, %v", st, err)
	}
	const auditor = "audit@pve!ro=s3cret"
	c.AddToken(auditor, map[string][]string{"/vms": {"VM.Audit"}})
	if r := call(t, c, auditor, http.MethodPost, "/nodes/pve1/qemu/100/vncproxy", url.Values{"websocket": {"1"}}); r.status != http.StatusForbidden {
		t.Fatalf("vncproxy without VM.Console: %s", r.reason)
	}

	conn, st, err := dialConsole(t, c, testToken, "pve1", 100, port, ticket)
	if err != nil {
		t.Fatalf("vncwebsocket: status %d, %v", st, err)
	}
	if err := rfb.ClientLogin(conn, ticket); err != nil {
		t.Fatalf("VNC login with the ticket: %v", err)
	}
	si, err := rfb.ClientInit(conn)
	if err != nil {
		t.Fatal(err)
	}
	if si.Name != "web-1" || si.Width != 640 || si.Height != 400 {
		t.Fatalf("server init %+v", si)
	}
	img, err := rfb.ReadFrame(conn, si)
	if err != nil {
		t.Fatal(err)
	}
	if !img.Bounds().Eq(pvesim.ConsoleFrame("web-1").Bounds()) {
		t.Fatalf("frame bounds %v", img.Bounds())
	}
	for i := range 8 {
		if got, want := img.RGBAAt(i*80+40, 100), pvesim.ConsoleBar(i); got != want {
			t.Errorf("bar %d: %v, want %v", i, got, want)
		}
	}
	if want := pvesim.ConsoleFrame("web-1"); string(img.Pix) != string(want.Pix) {
		t.Error("the frame differs from ConsoleFrame (the name band)")
	}
	if string(pvesim.ConsoleFrame("web-2").Pix) == string(img.Pix) {
		t.Error("two names draw the same frame")
	}
	// The ticket worked once.
	if _, st, err := dialConsole(t, c, testToken, "pve1", 100, port, ticket); err == nil || st != http.StatusUnauthorized {
		t.Fatalf("second use of the ticket: status %d, %v", st, err)
	}
	task = proxmox.NewTask(proxmox.UPID(upid), cl)
	if err := task.Ping(ctx); err != nil || !task.IsRunning {
		t.Fatalf("vncproxy task while connected: running %v, %v", task.IsRunning, err)
	}
	conn.Close()
	waitOK(t, ctx, task, nil)

	// A wrong VNC password is refused by the VNC server.
	port, ticket, _ = open()
	conn, _, err = dialConsole(t, c, testToken, "pve1", 100, port, ticket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := rfb.ClientLogin(conn, "not-it"); !errors.Is(err, rfb.ErrAuthFailed) {
		t.Fatalf("VNC login with a wrong password: %v", err)
	}
}
