package loadbalancer

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// Zone is how one zone's flexgateway replicas are reached, configured by
// the operator.
type Zone struct {
	// Frontend is the address the edge gateways forward the listeners to:
	// the flexgateway replicas' (Service) address, reachable from the
	// zone's external network.
	Frontend netip.Addr `json:"frontend"`
	// Sources are the addresses the replicas dial backends from, as seen
	// by the edge gateways: only they may use a balancer's relay ports.
	Sources []netip.Prefix `json:"sources"`
	// ListenHost is the host the replicas bind the listeners on; "" is
	// every address.
	ListenHost string `json:"listenHost,omitempty"`
}

// FrontendBase is the first port of the replicas' listeners.
const FrontendBase = 28000

// FrontendPort is the port of lb's listener i on the zone's replicas:
// unique in the zone, since the balancer's address is (28000 + its index
// in the pool × MaxLBListeners + i; at most 60767).
func FrontendPort(en *catalog.ExternalNetwork, lb *catalog.LoadBalancer, i int) (int, error) {
	_, start, _ := en.Pool()
	a := lb.PublicAddr()
	if !en.InPool(a) {
		return 0, fmt.Errorf("load balancer %s: %s is outside zone %s's pool", lb.Name, a, en.Name)
	}
	return FrontendBase + int(num(a)-num(start))*catalog.MaxLBListeners + i, nil
}

func num(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// RelayPorts gives every distinct backend of lb a port on the balancer's
// public address, counting down from 65535 past the listeners' ports: the
// VDC's edge gateway forwards it to the VM's address and port.
func RelayPorts(lb *catalog.LoadBalancer) map[catalog.LBBackend]int {
	var all []catalog.LBBackend
	for _, p := range lb.Pools {
		all = append(all, p.Backends...)
	}
	slices.SortFunc(all, func(a, b catalog.LBBackend) int {
		return cmp.Or(cmp.Compare(a.VMID, b.VMID), cmp.Compare(a.Port, b.Port))
	})
	all = slices.Compact(all)
	used := map[int]bool{}
	for _, l := range lb.Listeners {
		used[l.Port] = true
	}
	out := make(map[catalog.LBBackend]int, len(all))
	port := 65535
	for _, be := range all {
		for used[port] {
			port--
		}
		out[be] = port
		port--
	}
	return out
}

// BackendID names a backend in lbconfig and in status: "<vmid>:<port>".
func BackendID(be catalog.LBBackend) string {
	return strconv.Itoa(be.VMID) + ":" + strconv.Itoa(be.Port)
}

// Render builds the Config of a zone's replicas from the zone's balancers,
// its external network and their secrets: each listener on its
// FrontendPort, each backend dialled at the balancer's address and its
// relay port. A balancer whose certificates cannot be read is left out
// (and reported in skipped), so one broken balancer never stops the others.
func Render(ctx context.Context, z Zone, en *catalog.ExternalNetwork, lbs []*catalog.LoadBalancer, secrets catalog.SecretStore) (cfg lbconfig.Config, skipped map[string]error) {
	skipped = map[string]error{}
	cfg.Balancers = []lbconfig.Balancer{}
	for _, lb := range lbs {
		b, err := renderOne(ctx, z, en, lb, secrets)
		if err != nil {
			skipped[lb.Name] = err
			continue
		}
		cfg.Balancers = append(cfg.Balancers, b)
	}
	slices.SortFunc(cfg.Balancers, func(a, b lbconfig.Balancer) int { return cmp.Compare(a.ID, b.ID) })
	cfg.Revision = revision(cfg.Balancers)
	return cfg, skipped
}

func renderOne(ctx context.Context, z Zone, en *catalog.ExternalNetwork, lb *catalog.LoadBalancer, secrets catalog.SecretStore) (lbconfig.Balancer, error) {
	b := lbconfig.Balancer{ID: lb.Name, VDC: lb.VDC}
	relays := RelayPorts(lb)
	for _, p := range lb.Pools {
		pool := lbconfig.Pool{Name: p.Name, Backends: []lbconfig.Backend{}}
		for _, be := range p.Backends {
			pool.Backends = append(pool.Backends, lbconfig.Backend{ID: BackendID(be),
				Address: net.JoinHostPort(lb.PublicAddress, strconv.Itoa(relays[be]))})
		}
		if hc := p.HealthCheck; hc != nil {
			pool.HealthCheck = &lbconfig.HealthCheck{Protocol: lbconfig.HealthCheckProtocol(hc.Protocol), Path: hc.Path,
				Interval: lbconfig.Duration(time.Duration(hc.IntervalSeconds) * time.Second), Timeout: lbconfig.Duration(time.Duration(hc.TimeoutSeconds) * time.Second),
				HealthyThreshold: hc.HealthyThreshold, UnhealthyThreshold: hc.UnhealthyThreshold}
		}
		b.Pools = append(b.Pools, pool)
	}
	for i, l := range lb.Listeners {
		port, err := FrontendPort(en, lb, i)
		if err != nil {
			return b, err
		}
		out := lbconfig.Listener{Name: l.Name, Protocol: lbconfig.Protocol(l.Protocol), Address: net.JoinHostPort(z.ListenHost, strconv.Itoa(port)),
			Pool: l.Pool, Certificates: slices.Clone(l.Certificates)}
		for _, r := range l.Routes {
			out.Routes = append(out.Routes, lbconfig.Route{PathPrefix: r.PathPrefix, Pool: r.Pool})
		}
		for _, r := range l.SNIRoutes {
			out.SNIRoutes = append(out.SNIRoutes, lbconfig.SNIRoute{ServerName: r.ServerName, Pool: r.Pool})
		}
		b.Listeners = append(b.Listeners, out)
	}
	if len(lb.Certificates) > 0 {
		data, err := secrets.GetSecret(ctx, catalog.LoadBalancerSecretName(lb.Name))
		if err != nil {
			return b, fmt.Errorf("load balancer %s: certificates: %w", lb.Name, err)
		}
		for _, c := range lb.Certificates {
			b.Certificates = append(b.Certificates, lbconfig.Certificate{Name: c.Name, CertPEM: string(data[certKey(c.Name)]), KeyPEM: string(data[keyKey(c.Name)])})
		}
	}
	return b, nil
}
