package graph

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// Load balancers (graph/loadbalancer.graphqls): the catalog's LoadBalancer
// objects of the request's VDC, changed through pkg/loadbalancer, with the
// backends' health as the zone's flexgateway replicas last reported it
// (lbsync watches their status).

// LBSyncer is the load balancers' sync to the zones' flexgateway replicas
// (lbsync.Syncer implements it).
type LBSyncer interface {
	// Statuses returns what each replica of the zone that answers reports
	// (as last seen: it does not wait on the replicas).
	Statuses(ctx context.Context, zone string) []lbconfig.Status
	// Kick starts a pass now (a balancer changed).
	Kick()
}

// lbStatusTimeout bounds the status read from a zone's replicas.
const lbStatusTimeout = 3 * time.Second

func loadBalancerID(lb *catalog.LoadBalancer) string {
	return base64.RawURLEncoding.EncodeToString([]byte("lb:" + lb.Name))
}

// lbService is the domain service over the resolver's catalog.
func (r *Resolver) lbService() (*loadbalancer.Service, error) {
	secrets, ok := r.Catalog.(catalog.SecretStore)
	if !ok {
		return nil, apierr.New(apierr.Internal, "the catalog keeps no secrets: load balancers are not offered")
	}
	return &loadbalancer.Service{Store: r.Catalog, Secrets: secrets}, nil
}

// lbError maps a domain error: another VDC's balancer is NOT_FOUND; a
// zone without a free address or an external network is the zone's fault;
// a VDC over its public addresses quota is QUOTA_EXCEEDED naming the
// quota's field.
func lbError(err error) error {
	if errors.Is(err, loadbalancer.ErrNotFound) {
		return apierr.New(apierr.NotFound, "load balancer not found")
	}
	if qe := (*quota.ExceededError)(nil); errors.As(err, &qe) {
		return &apierr.Error{Code: apierr.QuotaExceeded, Field: "quotas." + qe.Resource, Message: qe.Error()}
	}
	var ex *catalog.AlreadyExistsError
	if errors.As(err, &ex) && ex.Kind == catalog.KindLoadBalancer {
		return apierr.New(apierr.Conflict, "the VDC has a load balancer of that name already")
	}
	return edgeError(err, "input")
}

// vdcLoadBalancer finds the VDC's balancer with id: NOT_FOUND for any other.
func (r *Resolver) vdcLoadBalancer(ctx context.Context, id string) (*loadbalancer.Service, *catalog.LoadBalancer, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.lbService()
	if err != nil {
		return nil, nil, err
	}
	raw, err := base64.RawURLEncoding.DecodeString(id)
	name, ok := strings.CutPrefix(string(raw), "lb:")
	if err != nil || !ok {
		return nil, nil, lbError(loadbalancer.ErrNotFound)
	}
	lb, err := svc.Get(ctx, scope.VDC.Name, name)
	if err != nil {
		return nil, nil, lbError(err)
	}
	return svc, lb, nil
}

// lbBackends resolves the backends' VMs of the request's VDC in z: another
// VDC's VM (or none) is NOT_FOUND, one of another zone BAD_USER_INPUT.
type lbBackends struct {
	r     *Resolver
	vdc   string
	z     zones.Zone
	vmids map[int]bool // the VDC's VMs in z, read at first use
}

func (b *lbBackends) vmid(ctx context.Context, field, id string) (int, error) {
	ref, err := tenancy.ParseVMID(id)
	if err != nil {
		return 0, vmNotFound()
	}
	if ref.ZoneID != b.z.ID {
		if _, ok := b.r.zoneByID(ref.ZoneID); !ok {
			return 0, vmNotFound()
		}
		if _, _, err := b.r.vdcVM(ctx, b.vdc, id); err != nil {
			return 0, err
		}
		return 0, apierr.BadInput(field, "%s: the VM is not in the load balancer's zone %s", field, b.z.Name)
	}
	if b.vmids == nil {
		rs, err := b.r.session(ctx).PoolGuests(ctx, b.z, tenancy.PoolID(b.vdc))
		if err != nil {
			return 0, apierr.ZoneDown(b.z.Name, err)
		}
		b.vmids = map[int]bool{}
		for _, res := range rs {
			if res.Template != 1 {
				b.vmids[res.VMID] = true
			}
		}
	}
	if !b.vmids[ref.VMID] {
		return 0, vmNotFound()
	}
	return ref.VMID, nil
}

