package graph_test

import (
	"slices"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/devidp"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/shared"
)

// tenant is what a test on the shared harness has of its own: two VDCs and
// the users meshtest.DefaultUsers has for "red" and "blue" (alice a member
// of red, bob of blue, vera a viewer of red, and olga an admin of blue),
// and a network "lan" of blue's in zone alpha.
type tenant struct {
	red, blue, alice, bob, vera, olga string
	net                               string // blue's network in alpha
}

// sharedTenants names the tenants of sharedMesh, one per test using it.
var sharedTenants = []string{"console", "snapshots", "detail", "attacks", "kubeless", "ratelimit", "userdata", "placement", "sshkeys", "secgroups", "sgwriter", "disks", "pgroups", "sgnulls", "backups", "vdcimages", "vmimages", "bsched", "isos"}

// sharedMesh is the harness the tests share that need one zone ("alpha", of
// one node, whose storage "local" takes snippets, whose agent has a data
// listener that uploads take), the API and the catalog
// seedCatalog makes, and otherwise only
// VDCs of their own: it is started once for the package rather than once
// per test. Tenancy keeps them apart: each test acts as its tenant's users
// in its tenant's VDCs, where another test's resources answer NOT_FOUND.
// Tests that count what the whole orchestrator or agent did (metrics,
// audit events, traces), stop agents or restart the orchestrator start
// their own.
var sharedMesh = shared.New("mesh harness", func(t testing.TB) *meshtest.Harness {
	users := []devidp.User{{Username: "admin", Name: "Ada Admin", Roles: []string{auth.PlatformAdminRole}}}
	var vdcs []*catalog.VDC
	for _, name := range sharedTenants {
		tn := tenantNamed(name)
		users = append(users,
			devidp.User{Username: tn.alice, Name: "Alice of " + name, Roles: []string{auth.VDCRoleKey(tn.red, auth.RoleMember)}},
			devidp.User{Username: tn.bob, Name: "Bob of " + name, Roles: []string{auth.VDCRoleKey(tn.blue, auth.RoleMember)}},
			devidp.User{Username: tn.vera, Name: "Vera of " + name, Roles: []string{auth.VDCRoleKey(tn.red, auth.RoleViewer)}},
			devidp.User{Username: tn.olga, Name: "Olga of " + name, Roles: []string{auth.VDCRoleKey(tn.blue, auth.RoleAdmin)}})
		for _, v := range meshtest.DefaultVDCs() {
			v.Name = name + "-" + v.Name
			vdcs = append(vdcs, v)
		}
	}
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1, Snippets: true, DataListen: "127.0.0.1:0"}),
		meshtest.WithAPI(meshtest.APISpec{Users: users, VDCs: vdcs, SecurityGroupInterval: time.Second, BackupQuotaInterval: time.Second}))
	h.WaitOnline(t, 30*time.Second)
	seedCatalog(t, h, "alpha")
	// The one BACKUP profile of the tests that take backups: zone
	// alpha's "local" storage.
	h.GraphQL(t, "admin", "", `mutation { createStorageProfile(input: {name: "backups", tier: "backup", kind: BACKUP,
	  pools: [{zone: "alpha", pool: "local"}]}) { name kind } }`, nil).OK(t)
	return h
})

func tenantNamed(name string) tenant {
	return tenant{red: name + "-red", blue: name + "-blue", alice: name + "-alice", bob: name + "-bob", vera: name + "-vera", olga: name + "-olga"}
}

// sharedTenant is the shared harness and the tenant name of sharedTenants,
// with its network in blue created.
func sharedTenant(t *testing.T, name string) (*meshtest.Harness, tenant) {
	t.Helper()
	h, tn := sharedVDCs(t, name)
	tn.net = createNetworks(t, h, tn.bob, tn.blue, "alpha")["alpha"]
	return h, tn
}

// sharedVDCs is sharedTenant without the network.
func sharedVDCs(t *testing.T, name string) (*meshtest.Harness, tenant) {
	t.Helper()
	if !slices.Contains(sharedTenants, name) {
		t.Fatalf("no tenant %q in sharedTenants", name)
	}
	return sharedMesh.Get(t), tenantNamed(name)
}
