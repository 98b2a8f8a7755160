package graph_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// imageTemplate is the template guest of blue's image name in the zone of
// c, and its first disk's volume; false for none.
func imageTemplate(t *testing.T, c *proxmox.Client, name string) (pveapi.Resource, string, bool) {
	t.Helper()
	guests, err := pveapi.Guests(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range guests {
		if g.Name == "fp-template-blue."+name && g.Template == 1 {
			cfg, err := pveapi.GuestConfig(t.Context(), c, g.Node, g.VMID)
			if err != nil {
				t.Fatal(err)
			}
			vol, _, _ := strings.Cut(cfg.Str("scsi0"), ",")
			return g, vol, true
		}
	}
	return pveapi.Resource{}, "", false
}

// plantedCopy makes in the zone of dst the guest a copy of blue's image
// name from the zone of src is while its copier copies: tagged as the
// image's and fp-incoming, with an empty disk, its copier's last beat at
// beat (a copy whose copier was killed midway when long past). It returns
// the guest's node, VMID and description.
func plantedCopy(t *testing.T, src, dst *proxmox.Client, name string, beat time.Time) (cut struct {
	Node        string
	VMID        int
	description string
}) {
	t.Helper()
	ctx := t.Context()
	tpl, vol, ok := imageTemplate(t, src, name)
	if !ok {
		t.Fatalf("no template of %s to copy", name)
	}
	cfg, err := pveapi.GuestConfig(ctx, src, tpl.Node, tpl.VMID)
	if err != nil {
		t.Fatal(err)
	}
	vmid, err := pveapi.NextID(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	cut.Node, cut.VMID = "pve1", vmid
	cut.description = "copy alive at " + beat.UTC().Format(time.RFC3339Nano)
	if _, err := pveapi.Run(ctx, dst, "POST", "/nodes/pve1/qemu", map[string]any{"vmid": vmid, "name": tpl.Name,
		"tags": cfg.Str("tags") + ";fp-incoming", "scsi0": strings.SplitN(vol, ":", 2)[0] + ":1",
		"description": cut.description}); err != nil {
		t.Fatal(err)
	}
	return cut
}

// shaPrefix is the SHA-256 of the first n bytes of path, and whether the
// rest of it is zeros.
func shaPrefix(t *testing.T, path string, n int64) (string, bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyN(h, f, n); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil)), len(bytes.Trim(rest, "\x00")) == 0
}

