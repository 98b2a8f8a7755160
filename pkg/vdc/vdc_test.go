package vdc_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
	"github.com/flexplane/flexplane/pkg/vdc"
)

// estate is two zones with what the VDC has in each; it records the
// cleanups asked.
type estate struct {
	mu       sync.Mutex
	nets     map[string]int      // networks per zone id
	vms      int                 // VMs the ledger counts
	down     map[string]bool     // zones that do not answer
	failPool bool                // pool removals fail
	removed  map[string][]string // zone id: "sdn", "pool" in order
	backups  []string            // the VDC's backup archives
	writing  int                 // its backups being written
}

func (e *estate) VDCBackups(context.Context, string) ([]string, int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.backups), e.writing, nil
}

func (e *estate) DeleteBackup(_ context.Context, _, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.backups = slices.DeleteFunc(e.backups, func(b string) bool { return b == id })
	return nil
}

// UsedBytes counts each backup as 1 GiB.
func (e *estate) UsedBytes(context.Context, string) (int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return int64(len(e.backups)) << 30, nil
}

func (e *estate) Zones() []vdc.Zone {
	return []vdc.Zone{{ID: "z-alpha", Name: "alpha"}, {ID: "z-beta", Name: "beta"}}
}

func (e *estate) List(_ context.Context, zoneID, _ string) ([]network.Network, error) {
	if e.down[zoneID] {
		return nil, errors.New("no agent")
	}
	return make([]network.Network, e.nets[zoneID]), nil
}

func (e *estate) RemoveVDC(_ context.Context, zoneID, _ string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.removed[zoneID] = append(e.removed[zoneID], "sdn")
	return nil
}

func (e *estate) RemovePool(_ context.Context, zoneID, _ string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.removed[zoneID] = append(e.removed[zoneID], "pool")
	if e.failPool {
		return errors.New("pool busy")
	}
	return nil
}

func (e *estate) Usage(context.Context, *catalog.VDC) (quota.Usage, error) {
	return quota.Usage{VMs: e.vms}, nil
}

func setup(t *testing.T, e *estate) (*vdc.Service, catalog.Store) {
	t.Helper()
	s, err := catalog.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := vdc.New(vdc.Config{Store: s, Zones: e, Networks: e, Pools: e, Ledger: e, Backups: e})
	if err != nil {
		t.Fatal(err)
	}
	v := &catalog.VDC{}
	v.Name, v.Quotas = "prod", catalog.VDCQuotas{VCPUs: 8, MemoryMiB: 8192, StorageGiB: 100, VMs: 4}
	if _, err := svc.Create(t.Context(), v); err != nil {
		t.Fatal(err)
	}
	return svc, s
}

func newEstate() *estate {
	return &estate{nets: map[string]int{}, down: map[string]bool{}, removed: map[string][]string{}}
}

