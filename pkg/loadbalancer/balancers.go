package loadbalancer

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// The balancers of the API: backends named by their VMs' API ids, checked
// to be VMs of the balancer's VDC in its zone, and the sync to the zones'
// flexgateway replicas told of every change.

// Fleet is what the service needs of the zones to check backends (the
// orchestrator implements it over the fleet registry).
type Fleet interface {
	// ZoneName returns the name of the zone of id; false when there is
	// none.
	ZoneName(id string) (string, bool)
	// ZoneID returns the id of the zone named name; false when there is
	// none.
	ZoneID(name string) (string, bool)
	// PoolVMs lists the VM ids of the guests (templates left out) of the
	// Proxmox pool in the zone of id zoneID.
	PoolVMs(ctx context.Context, zoneID, pool string) ([]int, error)
}

// Sync is the load balancers' sync to the zones' flexgateway replicas
// (lbsync.Syncer implements it).
type Sync interface {
	// Statuses returns what each replica of the zone that answers reports
	// (as last seen: it does not wait on the replicas).
	Statuses(ctx context.Context, zone string) []lbconfig.Status
	// Kick starts a pass now (a balancer changed).
	Kick()
}

// statusTimeout bounds the status read from a zone's replicas.
const statusTimeout = 3 * time.Second

// BackendSpec is a backend as the API names it.
type BackendSpec struct {
	// VM is the API id of the VM (tenancy.VMRef.ID).
	VM string
	// Port is the VM's port.
	Port int
}

// PoolSpec is a backend pool as the API gives it.
type PoolSpec struct {
	Name        string
	Backends    []BackendSpec
	HealthCheck *catalog.LBHealthCheck
}

// Spec is what a create or an update gives: nil Listeners or Pools keep
// the balancer's (an update), a nil Description keeps it.
type Spec struct {
	Description *string
	Listeners   []catalog.LBListener
	Pools       []PoolSpec
	// Certificates are the balancer's certificates; nil keeps the stored
	// ones (an update).
	Certificates []CertificatePEM
}

// vmNotFound is a VM the VDC does not have (another VDC's or none).
func vmNotFound() error { return fault.New(fault.NotFound, "VM not found") }

// backends resolves the backends' VMs of vdc in zone: another VDC's VM
// (or none) is NOT_FOUND, one of another zone bad input.
type backends struct {
	s         *Service
	vdc       string
	zone, zid string
	vmids     map[int]bool // the VDC's VMs in the zone, read at first use
}

