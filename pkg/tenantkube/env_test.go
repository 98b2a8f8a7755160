package tenantkube_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/agenttest"
	"github.com/flexplane/flexplane/pkg/dev/capitest"
	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenantkube"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider"
)

var kube *kubetest.Server

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(kubetest.Main(m, &kube, func(ctx context.Context, s *kubetest.Server) error { return capitest.InstallCRDs(ctx, s.RESTConfig()) }))
}

// env is a management cluster namespace's worth of Cluster API with
// flexplane's provider over a simulated zone with VDCs blue and red.
type env struct {
	zone  *vmtest.Zone
	store *catalog.DirStore
	comp  *compute.Service
	svc   *tenantkube.Service
	cp    *capitest.ControlPlane
	kc    client.Client
	blue  string // blue's network "lan"
	red   string // red's network "lan"
}

// versions are the Kubernetes versions the env offers.
var versions = []string{"v1.36.4", "v1.37.2", "v1.38.0"}

var quotas = catalog.VDCQuotas{VCPUs: 64, MemoryMiB: 1 << 16, StorageGiB: 10000, VMs: 12}

// newEnv builds the env; with provider it runs the controllers (one test
// at a time may: they watch every namespace).
func newEnv(t testing.TB, q catalog.VDCQuotas, provider bool) *env {
	return newEnvImages(t, q, provider, nil)
}

// newEnvImages is newEnv whose workers of the versions of images are made
// from those catalog images (each a copy of "tiny" in the catalog).
func newEnvImages(t testing.TB, q catalog.VDCQuotas, provider bool, images map[string]string) *env {
	z := vmtest.StartZone(t, "alpha", 2)
	e := &env{zone: z, cp: &capitest.ControlPlane{}}
	e.blue = vmtest.AddNetwork(t, z, "blue", "lan", "10.1.0.0/24", "10.1.0.1")
	e.red = vmtest.AddNetwork(t, z, "red", "lan", "10.1.0.0/24", "10.1.0.1")
	url, sum := vmtest.ImageServer(t, 1<<20)
	e.store = vmtest.Catalog(t, []string{"blue", "red"}, q, url, sum, z)
	// The zone's external network: the VDCs' edge gateways, which carry
	// the workers to their clusters' API servers, take addresses of it.
	en := &catalog.ExternalNetwork{}
	en.Name, en.Bridge, en.CIDR, en.Gateway, en.PoolStart, en.PoolEnd = z.Name, "vmbr0", "203.0.113.0/24", "203.0.113.254", "203.0.113.10", "203.0.113.50"
	if _, err := catalog.Create(t.Context(), e.store, en); err != nil {
		t.Fatal(err)
	}
	tiny, err := catalog.Get[*catalog.Image](t.Context(), e.store, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range images {
		img := &catalog.Image{ImageSpec: tiny.ImageSpec}
		img.Name = name
		if _, err := catalog.Create(t.Context(), e.store, img); err != nil && !errors.Is(err, catalog.ErrAlreadyExists) {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("CAPI_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	comp, err := compute.New(compute.Config{Catalog: e.store, Zones: compute.StaticZones{{ID: z.Name, Name: z.Name, Client: z.Client}},
		Snippets: agenttest.Snippets(t, z), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	e.comp = comp
	scheme, err := capiprovider.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	e.kc, err = client.New(kube.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	e.cp.Client, e.cp.Kube = e.kc, kube
	e.svc, err = tenantkube.New(tenantkube.Config{Client: e.kc, Compute: comp, Catalog: e.store, ControlPlane: e.cp,
		WorkerImage: "tiny", WorkerImages: images, WorkerDiskGiB: 4, Logger: log, Versions: versions})
	if err != nil {
		t.Fatal(err)
	}
	if !provider {
		return e
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		done <- capiprovider.Run(ctx, capiprovider.Config{REST: kube.RESTConfig(), Compute: comp, ControlPlane: e.cp, Core: true, WorkerImage: e.svc.WorkerImage,
			Poll: 250 * time.Millisecond, Logger: log, Started: func() { close(started) }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("provider: %v", err)
		}
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		_ = comp.Shutdown(sctx)
	})
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("provider: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the provider's caches did not sync in 2 minutes")
	}
	return e
}

// workers lists the running VMs of vdc in the zone whose name starts with
// prefix.
func (e *env) workers(t testing.TB, vdc, prefix string) []*compute.VM {
	t.Helper()
	ctx := context.Background()
	gs, err := pveapi.Guests(ctx, e.zone.Client)
	if err != nil {
		t.Fatal(err)
	}
	var out []*compute.VM
	for _, g := range gs {
		if v, _ := tenancy.VDCOf(g.Tags()); v != vdc || g.Template == 1 || !strings.HasPrefix(g.Name, prefix) {
			continue
		}
		vm, err := e.comp.VM(ctx, vdc, tenancy.VMRef{ZoneID: e.zone.Name, VMID: g.VMID}.ID())
		if err != nil {
			continue
		}
		out = append(out, vm)
	}
	return out
}

// waitFor polls cond until it holds or d passes; cond's second result,
// the state it saw, explains a failure.
func waitFor(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	poll.Until(t, d, what, func() error {
		if ok, state := cond(); !ok {
			return errors.New(state)
		}
		return nil
	})
}

// endpoints are the Kubernetes endpoints of vdc's gateway in the zone.
func (e *env) endpoints(t testing.TB, vdc string) []catalog.KubeEndpoint {
	t.Helper()
	g, err := catalog.Get[*catalog.EdgeGateway](t.Context(), e.store, catalog.EdgeGatewayName(vdc, e.zone.Name))
	if err != nil {
		t.Fatalf("%s's gateway: %v", vdc, err)
	}
	return g.KubeEndpoints
}

// dedicate dedicates the env's zone to vdcs (its ZonePolicy) and returns
// what takes the dedication back.
func (e *env) dedicate(t testing.TB, vdcs ...string) func() {
	t.Helper()
	p := &catalog.ZonePolicy{ObjectMeta: catalog.ObjectMeta{Name: e.zone.Name}, ZonePolicySpec: catalog.ZonePolicySpec{DedicatedTo: vdcs}}
	if _, err := catalog.Create(t.Context(), e.store, p); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := catalog.Delete[*catalog.ZonePolicy](context.Background(), e.store, e.zone.Name, ""); err != nil {
			t.Fatal(err)
		}
	}
}
