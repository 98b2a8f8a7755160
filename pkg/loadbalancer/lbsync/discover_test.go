package lbsync_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/lbtest"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbsync"
)

// TestDiscoverFromEndpointSlices: on a real kube-apiserver, the syncer
// finds a zone's replicas in the EndpointSlices of the zone's admin
// Service (as charts/flexgateway names it) and pushes to the ready ones
// only; a replica whose endpoint becomes ready, or a new slice, gets the
// config at once (the watch signals the change, no pass waits for its
// time); a replica whose endpoint is gone leaves the zone's statuses; the
// endpoints of other Services and zones are never used.
func TestDiscoverFromEndpointSlices(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	kube := kubetest.ForTest(t)
	client, err := kubernetes.NewForConfig(kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	const ns = "flexgateway"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slices := client.DiscoveryV1().EndpointSlices(ns)
	// The API server refuses loopback endpoints: the slices name the
	// replicas by an address of 198.18.0.0/15 (benchmarking, never
	// routed), which the syncer's client dials on loopback, at the same
	// port.
	slice := func(name, service string, r *lbtest.Replica, ready bool) *discoveryv1.EndpointSlice {
		u, err := url.Parse(r.URL)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(u.Port())
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("admin"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.18.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}},
		}
	}
	dialer := &net.Dialer{}
	pki := lbtest.NewPKI(t)
	tr := pki.Transport(t)
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "198.18.0.1" {
			return nil, fmt.Errorf("dial %s: not a replica of the test", addr)
		}
		return dialer.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	create := func(s *discoveryv1.EndpointSlice) {
		if _, err := slices.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ready, notReady, otherZone, otherService := lbtest.NewReplica(t, pki, "tok"), lbtest.NewReplica(t, pki, "tok"), lbtest.NewReplica(t, pki, "tok"), lbtest.NewReplica(t, pki, "tok")
	create(slice("alpha-1", "gw-alpha-admin", ready, true))
	create(slice("alpha-2", "gw-alpha-admin", notReady, false))
	create(slice("beta-1", "gw-beta-admin", otherZone, true))
	create(slice("other-1", "other", otherService, true))

	store, err := catalog.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	disc, err := lbsync.NewEndpointSlices(client, lbsync.EndpointSlicesConfig{Namespace: ns, Fullname: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	zones := map[string]lbsync.Zone{"alpha": {Zone: loadbalancer.Zone{ListenHost: "0.0.0.0", Frontend: netip.MustParseAddr("198.51.100.5")}}}
	// A resync far beyond the test: only the discovery's signal can start
	// the passes that reach new replicas.
	s := lbsync.New(lbsync.Config{Store: store, Secrets: store, Zones: zones, Discover: disc, Tokens: map[string]string{"alpha": "tok"}, Resync: time.Hour, HTTP: hc})
	go func() { _ = s.Run(ctx) }()

	cfg := ready.Await(t, 10*time.Second, func(c lbconfig.Config) bool { return c.Revision != "" })
	awaitStatus(t, s, func(sts []lbconfig.Status) bool { return len(sts) == 1 && sts[0].Revision == cfg.Revision })
	for name, r := range map[string]*lbtest.Replica{"not ready": notReady, "other zone": otherZone, "other service": otherService} {
		if n := len(r.Configs()); n != 0 {
			t.Errorf("the %s replica was sent %d configs", name, n)
		}
	}

	// The not-ready endpoint becomes ready; a new slice appears.
	start := time.Now()
	s2, err := slices.Get(ctx, "alpha-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s2.Endpoints[0].Conditions.Ready = ptr.To(true)
	if _, err := slices.Update(ctx, s2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	late := lbtest.NewReplica(t, pki, "tok")
	create(slice("alpha-3", "gw-alpha-admin", late, true))
	for _, r := range []*lbtest.Replica{notReady, late} {
		r.Await(t, 10*time.Second, func(c lbconfig.Config) bool { return c.Revision == cfg.Revision })
	}
	d := time.Since(start)
	t.Logf("new replicas had the config %s after their endpoints were ready", d.Round(time.Millisecond))
	if d > 3*time.Second {
		t.Errorf("new replicas had the config %s after their endpoints were ready", d)
	}
	awaitStatus(t, s, func(sts []lbconfig.Status) bool { return len(sts) == 3 })

	// Endpoints gone: their replicas leave the statuses.
	for _, name := range []string{"alpha-1", "alpha-3"} {
		if err := slices.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	awaitStatus(t, s, func(sts []lbconfig.Status) bool { return len(sts) == 1 })
	want := strings.Replace(notReady.URL, "127.0.0.1", "198.18.0.1", 1)
	if urls, err := disc.Replicas(ctx, "alpha"); err != nil || len(urls) != 1 || urls[0] != want {
		t.Errorf("replicas %v, %v; want only %s", urls, err, want)
	}
}
