package graph

import (
	"context"
	"encoding/base64"
	"strings"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Load balancers (graph/loadbalancer.graphqls): the catalog's LoadBalancer
// objects of the request's VDC, changed through pkg/loadbalancer, with the
// backends' health as the zone's flexgateway replicas last reported it
// (lbsync watches their status).

func loadBalancerID(lb *catalog.LoadBalancer) string {
	return base64.RawURLEncoding.EncodeToString([]byte("lb:" + lb.Name))
}

// balancers is the load balancers service, INTERNAL when there is none.
func (r *Resolver) balancers() (*loadbalancer.Service, error) {
	if r.LoadBalancers == nil {
		return nil, apierr.New(apierr.Internal, "the catalog keeps no secrets: load balancers are not offered")
	}
	return r.LoadBalancers, nil
}

// lbError maps an error of the load balancers service (whose fields are
// relative to the input).
func lbError(err error) error { return apierr.From(err, "input") }

// lbObject is the catalog name the id of a balancer stands for: NOT_FOUND
// for an id of anything else.
func lbObject(id string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(id)
	name, ok := strings.CutPrefix(string(raw), "lb:")
	if err != nil || !ok {
		return "", lbError(loadbalancer.ErrNotFound)
	}
	return name, nil
}

// vdcLoadBalancer finds the VDC's balancer with id: NOT_FOUND for any other.
func (r *Resolver) vdcLoadBalancer(ctx context.Context, id string) (*catalog.LoadBalancer, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.balancers()
	if err != nil {
		return nil, err
	}
	name, err := lbObject(id)
	if err != nil {
		return nil, err
	}
	lb, err := svc.Get(ctx, scope.VDC.Name, name)
	if err != nil {
		return nil, lbError(err)
	}
	return lb, nil
}

// lbSpec is the service's spec of the inputs (nil keeps what they stand
// for).
func lbSpec(description *string, ls []*model.LoadBalancerListenerInput, ps []*model.BackendPoolInput, certs []*model.TLSCertificateInput) loadbalancer.Spec {
	spec := loadbalancer.Spec{Description: description}
	if ls != nil {
		spec.Listeners = []catalog.LBListener{}
		for _, in := range ls {
			l := catalog.LBListener{Name: in.Name, Protocol: string(in.Protocol), Port: in.Port, Pool: deref(in.Pool),
				Certificates: in.Certificates, ServerNames: in.ServerNames}
			for _, rt := range in.Routes {
				l.Routes = append(l.Routes, catalog.LBRoute{PathPrefix: rt.PathPrefix, Pool: rt.Pool})
			}
			for _, rt := range in.SniRoutes {
				l.SNIRoutes = append(l.SNIRoutes, catalog.LBSNIRoute{ServerName: rt.ServerName, Pool: rt.Pool})
			}
			spec.Listeners = append(spec.Listeners, l)
		}
	}
	if ps != nil {
		spec.Pools = []loadbalancer.PoolSpec{}
		for _, in := range ps {
			p := loadbalancer.PoolSpec{Name: in.Name}
			for _, be := range in.Backends {
				p.Backends = append(p.Backends, loadbalancer.BackendSpec{VM: be.VMID, Port: be.Port})
			}
			if hc := in.HealthCheck; hc != nil {
				p.HealthCheck = &catalog.LBHealthCheck{Protocol: string(hc.Protocol), Path: deref(hc.Path),
					IntervalSeconds: deref(hc.IntervalSeconds), TimeoutSeconds: deref(hc.TimeoutSeconds),
					HealthyThreshold: deref(hc.HealthyThreshold), UnhealthyThreshold: deref(hc.UnhealthyThreshold)}
			}
			spec.Pools = append(spec.Pools, p)
		}
	}
	if certs != nil {
		spec.Certificates = lbCertificates(certs)
	}
	return spec
}

func lbCertificates(in []*model.TLSCertificateInput) []loadbalancer.CertificatePEM {
	out := make([]loadbalancer.CertificatePEM, 0, len(in))
	for _, c := range in {
		out = append(out, loadbalancer.CertificatePEM{Name: c.Name, CertPEM: deref(c.CertificatePem), KeyPEM: deref(c.PrivateKeyPem)})
	}
	return out
}

// createLoadBalancer creates the balancer in a zone the VDC may use.
func (r *Resolver) createLoadBalancer(ctx context.Context, in model.CreateLoadBalancerInput) (*catalog.LoadBalancer, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.balancers()
	if err != nil {
		return nil, err
	}
	z, err := r.edgeZone(ctx, scope.VDC.Name, in.Zone, "input.zone")
	if err != nil {
		return nil, err
	}
	out, err := svc.CreateBalancer(ctx, scope.VDC.Name, z.Name, in.Name, lbSpec(in.Description, in.Listeners, in.Pools, in.Certificates))
	if err != nil {
		return nil, lbError(err)
	}
	return out, nil
}

// updateLoadBalancer replaces what the input gives.
func (r *Resolver) updateLoadBalancer(ctx context.Context, in model.UpdateLoadBalancerInput) (*catalog.LoadBalancer, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.balancers()
	if err != nil {
		return nil, err
	}
	name, err := lbObject(in.ID)
	if err != nil {
		return nil, err
	}
	out, err := svc.UpdateBalancer(ctx, scope.VDC.Name, name, lbSpec(in.Description, in.Listeners, in.Pools, in.Certificates))
	if err != nil {
		return nil, lbError(err)
	}
	return out, nil
}

// deleteLoadBalancer deletes the balancer and releases its address.
func (r *Resolver) deleteLoadBalancer(ctx context.Context, id string) (*model.DeletedLoadBalancer, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.balancers()
	if err != nil {
		return nil, err
	}
	name, err := lbObject(id)
	if err != nil {
		return nil, err
	}
	if err := svc.DeleteBalancer(ctx, scope.VDC.Name, name); err != nil {
		return nil, lbError(err)
	}
	return &model.DeletedLoadBalancer{ID: id}, nil
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
	svc, err := r.balancers()
	if err != nil {
		return nil, err
	}
	lbs, err := svc.Balancers(ctx, scope.VDC.Name, deref(zone))
	if err != nil {
		return nil, apierr.From(err, "")
	}
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
	zoneID := lb.Zone
	if svc, err := r.balancers(); err == nil {
		sts, zoneID = svc.Statuses(ctx, lb), svc.ZoneID(lb)
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
