// Package catalogtest is the behaviour every catalog.Store must have,
// as tests any backend runs against itself (Run): conditional writes and
// conflicts, every kind round-tripped, validation that changes nothing,
// concurrent updates across two stores (two replicas) with one winner, and
// Export/Import between backends without loss.
package catalogtest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// Open returns two stores over one new, empty catalog (as two
// orchestrator replicas sharing it).
type Open func(t *testing.T) (a, b catalog.Store)

// Run runs the behaviour tests on stores from open, in parallel subtests.
func Run(t *testing.T, open Open) {
	tests := map[string]func(*testing.T, Open){
		"CRUDAndConflicts":           crudAndConflicts,
		"AllKindsRoundTrip":          allKindsRoundTrip,
		"ValidationChangesNothing":   validationChangesNothing,
		"ConcurrentUpdates":          concurrentUpdates,
		"EveryFieldKept":             everyFieldKept,
		"PublicAddressesOnce":        publicAddressesOnce,
		"Secrets":                    secrets,
		"DeleteEdgeGateway":          deleteEdgeGateway,
		"KubeEndpointsOnce":          kubeEndpointsOnce,
		"AccessChangesReachReplicas": accessChangesReachReplicas,
		"SSHKeysPerSubject":          sshKeysPerSubject,
		"VDCZoneSetNeverLoses":       vdcZoneSetNeverLoses,
	}
	for name, f := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, open)
		})
	}
}

// VDC returns a valid VDC.
func VDC(name string, vcpus int) *catalog.VDC {
	v := &catalog.VDC{}
	v.Name = name
	v.Description = "test VDC"
	v.Quotas = catalog.VDCQuotas{VCPUs: vcpus, MemoryMiB: 65536, StorageGiB: 1000, VMs: 10}
	return v
}

func vdc(name string, vcpus int) *catalog.VDC { return VDC(name, vcpus) }

