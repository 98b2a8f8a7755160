package compute_test

import (
	"context"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestLookupsAskTheIDsZone: with one zone (beta) so slow that each of its
// reads takes a minute, a VM of another zone (alpha) is found by asking
// alpha only, and an id of alpha that names no VM answers NOT_FOUND within
// the zone timeout (beta is asked whether the VM moved there, and passed
// over when it does not answer in time), both long before beta's reads
// would end.
func TestLookupsAskTheIDsZone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "alpha", "beta")
	alpha, beta := e.zones[0], e.zones[1]
	e.stage(alpha)
	ctx := vmtest.Ctx(t)
	_, op, err := e.svc.CreateVM(ctx, e.input("alpha", "near"))
	if err != nil {
		t.Fatal(err)
	}
	fin := e.wait(e.svc, "blue", op.ID)
	if fin.State != compute.OpSucceeded {
		t.Fatalf("create: %+v", fin)
	}

	ca, asked := pvetest.CountingClient(t, alpha.Sim, vmtest.Token)
	cb, askedBeta := pvetest.CountingClient(t, beta.Sim, vmtest.Token)
	for _, path := range []string{"/cluster/resources", "/pools", "/nodes/*/qemu/*/config"} {
		beta.Sim.InjectFault(pvesim.Fault{Method: "GET", Path: path, Delay: time.Minute, Count: 1000})
	}
	cfg := e.cfg
	cfg.Zones = compute.StaticZones{{ID: alpha.Name, Name: alpha.Name, Client: ca}, {ID: beta.Name, Name: beta.Name, Client: cb}}
	cfg.ZoneTimeout = 2 * time.Second
	svc := e.newService(cfg)

	// Generous, but well short of beta's minute.
	lookup := func(id string) error {
		t.Helper()
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := svc.VM(lctx, "blue", id)
		if lctx.Err() != nil {
			t.Fatalf("the lookup of %s waited for the slow zone: %v", id, err)
		}
		return err
	}
	if err := lookup(fin.VMID); err != nil {
		t.Fatalf("the VM of alpha: %v", err)
	}
	if n := askedBeta.Requests(); n != 0 || asked.Requests() == 0 {
		t.Errorf("finding a VM of alpha asked beta %d times (alpha %d), want alpha only", n, asked.Requests())
	}
	missing := tenancy.VMRef{ZoneID: alpha.Name, VMID: 999}.ID()
	if err := lookup(missing); !compute.IsKind(err, compute.KindNotFound) {
		t.Fatalf("a VM there is not: %v, want NOT_FOUND", err)
	}
	if err := lookup("vm-made-up"); !compute.IsKind(err, compute.KindNotFound) {
		t.Fatalf("an id that is none: %v, want NOT_FOUND", err)
	}
}
