package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
)

func openStore(t *testing.T, dir string) *catalog.DirStore {
	t.Helper()
	s, err := catalog.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func vdc(name string, vcpus int) *catalog.VDC {
	v := &catalog.VDC{}
	v.Name = name
	v.Description = "test VDC"
	v.Quotas = catalog.VDCQuotas{VCPUs: vcpus, MemoryMiB: 65536, StorageGiB: 1000, VMs: 10}
	return v
}

func TestCRUDAndConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir)

	created, err := catalog.Create(ctx, s, vdc("prod", 16))
	if err != nil {
		t.Fatal(err)
	}
	if created.ResourceVersion == "" || created.CreationTimestamp.IsZero() {
		t.Fatalf("create did not set metadata: %+v", created.ObjectMeta)
	}
	data, err := os.ReadFile(filepath.Join(dir, "vdcs", "prod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"apiVersion: flexplane.io/v1alpha1", "kind: VDC", "name: prod", "vcpus: 16"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("manifest lacks %q:\n%s", want, data)
		}
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

func TestAllKindsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir)
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
	// A second store on the same directory reads what the first wrote.
	other := openStore(t, dir)
	gotSP, err := catalog.Get[*catalog.StorageProfile](ctx, other, "ssd-standard")
	if err != nil {
		t.Fatal(err)
	}
	if pool, ok := gotSP.PoolFor("hel1"); !ok || pool != "ceph.ssd" || gotSP.ReadMBps != 500 {
		t.Fatalf("storage profile: %+v", gotSP)
	}
	gotImg, err := catalog.Get[*catalog.Image](ctx, other, "ubuntu-24.04")
	if err != nil {
		t.Fatal(err)
	}
	if gotImg.Version != "1.0" || !gotImg.CloudInit || gotImg.Checksum != img.Checksum {
		t.Fatalf("image: %+v", gotImg)
	}
	cps, err := catalog.List[*catalog.ComputeProfile](ctx, other)
	if err != nil || len(cps) != 1 || cps[0].MemoryMiB != 8192 {
		t.Fatalf("list: %v %+v", err, cps)
	}
}

func TestValidationChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, t.TempDir())
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

func TestRejectsBadManifest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir)
	manifest := "apiVersion: flexplane.io/v1alpha1\nkind: VDC\nmetadata:\n  name: hand\nspec:\n  quota: {}\n"
	if err := os.WriteFile(filepath.Join(dir, "vdcs", "hand.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := s.Get(context.Background(), catalog.KindVDC, "hand")
	if err == nil || !strings.Contains(err.Error(), `unknown field "quota"`) {
		t.Fatalf("got %v, want unknown field error", err)
	}
}

// Two stores on one directory (as two orchestrator replicas on one volume):
// of N concurrent updates from the same read, exactly one wins.
func TestConcurrentUpdatesAcrossStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	stores := []*catalog.DirStore{openStore(t, dir), openStore(t, dir)}
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
	got, err := catalog.Get[*catalog.VDC](ctx, stores[1], "shared")
	if err != nil {
		t.Fatal(err)
	}
	if got.Quotas.VCPUs != 100+winners[0] {
		t.Fatalf("stored %d, winner wrote %d", got.Quotas.VCPUs, 100+winners[0])
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(filepath.Join(dir, "vdcs"))
	if len(entries) != 1 {
		t.Fatalf("vdcs dir: %v", fmt.Sprint(entries))
	}
}