// Sample returns one object of every kind with every field set, the VDC
// with reservations and counts whose times have nanoseconds.
func Sample() []catalog.Object {
	at := time.Date(2026, 12, 1, 10, 11, 12, 123456789, time.UTC)
	v := VDC("full", 8)
	v.Status.Reservations = []catalog.QuotaReservation{
		{ID: "op-1", VCPUs: 2, MemoryMiB: 2048, StorageGiB: 20, Expires: at, Zone: "fra1", VMID: 101},
		{ID: "op-2", VCPUs: 1, MemoryMiB: 512, StorageGiB: 5, Expires: at.Add(time.Minute)},
	}
	v.Status.Counted = map[string]catalog.ZoneCount{"fra1": {VCPUs: 4, MemoryMiB: 4096, StorageGiB: 40, VMs: 2, At: at}}
	v.Status.Zones, v.Status.ZonesComplete = []string{"fra1", "hel1"}, true
	v.Members = []catalog.MemberBinding{{User: "alice", Role: catalog.RoleAdmin}, {User: "bob", Role: catalog.RoleViewer}}
	later, used := at.Add(time.Hour), at.Add(time.Minute)
	v.ServiceAccounts = []catalog.ServiceAccount{
		{ID: "sa-0123456789abcdef0123", Name: "ci", Role: catalog.RoleMember, CreatedBy: "alice-sub", CreatedAt: at, ExpiresAt: &later,
			LastUsedAt: &used, TokenHash: "sha256:" + strings.Repeat("0f", 32), PreviousTokenHash: "sha256:" + strings.Repeat("a1", 32), PreviousUntil: &later},
		{ID: "sa-0123456789abcdef0124", Name: "reader", Role: catalog.RoleViewer, CreatedAt: at, TokenHash: "sha256:" + strings.Repeat("1e", 32)},
	}
	cp := &catalog.ComputeProfile{}
	cp.Name, cp.Description, cp.VCPUs, cp.MemoryMiB = "medium", "4 by 8", 4, 8192
	sp := &catalog.StorageProfile{}
	sp.Name, sp.Description, sp.Tier, sp.ReadMBps, sp.WriteMBps = "ssd-standard", "SSD", "ssd", 500, 250
	sp.Pools = []catalog.ZonePool{{Zone: "fra1", Pool: "local-lvm"}, {Zone: "hel1", Pool: "ceph.ssd"}}
	img := &catalog.Image{}
	img.Name, img.Description, img.Version, img.URL, img.CloudInit = "ubuntu-24.04", "Noble", "20251117", "https://images.example/noble.qcow2", true
	img.Checksum = "sha256:" + strings.Repeat("ab", 32)
	zp := &catalog.ZonePolicy{}
	zp.Name, zp.Region, zp.DedicatedTo = "fra1", "eu-central", []string{"full", "other"}
	zp.Maintenance = []catalog.HostInMaintenance{{Host: "pve1", Since: "2026-01-02T03:04:05Z",
		Failed: []catalog.DrainFailure{{VMID: 101, Message: "VM web (101) cannot move: no host can take it"}}}}
	en := &catalog.ExternalNetwork{}
	en.Name, en.Description, en.Bridge, en.CIDR, en.Gateway = "fra1", "transit", "vmbr0", "203.0.113.0/24", "203.0.113.1"
	en.PoolStart, en.PoolEnd = "203.0.113.10", "203.0.113.99"
	en.Status.Allocations = []catalog.PublicAllocation{{Address: "203.0.113.10", VDC: "full", Use: catalog.UseGateway},
		{Address: "203.0.113.11", VDC: "full", Use: catalog.UseOneToOne}}
	gw := &catalog.EdgeGateway{}
	gw.Name, gw.VDC, gw.Zone, gw.PublicAddress, gw.EgressMbps, gw.IngressMbps = "full.fra1", "full", "fra1", "203.0.113.10", 100, 50
	gw.FirewallRules = []catalog.FirewallRule{
		{ID: "r1", Description: "web", Direction: catalog.DirectionInbound, Protocol: "tcp", FromPort: 80, ToPort: 443, Source: "0.0.0.0/0", Destination: "10.1.0.0/24", Action: catalog.ActionAllow},
		{ID: "r2", Direction: catalog.DirectionOutbound, Protocol: "any", Action: catalog.ActionDeny}}
	gw.PortForwards = []catalog.PortForward{{ID: "p1", Protocol: "tcp", PublicAddress: "203.0.113.10", PublicPort: 8080, VMID: 101, TargetPort: 80}}
	gw.OneToOne = []catalog.OneToOneAddress{{ID: "o1", PublicAddress: "203.0.113.11", VMID: 102}}
	gw.KubeEndpoints = []catalog.KubeEndpoint{{Cluster: "full-k8s", Address: "10.1.0.1", Port: 6443, Claimed: time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)}}
	en.Status.Allocations = append(en.Status.Allocations, catalog.PublicAllocation{Address: "203.0.113.12", VDC: "full", Use: catalog.UseLoadBalancer})
	lb := &catalog.LoadBalancer{}
	lb.Name, lb.VDC, lb.Zone, lb.Description, lb.PublicAddress = "full.web", "full", "fra1", "the shop", "203.0.113.12"
	lb.Pools = []catalog.LBPool{
		{Name: "app", Backends: []catalog.LBBackend{{VMID: 101, Port: 8080}, {VMID: 102, Port: 8080}},
			HealthCheck: &catalog.LBHealthCheck{Protocol: catalog.LBHealthHTTP, Path: "/healthz", IntervalSeconds: 5, TimeoutSeconds: 2, HealthyThreshold: 2, UnhealthyThreshold: 3}},
		{Name: "static", Backends: []catalog.LBBackend{{VMID: 103, Port: 80}}}}
	lb.Certificates = []catalog.LBCertificate{{Name: "shop", DNSNames: []string{"shop.example", "*.shop.example"}, NotAfter: at, Fingerprint: strings.Repeat("0f", 32)}}
	lb.Listeners = []catalog.LBListener{
		{Name: "tcp", Protocol: catalog.LBProtocolTCP, Port: 5432, Pool: "app"},
		{Name: "web", Protocol: catalog.LBProtocolHTTP, Port: 80, Pool: "app", Routes: []catalog.LBRoute{{PathPrefix: "/static/", Pool: "static"}}},
		{Name: "secure", Protocol: catalog.LBProtocolHTTPS, Port: 443, Pool: "app", Certificates: []string{"shop"}, ServerNames: []string{"shop.example"}},
		{Name: "pass", Protocol: catalog.LBProtocolTLSPassthrough, Port: 8443, SNIRoutes: []catalog.LBSNIRoute{{ServerName: "db.shop.example", Pool: "app"}}}}
	v.DefaultSecurityGroup = "web"
	sg := SecurityGroup("full", "web")
	sg.Description = "the shop's web servers"
	sg.Rules = append(sg.Rules,
		catalog.SecurityRule{Direction: catalog.DirectionInbound, Protocol: catalog.SecurityProtocolUDP, Ports: "8000:8100,9000", PeerGroup: "db", Description: "metrics"},
		catalog.SecurityRule{Direction: catalog.DirectionOutbound, Protocol: catalog.SecurityProtocolICMP, PeerCIDR: "2001:db8::/32"})
	keys := &catalog.UserSSHKeys{}
	keys.Subject = "alice@example"
	keys.Name = catalog.UserSSHKeysName(keys.Subject)
	keys.Keys = []catalog.UserSSHKey{
		{Name: "laptop", PublicKey: SSHKey(1, "alice@laptop"), Created: at},
		{Name: "backup", PublicKey: `command="/usr/bin/backup",from="10.0.0.0/8",no-pty ` + SSHKey(2, ""), Created: at.Add(time.Hour)}}
	pg := PlacementGroup("full", "db", "fra1", catalog.PlacementSpread)
	pg.BestEffort = true
	return []catalog.Object{v, cp, sp, img, zp, en, gw, lb, sg, keys, pg}
}

// SecurityGroup returns a valid security group of vdc with one rule.
func SecurityGroup(vdc, name string) *catalog.SecurityGroup {
	g := &catalog.SecurityGroup{}
	g.Name, g.VDC = catalog.SecurityGroupName(vdc, name), vdc
	g.Rules = []catalog.SecurityRule{{Direction: catalog.DirectionInbound, Protocol: catalog.SecurityProtocolTCP, Ports: "443", PeerCIDR: "10.0.0.0/8"}}
	return g
}

// PlacementGroup returns a valid placement group of vdc in zone.
func PlacementGroup(vdc, name, zone, policy string) *catalog.PlacementGroup {
	g := &catalog.PlacementGroup{}
	g.Name, g.VDC, g.Zone, g.Policy = catalog.PlacementGroupName(vdc, name), vdc, zone, policy
	return g
}

// secrets: a store that keeps secrets (catalog.SecretStore) returns what
// was put, to the other store too, replaces it, and forgets it on delete.
func secrets(t *testing.T, open Open) {
	ctx := t.Context()
	a, b := open(t)
	sa, ok1 := a.(catalog.SecretStore)
	sb, ok2 := b.(catalog.SecretStore)
	if !ok1 || !ok2 {
		t.Fatalf("%T does not keep secrets", a)
	}
	if _, err := sa.GetSecret(ctx, "lb.none.x"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("get a missing secret: %v, want not found", err)
	}
	for _, v := range []string{"one", "two"} {
		if err := sa.PutSecret(ctx, "lb.full.web", map[string][]byte{"shop.key": []byte(v + "\x00\xff")}); err != nil {
			t.Fatal(err)
		}
		got, err := sb.GetSecret(ctx, "lb.full.web")
		if err != nil || string(got["shop.key"]) != v+"\x00\xff" || len(got) != 1 {
			t.Fatalf("secret read back: %q, %v", got, err)
		}
	}
	if err := sb.DeleteSecret(ctx, "lb.full.web"); err != nil {
		t.Fatal(err)
	}
	if err := sb.DeleteSecret(ctx, "lb.full.web"); err != nil {
		t.Fatalf("delete a deleted secret: %v", err)
	}
	if _, err := sa.GetSecret(ctx, "lb.full.web"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("a deleted secret: %v, want not found", err)
	}
}