func (s *Service) vdcVMs(ctx context.Context, zoneID, zone, vdc string) (map[int]bool, error) {
	ids, err := s.Fleet.PoolVMs(ctx, zoneID, tenancy.PoolID(vdc))
	if err != nil {
		return nil, fault.ZoneDown(zone, err)
	}
	out := make(map[int]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

func (b *backends) vmid(ctx context.Context, field, id string) (int, error) {
	ref, err := tenancy.ParseVMID(id)
	if err != nil {
		return 0, vmNotFound()
	}
	if ref.ZoneID != b.zid {
		name, ok := b.s.Fleet.ZoneName(ref.ZoneID)
		if !ok {
			return 0, vmNotFound()
		}
		vms, err := b.s.vdcVMs(ctx, ref.ZoneID, name, b.vdc)
		if err != nil {
			return 0, err
		}
		if !vms[ref.VMID] {
			return 0, vmNotFound()
		}
		return 0, fault.Invalid(field, "the VM is not in the load balancer's zone %s", b.zone)
	}
	if b.vmids == nil {
		if b.vmids, err = b.s.vdcVMs(ctx, b.zid, b.zone, b.vdc); err != nil {
			return 0, err
		}
	}
	if !b.vmids[ref.VMID] {
		return 0, vmNotFound()
	}
	return ref.VMID, nil
}

// apply fills lb's description, listeners and pools from spec.
func (b *backends) apply(ctx context.Context, lb *catalog.LoadBalancer, spec Spec) error {
	if spec.Description != nil {
		lb.Description = *spec.Description
	}
	if spec.Listeners != nil {
		lb.Listeners = slices.Clone(spec.Listeners)
	}
	if spec.Pools == nil {
		return nil
	}
	lb.Pools = []catalog.LBPool{}
	for i, in := range spec.Pools {
		p := catalog.LBPool{Name: in.Name, HealthCheck: in.HealthCheck}
		for j, be := range in.Backends {
			f := fmt.Sprintf("pools[%d].backends[%d]", i, j)
			if be.Port < 1 || be.Port > 65535 {
				return fault.Invalid(f+".port", "port %d is out of range: 1 to 65535", be.Port)
			}
			vmid, err := b.vmid(ctx, f+".vmId", be.VM)
			if err != nil {
				return err
			}
			p.Backends = append(p.Backends, catalog.LBBackend{VMID: vmid, Port: be.Port})
		}
		lb.Pools = append(lb.Pools, p)
	}
	return nil
}

// kick tells the sync a balancer changed, so that the replicas get it now
// rather than at the next pass.
func (s *Service) kick() {
	if s.Sync != nil {
		s.Sync.Kick()
	}
}

// CreateBalancer checks spec (its backends VMs of vdc in the zone named
// zone, which the caller has checked vdc may use) and creates vdc's
// balancer name there (see Create).
func (s *Service) CreateBalancer(ctx context.Context, vdc, zone, name string, spec Spec) (*catalog.LoadBalancer, error) {
	if err := catalog.ValidateLabel("name", name); err != nil {
		return nil, err
	}
	zid, ok := s.Fleet.ZoneID(zone)
	if !ok {
		return nil, fault.New(fault.ZoneUnavailable, "zone %s is not reachable", zone)
	}
	lb := &catalog.LoadBalancer{LoadBalancerSpec: catalog.LoadBalancerSpec{VDC: vdc, Zone: zone}}
	lb.Name = catalog.LoadBalancerName(vdc, name)
	if err := (&backends{s: s, vdc: vdc, zone: zone, zid: zid}).apply(ctx, lb, spec); err != nil {
		return nil, err
	}
	out, err := s.Create(ctx, lb, spec.Certificates)
	if err != nil {
		return nil, err
	}
	s.kick()
	return out, nil
}

// UpdateBalancer replaces what spec gives of vdc's balancer object (see
// Update); nil Certificates keep the stored ones.
func (s *Service) UpdateBalancer(ctx context.Context, vdc, object string, spec Spec) (*catalog.LoadBalancer, error) {
	old, err := s.Get(ctx, vdc, object)
	if err != nil {
		return nil, err
	}
	zid, ok := s.Fleet.ZoneID(old.Zone)
	if !ok {
		return nil, fault.New(fault.ZoneUnavailable, "zone %s is not reachable", old.Zone)
	}
	want := old.DeepCopyObject().(*catalog.LoadBalancer)
	if err := (&backends{s: s, vdc: vdc, zone: old.Zone, zid: zid}).apply(ctx, want, spec); err != nil {
		return nil, err
	}
	certs := spec.Certificates
	if certs == nil {
		for _, c := range old.Certificates {
			certs = append(certs, CertificatePEM{Name: c.Name})
		}
	}
	out, err := s.Update(ctx, vdc, old.Name, want, certs)
	if err != nil {
		return nil, err
	}
	s.kick()
	return out, nil
}

// DeleteBalancer deletes vdc's balancer object and gives its address back
// (see Delete).
func (s *Service) DeleteBalancer(ctx context.Context, vdc, object string) error {
	if _, err := s.Delete(ctx, vdc, object); err != nil {
		return err
	}
	s.kick()
	return nil
}

// Balancers lists vdc's balancers (in the zone named zone, when not
// empty).
func (s *Service) Balancers(ctx context.Context, vdc, zone string) ([]*catalog.LoadBalancer, error) {
	all, err := catalog.List[*catalog.LoadBalancer](ctx, s.Store)
	if err != nil {
		return nil, fmt.Errorf("load balancer: list: %w", err)
	}
	return slices.DeleteFunc(catalog.LoadBalancersOf(all, vdc), func(lb *catalog.LoadBalancer) bool {
		return zone != "" && lb.Zone != zone
	}), nil
}

// Statuses returns what the replicas of lb's zone last reported (none
// without a sync).
func (s *Service) Statuses(ctx context.Context, lb *catalog.LoadBalancer) []lbconfig.Status {
	if s.Sync == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	return s.Sync.Statuses(ctx, lb.Zone)
}

// ZoneID returns the id of lb's zone; its name when the zone is not
// known.
func (s *Service) ZoneID(lb *catalog.LoadBalancer) string {
	if s.Fleet != nil {
		if id, ok := s.Fleet.ZoneID(lb.Zone); ok {
			return id
		}
	}
	return lb.Zone
}
