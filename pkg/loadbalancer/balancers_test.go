package loadbalancer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// fleet is zones alpha (z-alpha) and beta (z-beta); the pool of VDC prod
// holds VMs 100 and 101 in alpha, 200 in beta; down zones fail.
type fleet struct{ down map[string]bool }

var zoneNames = map[string]string{"z-alpha": "alpha", "z-beta": "beta"}

func (fleet) ZoneName(id string) (string, bool) { n, ok := zoneNames[id]; return n, ok }

func (fleet) ZoneID(name string) (string, bool) {
	for id, n := range zoneNames {
		if n == name {
			return id, true
		}
	}
	return "", false
}

func (f fleet) PoolVMs(_ context.Context, zoneID, pool string) ([]int, error) {
	if f.down[zoneID] {
		return nil, errors.New("no agent")
	}
	if pool != tenancy.PoolID("prod") {
		return nil, nil
	}
	return map[string][]int{"z-alpha": {100, 101}, "z-beta": {200}}[zoneID], nil
}

type kicker struct{ kicks int }

func (s *kicker) Statuses(context.Context, string) []lbconfig.Status { return nil }
func (s *kicker) Kick()                                              { s.kicks++ }

func vm(zoneID string, id int) string { return tenancy.VMRef{ZoneID: zoneID, VMID: id}.ID() }

func tcp(backends ...loadbalancer.BackendSpec) loadbalancer.Spec {
	return loadbalancer.Spec{
		Listeners: []catalog.LBListener{{Name: "raw", Protocol: catalog.LBProtocolTCP, Port: 5432, Pool: "db"}},
		Pools:     []loadbalancer.PoolSpec{{Name: "db", Backends: backends}},
	}
}

// TestBackendsAreTheVDCsVMsInTheZone: a backend is a VM of the balancer's
// VDC in its zone: another VDC's (or none) is NOT_FOUND, one of the VDC in
// another zone bad input on its field, a zone that does not answer
// ZONE_UNAVAILABLE; every change kicks the sync.
func TestBackendsAreTheVDCsVMsInTheZone(t *testing.T) {
	t.Parallel()
	svc, _ := setup(t)
	f := fleet{down: map[string]bool{}}
	sy := &kicker{}
	svc.Fleet, svc.Sync = f, sy
	ctx := t.Context()
	kind := func(err error) (fault.Kind, string, bool) {
		var fe *fault.Error
		if !errors.As(err, &fe) {
			return 0, "", false
		}
		return fe.Kind, fe.Field, true
	}
	for _, c := range []struct {
		name  string
		be    loadbalancer.BackendSpec
		kind  fault.Kind
		field string
	}{
		{"a VM of no pool", loadbalancer.BackendSpec{VM: vm("z-alpha", 900), Port: 5432}, fault.NotFound, ""},
		{"not a VM id", loadbalancer.BackendSpec{VM: "nope", Port: 5432}, fault.NotFound, ""},
		{"a VM of another zone", loadbalancer.BackendSpec{VM: vm("z-beta", 200), Port: 5432}, fault.BadInput, "pools[0].backends[0].vmId"},
		{"a VM of an unknown zone", loadbalancer.BackendSpec{VM: vm("z-gamma", 200), Port: 5432}, fault.NotFound, ""},
		{"port 0", loadbalancer.BackendSpec{VM: vm("z-alpha", 100), Port: 0}, fault.BadInput, "pools[0].backends[0].port"},
	} {
		_, err := svc.CreateBalancer(ctx, "prod", "alpha", "db", tcp(c.be))
		if k, field, ok := kind(err); !ok || k != c.kind || field != c.field {
			t.Errorf("%s: %v, want kind %d on %q", c.name, err, c.kind, c.field)
		}
	}
	f.down["z-alpha"] = true
	if _, err := svc.CreateBalancer(ctx, "prod", "alpha", "db", tcp(loadbalancer.BackendSpec{VM: vm("z-alpha", 100), Port: 5432})); !fault.Is(err, fault.ZoneUnavailable) {
		t.Errorf("zone down: %v", err)
	}
	f.down["z-alpha"] = false
	if sy.kicks != 0 || allocations(t, svc.Store) != 0 {
		t.Fatalf("refused creates: %d kicks, %d addresses taken", sy.kicks, allocations(t, svc.Store))
	}
	lb, err := svc.CreateBalancer(ctx, "prod", "alpha", "db", tcp(loadbalancer.BackendSpec{VM: vm("z-alpha", 100), Port: 5432}))
	if err != nil {
		t.Fatal(err)
	}
	if len(lb.Pools) != 1 || len(lb.Pools[0].Backends) != 1 || lb.Pools[0].Backends[0].VMID != 100 || svc.ZoneID(lb) != "z-alpha" {
		t.Errorf("created: %+v", lb)
	}
	desc := "primary"
	up, err := svc.UpdateBalancer(ctx, "prod", lb.Name, loadbalancer.Spec{Description: &desc})
	if err != nil || up.Description != desc || len(up.Pools[0].Backends) != 1 {
		t.Errorf("update keeping pools: %+v, %v", up, err)
	}
	if err := svc.DeleteBalancer(ctx, "dev", lb.Name); !errors.Is(err, loadbalancer.ErrNotFound) {
		t.Errorf("another VDC's delete: %v", err)
	}
	if err := svc.DeleteBalancer(ctx, "prod", lb.Name); err != nil {
		t.Fatal(err)
	}
	if sy.kicks != 3 {
		t.Errorf("%d kicks after a create, an update and a delete", sy.kicks)
	}
}
