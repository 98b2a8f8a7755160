package portal_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/graph/server"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/devidp"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/portal"
	"github.com/flexplane/flexplane/pkg/sshkey"
	"github.com/flexplane/flexplane/pkg/vdc"
)

const clientID = "flexplane-portal"

// TestBrowser runs the portal's browser tests (portal/tests, playwright-core
// driving Debian's chromium) against a real backend on loopback: the
// development OpenID provider, the GraphQL API over a catalog directory, and
// this package serving the built portal. `make test` builds the portal and
// installs the browser first.
func TestBrowser(t *testing.T) {
	t.Parallel()
	root, public := browserPrerequisites(t)

	// The portal's origin must be known before the provider starts: it is
	// the client's redirect URI.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := "http://" + ln.Addr().String()

	users := []devidp.User{
		{Username: "admin", Password: "admin-pw", Name: "Ada Admin", Email: "admin@example.test", Roles: []string{auth.PlatformAdminRole}},
		{Username: "alice", Password: "alice-pw", Name: "Alice Member", Email: "alice@example.test", Roles: []string{
			auth.VDCRoleKey("prod", auth.RoleMember), auth.VDCRoleKey("dev", auth.RoleMember)}},
		{Username: "bob", Password: "bob-pw", Name: "Bob", Roles: []string{auth.VDCRoleKey("staging", auth.RoleMember)}},
	}
	idp, err := devidp.New(devidp.Config{
		KeyDir: t.TempDir(),
		Users:  users,
		Clients: []devidp.Client{{
			ID:                     clientID,
			RedirectURIs:           []string{origin + "/auth/callback"},
			PostLogoutRedirectURIs: []string{origin + "/"},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := idp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idp.Close() })

	ctx := context.Background()
	store, err := catalog.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	seedCatalog(t, ctx, store)
	verifier, err := auth.NewVerifier(ctx, auth.Config{Issuer: idp.Issuer(), Audience: clientID})
	if err != nil {
		t.Fatal(err)
	}
	var logs io.Writer = io.Discard
	if testing.Verbose() {
		logs = os.Stderr
	}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	vdcs, err := vdc.New(vdc.Config{Store: store, Tokens: auth.ServiceAccountTokens{}, Backups: &e2eBackups{gone: map[string]bool{}}})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := sshkey.New(sshkey.Config{Catalog: store})
	if err != nil {
		t.Fatal(err)
	}
	apiHandler, err := server.New(server.Config{
		Verifier: verifier,
		Resolver: &graph.Resolver{Catalog: store, Estate: estate.New(estate.Config{Catalog: store}), VDCs: vdcs, SSHKeys: keys,
			Tenant: graph.Tenant{Name: "ACME Cloud", Domain: "cloud.acme.test"}},
		Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	portalHandler, err := portal.New(portal.Config{Dir: public, Issuer: idp.Issuer(), ClientID: clientID, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/graphql", apiHandler)
	mux.Handle("/", portalHandler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() { srv.Close() })

	artifacts := filepath.Join(root, "test-artifacts")
	t.Logf("portal %s, issuer %s; screenshots in %s", origin, idp.Issuer(), artifacts)
	start := runBrowserTests(t, root, []string{
		"PORTAL_URL=" + origin,
		"OIDC_ISSUER=" + idp.Issuer(),
		"PORTAL_ADMIN_USER=admin", "PORTAL_ADMIN_PASSWORD=admin-pw",
		"PORTAL_MEMBER_USER=alice", "PORTAL_MEMBER_PASSWORD=alice-pw",
		"PORTAL_MEMBER_VDCS=prod,dev",
		"PORTAL_ARTIFACTS=" + artifacts,
	}, "tests/portal.test.mjs", "tests/settings.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "signin", "home", "images", "compute-profiles", "storage-profiles", "vdcs", "phone-menu",
		"vdc-settings", "vdc-settings-token")
}

// browserPrerequisites fails the test when the built portal, its packages, the browser or node are missing; it
// returns the portal's source directory and its build, and makes sure its
// test-artifacts directory exists.
func browserPrerequisites(t *testing.T) (root, public string) {
	t.Helper()
	root, public = browsertest.Prerequisites(t, filepath.Join("..", ".."))
	if err := os.MkdirAll(filepath.Join(root, "test-artifacts"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root, public
}

// runBrowserTests runs the node test files (relative to root) with env
// added to the environment and fails the test when they fail.
func runBrowserTests(t *testing.T, root string, env []string, files ...string) time.Time {
	t.Helper()
	return browsertest.Run(t, root, 4*time.Minute, env, files...)
}

// seedCatalog creates what the demo stack has: three VDCs (prod with a
// quota of 4 public addresses, holding one of fra1's external network),
// two images, compute and storage profiles.
func seedCatalog(t *testing.T, ctx context.Context, store *catalog.DirStore) {
	t.Helper()
	for _, v := range []struct {
		name, desc string
		vcpus      int
	}{{"prod", "Production workloads", 64}, {"dev", "Development sandbox", 16}, {"staging", "Staging", 32}} {
		o := &catalog.VDC{}
		o.Name, o.Description = v.name, v.desc
		o.Quotas = catalog.VDCQuotas{VCPUs: v.vcpus, MemoryMiB: v.vcpus * 2048, StorageGiB: 1000, VMs: 20}
		if v.name == "prod" {
			four := 4
			o.Quotas.PublicAddresses = &four
		}
		mustCreate(t, ctx, store, o)
	}
	// fra1's external network, one address of whose pool prod holds.
	en := &catalog.ExternalNetwork{ExternalNetworkSpec: catalog.ExternalNetworkSpec{Bridge: "vmbr0", CIDR: "203.0.113.0/24",
		Gateway: "203.0.113.254", PoolStart: "203.0.113.10", PoolEnd: "203.0.113.20"}}
	en.Name = "fra1"
	mustCreate(t, ctx, store, en)
	if _, err := catalog.AllocatePublicAddress(ctx, store, "fra1", "prod", catalog.UseOneToOne, netip.Addr{}, "publicAddress"); err != nil {
		t.Fatal(err)
	}
	for _, i := range []struct{ name, version, desc string }{
		{"debian-12", "20261101", "Debian 12 (bookworm) generic cloud image"},
		{"ubuntu-24.04", "20261105", "Ubuntu 24.04 LTS server cloud image"},
	} {
		o := &catalog.Image{}
		o.Name, o.Version, o.Description, o.CloudInit = i.name, i.version, i.desc, true
		o.URL = "http://images.flexplane.test/" + i.name + ".qcow2"
		o.Checksum = "sha256:" + strings.Repeat("ab", 32)
		mustCreate(t, ctx, store, o)
	}
	for _, p := range []struct {
		name       string
		vcpus, mem int
	}{{"small", 1, 2048}, {"medium", 4, 8192}, {"large", 8, 16384}} {
		o := &catalog.ComputeProfile{}
		o.Name, o.VCPUs, o.MemoryMiB = p.name, p.vcpus, p.mem
		mustCreate(t, ctx, store, o)
	}
	for _, p := range []struct{ name, tier, pool string }{{"ssd-standard", "ssd", "local-lvm"}, {"nvme-performance", "nvme", "nvme-pool"}} {
		o := &catalog.StorageProfile{}
		o.Name, o.Tier = p.name, p.tier
		o.Pools = []catalog.ZonePool{{Zone: "fra1", Pool: p.pool}, {Zone: "hel1", Pool: p.pool}}
		mustCreate(t, ctx, store, o)
	}
}

func mustCreate[P catalog.ObjectPtr[T], T any](t *testing.T, ctx context.Context, store catalog.Store, obj P) {
	t.Helper()
	if _, err := catalog.Create(ctx, store, obj); err != nil {
		t.Fatal(err)
	}
}

// e2eBackups are two backups of every VDC the browser test makes (named
// e2e-...), until deleted: this harness has no zones to take them in.
type e2eBackups struct {
	mu   sync.Mutex
	gone map[string]bool // "vdc/id" deleted
}

func (b *e2eBackups) VDCBackups(_ context.Context, vdc string) ([]string, int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for _, id := range []string{"b1", "b2"} {
		if strings.HasPrefix(vdc, "e2e-") && !b.gone[vdc+"/"+id] {
			ids = append(ids, id)
		}
	}
	return ids, 0, nil
}

func (b *e2eBackups) DeleteBackup(_ context.Context, vdc, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gone[vdc+"/"+id] = true
	return nil
}

// UsedBytes: the harness's backups take no room.
func (b *e2eBackups) UsedBytes(context.Context, string) (int64, error) { return 0, nil }