// TestStageVDCImage: a member stages the VDC's image, uploaded into
// alpha, into beta: the template is copied agent to agent (its disk's
// bytes arrive), the image's state per zone shows it STAGING then
// STAGED, a VM of the VDC is created from it in beta, and staging it
// again changes nothing; copies cut off by a crash (their copier's beat
// long past) are removed by the orchestrator's periodic pass, with no
// request, and the image copied afresh, while a copy still beating is left
// alone; another VDC's member gets NOT_FOUND, an unknown
// zone is BAD_USER_INPUT, a viewer FORBIDDEN, and nothing is left marked
// for a copy. Deleting the image removes its templates in both zones.
func TestStageVDCImage(t *testing.T) {
	t.Parallel()
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}, meshtest.ClusterSpec{Name: "beta", Nodes: 1}),
		meshtest.WithAPI(meshtest.APISpec{ImageCopyRecoverInterval: 200 * time.Millisecond}))
	h.WaitOnline(t, 30*time.Second)
	nets := seedVMs(t, h, "alpha", "beta")
	ctx := t.Context()
	ac := h.Orchestrator.Zones().Client(h.Zone(t, h.Clusters[0]).ID)
	bc := h.Orchestrator.Zones().Client(h.Zone(t, h.Clusters[1]).ID)

	file := make([]byte, 2<<20+4321)
	for i := range file {
		file[i] = byte(i*7 + i>>11)
	}
	r, err := upload(t, h, "bob", "blue", map[string]any{"name": "app", "format": "RAW", "cloudInit": true, "zone": "alpha"}, bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	r.OK(t)

	const stage = `mutation($n: String!, $z: String!) { stageVDCImage(name: $n, zone: $z) { zone state reason } }`
	type zoneState struct{ Zone, State string }
	states := func() map[string]string {
		t.Helper()
		var img struct{ VDCZones []zoneState }
		h.GraphQL(t, "bob", "blue", `{ image(name: "app") { vdcZones { zone state } } }`, nil).OK(t).Into(t, "image", &img)
		out := map[string]string{}
		for _, z := range img.VDCZones {
			out[z.Zone] = z.State
		}
		return out
	}
	if got := states(); got["alpha"] != "STAGED" || got["beta"] != "ABSENT" {
		t.Fatalf("before staging: %v", got)
	}
	// Refusals change nothing.
	if r := h.GraphQL(t, "alice", "red", stage, map[string]any{"n": "app", "z": "beta"}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("red stages blue's image: %s", r.Raw)
	}
	if r := h.GraphQL(t, "bob", "blue", stage, map[string]any{"n": "app", "z": "gamma"}); r.Code(t) != "BAD_USER_INPUT" || fieldOf(t, r) != "zone" {
		t.Errorf("an unknown zone: %s", r.Raw)
	}
	if r := h.GraphQL(t, "vera", "red", stage, map[string]any{"n": "app", "z": "beta"}); r.Code(t) != "FORBIDDEN" {
		t.Errorf("a viewer stages: %s", r.Raw)
	}
	var st zoneState
	h.GraphQL(t, "bob", "blue", stage, map[string]any{"n": "app", "z": "alpha"}).OK(t).Into(t, "stageVDCImage", &st)
	if st.State != "STAGED" {
		t.Errorf("staging where it is: %+v", st)
	}
	if got := states(); got["beta"] != "ABSENT" {
		t.Fatalf("after refusals: %v", got)
	}
	// A zone dedicated to another VDC does not exist for blue: its image's
	// state there is not told, and staging into it is refused as into a
	// zone that does not exist.
	dedicate := `mutation($to: [String!]) { updateZone(input: {name: "beta", dedicatedTo: $to}) { name } }`
	h.GraphQL(t, "admin", "", dedicate, map[string]any{"to": []string{"red"}}).OK(t)
	if got := states(); len(got) != 1 || got["alpha"] != "STAGED" {
		t.Errorf("with beta dedicated to red: %v", got)
	}
	if r := h.GraphQL(t, "bob", "blue", stage, map[string]any{"n": "app", "z": "beta"}); r.Code(t) != "BAD_USER_INPUT" || fieldOf(t, r) != "zone" {
		t.Errorf("staging into a zone dedicated to red: %s", r.Raw)
	}
	h.GraphQL(t, "admin", "", dedicate, map[string]any{"to": []string{}}).OK(t)

	// Copies in beta, planted as their copiers leave them: one still
	// beating, and after it (a higher VMID) one cut off by a crash, its
	// last beat long past. The image is STAGING there; with no request,
	// the orchestrator's periodic pass (over a zone's guests in VMID
	// order) looks at the beating copy, leaves it, and removes the one cut
	// off.
	gone := func(c *proxmox.Client, node string, vmid int, description string) bool {
		// (A new copy may have taken the VMID of the removed one.)
		cfg, err := pveapi.GuestConfig(ctx, c, node, vmid)
		if err != nil && !pveapi.IsNotFound(err) {
			t.Fatal(err)
		}
		return err != nil || cfg.Str("description") != description
	}
	alive := plantedCopy(t, ac, bc, "app", time.Now())
	cut := plantedCopy(t, ac, bc, "app", time.Now().Add(-time.Hour))
	if alive.VMID >= cut.VMID {
		t.Fatalf("the beating copy %d is not before the one cut off %d", alive.VMID, cut.VMID)
	}
	if got := states(); got["beta"] != "STAGING" {
		t.Fatalf("with copies under way: %v", got)
	}
	poll.True(t, 30*time.Second, "the copy cut off removed", func() bool { return gone(bc, cut.Node, cut.VMID, cut.description) })
	if gone(bc, alive.Node, alive.VMID, alive.description) {
		t.Fatal("the copy still beating was removed")
	}
	if got := states(); got["beta"] != "STAGING" {
		t.Fatalf("with the copy still beating: %v", got)
	}
	// Its copier dies too (its beat now long past): the pass removes it
	// and copies the image afresh, to STAGED, still with no request.
	old := "copy alive at " + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	if _, err := pveapi.Run(ctx, bc, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/config", alive.Node, alive.VMID), map[string]any{"description": old}); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 60*time.Second, "app staged in beta", func() bool { return states()["beta"] == "STAGED" })
	if !gone(bc, alive.Node, alive.VMID, old) {
		t.Error("the second copy cut off is left")
	}
	h.GraphQL(t, "bob", "blue", stage, map[string]any{"n": "app", "z": "beta"}).OK(t).Into(t, "stageVDCImage", &st)
	if st.State != "STAGED" {
		t.Errorf("staging again: %+v", st)
	}

	// The copy holds the source's bytes (then zeros, to its whole GiB).
	src, srcVol, ok := imageTemplate(t, ac, "app")
	if !ok {
		t.Fatal("no template of app in alpha")
	}
	dst, dstVol, ok := imageTemplate(t, bc, "app")
	if !ok {
		t.Fatal("no template of app in beta")
	}
	srcPath := diskPath(t, ctx, ac, src.Node, srcVol)
	fi, err := os.Stat(srcPath)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := shaPrefix(t, srcPath, fi.Size())
	if got, zeros := shaPrefix(t, diskPath(t, ctx, bc, dst.Node, dstVol), fi.Size()); got != want || !zeros {
		t.Errorf("beta's template disk: sha %s (rest zeros: %v), alpha's %s", got, zeros, want)
	}
	for _, g := range []struct {
		c *proxmox.Client
		r pveapi.Resource
	}{{ac, src}, {bc, dst}} {
		cfg, err := pveapi.GuestConfig(ctx, g.c, g.r.Node, g.r.VMID)
		if err != nil {
			t.Fatal(err)
		}
		if tags := cfg.Str("tags"); strings.Contains(tags, "fp-image-out") || strings.Contains(tags, "fp-incoming") {
			t.Errorf("template %d is left marked: %s", g.r.VMID, tags)
		}
	}

	var created struct{ Operation gqlOp }
	h.GraphQL(t, "bob", "blue", createVM, map[string]any{"in": map[string]any{"name": "in-beta", "zone": "beta", "image": "app", "computeProfile": "small",
		"storageProfile": "ssd", "diskGiB": 1, "nics": []any{map[string]any{"network": nets["beta"]}}, "sshKeys": []string{sshKey}, "user": "bob"}}).
		OK(t).Into(t, "createVM", &created)
	vm := awaitCreate(t, h, "bob", "blue", created.Operation.ID)
	h.GraphQL(t, "bob", "blue", `mutation($id: ID!) { deleteVM(id: $id) { id } }`, map[string]any{"id": vm}).OK(t)
	poll.True(t, 30*time.Second, "the VM deleted", func() bool {
		return h.GraphQL(t, "bob", "blue", `query($id: ID!) { vm(id: $id) { id } }`, map[string]any{"id": vm}).Code(t) == "NOT_FOUND"
	})
	h.GraphQL(t, "bob", "blue", `mutation { deleteVDCImage(name: "app") { name } }`, nil).OK(t)
	for _, c := range []*proxmox.Client{ac, bc} {
		if _, _, ok := imageTemplate(t, c, "app"); ok {
			t.Error("a template of the deleted image is left")
		}
	}
}
