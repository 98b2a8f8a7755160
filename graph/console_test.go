package graph_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/support/rfb"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestConsoleEndToEnd opens a VM's console as the portal does: openConsole
// checks the VDC and answers a websocket path with a one-use ticket; the
// websocket reaches the VM's VNC server through the orchestrator, the mesh,
// the agent's Console RPC and simulated Proxmox's vncproxy/vncwebsocket.
// The client sees RFB 3.8 with no authentication (the agent logged in
// with the Proxmox ticket), the VM's name as the desktop's and its test
// picture. The ticket works once; a made-up one, another VDC (NOT_FOUND),
// and a stopped VM (CONFLICT) get no console. A service account's token
// opens it as a user's does, in its own VDC only.
func TestConsoleEndToEnd(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "console")
	var created struct{ Operation gqlOp }
	h.GraphQL(t, tn.bob, tn.blue, createVM, map[string]any{"in": map[string]any{"name": "screen", "zone": "alpha", "image": "tiny",
		"computeProfile": "small", "storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": tn.net}},
		"sshKeys": []string{sshKey}, "user": "bob"}}).OK(t).Into(t, "createVM", &created)
	vm := awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)

	const open = `mutation($id: ID!) { openConsole(id: $id) { path expiresAt } }`
	var s struct {
		Path      string
		ExpiresAt time.Time
	}
	h.GraphQL(t, tn.bob, tn.blue, open, map[string]any{"id": vm}).OK(t).Into(t, "openConsole", &s)
	if !strings.HasPrefix(s.Path, "/console/") || time.Until(s.ExpiresAt) <= 0 || time.Until(s.ExpiresAt) > time.Minute {
		t.Fatalf("openConsole: %+v", s)
	}
	ws := strings.Replace(h.Orchestrator.URL(), "http", "ws", 1)
	dial := func(path string) (net.Conn, int, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		c, resp, err := rfb.DialWebsocket(ctx, ws+path, nil, nil, 0)
		if resp != nil {
			return c, resp.StatusCode, err
		}
		return c, 0, err
	}
	conn, st, err := dial(s.Path)
	if err != nil {
		t.Fatalf("console websocket: %d %v", st, err)
	}
	defer conn.Close()
	if err := rfb.ClientNone(conn); err != nil {
		t.Fatalf("RFB handshake with the relay: %v", err)
	}
	si, err := rfb.ClientInit(conn)
	if err != nil {
		t.Fatal(err)
	}
	if si.Name != "screen" {
		t.Fatalf("desktop %q, want the VM's name", si.Name)
	}
	img, err := rfb.ReadFrame(conn, si)
	if err != nil {
		t.Fatal(err)
	}
	if string(img.Pix) != string(pvesim.ConsoleFrame("screen").Pix) {
		t.Fatalf("the frame is not the VM's test picture (first bar %v, want %v)", img.RGBAAt(40, 100), pvesim.ConsoleBar(0))
	}

	// The ticket worked once; a made-up one never does.
	for _, p := range []string{s.Path, "/console/made-up"} {
		if _, st, err := dial(p); err == nil || st != http.StatusForbidden {
			t.Errorf("%s: status %d, %v; want 403", p, st, err)
		}
	}
	conn.Close()
	refusalsLookAlike(t, h.Orchestrator.URL(), s.Path)

	// A service account of blue opens the console with its own token, as
	// a user's token does; in red it finds nothing.
	var sa struct{ Token string }
	h.GraphQL(t, "admin", tn.blue, `mutation { createServiceAccount(input: {name: "console", role: MEMBER}) { token } }`, nil).
		OK(t).Into(t, "createServiceAccount", &sa)
	meshtest.PostGraphQL(t, h.GraphQLURL(), "Bearer "+sa.Token, tn.blue, open, map[string]any{"id": vm}).OK(t).Into(t, "openConsole", &s)
	saConn, _, err := dial(s.Path)
	if err != nil {
		t.Fatalf("the service account's console: %v", err)
	}
	if err := rfb.ClientNone(saConn); err != nil {
		t.Fatalf("RFB handshake of the service account's console: %v", err)
	}
	saConn.Close()
	if got := meshtest.PostGraphQL(t, h.GraphQLURL(), "Bearer "+sa.Token, tn.red, open, map[string]any{"id": vm}).Code(t); got != "NOT_FOUND" {
		t.Errorf("the service account in another VDC: %s, want NOT_FOUND", got)
	}

	// Another VDC's member gets NOT_FOUND, a viewer (who may not open
	// consoles at all) FORBIDDEN, a stopped VM CONFLICT.
	for user, want := range map[string]string{tn.alice: "NOT_FOUND", tn.vera: "FORBIDDEN"} {
		if got := h.GraphQL(t, user, tn.red, open, map[string]any{"id": vm}).Code(t); got != want {
			t.Errorf("%s in %s: %s, want %s", user, tn.red, got, want)
		}
	}
	var op gqlOp
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { stopVM(id: $id) { id state } }`, map[string]any{"id": vm}).OK(t).Into(t, "stopVM", &op)
	poll.True(t, 30*time.Second, "the VM to stop", func() bool {
		var v struct{ Status string }
		h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { vm(id: $id) { status } }`, map[string]any{"id": vm}).OK(t).Into(t, "vm", &v)
		return v.Status == "STOPPED"
	})
	if got := h.GraphQL(t, tn.bob, tn.blue, open, map[string]any{"id": vm}).Code(t); got != "CONFLICT" {
		t.Errorf("console of a stopped VM: %s, want CONFLICT", got)
	}

	// A ticket that outlives its VM: the VM deleted and its VMID given to
	// a running guest of another VDC, the ticket opens nothing.
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { startVM(id: $id) { id } }`, map[string]any{"id": vm}).OK(t)
	poll.True(t, 30*time.Second, "the VM to run again", func() bool {
		var v struct{ Status string }
		h.GraphQL(t, tn.bob, tn.blue, `query($id: ID!) { vm(id: $id) { status } }`, map[string]any{"id": vm}).OK(t).Into(t, "vm", &v)
		return v.Status == "RUNNING"
	})
	h.GraphQL(t, tn.bob, tn.blue, open, map[string]any{"id": vm}).OK(t).Into(t, "openConsole", &s)
	node, err := base64.RawURLEncoding.DecodeString(strings.Split(strings.TrimPrefix(s.Path, "/console/"), ".")[1])
	if err != nil {
		t.Fatal(err)
	}
	ref, err := tenancy.ParseVMID(vm)
	if err != nil {
		t.Fatal(err)
	}
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { deleteVM(id: $id) { id } }`, map[string]any{"id": vm}).OK(t)
	pve := h.Clusters[0].Proxmox(t)
	guest := fmt.Sprintf("/nodes/%s/qemu/%d", node, ref.VMID)
	poll.Until(t, 30*time.Second, "the VMID given to a running guest of "+tn.red, func() error {
		var st struct{ Status string }
		if err := pve.Get(t.Context(), guest+"/status/current", &st); err != nil {
			// Gone: the guest of another VDC takes the VMID.
			err := pve.Post(t.Context(), fmt.Sprintf("/nodes/%s/qemu", node), map[string]any{"vmid": ref.VMID, "name": "reuser",
				"tags": tenancy.ManagedTag + ";" + tenancy.VDCTag(tn.red)}, nil)
			return fmt.Errorf("no guest %d (create: %v)", ref.VMID, err)
		}
		var cfg struct{ Tags string }
		if err := pve.Get(t.Context(), guest+"/config", &cfg); err != nil || !strings.Contains(cfg.Tags, tenancy.VDCTag(tn.red)) {
			return fmt.Errorf("guest %d is still the deleted VM's (tags %q, %v)", ref.VMID, cfg.Tags, err)
		}
		if st.Status != "running" {
			return fmt.Errorf("%s (start: %v)", st.Status, pve.Post(t.Context(), guest+"/status/start", map[string]any{}, nil))
		}
		return nil
	})
	if time.Until(s.ExpiresAt) < time.Second {
		t.Fatalf("the ticket expired (%s) before the VMID was reused: the check would prove nothing", s.ExpiresAt)
	}
	if _, st, err := dial(s.Path); err == nil || st != http.StatusForbidden {
		t.Errorf("the deleted VM's ticket on %s's guest of its VMID: status %d, %v; want 403", tn.red, st, err)
	}
}