// lbSpec fills lb's listeners and pools from the inputs (nil keeps them).
func (r *Resolver) lbSpec(ctx context.Context, b *lbBackends, lb *catalog.LoadBalancer, ls []*model.LoadBalancerListenerInput, ps []*model.BackendPoolInput) error {
	if ls != nil {
		lb.Listeners = []catalog.LBListener{}
		for _, in := range ls {
			l := catalog.LBListener{Name: in.Name, Protocol: string(in.Protocol), Port: in.Port, Pool: deref(in.Pool),
				Certificates: in.Certificates, ServerNames: in.ServerNames}
			for _, rt := range in.Routes {
				l.Routes = append(l.Routes, catalog.LBRoute{PathPrefix: rt.PathPrefix, Pool: rt.Pool})
			}
			for _, rt := range in.SniRoutes {
				l.SNIRoutes = append(l.SNIRoutes, catalog.LBSNIRoute{ServerName: rt.ServerName, Pool: rt.Pool})
			}
			lb.Listeners = append(lb.Listeners, l)
		}
	}
	if ps == nil {
		return nil
	}
	lb.Pools = []catalog.LBPool{}
	for i, in := range ps {
		p := catalog.LBPool{Name: in.Name}
		for j, be := range in.Backends {
			f := fmt.Sprintf("input.pools[%d].backends[%d]", i, j)
			if err := validPort(f+".port", be.Port); err != nil {
				return err
			}
			vmid, err := b.vmid(ctx, f+".vmId", be.VMID)
			if err != nil {
				return err
			}
			p.Backends = append(p.Backends, catalog.LBBackend{VMID: vmid, Port: be.Port})
		}
		if hc := in.HealthCheck; hc != nil {
			p.HealthCheck = &catalog.LBHealthCheck{Protocol: string(hc.Protocol), Path: deref(hc.Path),
				IntervalSeconds: deref(hc.IntervalSeconds), TimeoutSeconds: deref(hc.TimeoutSeconds),
				HealthyThreshold: deref(hc.HealthyThreshold), UnhealthyThreshold: deref(hc.UnhealthyThreshold)}
		}
		lb.Pools = append(lb.Pools, p)
	}
	return nil
}

func lbCertificates(in []*model.TLSCertificateInput) []loadbalancer.CertificatePEM {
	out := make([]loadbalancer.CertificatePEM, 0, len(in))
	for _, c := range in {
		out = append(out, loadbalancer.CertificatePEM{Name: c.Name, CertPEM: deref(c.CertificatePem), KeyPEM: deref(c.PrivateKeyPem)})
	}
	return out
}

// createLoadBalancer checks the input and creates the balancer.
func (r *Resolver) createLoadBalancer(ctx context.Context, in model.CreateLoadBalancerInput) (*catalog.LoadBalancer, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.lbService()
	if err != nil {
		return nil, err
	}
	if err := catalog.ValidateLabel("input.name", in.Name); err != nil {
		return nil, apierr.From(err, "")
	}
	z, err := r.edgeZone(ctx, scope.VDC.Name, in.Zone, "input.zone")
	if err != nil {
		return nil, err
	}
	lb := &catalog.LoadBalancer{LoadBalancerSpec: catalog.LoadBalancerSpec{VDC: scope.VDC.Name, Zone: z.Name, Description: deref(in.Description)}}
	lb.Name = catalog.LoadBalancerName(scope.VDC.Name, in.Name)
	if err := r.lbSpec(ctx, &lbBackends{r: r, vdc: scope.VDC.Name, z: z}, lb, in.Listeners, in.Pools); err != nil {
		return nil, err
	}
	out, err := svc.Create(ctx, lb, lbCertificates(in.Certificates))
	if err != nil {
		return nil, lbError(err)
	}
	r.lbChanged()
	return out, nil
}

