package kubestore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/catalog/kubestore"
	"github.com/flexplane/flexplane/pkg/catalog/kubestore/v1alpha1"
	"github.com/flexplane/flexplane/pkg/dev/catalogtest"
	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// kube is the API server all tests of the package share (one namespace
// per catalog).
var kube *kubetest.Server

func TestMain(m *testing.M) {
	os.Exit(kubetest.Main(m, &kube, func(ctx context.Context, s *kubetest.Server) error {
		return kubestore.InstallCRDs(ctx, s.RESTConfig())
	}))
}

var nsSeq atomic.Int64

// namespace creates a new namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("catalog-%d", nsSeq.Add(1))
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func open(t *testing.T, ns string) *kubestore.Store {
	t.Helper()
	s, err := kubestore.Open(t.Context(), kubestore.Config{REST: kube.RESTConfig(), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestKubeStore holds the CRD store to the behaviour of every store: two
// stores with their own watch caches on one namespace stand for two
// replicas.
func TestKubeStore(t *testing.T) {
	t.Parallel()
	catalogtest.Run(t, func(t *testing.T) (catalog.Store, catalog.Store) {
		ns := namespace(t)
		return open(t, ns), open(t, ns)
	})
}

// TestStaleWriteIsConflict: a write with a resourceVersion another replica
// has moved on from is refused by the API server and reaches GraphQL
// clients as CONFLICT; it changes nothing.
func TestStaleWriteIsConflict(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	a, b := open(t, ns), open(t, ns)
	ctx := t.Context()
	v, err := catalog.Create(ctx, a, catalogtest.VDC("prod", 4))
	if err != nil {
		t.Fatal(err)
	}
	o, err := catalogtest.Await(t, b, catalog.KindVDC, "prod", nil)
	if err != nil {
		t.Fatal(err)
	}
	fromB := o.(*catalog.VDC)
	v.Quotas.VCPUs = 8
	moved, err := catalog.Update(ctx, a, v)
	if err != nil {
		t.Fatal(err)
	}
	fromB.Quotas.VCPUs = 99
	_, err = catalog.Update(ctx, b, fromB)
	var ce *catalog.ConflictError
	if !errors.As(err, &ce) || ce.Expected != fromB.ResourceVersion || ce.Actual != moved.ResourceVersion {
		t.Fatalf("stale update: %v, want a conflict from %s to %s", err, fromB.ResourceVersion, moved.ResourceVersion)
	}
	if e := apierr.From(err, "input"); e.Code != apierr.Conflict {
		t.Errorf("GraphQL code %s, want CONFLICT", e.Code)
	}
	// A conflict returns once b's cache holds what won: the read of a
	// read-modify-write loop that tries again is of that version.
	if cur, err := catalog.Get[*catalog.VDC](ctx, b, "prod"); err != nil || cur.ResourceVersion != moved.ResourceVersion {
		t.Fatalf("read after the conflict: %+v, %v; want version %s", cur, err, moved.ResourceVersion)
	}
	if err := b.Delete(ctx, catalog.KindVDC, "prod", fromB.ResourceVersion); !errors.Is(err, catalog.ErrConflict) {
		t.Errorf("stale delete: %v, want a conflict", err)
	}
	got, err := catalogtest.Await(t, b, catalog.KindVDC, "prod", func(o catalog.Object) bool {
		return o.GetObjectMeta().ResourceVersion == moved.ResourceVersion
	})
	if err != nil || got.(*catalog.VDC).Quotas.VCPUs != 8 {
		t.Fatalf("after the stale writes: %+v, %v", got, err)
	}
}

// raw writes a manifest as kubectl would: past the domain's validation,
// only the CRD's schema checks it.
func raw(t *testing.T, ns string, kind catalog.Kind, manifest string) error {
	t.Helper()
	dc, err := dynamic.NewForConfig(kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(manifest)); err != nil {
		t.Fatal(err)
	}
	_, err = dc.Resource(kubestore.GVR(kind)).Namespace(ns).Create(t.Context(), u, metav1.CreateOptions{})
	return err
}

// TestServerSideValidation: the CRDs' schemas refuse what the domain
// refuses, and the refusal names the field as the domain does, so a
// GraphQL client gets BAD_USER_INPUT on input.<field>.
func TestServerSideValidation(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	sum := "sha256:" + strings.Repeat("0", 64)
	image := func(name, spec string) string {
		return `{"apiVersion":"flexplane.io/v1alpha1","kind":"Image","metadata":{"name":"` + name + `"},"spec":` + spec + `}`
	}
	cases := []struct {
		kind     catalog.Kind
		field    string
		manifest string
	}{
		{catalog.KindVDC, "quotas.vcpus", `{"apiVersion":"flexplane.io/v1alpha1","kind":"VDC","metadata":{"name":"neg"},"spec":{"quotas":{"vcpus":-1,"memoryMiB":1,"storageGiB":1,"vms":1}}}`},
		{catalog.KindVDC, "name", `{"apiVersion":"flexplane.io/v1alpha1","kind":"VDC","metadata":{"name":"a.b"},"spec":{"quotas":{"vcpus":1,"memoryMiB":1,"storageGiB":1,"vms":1}}}`},
		{catalog.KindVDC, "quotas.vms", `{"apiVersion":"flexplane.io/v1alpha1","kind":"VDC","metadata":{"name":"novms"},"spec":{"quotas":{"vcpus":1,"memoryMiB":1,"storageGiB":1}}}`},
		{catalog.KindComputeProfile, "memoryMiB", `{"apiVersion":"flexplane.io/v1alpha1","kind":"ComputeProfile","metadata":{"name":"tiny"},"spec":{"vcpus":1,"memoryMiB":16}}`},
		{catalog.KindStorageProfile, "pools[1]", `{"apiVersion":"flexplane.io/v1alpha1","kind":"StorageProfile","metadata":{"name":"dup"},"spec":{"tier":"ssd","readMBps":0,"writeMBps":0,"pools":[{"zone":"fra1","pool":"a1"},{"zone":"fra1","pool":"b1"}]}}`},
		{catalog.KindStorageProfile, "pools[0].pool", `{"apiVersion":"flexplane.io/v1alpha1","kind":"StorageProfile","metadata":{"name":"dots"},"spec":{"tier":"ssd","readMBps":0,"writeMBps":0,"pools":[{"zone":"fra1","pool":"../etc"}]}}`},
		{catalog.KindImage, "checksum", image("md5", `{"version":"1","url":"https://x/y","checksum":"md5:abc","cloudInit":false}`)},
		{catalog.KindImage, "url", image("ftp", `{"version":"1","url":"ftp://x/y","checksum":"`+sum+`","cloudInit":false}`)},
		{catalog.KindImage, "url", image("creds", `{"version":"1","url":"https://u:p@x/y","checksum":"`+sum+`","cloudInit":false}`)},
		{catalog.KindExternalNetwork, "cidr", `{"apiVersion":"flexplane.io/v1alpha1","kind":"ExternalNetwork","metadata":{"name":"fra1"},"spec":{"bridge":"vmbr0","cidr":"203.0.113.5/24","gateway":"203.0.113.1","poolStart":"203.0.113.10","poolEnd":"203.0.113.20"}}`},
		{catalog.KindEdgeGateway, "firewallRules[0].protocol", `{"apiVersion":"flexplane.io/v1alpha1","kind":"EdgeGateway","metadata":{"name":"red.fra1"},"spec":{"vdc":"red","zone":"fra1","publicAddress":"203.0.113.10","egressMbps":0,"ingressMbps":0,"firewallRules":[{"id":"r1","direction":"in","protocol":"sctp","action":"allow"}]}}`},
		{catalog.KindImage, "version", image("spaces", `{"version":"1 2","url":"https://x/y","checksum":"`+sum+`","cloudInit":false}`)},
	}
	for _, c := range cases {
		err := raw(t, ns, c.kind, c.manifest)
		if err == nil {
			t.Errorf("%s: the server accepted %s", c.field, c.manifest)
			continue
		}
		mapped := kubestore.FromAPIError(c.kind, "x", err)
		var ve *catalog.ValidationError
		if !errors.As(mapped, &ve) || !strings.HasPrefix(ve.Field, c.field) {
			t.Errorf("%s: server said %v, mapped to %v", c.field, err, mapped)
			continue
		}
		if e := apierr.From(mapped, "input"); e.Code != apierr.BadUserInput || !strings.HasPrefix(e.Field, "input."+c.field) {
			t.Errorf("%s: GraphQL error %s on %q", c.field, e.Code, e.Field)
		}
	}
	s := open(t, ns)
	for _, k := range catalog.Kinds() {
		if objs, err := s.List(t.Context(), k); err != nil || len(objs) != 0 {
			t.Errorf("%s: refused writes left %d objects (%v)", k, len(objs), err)
		}
	}
}

// TestCacheSeesOtherWriters: writes made past the store (kubectl, another
// replica) reach its cache through the watch, deletes too, and the store's
// own writes are readable the moment they return.
func TestCacheSeesOtherWriters(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	s := open(t, ns)
	ctx := t.Context()
	manifest := `{"apiVersion":"flexplane.io/v1alpha1","kind":"ComputeProfile","metadata":{"name":"byhand"},"spec":{"vcpus":2,"memoryMiB":2048}}`
	if err := raw(t, ns, catalog.KindComputeProfile, manifest); err != nil {
		t.Fatal(err)
	}
	o, err := catalogtest.Await(t, s, catalog.KindComputeProfile, "byhand", nil)
	if err != nil || o.(*catalog.ComputeProfile).MemoryMiB != 2048 {
		t.Fatalf("kubectl's write: %+v, %v", o, err)
	}
	// Read-your-writes, many times over.
	p := o.(*catalog.ComputeProfile)
	for i := range 20 {
		p.VCPUs = 3 + i
		if p, err = catalog.Update(ctx, s, p); err != nil {
			t.Fatal(err)
		}
		got, err := catalog.Get[*catalog.ComputeProfile](ctx, s, "byhand")
		if err != nil || got.VCPUs != 3+i || got.ResourceVersion != p.ResourceVersion {
			t.Fatalf("read after write %d: %+v, %v", i, got, err)
		}
	}
	dc, err := dynamic.NewForConfig(kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.Resource(kubestore.GVR(catalog.KindComputeProfile)).Namespace(ns).Delete(ctx, "byhand", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the external delete to reach the cache", func() error {
		if _, err := s.Get(ctx, catalog.KindComputeProfile, "byhand"); !errors.Is(err, catalog.ErrNotFound) {
			return fmt.Errorf("get: %v", err)
		}
		return nil
	})
}

// TestExportImportRoundTrip moves a catalog from the directory backend to
// Kubernetes and back; every object arrives with every field.
func TestExportImportRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir, err := catalog.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range catalogtest.Sample() {
		if _, err := dir.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	var exported bytes.Buffer
	n, err := catalog.Export(ctx, dir, &exported)
	if err != nil || n != len(catalogtest.Sample()) {
		t.Fatalf("export: %d objects, %v", n, err)
	}
	k := open(t, namespace(t))
	res, err := catalog.Import(ctx, k, bytes.NewReader(exported.Bytes()), catalog.ImportOptions{})
	if err != nil || res.Created != n {
		t.Fatalf("import into kubernetes: %+v, %v", res, err)
	}
	// Again: nothing changes; with a changed object, only Replace writes.
	if res, err := catalog.Import(ctx, k, bytes.NewReader(exported.Bytes()), catalog.ImportOptions{}); err != nil || res.Unchanged != n {
		t.Fatalf("second import: %+v, %v", res, err)
	}
	var back bytes.Buffer
	if _, err := catalog.Export(ctx, k, &back); err != nil {
		t.Fatal(err)
	}
	dir2, err := catalog.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := catalog.Import(ctx, dir2, bytes.NewReader(back.Bytes()), catalog.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range catalogtest.Sample() {
		for _, st := range []catalog.Store{k, dir2} {
			got, err := st.Get(ctx, want.ObjectKind(), want.GetObjectMeta().Name)
			if err != nil {
				t.Fatal(err)
			}
			if !catalogtest.SameContent(got, want) {
				t.Errorf("%T after the round trip: %+v, want %+v", st, got, want)
			}
		}
	}
	changed := strings.Replace(exported.String(), "vcpus: 4\n", "vcpus: 6\n", 1)
	if _, err := catalog.Import(ctx, k, strings.NewReader(changed), catalog.ImportOptions{}); !errors.Is(err, catalog.ErrAlreadyExists) {
		t.Fatalf("import of a changed object without Replace: %v", err)
	}
	if res, err := catalog.Import(ctx, k, strings.NewReader(changed), catalog.ImportOptions{Replace: true}); err != nil || res.Replaced != 1 {
		t.Fatalf("import with Replace: %+v, %v", res, err)
	}
}

// TestAPITypesMirrorDomain: the JSON of every domain object decodes
// strictly into its v1alpha1 type and back into the same domain object, so
// the CRDs generated from v1alpha1 describe exactly what the store writes.
func TestAPITypesMirrorDomain(t *testing.T) {
	t.Parallel()
	types := map[catalog.Kind]any{
		catalog.KindVDC: &v1alpha1.VDC{}, catalog.KindComputeProfile: &v1alpha1.ComputeProfile{},
		catalog.KindStorageProfile: &v1alpha1.StorageProfile{}, catalog.KindImage: &v1alpha1.Image{},
		catalog.KindZonePolicy: &v1alpha1.ZonePolicy{}, catalog.KindExternalNetwork: &v1alpha1.ExternalNetwork{},
		catalog.KindEdgeGateway: &v1alpha1.EdgeGateway{}, catalog.KindLoadBalancer: &v1alpha1.LoadBalancer{},
		catalog.KindSecurityGroup:  &v1alpha1.SecurityGroup{},
		catalog.KindUserSSHKeys:    &v1alpha1.UserSSHKeys{},
		catalog.KindPlacementGroup: &v1alpha1.PlacementGroup{},
	}
	for _, o := range catalogtest.Sample() {
		*o.GetTypeMeta() = catalog.TypeMeta{APIVersion: catalog.APIVersion, Kind: o.ObjectKind()}
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		api := types[o.ObjectKind()]
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(api); err != nil {
			t.Errorf("%s: the domain's JSON does not fit v1alpha1: %v", o.ObjectKind(), err)
			continue
		}
		again, err := json.Marshal(api)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(again); err != nil {
			t.Fatal(err)
		}
		back, err := kubestore.FromUnstructured(o.ObjectKind(), u)
		if err != nil {
			t.Errorf("%s: v1alpha1's JSON does not fit the domain: %v", o.ObjectKind(), err)
			continue
		}
		if !catalogtest.SameContent(back, o) {
			t.Errorf("%s: through v1alpha1 %+v, want %+v", o.ObjectKind(), back, o)
		}
	}
}

// TestSecretNamespace: with a SecretNamespace the store keeps its Secrets
// (the load balancers' certificates) there, none in the catalog's
// namespace, and reads, replaces and deletes them there.
func TestSecretNamespace(t *testing.T) {
	t.Parallel()
	ns, secrets := namespace(t), namespace(t)
	s, err := kubestore.Open(t.Context(), kubestore.Config{REST: kube.RESTConfig(), Namespace: ns, SecretNamespace: secrets})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	cs, err := kubernetes.NewForConfig(kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, v := range []string{"one", "two"} {
		if err := s.PutSecret(ctx, "lb.vdc-a.web", map[string][]byte{"shop.key": []byte(v)}); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetSecret(ctx, "lb.vdc-a.web")
		if err != nil || string(got["shop.key"]) != v {
			t.Fatalf("GetSecret: %q %v, want %q", got, err, v)
		}
	}
	if _, err := cs.CoreV1().Secrets(secrets).Get(ctx, "lb.vdc-a.web", metav1.GetOptions{}); err != nil {
		t.Errorf("the Secret in %s: %v", secrets, err)
	}
	if list, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("Secrets in the catalog's namespace %s: %d %v, want none", ns, len(list.Items), err)
	}
	if err := s.DeleteSecret(ctx, "lb.vdc-a.web"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSecret(ctx, "lb.vdc-a.web"); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("GetSecret after DeleteSecret: %v, want not found", err)
	}
}

// TestVDCImages: a VDC's images, an uploaded one (url upload:<sha256>) and
// one made from a VM (url vm:<id>, no checksum), pass the Image CRD and
// come back with their VDC, format, size and zone; a platform image's url
// must still be http(s).
func TestVDCImages(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	s := open(t, ns)
	sum := strings.Repeat("ab", 32)
	up := &catalog.Image{}
	up.Name, up.VDC, up.Version, up.URL, up.Checksum = "red.app", "red", "20261206T081500.123Z", "upload:"+sum, "sha256:"+sum
	up.Format, up.SizeBytes, up.Zone = catalog.ImageFormatRaw, 3<<30, "fra1"
	vm := &catalog.Image{}
	vm.Name, vm.VDC, vm.Version, vm.URL, vm.Format, vm.SizeBytes = "red.golden", "red", "20261206T081500.456Z", "vm:dm0vZnJhMS8xMDE", catalog.ImageFormatQCOW2, 4<<30
	for _, img := range []*catalog.Image{up, vm} {
		if _, err := catalog.Create(t.Context(), s, img); err != nil {
			t.Fatalf("%s: %v", img.Name, err)
		}
		got, err := catalog.Get[*catalog.Image](t.Context(), s, img.Name)
		if err != nil || got.VDC != "red" || got.Format != img.Format || got.SizeBytes != img.SizeBytes || got.Zone != img.Zone || got.URL != img.URL || got.ShortName() != img.Name[len("red."):] {
			t.Errorf("%s read back as %+v (%v)", img.Name, got, err)
		}
	}
	manifest := `{"apiVersion":"flexplane.io/v1alpha1","kind":"Image","metadata":{"name":"odd"},"spec":{"version":"1","url":"upload:xyz","checksum":"","cloudInit":false}}`
	if err := raw(t, ns, catalog.KindImage, manifest); err == nil {
		t.Errorf("the server accepted %s", manifest)
	}
}

// TestWatchSignalsOtherWriters: another writer's create and delete (kubectl)
// are signalled to the store's watchers through its informers; the channel
// closes with its context.
func TestWatchSignalsOtherWriters(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	s := open(t, ns)
	ctx, cancel := context.WithCancel(t.Context())
	ch := s.Watch(ctx)
	signalled := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("no signal after %s", what)
		}
	}
	manifest := `{"apiVersion":"flexplane.io/v1alpha1","kind":"ComputeProfile","metadata":{"name":"watched"},"spec":{"vcpus":2,"memoryMiB":2048}}`
	if err := raw(t, ns, catalog.KindComputeProfile, manifest); err != nil {
		t.Fatal(err)
	}
	signalled("kubectl's create")
	dc, err := dynamic.NewForConfig(kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.Resource(kubestore.GVR(catalog.KindComputeProfile)).Namespace(ns).Delete(t.Context(), "watched", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	signalled("kubectl's delete")
	cancel()
	poll.True(t, 10*time.Second, "the channel closed with its context", func() bool {
		select {
		case _, ok := <-ch:
			return !ok
		default:
			return false
		}
	})
}

// TestGetFindsWhatTheWatchHasNotBrought: an object another replica has
// just written is found by a Get before this replica's watch brings it (a
// request that follows a write through another replica is not told
// NOT_FOUND); a name that exists nowhere, or cannot exist, is still
// NOT_FOUND.
func TestGetFindsWhatTheWatchHasNotBrought(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	writer, reader := open(t, ns), open(t, ns)
	ctx := t.Context()
	// The reader's cache stops here: its watches are stopped.
	if err := reader.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Create(ctx, &catalog.ComputeProfile{ObjectMeta: catalog.ObjectMeta{Name: "fresh"}, ComputeProfileSpec: catalog.ComputeProfileSpec{VCPUs: 2, MemoryMiB: 1024}}); err != nil {
		t.Fatal(err)
	}
	got, err := catalog.Get[*catalog.ComputeProfile](ctx, reader, "fresh")
	if err != nil || got.VCPUs != 2 || got.ResourceVersion == "" {
		t.Fatalf("get of another replica's write: %+v, %v", got, err)
	}
	for _, name := range []string{"absent", "Not/A/Name", ""} {
		if _, err := reader.Get(ctx, catalog.KindComputeProfile, name); !errors.Is(err, catalog.ErrNotFound) {
			t.Errorf("get %q: %v, want NOT_FOUND", name, err)
		}
	}
}