// refusalsLookAlike: GET /console/{ticket} without a good ticket answers
// the same 403, byte for byte (the headers but Date too), whether the
// ticket names the VM's own agent (used) or with a made-up secret, an
// agent of its zone that does not exist, a zone that does not exist, or
// nothing at all: a caller without a ticket learns nothing of which agents
// or VMs there are.
func refusalsLookAlike(t *testing.T, base, used string) {
	t.Helper()
	parts := strings.Split(strings.TrimPrefix(used, "/console/"), ".") // zone, node, secret
	if len(parts) != 3 {
		t.Fatalf("ticket %q is not zone.node.secret", used)
	}
	enc := base64.RawURLEncoding.EncodeToString
	madeUp := strings.Repeat("ab", 32)
	type answer struct {
		Status int
		Header http.Header
		Body   string
	}
	get := func(path string) answer {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Header.Del("Date")
		return answer{resp.StatusCode, resp.Header, string(body)}
	}
	want := get(used)
	if want.Status != http.StatusForbidden {
		t.Fatalf("a used ticket: %+v, want 403", want)
	}
	for name, path := range map[string]string{
		"the VM's agent, a made-up secret":  "/console/" + parts[0] + "." + parts[1] + "." + madeUp,
		"an agent of the zone there is not": "/console/" + parts[0] + "." + enc([]byte("no-such-node")) + "." + madeUp,
		"a zone there is not":               "/console/" + enc([]byte("no-such-zone")) + "." + parts[1] + "." + madeUp,
		"no ticket at all":                  "/console/made-up",
	} {
		if got := get(path); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want the answer to a used ticket %+v", name, got, want)
		}
	}
}