// everyFieldKept: what is written is what is read, field for field, by
// the other store too.
func everyFieldKept(t *testing.T, open Open) {
	ctx := t.Context()
	s, other := open(t)
	for _, o := range Sample() {
		created, err := s.Create(ctx, o)
		if err != nil {
			t.Fatalf("create %s: %v", o.ObjectKind(), err)
		}
		for _, st := range []catalog.Store{s, other} {
			got, err := Await(t, st, o.ObjectKind(), o.GetObjectMeta().Name, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !SameContent(got, o) || got.GetObjectMeta().ResourceVersion != created.GetObjectMeta().ResourceVersion {
				t.Errorf("%s: read %+v, wrote %+v", o.ObjectKind(), got, o)
			}
		}
	}
}

// accessChangesReachReplicas: a service account's rotated token hash and
// its deletion, written through one store, are what the other store (a
// second replica, which checks tokens against its own reads) reads within
// 10 s; a refused duplicate changes nothing.
func accessChangesReachReplicas(t *testing.T, open Open) {
	ctx := t.Context()
	a, b := open(t)
	hash := func(c byte) string { return "sha256:" + strings.Repeat(string([]byte{c, c}), 32) }
	v := vdc("access", 4)
	v.ServiceAccounts = []catalog.ServiceAccount{{ID: "sa-00000000000000000001", Name: "ci", Role: catalog.RoleMember,
		CreatedAt: time.Now().UTC(), TokenHash: hash('a')}}
	created, err := catalog.Create(ctx, a, v)
	if err != nil {
		t.Fatal(err)
	}
	holds := func(want string) func(catalog.Object) bool {
		return func(o catalog.Object) bool {
			accounts := o.(*catalog.VDC).ServiceAccounts
			if want == "" {
				return len(accounts) == 0
			}
			return len(accounts) == 1 && accounts[0].TokenHash == want
		}
	}
	if _, err := Await(t, b, catalog.KindVDC, "access", holds(hash('a'))); err != nil {
		t.Fatalf("the other replica does not see the account: %v", err)
	}
	created.ServiceAccounts[0].TokenHash = hash('b')
	rotated, err := catalog.Update(ctx, a, created)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Await(t, b, catalog.KindVDC, "access", holds(hash('b'))); err != nil {
		t.Fatalf("the other replica does not see the rotation within 10 s: %v", err)
	}
	dup := rotated.DeepCopyObject().(*catalog.VDC)
	dup.ServiceAccounts = append(dup.ServiceAccounts, dup.ServiceAccounts[0])
	if _, err := catalog.Update(ctx, a, dup); !errors.Is(err, catalog.ErrInvalid) {
		t.Fatalf("a second account of one id: %v, want invalid", err)
	}
	rotated.ServiceAccounts = nil
	if _, err := catalog.Update(ctx, a, rotated); err != nil {
		t.Fatal(err)
	}
	if _, err := Await(t, b, catalog.KindVDC, "access", holds("")); err != nil {
		t.Fatalf("the other replica does not see the deletion within 10 s: %v", err)
	}
}

// Await reads an object until ok accepts it (nil: until it exists),
// for up to 10 s: a store with a watch-fed cache sees another store's
// write a moment later. It returns the last read.
func Await(t *testing.T, s catalog.Store, kind catalog.Kind, name string, ok func(catalog.Object) bool) (catalog.Object, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var o catalog.Object
	var err error
	_ = poll.Context(ctx, func() error {
		o, err = s.Get(t.Context(), kind, name)
		if (err == nil && (ok == nil || ok(o))) || (err != nil && !errors.Is(err, catalog.ErrNotFound)) {
			return nil
		}
		return errNotYet
	})
	return o, err
}

// errNotYet is what Await's condition reports while the object is not
// there or not yet accepted.
var errNotYet = errors.New("not yet")

// SameContent reports whether two objects are equal but for the metadata
// a store assigns (resourceVersion, creationTimestamp).
func SameContent(a, b catalog.Object) bool {
	x, y := a.DeepCopyObject(), b.DeepCopyObject()
	for _, o := range []catalog.Object{x, y} {
		m := o.GetObjectMeta()
		m.ResourceVersion, m.CreationTimestamp = "", time.Time{}
		*o.GetTypeMeta() = catalog.TypeMeta{}
	}
	bx, err1 := json.Marshal(x)
	by, err2 := json.Marshal(y)
	return err1 == nil && err2 == nil && x.ObjectKind() == y.ObjectKind() && bytes.Equal(bx, by)
}

func crudAndConflicts(t *testing.T, open Open) {
	ctx := t.Context()
	s, _ := open(t)

	created, err := catalog.Create(ctx, s, vdc("prod", 16))
	if err != nil {
		t.Fatal(err)
	}
	if created.ResourceVersion == "" || created.CreationTimestamp.IsZero() {
		t.Fatalf("create did not set metadata: %+v", created.ObjectMeta)
	}
	if _, err := catalog.Create(ctx, s, vdc("prod", 1)); !errors.Is(err, catalog.ErrAlreadyExists) {
		t.Fatalf("second create: got %v, want already exists", err)
	}

	got, err := catalog.Get[*catalog.VDC](ctx, s, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if got.Quotas.VCPUs != 16 || got.ResourceVersion != created.ResourceVersion {
		t.Fatalf("get: %+v", got)
	}

	got.Quotas.VCPUs = 32
	updated, err := catalog.Update(ctx, s, got)
	if err != nil {
		t.Fatal(err)
	}
	if updated.ResourceVersion == created.ResourceVersion || !updated.CreationTimestamp.Equal(created.CreationTimestamp) {
		t.Fatalf("update metadata: %+v vs %+v", updated.ObjectMeta, created.ObjectMeta)
	}

	stale := created.DeepCopyObject().(*catalog.VDC)
	stale.Quotas.VCPUs = 1
	_, err = catalog.Update(ctx, s, stale)
	var conflict *catalog.ConflictError
	if !errors.As(err, &conflict) || conflict.Expected != created.ResourceVersion || conflict.Actual != updated.ResourceVersion {
		t.Fatalf("stale update: got %v", err)
	}
	if err := catalog.Delete[*catalog.VDC](ctx, s, "prod", created.ResourceVersion); !errors.Is(err, catalog.ErrConflict) {
		t.Fatalf("stale delete: got %v", err)
	}
	if got, _ := catalog.Get[*catalog.VDC](ctx, s, "prod"); got.Quotas.VCPUs != 32 {
		t.Fatalf("stale writes changed the object: %+v", got)
	}

	if err := catalog.Delete[*catalog.VDC](ctx, s, "prod", updated.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := catalog.Get[*catalog.VDC](ctx, s, "prod"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	// Recreated under the same name, an old resourceVersion stays stale.
	again, err := catalog.Create(ctx, s, vdc("prod", 2))
	if err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion == created.ResourceVersion || again.ResourceVersion == updated.ResourceVersion {
		t.Fatalf("resourceVersion repeated after recreate: %s", again.ResourceVersion)
	}
	if err := catalog.Delete[*catalog.VDC](ctx, s, "prod", updated.ResourceVersion); !errors.Is(err, catalog.ErrConflict) {
		t.Fatalf("delete with pre-recreate version: %v", err)
	}
	if err := catalog.Delete[*catalog.VDC](ctx, s, "nope", ""); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("delete missing: %v", err)
	}
}

func allKindsRoundTrip(t *testing.T, open Open) {
	ctx := t.Context()
	s, other := open(t)
	cp := &catalog.ComputeProfile{}
	cp.Name, cp.VCPUs, cp.MemoryMiB = "medium", 4, 8192
	sp := &catalog.StorageProfile{}
	sp.Name, sp.Tier, sp.ReadMBps, sp.WriteMBps = "ssd-standard", "ssd", 500, 250
	sp.Pools = []catalog.ZonePool{{Zone: "fra1", Pool: "local-lvm"}, {Zone: "hel1", Pool: "ceph.ssd"}}
	img := &catalog.Image{}
	img.Name, img.Version, img.URL, img.CloudInit = "ubuntu-24.04", "1.0", "https://images.example/noble.qcow2", true
	img.Checksum = "sha256:" + strings.Repeat("ab", 32)
	for _, o := range []catalog.Object{cp, sp, img} {
		if _, err := s.Create(ctx, o); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
	// The second store reads what the first wrote.
	o, err := Await(t, other, catalog.KindStorageProfile, "ssd-standard", nil)
	if err != nil {
		t.Fatal(err)
	}
	gotSP := o.(*catalog.StorageProfile)
	if pool, ok := gotSP.PoolFor("hel1"); !ok || pool != "ceph.ssd" || gotSP.ReadMBps != 500 {
		t.Fatalf("storage profile: %+v", gotSP)
	}
	if o, err = Await(t, other, catalog.KindImage, "ubuntu-24.04", nil); err != nil {
		t.Fatal(err)
	}
	gotImg := o.(*catalog.Image)
	if gotImg.Version != "1.0" || !gotImg.CloudInit || gotImg.Checksum != img.Checksum {
		t.Fatalf("image: %+v", gotImg)
	}
	if _, err := Await(t, other, catalog.KindComputeProfile, "medium", nil); err != nil {
		t.Fatal(err)
	}
	cps, err := catalog.List[*catalog.ComputeProfile](ctx, other)
	if err != nil || len(cps) != 1 || cps[0].MemoryMiB != 8192 {
		t.Fatalf("list: %v %+v", err, cps)
	}
}

func validationChangesNothing(t *testing.T, open Open) {
	ctx := t.Context()
	s, _ := open(t)
	base := func() *catalog.StorageProfile {
		sp := &catalog.StorageProfile{}
		sp.Name, sp.Tier = "fast", "nvme"
		sp.Pools = []catalog.ZonePool{{Zone: "fra1", Pool: "nvme"}}
		return sp
	}
	cases := []struct {
		field string
		obj   catalog.Object
	}{
		{"name", vdc("Prod", 1)},
		{"name", vdc("a.b", 1)},
		{"name", vdc(strings.Repeat("a", 64), 1)},
		{"quotas.vcpus", vdc("prod", -1)},
		{"members[1].user", func() catalog.Object {
			v := vdc("prod", 1)
			v.Members = []catalog.MemberBinding{{User: "alice", Role: catalog.RoleAdmin}, {User: "alice", Role: catalog.RoleViewer}}
			return v
		}()},
		{"members[0].role", func() catalog.Object {
			v := vdc("prod", 1)
			v.Members = []catalog.MemberBinding{{User: "alice", Role: "owner"}}
			return v
		}()},
		{"serviceAccounts[0].tokenHash", func() catalog.Object {
			v := vdc("prod", 1)
			v.ServiceAccounts = []catalog.ServiceAccount{{ID: "sa-0123456789abcdef0123", Name: "ci", Role: catalog.RoleMember, TokenHash: "fpsa_plaintext"}}
			return v
		}()},
		{"defaultSecurityGroup", func() catalog.Object { v := vdc("prod", 1); v.DefaultSecurityGroup = "Web"; return v }()},
		{"name", func() catalog.Object { g := SecurityGroup("prod", "web"); g.Name = "prod"; return g }()},
		{"name", func() catalog.Object { g := SecurityGroup("prod", "web"); g.VDC = "other"; return g }()},
		{"rules[0].ports", func() catalog.Object { g := SecurityGroup("prod", "web"); g.Rules[0].Ports = "80:22"; return g }()},
		{"rules[0].ports", func() catalog.Object { g := SecurityGroup("prod", "web"); g.Rules[0].Ports = "70000"; return g }()},
		{"rules[0].ports", func() catalog.Object {
			g := SecurityGroup("prod", "web")
			g.Rules[0].Protocol = catalog.SecurityProtocolICMP
			return g
		}()},
		{"rules[1].peerCidr", func() catalog.Object {
			g := SecurityGroup("prod", "web")
			g.Rules = append(g.Rules, catalog.SecurityRule{Direction: catalog.DirectionOutbound, Protocol: "any", PeerCIDR: "10.0.0.1/8"})
			return g
		}()},
		{"rules[0].direction", func() catalog.Object { g := SecurityGroup("prod", "web"); g.Rules[0].Direction = "sideways"; return g }()},
		{"policy", PlacementGroup("prod", "db", "fra1", "SCATTER")},
		{"zone", PlacementGroup("prod", "db", "Fra 1", catalog.PlacementPack)},
		{"name", func() catalog.Object {
			g := PlacementGroup("prod", "db", "fra1", catalog.PlacementPack)
			g.VDC = "other"
			return g
		}()},
		{"rules", func() catalog.Object {
			g := SecurityGroup("prod", "web")
			for len(g.Rules) <= catalog.MaxSecurityRules {
				g.Rules = append(g.Rules, g.Rules[0])
			}
			return g
		}()},
		{"tier", func() catalog.Object { sp := base(); sp.Tier = ""; return sp }()},
		{"pools", func() catalog.Object { sp := base(); sp.Pools = nil; return sp }()},
		{"pools[1].zone", func() catalog.Object {
			sp := base()
			sp.Pools = append(sp.Pools, catalog.ZonePool{Zone: "fra1", Pool: "x1"})
			return sp
		}()},
		{"pools[0].pool", func() catalog.Object { sp := base(); sp.Pools[0].Pool = "../etc"; return sp }()},
		{"readMBps", func() catalog.Object { sp := base(); sp.ReadMBps = -5; return sp }()},
		{"vcpus", func() catalog.Object { c := &catalog.ComputeProfile{}; c.Name, c.MemoryMiB = "x", 1024; return c }()},
		{"memoryMiB", func() catalog.Object { c := &catalog.ComputeProfile{}; c.Name, c.VCPUs = "x", 1; return c }()},
		{"url", func() catalog.Object {
			i := &catalog.Image{}
			i.Name, i.Version, i.URL, i.Checksum = "img", "1", "ftp://x/y", "sha256:"+strings.Repeat("0", 64)
			return i
		}()},
		{"checksum", func() catalog.Object {
			i := &catalog.Image{}
			i.Name, i.Version, i.URL, i.Checksum = "img", "1", "https://x/y", "md5:abc"
			return i
		}()},
		{"version", func() catalog.Object {
			i := &catalog.Image{}
			i.Name, i.Version, i.URL, i.Checksum = "img", "1 2", "https://x/y", "sha256:"+strings.Repeat("0", 64)
			return i
		}()},
	}
	for _, c := range cases {
		_, err := s.Create(ctx, c.obj)
		var ve *catalog.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%T %q: got %v, want a validation error on %s", c.obj, c.obj.GetObjectMeta().Name, err, c.field)
		}
	}
	for _, k := range catalog.Kinds() {
		if objs, err := s.List(ctx, k); err != nil || len(objs) != 0 {
			t.Errorf("%s: invalid creates left %d objects (%v)", k, len(objs), err)
		}
	}
}

func concurrentUpdates(t *testing.T, open Open) {
	ctx := t.Context()
	a, b := open(t)
	stores := []catalog.Store{a, b}
	base, err := catalog.Create(ctx, stores[0], vdc("shared", 1))
	if err != nil {
		t.Fatal(err)
	}
	const n = 24
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		winners   []int // protected by mu
		conflicts int   // protected by mu
		others    []error
	)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := base.DeepCopyObject().(*catalog.VDC)
			v.Quotas.VCPUs = 100 + i
			<-start
			_, err := catalog.Update(ctx, stores[i%2], v)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				winners = append(winners, i)
			case errors.Is(err, catalog.ErrConflict):
				conflicts++
			default:
				others = append(others, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(others) > 0 || len(winners) != 1 || conflicts != n-1 {
		t.Fatalf("winners %v, conflicts %d, other errors %v", winners, conflicts, others)
	}
	o, err := Await(t, stores[1], catalog.KindVDC, "shared", func(o catalog.Object) bool {
		return o.(*catalog.VDC).Quotas.VCPUs != 1
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.(*catalog.VDC); got.Quotas.VCPUs != 100+winners[0] {
		t.Fatalf("stored %d, winner wrote %d", o.(*catalog.VDC).Quotas.VCPUs, 100+winners[0])
	}
}

// vdcZoneSetNeverLoses: zones recorded at once through both stores (two
// replicas creating in different zones) all land in the VDC's zone set,
// sorted; a rebuilt set stored meanwhile keeps them too.
func vdcZoneSetNeverLoses(t *testing.T, open Open) {
	ctx := t.Context()
	a, b := open(t)
	stores := []catalog.Store{a, b}
	if _, err := catalog.Create(ctx, a, vdc("zoned", 1)); err != nil {
		t.Fatal(err)
	}
	// The other replica's store sees the VDC once its watch brings it.
	if _, err := Await(t, b, catalog.KindVDC, "zoned", func(catalog.Object) bool { return true }); err != nil {
		t.Fatal(err)
	}
	const n = 12
	var want []string
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	start := make(chan struct{})
	for i := range n {
		zone := fmt.Sprintf("zone-%02d", i)
		want = append(want, zone)
		wg.Go(func() {
			<-start
			errs[i] = catalog.RecordVDCZone(ctx, stores[i%2], "zoned", zone)
		})
	}
	wg.Go(func() {
		<-start
		_, errs[n] = catalog.CompleteVDCZones(ctx, b, "zoned", []string{"zone-03", "zone-found"})
	})
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	want = append(want, "zone-found")
	for _, st := range stores {
		o, err := Await(t, st, catalog.KindVDC, "zoned", func(o catalog.Object) bool {
			return len(o.(*catalog.VDC).Status.Zones) == len(want)
		})
		if err != nil {
			t.Fatal(err)
		}
		if v := o.(*catalog.VDC); !slices.Equal(v.Status.Zones, want) || !v.Status.ZonesComplete {
			t.Fatalf("zone set %v complete %v, want %v complete", v.Status.Zones, v.Status.ZonesComplete, want)
		}
	}
	// Recording a zone already there writes nothing.
	before, err := catalog.Get[*catalog.VDC](ctx, a, "zoned")
	if err != nil {
		t.Fatal(err)
	}
	if err := catalog.RecordVDCZone(ctx, a, "zoned", "zone-05"); err != nil {
		t.Fatal(err)
	}
	if after, err := catalog.Get[*catalog.VDC](ctx, a, "zoned"); err != nil || after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("recording a known zone wrote the VDC: %v", err)
	}
}

// publicAddressesOnce: concurrent allocations on both stores each get an
// address of the pool, none twice; the pool once full refuses the next;
// concurrent ensures of one edge gateway make one, holding one address.
func publicAddressesOnce(t *testing.T, open Open) {
	ctx := t.Context()
	a, b := open(t)
	stores := []catalog.Store{a, b}
	en := zone1(t, a, "203.0.113.21")
	if _, err := Await(t, b, catalog.KindExternalNetwork, "zone1", nil); err != nil {
		t.Fatal(err)
	}
	const n = 10
	got := make([]netip.Addr, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = catalog.AllocatePublicAddress(ctx, stores[i%2], "zone1", fmt.Sprintf("vdc%d", i), catalog.UseOneToOne, netip.Addr{}, "publicAddress")
		})
	}
	wg.Wait()
	seen := map[netip.Addr]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("allocation %d: %v", i, errs[i])
		}
		if seen[got[i]] || !en.InPool(got[i]) {
			t.Fatalf("allocation %d got %s: handed out twice or outside the pool (%v)", i, got[i], got)
		}
		seen[got[i]] = true
	}
	// Two replicas ensure one gateway at once: one object, one address.
	gws := make([]*catalog.EdgeGateway, 2)
	for i := range 2 {
		wg.Go(func() { gws[i], errs[i] = catalog.EnsureEdgeGateway(ctx, stores[i], "red", "zone1") })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || gws[0].PublicAddress != gws[1].PublicAddress {
		t.Fatalf("concurrent ensures: %v %v, %+v %+v", errs[0], errs[1], gws[0], gws[1])
	}
	// The pool holds 12: 10 + red's gateway leave one.
	last, err := catalog.AllocatePublicAddress(ctx, a, "zone1", "blue", catalog.UseOneToOne, netip.Addr{}, "publicAddress")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := catalog.AllocatePublicAddress(ctx, b, "zone1", "blue", catalog.UseOneToOne, netip.Addr{}, "publicAddress"); !errors.Is(err, catalog.ErrPoolExhausted) {
		t.Fatalf("allocation from a full pool: %v", err)
	}
	if _, err := catalog.AllocatePublicAddress(ctx, b, "zone1", "blue", catalog.UseOneToOne, last, "publicAddress"); !errors.Is(err, catalog.ErrAddressInUse) {
		t.Fatalf("allocation of a held address: %v", err)
	}
	var ve *catalog.ValidationError
	if _, err := catalog.AllocatePublicAddress(ctx, b, "zone1", "blue", catalog.UseOneToOne, netip.MustParseAddr("198.51.100.7"), "publicAddress"); !errors.As(err, &ve) || ve.Field != "publicAddress" {
		t.Fatalf("allocation outside the pool: %v", err)
	}
	if err := catalog.ReleasePublicAddress(ctx, b, "zone1", "blue", last); err != nil {
		t.Fatal(err)
	}
	o, err := Await(t, a, catalog.KindExternalNetwork, "zone1", func(o catalog.Object) bool {
		return len(o.(*catalog.ExternalNetwork).Status.Allocations) == n+1
	})
	if err != nil || len(o.(*catalog.ExternalNetwork).Status.Allocations) != n+1 {
		t.Fatalf("after the release: %+v %v", o, err)
	}
}

// deleteEdgeGateway: deleting a VDC's gateway gives back its public address
// and its 1:1 addresses, and nobody else's; a gateway the VDC does not have
// is ErrNotFound.
func deleteEdgeGateway(t *testing.T, open Open) {
	ctx := t.Context()
	a, b := open(t)
	zone1(t, a, "203.0.113.20")
	red, err := catalog.EnsureEdgeGateway(ctx, a, "red", "zone1")
	if err != nil {
		t.Fatal(err)
	}
	blue, err := catalog.EnsureEdgeGateway(ctx, a, "blue", "zone1")
	if err != nil {
		t.Fatal(err)
	}
	one, err := catalog.AllocatePublicAddress(ctx, a, "zone1", "red", catalog.UseOneToOne, netip.Addr{}, "publicAddress")
	if err != nil {
		t.Fatal(err)
	}
	red.OneToOne = []catalog.OneToOneAddress{{ID: "o1", PublicAddress: one.String(), VMID: 100}}
	if _, err := catalog.Update(ctx, a, red); err != nil {
		t.Fatal(err)
	}
	if _, err := catalog.DeleteEdgeGateway(ctx, b, "green", "zone1"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("deleting a gateway green does not have: %v", err)
	}
	if _, err := Await(t, b, catalog.KindEdgeGateway, red.Name, func(o catalog.Object) bool {
		return len(o.(*catalog.EdgeGateway).OneToOne) == 1
	}); err != nil {
		t.Fatal(err)
	}
	released, err := catalog.DeleteEdgeGateway(ctx, b, "red", "zone1")
	want := []netip.Addr{netip.MustParseAddr(red.PublicAddress), one}
	if err != nil || !slices.Equal(released, want) {
		t.Fatalf("DeleteEdgeGateway: released %v, %v; want %v", released, err, want)
	}
	if _, err := catalog.DeleteEdgeGateway(ctx, b, "red", "zone1"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("deleting it again: %v", err)
	}
	o, err := Await(t, a, catalog.KindExternalNetwork, "zone1", func(o catalog.Object) bool {
		return len(o.(*catalog.ExternalNetwork).Status.Allocations) == 1
	})
	if err != nil {
		t.Fatalf("the pool after the delete: %+v %v", o, err)
	}
	if al := o.(*catalog.ExternalNetwork).Status.Allocations[0]; al.VDC != "blue" || al.Address != blue.PublicAddress {
		t.Fatalf("the pool after red's gateway went: %+v", o.(*catalog.ExternalNetwork).Status.Allocations)
	}
}

// kubeEndpointsOnce: clusters claiming endpoints on one gateway address at
// once, through two replicas, each get a port of their own, the lowest
// free ones; a cluster claiming again gets its own again; a released port
// is the next one given; another address has its own ports; a gateway the
// VDC does not have refuses, and bad claims are refused by validation.
func kubeEndpointsOnce(t *testing.T, open Open) {
	ctx := t.Context()
	a, b := open(t)
	stores := []catalog.Store{a, b}
	zone1(t, a, "203.0.113.20")
	if _, err := catalog.ClaimKubeEndpoint(ctx, a, "red", "zone1", "red-k0", netip.MustParseAddr("10.1.0.1")); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("a claim without a gateway: %v", err)
	}
	if _, err := catalog.EnsureEdgeGateway(ctx, a, "red", "zone1"); err != nil {
		t.Fatal(err)
	}
	// The other replica sees the gateway once its cache does.
	if _, err := Await(t, b, catalog.KindEdgeGateway, catalog.EdgeGatewayName("red", "zone1"), func(catalog.Object) bool { return true }); err != nil {
		t.Fatal(err)
	}
	lan := netip.MustParseAddr("10.1.0.1")
	const n = 6
	ports := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ports[i], errs[i] = catalog.ClaimKubeEndpoint(ctx, stores[i%2], "red", "zone1", fmt.Sprintf("red-k%d", i), lan)
		})
	}
	wg.Wait()
	seen := map[int]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		if seen[ports[i]] || ports[i] < catalog.FirstKubeEndpointPort || ports[i] >= catalog.FirstKubeEndpointPort+n {
			t.Fatalf("claim %d got port %d: given twice or not the lowest free (%v)", i, ports[i], ports)
		}
		seen[ports[i]] = true
	}
	// Each replica reads every claim once its cache has them.
	for _, st := range stores {
		if _, err := Await(t, st, catalog.KindEdgeGateway, catalog.EdgeGatewayName("red", "zone1"), func(o catalog.Object) bool {
			return len(o.(*catalog.EdgeGateway).KubeEndpoints) == n
		}); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := catalog.ClaimKubeEndpoint(ctx, b, "red", "zone1", "red-k2", lan); err != nil || p != ports[2] {
		t.Fatalf("red-k2 claiming again: %d %v, want its own %d", p, err, ports[2])
	}
	if p, err := catalog.ClaimKubeEndpoint(ctx, a, "red", "zone1", "red-other", netip.MustParseAddr("10.2.0.1")); err != nil || p != catalog.FirstKubeEndpointPort {
		t.Fatalf("a claim on another network's address: %d %v", p, err)
	}
	if err := catalog.ReleaseKubeEndpoint(ctx, b, "red", "zone1", "red-k3"); err != nil {
		t.Fatal(err)
	}
	if err := catalog.ReleaseKubeEndpoint(ctx, b, "red", "zone1", "red-k3"); err != nil {
		t.Fatalf("releasing again: %v", err)
	}
	if p, err := catalog.ClaimKubeEndpoint(ctx, a, "red", "zone1", "red-new", lan); err != nil || p != ports[3] {
		t.Fatalf("after red-k3's release a new claim got %d %v, want its port %d", p, err, ports[3])
	}
	g, err := catalog.Get[*catalog.EdgeGateway](ctx, a, catalog.EdgeGatewayName("red", "zone1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(g.KubeEndpoints) != n+1 {
		t.Errorf("the gateway holds %d endpoints, want %d: %+v", len(g.KubeEndpoints), n+1, g.KubeEndpoints)
	}
	for field, e := range map[string]catalog.KubeEndpoint{
		"kubeEndpoints[7].port":    {Cluster: "x", Address: lan.String(), Port: ports[0], Claimed: time.Now()},
		"kubeEndpoints[7].cluster": {Cluster: "red-k0", Address: lan.String(), Port: 7000, Claimed: time.Now()},
		"kubeEndpoints[7].address": {Cluster: "y", Address: "10.1.0", Port: 7001, Claimed: time.Now()},
	} {
		bad := *g
		bad.KubeEndpoints = append(slices.Clone(g.KubeEndpoints), e)
		var ve *catalog.ValidationError
		if _, err := catalog.Update(ctx, a, &bad); !errors.As(err, &ve) || ve.Field != field {
			t.Errorf("a bad endpoint: %v, want a validation error of %s", err, field)
		}
	}
}

// zone1 creates, through s, the external network of zone "zone1":
// 203.0.113.0/24, its pool from 203.0.113.10 to poolEnd.
func zone1(t *testing.T, s catalog.Store, poolEnd string) *catalog.ExternalNetwork {
	t.Helper()
	en := &catalog.ExternalNetwork{}
	en.Name, en.Bridge, en.CIDR, en.Gateway, en.PoolStart, en.PoolEnd = "zone1", "vmbr0", "203.0.113.0/24", "203.0.113.1", "203.0.113.10", poolEnd
	if _, err := catalog.Create(t.Context(), s, en); err != nil {
		t.Fatal(err)
	}
	return en
}

// SSHKey returns the authorized_keys line of an ed25519 key made from
// seed (the same seed, the same key), with comment.
func SSHKey(seed byte, comment string) string {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	pub, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))) + " " + comment)
}

