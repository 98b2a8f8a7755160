package meshtest_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/support/rfb"
)

// TestReplicasConsole: a console ticket opened through one replica opens
// the VM's console through another (the browser's websocket reaches
// whichever replica the Service picks), and only once, at any replica.
func TestReplicasConsole(t *testing.T) {
	t.Parallel()
	rs := startReplicas(t, pvesim.Timing{})
	alice := rs.token("alice")
	a := rs.waitLeader(30*time.Second, nil)
	lan := rs.seedRed(a)
	var created struct {
		CreateVM struct{ Operation struct{ ID string } }
	}
	if err := rs.graphql(a, alice, "red", `mutation($in: CreateVMInput!) { createVM(input: $in) { operation { id } } }`, map[string]any{"in": map[string]any{
		"name": "screen", "zone": "ha", "image": "tiny", "computeProfile": "small", "storageProfile": "ssd", "diskGiB": 4,
		"nics": []any{map[string]any{"network": lan}}, "user": "alice"}}, &created); err != nil {
		t.Fatal(err)
	}
	var vm string
	poll.Until(t, 2*time.Minute, "the VM running", func() error {
		var d struct {
			VMs []struct{ ID, Name, Status string }
		}
		if err := rs.graphql(a, alice, "red", `{ vms { id name status } }`, nil, &d); err != nil {
			return err
		}
		for _, v := range d.VMs {
			if v.Name == "screen" && v.Status == "RUNNING" {
				vm = v.ID
				return nil
			}
		}
		return fmt.Errorf("vms: %+v", d.VMs)
	})

	var open struct{ OpenConsole struct{ Path string } }
	if err := rs.graphql(a, alice, "red", `mutation($id: ID!) { openConsole(id: $id) { path } }`, map[string]any{"id": vm}, &open); err != nil {
		t.Fatal(err)
	}
	dial := func(r *replica) (int, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		c, resp, err := rfb.DialWebsocket(ctx, "ws"+strings.TrimPrefix(r.url(), "http")+open.OpenConsole.Path, nil, nil, 0)
		if err != nil {
			if resp != nil {
				return resp.StatusCode, err
			}
			return 0, err
		}
		defer c.Close()
		if err := rfb.ClientNone(c); err != nil {
			return 0, err
		}
		si, err := rfb.ClientInit(c)
		if err == nil && si.Name != "screen" {
			err = fmt.Errorf("desktop %q, want the VM's name", si.Name)
		}
		return http.StatusSwitchingProtocols, err
	}
	var b *replica
	for _, r := range rs.replicas {
		if r != a {
			b = r
			break
		}
	}
	if st, err := dial(b); err != nil {
		t.Fatalf("the ticket of %s at %s: %d %v", a.name, b.name, st, err)
	}
	for _, r := range rs.replicas {
		if st, err := dial(r); st != http.StatusForbidden {
			t.Errorf("the used ticket at %s: %d %v, want 403", r.name, st, err)
		}
	}
}
