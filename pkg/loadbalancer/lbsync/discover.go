package lbsync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// Discoverer finds the flexgateway replicas of a zone.
type Discoverer interface {
	// Start starts finding replicas until ctx ends, and returns once the
	// first answer is known (Syncer.Run calls it).
	Start(ctx context.Context) error
	// Replicas returns the admin URLs of the zone's replicas.
	Replicas(ctx context.Context, zone string) ([]string, error)
	// Changed is signalled (without blocking its sender) whenever a
	// zone's replicas may have changed.
	Changed() <-chan struct{}
}

// EndpointSlicesConfig says where the charts/flexgateway release's admin
// Services are: one per zone, named "<Fullname>-<zone>-admin".
type EndpointSlicesConfig struct {
	// Namespace is the release's namespace; "" is the orchestrator's.
	Namespace string `json:"namespace"`
	// Fullname is the release's full name (the chart's
	// flexgateway.fullname, "flexgateway" for a release of that name).
	Fullname string `json:"fullname"`
}

// Service is the name of zone's admin Service.
func (c EndpointSlicesConfig) Service(zone string) string {
	return c.Fullname + "-" + zone + "-admin"
}

// EndpointSlices discovers the replicas from the EndpointSlices of the
// zones' admin Services, watched through an informer: Replicas answers
// from its cache and costs nothing, and every change of a slice signals
// Changed. Only ready endpoints count. The chart's admin Service
// publishes not-ready addresses (a replica is ready only once it has a
// config, and it gets one from here), so there ready means the pod has an
// address; an endpoint explicitly not ready is left out.
type EndpointSlices struct {
	cfg     EndpointSlicesConfig
	factory informers.SharedInformerFactory
	lister  discoverylisters.EndpointSliceNamespaceLister
	changed chan struct{}
}

// NewEndpointSlices returns the discovery of the namespace's
// EndpointSlices; Start starts watching them.
func NewEndpointSlices(client kubernetes.Interface, cfg EndpointSlicesConfig) (*EndpointSlices, error) {
	if cfg.Namespace == "" || cfg.Fullname == "" {
		return nil, errors.New("lbsync: endpoint slices: Namespace and Fullname are required")
	}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(cfg.Namespace))
	inf := f.Discovery().V1().EndpointSlices()
	d := &EndpointSlices{cfg: cfg, factory: f, lister: inf.Lister().EndpointSlices(cfg.Namespace), changed: make(chan struct{}, 1)}
	signal := func() {
		select {
		case d.changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal() },
		UpdateFunc: func(any, any) { signal() },
		DeleteFunc: func(any) { signal() },
	}); err != nil {
		return nil, fmt.Errorf("lbsync: endpoint slices: %w", err)
	}
	return d, nil
}

// Start implements Discoverer: it watches the slices until ctx ends and
// returns once the first list is in the cache.
func (d *EndpointSlices) Start(ctx context.Context) error {
	d.factory.Start(ctx.Done())
	for typ, ok := range d.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("lbsync: endpoint slices: %v: the cache did not sync: %w", typ, context.Cause(ctx))
		}
	}
	return nil
}

// Changed implements Discoverer.
func (d *EndpointSlices) Changed() <-chan struct{} { return d.changed }

// Replicas implements Discoverer: the ready endpoints' addresses at the
// slices' port named "admin" (or their only port), sorted.
func (d *EndpointSlices) Replicas(_ context.Context, zone string) ([]string, error) {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: d.cfg.Service(zone)})
	slices_, err := d.lister.List(sel)
	if err != nil {
		return nil, fmt.Errorf("lbsync: endpoint slices: %w", err)
	}
	var out []string
	for _, s := range slices_ {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		port, ok := adminPort(s)
		if !ok {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				out = append(out, "https://"+net.JoinHostPort(a, strconv.Itoa(port)))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// adminPort is the slice's port named "admin", or its only port.
func adminPort(s *discoveryv1.EndpointSlice) (int, bool) {
	for _, p := range s.Ports {
		if p.Port != nil && (p.Name != nil && *p.Name == "admin" || len(s.Ports) == 1) {
			return int(*p.Port), true
		}
	}
	return 0, false
}