// sshKeysPerSubject: a subject's keys are its own (another subject may
// use the same name), names are unique per subject, at most
// catalog.MaxUserSSHKeys, bad keys change nothing, and adds racing on two
// stores all land.
func sshKeysPerSubject(t *testing.T, open Open) {
	ctx := t.Context()
	a, b := open(t)
	if keys, err := catalog.SSHKeysOf(ctx, a, "nobody"); err != nil || len(keys) != 0 {
		t.Fatalf("keys of a subject without any: %v %v", keys, err)
	}
	k, err := catalog.AddSSHKey(ctx, a, "alice", "laptop", SSHKey(1, "alice@laptop"))
	if err != nil || k.Name != "laptop" || k.Created.IsZero() {
		t.Fatalf("add: %+v %v", k, err)
	}
	if _, err := catalog.AddSSHKey(ctx, a, "bob", "laptop", SSHKey(2, "bob@laptop")); err != nil {
		t.Fatalf("another subject's key of the same name: %v", err)
	}
	if _, err := Await(t, b, catalog.KindUserSSHKeys, catalog.UserSSHKeysName("bob"), nil); err != nil {
		t.Fatal(err)
	}
	var ve *catalog.ValidationError
	for _, c := range []struct{ field, name, key string }{
		{"name", "laptop", SSHKey(3, "")},
		{"name", "", SSHKey(3, "")},
		{"name", "a/b", SSHKey(3, "")},
		{"publicKey", "x", "ssh-ed25519 AAAA"},
		{"publicKey", "x", "ssh-foo " + strings.Fields(SSHKey(3, ""))[1]},
		{"publicKey", "x", `command="` + strings.Repeat("a", catalog.MaxSSHKeyOptionsLen) + `" ` + SSHKey(3, "")},
		{"publicKey", "x", SSHKey(3, strings.Repeat("c", catalog.MaxSSHKeyLen))},
		{"publicKey", "x", SSHKey(3, "") + "\n" + SSHKey(4, "")},
	} {
		if _, err := catalog.AddSSHKey(ctx, b, "alice", c.name, c.key); !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("add %q %.40q: %v, want a validation error of %s", c.name, c.key, err, c.field)
		}
	}
	if keys, err := catalog.SSHKeysOf(ctx, b, "alice"); err != nil || len(keys) != 1 || keys[0].PublicKey != SSHKey(1, "alice@laptop") {
		t.Fatalf("alice's keys after refused adds: %+v %v", keys, err)
	}
	if _, err := catalog.DeleteSSHKey(ctx, a, "carol", "laptop"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("carol deleting a name only others have: %v, want not found", err)
	}
	// Adds racing on both stores: every one lands.
	const n = 6
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = catalog.AddSSHKey(ctx, []catalog.Store{a, b}[i%2], "alice", fmt.Sprintf("k%d", i), SSHKey(byte(10+i), ""))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	o, err := Await(t, a, catalog.KindUserSSHKeys, catalog.UserSSHKeysName("alice"), func(o catalog.Object) bool {
		return len(o.(*catalog.UserSSHKeys).Keys) == n+1
	})
	if err != nil || len(o.(*catalog.UserSSHKeys).Keys) != n+1 {
		t.Fatalf("alice's keys after racing adds: %+v %v", o, err)
	}
	for i := n + 1; i < catalog.MaxUserSSHKeys; i++ {
		if _, err := catalog.AddSSHKey(ctx, a, "alice", fmt.Sprintf("k%d", i), SSHKey(byte(i), "")); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	if _, err := catalog.AddSSHKey(ctx, a, "alice", "one-more", SSHKey(200, "")); !errors.As(err, &ve) {
		t.Fatalf("key %d: %v, want a validation error", catalog.MaxUserSSHKeys+1, err)
	}
	if gone, err := catalog.DeleteSSHKey(ctx, a, "bob", "laptop"); err != nil || gone.PublicKey != SSHKey(2, "bob@laptop") {
		t.Fatalf("delete bob's laptop: %+v %v", gone, err)
	}
	if keys, err := catalog.SSHKeysOf(ctx, a, "alice"); err != nil || keys[0].Name != "laptop" {
		t.Fatalf("bob's delete touched alice's keys: %v", err)
	}
	if _, err := Await(t, b, catalog.KindUserSSHKeys, catalog.UserSSHKeysName("bob"), func(catalog.Object) bool { return false }); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("bob without keys: %v, want his object gone", err)
	}
}
