// Package vmtest is test support for the VM packages (images, ipam, quota,
// compute): it starts simulated Proxmox zones (pkg/pvesim) with a go-proxmox
// client each, serves image files over loopback HTTP, creates a VDC's SDN
// networks the way flexplane does (tenancy ids and alias) and fills a
// catalog directory with a VDC, profiles and an image.
package vmtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	netpkg "github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Token is the Proxmox API token (USER@REALM!ID=SECRET) the zones of
// StartZone accept, for a test that builds a client of its own.
const Token = "root@pam!vmtest=vmtest-secret"

// Zone is a simulated zone and its client.
type Zone struct {
	Name    string
	Sim     *pvesim.Cluster
	Client  *proxmox.Client
	Storage string // the storage the test profiles map for this zone
}

// StartZone starts a simulated cluster named name with nodes nodes, closed
// at the end of the test, and a client of it (pkg/dev/pvetest); its nodes
// have file systems (pvesim Config.FileRoot) for snippets.
func StartZone(t testing.TB, name string, nodes int) *Zone {
	t.Helper()
	return StartZoneTimed(t, name, nodes, pvesim.Timing{})
}

// StartZoneTimed is StartZone with the simulator's task durations timing.
func StartZoneTimed(t testing.TB, name string, nodes int, timing pvesim.Timing) *Zone {
	t.Helper()
	sim, c := pvetest.Start(t, pvesim.Config{Cluster: name, Nodes: nodes, FileRoot: t.TempDir(), Timing: timing}, Token)
	return &Zone{Name: name, Sim: sim, Client: c, Storage: "local-lvm"}
}

// Ctx is a context that ends with the test (at most a minute).
func Ctx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// ImageServer serves a fake image file of size bytes over loopback HTTP and
// returns its URL and "sha256:<hex>" checksum.
func ImageServer(t testing.TB, size int) (url, checksum string) {
	t.Helper()
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i * 7)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	sum := sha256.Sum256(body)
	return srv.URL + "/image.qcow2", "sha256:" + hex.EncodeToString(sum[:])
}

// AddNetwork creates the network named network of vdc in zone z with
// cidr and gateway, as the product does (network.Create: the VDC's VXLAN
// zone, its VNet and subnet, applied). It returns the network's id.
func AddNetwork(t testing.TB, z *Zone, vdc, network, cidr, gateway string) string {
	t.Helper()
	n, err := netpkg.Create(Ctx(t), z.Client, netpkg.Spec{VDC: vdc, Name: network, CIDR: cidr, Gateway: gateway})
	if err != nil {
		t.Fatalf("vmtest: add network %s: %v", network, err)
	}
	return tenancy.NetworkRef{ZoneID: z.Name, VNet: n.VNet}.ID()
}

// Catalog opens a catalog directory with VDC vdc (the given quotas), a
// compute profile "small" (1 vCPU, 512 MiB) and "medium" (2 vCPU, 2048 MiB),
// a storage profile "ssd" mapping every zone to its Storage, and an image
// "tiny" at url with checksum.
func Catalog(t testing.TB, vdcs []string, q catalog.VDCQuotas, url, checksum string, zones ...*Zone) *catalog.DirStore {
	t.Helper()
	ctx := Ctx(t)
	st, err := catalog.OpenDir(t.TempDir())
	if err != nil {
		t.Fatalf("open catalog: %v", err)
	}
	objs := []catalog.Object{
		&catalog.ComputeProfile{ObjectMeta: catalog.ObjectMeta{Name: "small"}, ComputeProfileSpec: catalog.ComputeProfileSpec{VCPUs: 1, MemoryMiB: 512}},
		&catalog.ComputeProfile{ObjectMeta: catalog.ObjectMeta{Name: "medium"}, ComputeProfileSpec: catalog.ComputeProfileSpec{VCPUs: 2, MemoryMiB: 2048}},
		&catalog.Image{ObjectMeta: catalog.ObjectMeta{Name: "tiny"}, ImageSpec: catalog.ImageSpec{Version: "1", URL: url, Checksum: checksum, CloudInit: true}},
	}
	sp := &catalog.StorageProfile{ObjectMeta: catalog.ObjectMeta{Name: "ssd"}, StorageProfileSpec: catalog.StorageProfileSpec{Tier: "ssd", ReadMBps: 200, WriteMBps: 100}}
	for _, z := range zones {
		sp.Pools = append(sp.Pools, catalog.ZonePool{Zone: z.Name, Pool: z.Storage})
	}
	objs = append(objs, sp)
	for _, v := range vdcs {
		objs = append(objs, &catalog.VDC{ObjectMeta: catalog.ObjectMeta{Name: v}, VDCSpec: catalog.VDCSpec{Quotas: q}})
	}
	for _, o := range objs {
		*o.GetTypeMeta() = catalog.TypeMeta{APIVersion: catalog.APIVersion, Kind: o.ObjectKind()}
		if _, err := st.Create(ctx, o); err != nil {
			t.Fatalf("create %s: %v", o.GetObjectMeta().Name, err)
		}
	}
	return st
}

// BareGuest creates guest vmid on node straight through Proxmox (no disk, one NIC on
// vnet with a MAC of the VMID and cloud-init's ipconfig0 ip/24 with gateway gw) and
// starts it, waiting for both tasks.
func BareGuest(t testing.TB, c *proxmox.Client, node string, vmid int, vnet, ip, gw string) {
	t.Helper()
	for _, step := range []struct {
		path string
		body map[string]any
	}{
		{"/nodes/" + node + "/qemu", map[string]any{"vmid": vmid, "name": fmt.Sprintf("vm%d", vmid),
			"net0":      fmt.Sprintf("virtio=BC:24:11:00:%02X:%02X,bridge=%s", vmid/256%256, vmid%256, vnet),
			"ipconfig0": "ip=" + ip + "/24,gw=" + gw}},
		{fmt.Sprintf("/nodes/%s/qemu/%d/status/start", node, vmid), nil},
	} {
		var upid proxmox.UPID
		if err := c.Post(Ctx(t), step.path, step.body, &upid); err != nil {
			t.Fatalf("vmtest: %s: %v", step.path, err)
		}
		task := proxmox.NewTask(upid, c)
		if err := task.Wait(Ctx(t), 20*time.Millisecond, 30*time.Second); err != nil || task.IsFailed {
			t.Fatalf("vmtest: %s: %v %s", step.path, err, task.ExitStatus)
		}
	}
}