func exists(t *testing.T, s catalog.Store) bool {
	t.Helper()
	_, err := catalog.Get[*catalog.VDC](t.Context(), s, "prod")
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// TestDeleteRefusedWhileInUse: a VDC with networks or VMs in any zone, or
// a zone that cannot tell, is kept, and nothing is cleaned.
func TestDeleteRefusedWhileInUse(t *testing.T) {
	t.Parallel()
	e := newEstate()
	svc, s := setup(t, e)
	ctx := t.Context()
	e.nets["z-beta"] = 2
	var fe *fault.Error
	if err := svc.Delete(ctx, "prod", nil, false); !errors.As(err, &fe) || fe.Kind != fault.Conflict ||
		fe.Message != "VDC prod still has 0 VMs and 2 networks: delete them first" {
		t.Errorf("with networks: %v", err)
	}
	e.nets["z-beta"], e.vms = 0, 1
	if err := svc.Delete(ctx, "prod", nil, false); !errors.As(err, &fe) || fe.Kind != fault.Conflict ||
		fe.Message != "VDC prod still has 1 VM and 0 networks: delete them first" {
		t.Errorf("with a VM: %v", err)
	}
	e.vms, e.down["z-alpha"] = 0, true
	if err := svc.Delete(ctx, "prod", nil, false); !errors.As(err, &fe) || fe.Kind != fault.ZoneUnavailable || fe.Zone != "alpha" {
		t.Errorf("zone down: %v", err)
	}
	if err := svc.Delete(ctx, "prod", new(string), false); !errors.As(err, &fe) || fe.Kind != fault.BadInput || fe.Field != "resourceVersion" {
		t.Errorf("empty resourceVersion: %v", err)
	}
	if !exists(t, s) || len(e.removed) != 0 {
		t.Errorf("a refused delete changed something: exists %v, removed %v", exists(t, s), e.removed)
	}
}

// TestDeleteCleansEveryZone: an empty VDC is deleted and its SDN zone and
// pool removed from every zone; a zone failing there is only logged.
func TestDeleteCleansEveryZone(t *testing.T) {
	t.Parallel()
	e := newEstate()
	e.failPool = true
	svc, s := setup(t, e)
	stale := "999"
	if err := svc.Delete(t.Context(), "prod", &stale, false); !errors.Is(err, catalog.ErrConflict) {
		t.Errorf("stale resourceVersion: %v", err)
	}
	if err := svc.Delete(t.Context(), "prod", nil, false); err != nil {
		t.Fatal(err)
	}
	if exists(t, s) {
		t.Error("the VDC is still there")
	}
	for _, z := range []string{"z-alpha", "z-beta"} {
		if got := e.removed[z]; len(got) != 2 || got[0] != "sdn" || got[1] != "pool" {
			t.Errorf("cleanup of %s: %v, want the SDN zone then the pool", z, got)
		}
	}
}

// TestDeleteWithBackups: a VDC with backups is kept (CONFLICT counting
// them) unless the delete asks for its backups to go, which deletes them
// and then the VDC; one with a backup being written is kept either way;
// backups are deleted only once nothing else is in the way.
func TestDeleteWithBackups(t *testing.T) {
	t.Parallel()
	e := newEstate()
	e.backups = []string{"b1", "b2"}
	svc, s := setup(t, e)
	ctx := t.Context()
	var fe *fault.Error
	if err := svc.Delete(ctx, "prod", nil, false); !errors.As(err, &fe) || fe.Kind != fault.Conflict ||
		fe.Message != "VDC prod still has 2 backups: delete them first, or delete the VDC with deleteBackups" {
		t.Errorf("with backups: %v", err)
	}
	e.vms = 1
	if err := svc.Delete(ctx, "prod", nil, true); !errors.As(err, &fe) || fe.Kind != fault.Conflict || len(e.backups) != 2 {
		t.Errorf("with a VM and deleteBackups: %v, backups left %v", err, e.backups)
	}
	e.vms, e.writing = 0, 1
	if err := svc.Delete(ctx, "prod", nil, true); !errors.As(err, &fe) || fe.Kind != fault.Conflict ||
		fe.Message != "VDC prod has 1 backup being written: wait for them to end" || len(e.backups) != 2 {
		t.Errorf("with a backup being written: %v, backups left %v", err, e.backups)
	}
	e.writing = 0
	stale := "999"
	if err := svc.Delete(ctx, "prod", &stale, true); !errors.Is(err, catalog.ErrConflict) || len(e.backups) != 2 {
		t.Errorf("stale resourceVersion: %v, backups left %v", err, e.backups)
	}
	if !exists(t, s) || len(e.removed) != 0 {
		t.Fatalf("a refused delete changed something: exists %v, removed %v", exists(t, s), e.removed)
	}
	if err := svc.Delete(ctx, "prod", nil, true); err != nil {
		t.Fatal(err)
	}
	if exists(t, s) || len(e.backups) != 0 {
		t.Errorf("after the delete with its backups: exists %v, backups %v", exists(t, s), e.backups)
	}
}

// TestUsageAndUpdate: usage counts the ledger's VMs and the catalog's
// public addresses; an update with an empty resourceVersion is bad input.
func TestUsageAndUpdate(t *testing.T) {
	t.Parallel()
	e := newEstate()
	e.vms = 3
	svc, s := setup(t, e)
	ctx := t.Context()
	en := &catalog.ExternalNetwork{}
	en.Name, en.Bridge, en.CIDR, en.Gateway, en.PoolStart, en.PoolEnd = "alpha", "vmbr0", "203.0.113.0/24", "203.0.113.1", "203.0.113.10", "203.0.113.20"
	if _, err := catalog.Create(ctx, s, en); err != nil {
		t.Fatal(err)
	}
	if _, err := quota.TakePublicAddress(ctx, s, "prod", "alpha", catalog.UseOneToOne, netip.Addr{}, "publicAddress"); err != nil {
		t.Fatal(err)
	}
	v, err := catalog.Get[*catalog.VDC](ctx, s, "prod")
	if err != nil {
		t.Fatal(err)
	}
	u, err := svc.Usage(ctx, v)
	if err != nil || u.VMs.VMs != 3 || u.PublicAddresses != 2 {
		t.Errorf("usage: %+v, %v; want 3 VMs and 2 addresses (the gateway's and the 1:1)", u, err)
	}
	_, err = svc.Update(ctx, "prod", new(string), func(*catalog.VDC) {})
	if !fault.Is(err, fault.BadInput) {
		t.Errorf("empty resourceVersion: %v", err)
	}
	out, err := svc.Update(ctx, "prod", nil, func(v *catalog.VDC) { v.Description = "shop" })
	if err != nil || out.Description != "shop" {
		t.Errorf("update: %+v, %v", out, err)
	}
}
