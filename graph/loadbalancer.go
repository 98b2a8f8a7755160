package graph

import (
	"context"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
)

// Load balancers (graph/loadbalancer.graphqls): the catalog's LoadBalancer
// objects of the request's VDC, changed through pkg/loadbalancer, with the
// backends' health as the zone's flexgateway replicas last reported it
// (lbsync watches their status).

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

// vdcLoadBalancer finds the VDC's balancer with id: NOT_FOUND for any other.
func (r *Resolver) vdcLoadBalancer(ctx context.Context, id string) (*catalog.LoadBalancer, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	svc, err := r.balancers()
	if err != nil {
		return nil, err
	}
	name, err := loadbalancer.ParseID(id)
	if err != nil {
		return nil, lbError(err)
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

// lbPools are the balancer's pools with each backend's health as the
// zone's replicas report it now.
func (r *Resolver) lbPools(ctx context.Context, lb *catalog.LoadBalancer) ([]*loadbalancer.Pool, error) {
	svc, err := r.balancers()
	if err != nil {
		return nil, err
	}
	ps := svc.Pools(ctx, lb)
	out := make([]*loadbalancer.Pool, 0, len(ps))
	for i := range ps {
		out = append(out, &ps[i])
	}
	return out, nil
}
