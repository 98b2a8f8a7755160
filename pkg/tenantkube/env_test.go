package tenantkube_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/catalog/kubestore"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenantkube"
	"github.com/flexplane/flexplane/pkg/tenantkube/capiprovider"
)

var kube *kubetest.Server

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(kubetest.Main(m, &kube, installCRDs))
}

// installCRDs installs Cluster API's CRDs from the pinned module (the
// files the module ships in core/config/crd/bases) and the providers'.
func installCRDs(ctx context.Context, s *kubetest.Server) error {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-api").Output()
	if err != nil {
		return fmt.Errorf("finding the cluster-api module: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "core", "config", "crd", "bases")
	crds, err := kubestore.ReadCRDs(os.DirFS(dir), ".")
	if err != nil {
		return err
	}
	if err := kubestore.ApplyCRDs(ctx, s.RESTConfig(), crds); err != nil {
		return err
	}
	return capiprovider.InstallCRDs(ctx, s.RESTConfig())
}

// controlPlane stands for the hosted control plane (pkg/tenantkube/
// controlplane runs the real one): ready at once, it records what it was
// asked.
type controlPlane struct {
	mu      sync.Mutex
	ensured map[string]capiprovider.ControlPlaneSpec // protected by mu
	deleted map[string]bool                          // protected by mu
}

func (c *controlPlane) Ensure(_ context.Context, spec capiprovider.ControlPlaneSpec) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ensured[spec.Namespace] = spec
	return nil
}

func (c *controlPlane) Delete(_ context.Context, ns string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.ensured, ns)
	c.deleted[ns] = true
	return nil
}

func (c *controlPlane) Status(_ context.Context, ns string) (capiprovider.ControlPlaneStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	spec, ok := c.ensured[ns]
	if !ok {
		return capiprovider.ControlPlaneStatus{}, nil
	}
	return capiprovider.ControlPlaneStatus{Ready: true, Version: spec.Version,
		Components: []capiprovider.ComponentStatus{{Name: "kube-apiserver", Ready: true}, {Name: "etcd", Ready: true}}}, nil
}

func (c *controlPlane) Kubeconfig(_ context.Context, ns string, cred capiprovider.Credential) ([]byte, error) {
	return fmt.Appendf(nil, "cluster: %s\nuser: %s\ngroups: %s\nttl: %s\n", ns, cred.User, strings.Join(cred.Groups, ","), cred.TTL), nil
}

// env is a management cluster namespace's worth of Cluster API with
// flexplane's provider over a simulated zone with VDCs blue and red.
type env struct {
	zone  *vmtest.Zone
	store *catalog.DirStore
	comp  *compute.Service
	svc   *tenantkube.Service
	cp    *controlPlane
	kc    client.Client
	blue  string // blue's network "lan"
	red   string // red's network "lan"
}

var quotas = catalog.VDCQuotas{VCPUs: 64, MemoryMiB: 1 << 16, StorageGiB: 10000, VMs: 12}

// newEnv builds the env; with provider it runs the controllers (one test
// at a time may: they watch every namespace).
func newEnv(t testing.TB, q catalog.VDCQuotas, provider bool) *env {
	z := vmtest.StartZone(t, "alpha", 2)
	e := &env{zone: z, cp: &controlPlane{ensured: map[string]capiprovider.ControlPlaneSpec{}, deleted: map[string]bool{}}}
	e.blue = vmtest.AddNetwork(t, z, "blue", "lan", "10.1.0.0/24", "10.1.0.1")
	e.red = vmtest.AddNetwork(t, z, "red", "lan", "10.1.0.0/24", "10.1.0.1")
	url, sum := vmtest.ImageServer(t, 1<<20)
	e.store = vmtest.Catalog(t, []string{"blue", "red"}, q, url, sum, z)
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("CAPI_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	comp, err := compute.New(compute.Config{Catalog: e.store, Zones: compute.StaticZones{{ID: z.Name, Name: z.Name, Client: z.Client}}, Logger: log})
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
	e.svc, err = tenantkube.New(tenantkube.Config{Client: e.kc, Compute: comp, Catalog: e.store, ControlPlane: e.cp,
		WorkerImage: "tiny", WorkerDiskGiB: 4, Logger: log})
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
		done <- capiprovider.Run(ctx, capiprovider.Config{REST: kube.RESTConfig(), Compute: comp, ControlPlane: e.cp, Core: true,
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

// bootstrap writes the join data of cluster (the control plane's side,
// which the stand-in control plane does not do).
func (e *env) bootstrap(t testing.TB, c *tenantkube.Cluster, data string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.ID, Name: tenantkube.BootstrapSecretName(c.Name)},
		Type: "cluster.x-k8s.io/secret", Data: map[string][]byte{"value": []byte(data), "format": []byte("cloud-config")}}
	if err := e.kc.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
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

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (%s)", what, d, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