// updateLoadBalancer replaces what the input gives.
func (r *Resolver) updateLoadBalancer(ctx context.Context, in model.UpdateLoadBalancerInput) (*catalog.LoadBalancer, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, old, err := r.vdcLoadBalancer(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	z, ok := r.zoneNamed(old.Zone)
	if !ok {
		return nil, apierr.New(apierr.ZoneUnavailable, "zone %s is not reachable", old.Zone)
	}
	want := old.DeepCopyObject().(*catalog.LoadBalancer)
	if in.Description != nil {
		want.Description = *in.Description
	}
	if err := r.lbSpec(ctx, &lbBackends{r: r, vdc: scope.VDC.Name, z: z}, want, in.Listeners, in.Pools); err != nil {
		return nil, err
	}
	certs := lbCertificates(in.Certificates)
	if in.Certificates == nil {
		for _, c := range old.Certificates {
			certs = append(certs, loadbalancer.CertificatePEM{Name: c.Name})
		}
	}
	out, err := svc.Update(ctx, scope.VDC.Name, old.Name, want, certs)
	if err != nil {
		return nil, lbError(err)
	}
	r.lbChanged()
	return out, nil
}

// deleteLoadBalancer deletes the balancer and releases its address.
func (r *Resolver) deleteLoadBalancer(ctx context.Context, id string) (*model.DeletedLoadBalancer, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, lb, err := r.vdcLoadBalancer(ctx, id)
	if err != nil {
		return nil, err
	}
	if _, err := svc.Delete(ctx, scope.VDC.Name, lb.Name); err != nil {
		return nil, lbError(err)
	}
	r.lbChanged()
	return &model.DeletedLoadBalancer{ID: id}, nil
}

// lbChanged tells the sync a balancer changed, so that the replicas get
// it now rather than at the next pass.
func (r *Resolver) lbChanged() {
	if r.LoadBalancers != nil {
		r.LoadBalancers.Kick()
	}
}

// zoneNamed is the zone of that name.
func (r *Resolver) zoneNamed(name string) (zones.Zone, bool) {
	if r.Zones == nil {
		return zones.Zone{}, false
	}
	for _, z := range r.Zones.Zones() {
		if z.Name == name {
			return z, true
		}
	}
	return zones.Zone{}, false
}

// loadBalancers lists the VDC's balancers (in zone, when set).
func (r *Resolver) loadBalancers(ctx context.Context, zone *string, first *int, after *string) (*model.LoadBalancerConnection, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	all, err := catalog.List[*catalog.LoadBalancer](ctx, r.Catalog)
	if err != nil {
		return nil, apierr.From(err, "")
	}
	lbs := slices.DeleteFunc(catalog.LoadBalancersOf(all, scope.VDC.Name), func(lb *catalog.LoadBalancer) bool {
		return zone != nil && lb.Zone != *zone
	})
	p, err := paginate(lbs, func(lb *catalog.LoadBalancer) string { return sortKey(lb.ShortName()) }, first, 50, after)
	if err != nil {
		return nil, err
	}
	out := &model.LoadBalancerConnection{Edges: []*model.LoadBalancerEdge{}, Nodes: p.items, PageInfo: p.info, TotalCount: p.total}
	if out.Nodes == nil {
		out.Nodes = []*catalog.LoadBalancer{}
	}
	for i, lb := range p.items {
		out.Edges = append(out.Edges, &model.LoadBalancerEdge{Cursor: p.cursors[i], Node: lb})
	}
	return out, nil
}

// lbZone is the balancer's zone for its zone field.
func (r *Resolver) lbZone(lb *catalog.LoadBalancer) (*model.Zone, error) {
	z, ok := r.zoneNamed(lb.Zone)
	if !ok {
		return &model.Zone{ID: lb.Zone, Name: lb.Zone}, nil
	}
	return zoneModel(z, r.agentTarget()), nil
}

func lbListeners(lb *catalog.LoadBalancer) []*model.LoadBalancerListener {
	out := []*model.LoadBalancerListener{}
	for _, l := range lb.Listeners {
		m := &model.LoadBalancerListener{Name: l.Name, Protocol: model.LoadBalancerProtocol(l.Protocol), Port: l.Port, Pool: optString(l.Pool),
			Routes: []*model.PathRoute{}, SniRoutes: []*model.SNIRoute{}, Certificates: append([]string{}, l.Certificates...),
			ServerNames: append([]string{}, l.ServerNames...)}
		for _, rt := range l.Routes {
			m.Routes = append(m.Routes, &model.PathRoute{PathPrefix: rt.PathPrefix, Pool: rt.Pool})
		}
		for _, rt := range l.SNIRoutes {
			m.SniRoutes = append(m.SniRoutes, &model.SNIRoute{ServerName: rt.ServerName, Pool: rt.Pool})
		}
		out = append(out, m)
	}
	return out
}

// lbPools are the balancer's pools with each backend's health as the
// zone's replicas report it now.
func (r *Resolver) lbPools(ctx context.Context, lb *catalog.LoadBalancer) []*model.BackendPool {
	var sts []lbconfig.Status
	if r.LoadBalancers != nil {
		sctx, cancel := context.WithTimeout(ctx, lbStatusTimeout)
		sts = r.LoadBalancers.Statuses(sctx, lb.Zone)
		cancel()
	}
	zoneID := lb.Zone
	if z, ok := r.zoneNamed(lb.Zone); ok {
		zoneID = z.ID
	}
	out := []*model.BackendPool{}
	for _, p := range lb.Pools {
		m := &model.BackendPool{Name: p.Name, Backends: []*model.Backend{}}
		if hc := p.HealthCheck; hc != nil {
			m.HealthCheck = &model.HealthCheck{Protocol: model.HealthCheckProtocol(hc.Protocol), Path: optString(hc.Path), IntervalSeconds: hc.IntervalSeconds,
				TimeoutSeconds: hc.TimeoutSeconds, HealthyThreshold: hc.HealthyThreshold, UnhealthyThreshold: hc.UnhealthyThreshold}
		}
		for _, be := range p.Backends {
			b := &model.Backend{VMID: tenancy.VMRef{ZoneID: zoneID, VMID: be.VMID}.ID(), Port: be.Port, Health: model.BackendHealthUnknown}
			backendHealth(b, sts, lb.Name, p.Name, loadbalancer.BackendID(be))
			m.Backends = append(m.Backends, b)
		}
		out = append(out, m)
	}
	return out
}

// backendHealth sets b's health from the replicas' reports: UNHEALTHY when
// one finds it failing, HEALTHY when every one reporting it finds it well.
func backendHealth(b *model.Backend, sts []lbconfig.Status, balancer, pool, backend string) {
	for _, st := range sts {
		for _, bs := range st.Backends {
			if bs.Balancer != balancer || bs.Pool != pool || bs.Backend != backend {
				continue
			}
			if b.CheckedAt == nil || bs.Checked.After(*b.CheckedAt) {
				at := bs.Checked
				b.CheckedAt = &at
			}
			switch {
			case !bs.Healthy:
				b.Health, b.LastError = model.BackendHealthUnhealthy, optString(bs.LastError)
			case b.Health == model.BackendHealthUnknown:
				b.Health = model.BackendHealthHealthy
			}
		}
	}
}

func lbCertificateModels(lb *catalog.LoadBalancer) []*model.TLSCertificate {
	out := []*model.TLSCertificate{}
	for _, c := range lb.Certificates {
		out = append(out, &model.TLSCertificate{Name: c.Name, DNSNames: append([]string{}, c.DNSNames...), NotAfter: c.NotAfter, Fingerprint: c.Fingerprint})
	}
	return out
}
