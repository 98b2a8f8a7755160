package compute_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq0kYxJ9ehr0wF7rJ1aA0Yq8hZ3k2wq1n0X6cYzK7fU test@flexplane"

// env is a service over simulated zones with a catalog, networks of two
// VDCs ("blue", "red") and the image "tiny".
type env struct {
	t      testing.TB
	zones  []*vmtest.Zone
	store  *catalog.DirStore
	svc    *compute.Service
	cfg    compute.Config
	blue   map[string]string // zone name -> id of blue's network "lan"
	red    map[string]string // zone name -> id of red's network "lan"
	small  map[string]string // zone name -> id of blue's network "small" (a /28)
	quotas catalog.VDCQuotas
}

func newEnv(t *testing.T, q catalog.VDCQuotas, zoneNames ...string) *env {
	t.Helper()
	return newEnvOf(t, 2, q, zoneNames...)
}

// newEnvOf is newEnv with zones of nodes nodes.
func newEnvOf(t testing.TB, nodes int, q catalog.VDCQuotas, zoneNames ...string) *env {
	t.Helper()
	return newEnvTimed(t, nodes, pvesim.Timing{}, q, zoneNames...)
}

// newEnvTimed is newEnvOf with the simulators' task durations timing.
func newEnvTimed(t testing.TB, nodes int, timing pvesim.Timing, q catalog.VDCQuotas, zoneNames ...string) *env {
	t.Helper()
	e := &env{t: t, blue: map[string]string{}, red: map[string]string{}, small: map[string]string{}, quotas: q}
	for _, n := range zoneNames {
		z := vmtest.StartZoneTimed(t, n, nodes, timing)
		e.zones = append(e.zones, z)
		e.blue[n] = vmtest.AddNetwork(t, z, "blue", "lan", "10.1.0.0/24", "10.1.0.1")
		e.small[n] = vmtest.AddNetwork(t, z, "blue", "small", "10.2.0.0/28", "10.2.0.1")
		e.red[n] = vmtest.AddNetwork(t, z, "red", "lan", "10.1.0.0/24", "10.1.0.1")
	}
	url, sum := vmtest.ImageServer(t, 3<<20)
	e.store = vmtest.Catalog(t, []string{"blue", "red"}, q, url, sum, e.zones...)
	e.cfg = compute.Config{Catalog: e.store, Zones: e.static(), StaleAfter: time.Nanosecond, OrphanGrace: time.Nanosecond}
	e.cfg.Logger = testLogger()
	e.svc = e.newService(e.cfg)
	return e
}

func (e *env) static() compute.StaticZones {
	var zs compute.StaticZones
	for _, z := range e.zones {
		zs = append(zs, compute.Zone{ID: z.Name, Name: z.Name, Client: z.Client})
	}
	return zs
}

func (e *env) newService(cfg compute.Config) *compute.Service {
	e.t.Helper()
	svc, err := compute.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := svc.Shutdown(ctx); err != nil {
			e.t.Errorf("shutdown: %v", err)
		}
	})
	return svc
}

func (e *env) input(zone, name string) compute.CreateInput {
	return compute.CreateInput{VDC: "blue", Name: name, Zone: zone, Image: "tiny", ComputeProfile: "small",
		StorageProfile: "ssd", DiskGiB: 4, NICs: []compute.NICInput{{Network: e.blue[zone]}},
		SSHKeys: []string{testKey}, User: "ops"}
}

// wait waits for operation id to end and returns its final state.
func (e *env) wait(svc *compute.Service, vdc, id string) compute.Operation {
	e.t.Helper()
	ctx := vmtest.Ctx(e.t)
	ch, err := svc.Watch(ctx, vdc, id)
	if err != nil {
		e.t.Fatalf("watch %s: %v", id, err)
	}
	var last compute.Operation
	for op := range ch {
		last = op
	}
	if !last.Done() {
		e.t.Fatalf("operation %s did not end: %+v", id, last)
	}
	return last
}

// snapshot is the Proxmox and catalog state a failed request must not
// change.
type snapshot struct {
	guests   []string
	mappings []string
	reserved int
	versions []string // the VDCs' resourceVersions
}

func (e *env) snapshot() snapshot {
	e.t.Helper()
	ctx := vmtest.Ctx(e.t)
	var s snapshot
	for _, z := range e.zones {
		gs, err := pveapi.Guests(ctx, z.Client)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, g := range gs {
			s.guests = append(s.guests, z.Name+"/"+g.Name+"/"+g.RawTags+"/"+g.Status)
		}
		ms, err := ipam.Mappings(ctx, z.Client)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, m := range ms {
			s.mappings = append(s.mappings, z.Name+"/"+m.Zone+"/"+m.IP+"/"+m.MAC)
		}
	}
	sort.Strings(s.guests)
	sort.Strings(s.mappings)
	for _, v := range []string{"blue", "red"} {
		rs, err := e.svc.Quota().Reservations(ctx, v)
		if err != nil {
			e.t.Fatal(err)
		}
		s.reserved += len(rs)
		vdc, err := catalog.Get[*catalog.VDC](ctx, e.store, v)
		if err != nil {
			e.t.Fatal(err)
		}
		s.versions = append(s.versions, v+"@"+vdc.ResourceVersion)
	}
	return s
}

func (s snapshot) equal(o snapshot) bool {
	return slices.Equal(s.guests, o.guests) && slices.Equal(s.mappings, o.mappings) && s.reserved == o.reserved &&
		slices.Equal(s.versions, o.versions)
}

// flexMappings counts the flexplane IPAM mappings of zone z.
func (e *env) flexMappings(z *vmtest.Zone) []ipam.Mapping {
	e.t.Helper()
	ms, err := ipam.Mappings(vmtest.Ctx(e.t), z.Client)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []ipam.Mapping
	for _, m := range ms {
		if ipam.IsFlexplaneMAC(m.MAC) {
			out = append(out, m)
		}
	}
	return out
}

// code returns the code and field a GraphQL client sees for err, a
// createVM input being "input" ("" when err is no *compute.Error: every
// error of the service must be one).
func code(err error) (apierr.Code, string) {
	var ce *compute.Error
	if !errors.As(err, &ce) {
		return "", ""
	}
	ae := apierr.From(err, "input")
	return ae.Code, ae.Field
}

// stage stages the image in zone z through the service's stager.
func (e *env) stage(z *vmtest.Zone) {
	e.t.Helper()
	img, err := catalog.Get[*catalog.Image](vmtest.Ctx(e.t), e.store, "tiny")
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.svc.Images().Stager().Ensure(vmtest.Ctx(e.t), imagesTarget(z), img); err != nil {
		e.t.Fatalf("stage: %v", err)
	}
}

// testLogger discards logs unless VMOPS_LOG is set (then debug to stderr).
func testLogger() *slog.Logger {
	if os.Getenv("VMOPS_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
